"""Benchmark: ``migslice status`` on 5,000 nodes and 40,000 pods (goal: <= 3 s, whole command).

The cluster is the plane suite's size, built with ``harness.builders``: 5,000 A100-80GB nodes
of 8 GPUs, half ``all-1g.10gb`` and half ``all-balanced`` (MIG Manager's state ``success``),
40,000 bound GPU pods on about one instance in seven, 200 waiting pods of four shapes
(kube-scheduler marked them Unschedulable), 20 tenants with a quota each. It is written as one
JSON ``List`` (as ``kubectl get nodes,pods,tenantpolicies -A -o json`` writes it) into a
temporary folder, not kept (about 26 MB), and the whole command is timed in a fresh process
each run: interpreter start, imports, the file read, the inventory, tenants, maps, the waiting
pods' reasons and the text printed (to /dev/null), ``--runs`` runs (default 3), with their
spread, and the CPU each took (about what the wall clock is on an idle machine). ``--code
DIR`` times another checkout's code (a clone at an older commit) on the same cluster, so a
before and an after are measured alike.

    python -m bench.plane.status_scale --label after            # about a minute here
    python -m bench.plane.status_scale --label before --code /tmp/old-checkout
    python -m bench.plane.status_scale --nodes 500 --pods 4000 --label small --out /tmp/s

Writes its run under ``--label`` in the section ``status_scale`` of
``bench/plane/report.json`` (and ``report.md``), beside the runs already there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.plane.suite import SUITE
from harness.builders import make_mig_config_map, make_node, make_pod, make_policy, unschedulable

GOAL_S = 3.0
CONFIGS = """version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  all-balanced:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
"""
WAITING_PROFILES = ("3g.40gb", "7g.80gb", "2g.20gb", "4g.40gb")


def build(nodes: int, pods: int, waiting: int, tenants: int) -> dict[str, Any]:
    """The cluster (see the module docstring) as one ``List``."""
    items: list[dict[str, Any]] = [make_mig_config_map(CONFIGS)]
    slots: list[tuple[str, str]] = []
    for index in range(nodes):
        name = f"gpu-{index:05d}"
        if index % 2:
            mig = {"1g.10gb": 56}
            config = "all-1g.10gb"
            slots += [(name, "1g.10gb")] * 56
        else:
            mig = {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}
            config = "all-balanced"
            slots += [(name, "1g.10gb")] * 16 + [(name, "2g.20gb")] * 8 + [(name, "3g.40gb")] * 8
        items.append(
            make_node(
                name,
                gpu_count=8,
                mig=mig,
                config=config,
                config_state="success",
                with_type_meta=True,
            )
        )
    for index in range(tenants):
        items.append(
            make_policy(
                f"team-{index}", namespaces=[f"team-{index}"], quota={"computeSlices": 4000}
            )
        )
    step = max(1, len(slots) // max(pods, 1))
    for index in range(pods):
        node, profile = slots[(index * step) % len(slots)]
        items.append(
            make_pod(
                f"p-{index}",
                namespace=f"team-{index % tenants}",
                profile=profile,
                node_name=node,
                phase="Running",
                with_type_meta=True,
            )
        )
    for index in range(waiting):
        profile = WAITING_PROFILES[index % len(WAITING_PROFILES)]
        pod = make_pod(
            f"w-{index}", namespace=f"team-{index % tenants}", profile=profile, with_type_meta=True
        )
        items.append(unschedulable(pod))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def time_runs(path: Path, runs: int, code: Path | None) -> tuple[list[float], list[float]]:
    """Seconds of each run of the whole command, each in a fresh process: wall clock, and
    the CPU it took (user + system; on a shared machine the wall clock also counts waiting
    for a core)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(code), env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "migslice.cli", "status", "--cluster-file", str(path)]
    seconds, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env, cwd=code)
        seconds.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return seconds, cpu


def summary(seconds: list[float], cpu: list[float] | None = None) -> dict[str, Any]:
    return {
        "seconds": [round(s, 2) for s in seconds],
        "cpu_seconds": [round(s, 2) for s in cpu or ()],
        "median_s": round(statistics.median(seconds), 2),
        "spread_s": round(max(seconds) - min(seconds), 2),
        "met": max(seconds) <= GOAL_S,
    }


def _code_of(folder: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


def markdown(runs: dict[str, Any]) -> str:
    lines = [
        "# `migslice status` at scale (`bench/plane/status_scale.py`)",
        "",
        f"The whole command on a cluster file, a fresh process each run; goal: <= {GOAL_S:.0f} s "
        "for every run. 2 shared cores: the load average says how shared.",
        "",
        "| run | code | when | nodes | bound pods | waiting | file MB | runs s | median s "
        "| spread s | CPU s per run | load average | met |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, run in runs.items():
        lines.append(
            f"| {label} | {run['code']} | {run['when']} | {run['nodes']} | {run['pods']} | "
            f"{run['waiting']} | {run['file_mb']} | "
            f"{', '.join(f'{s:.2f}' for s in run['seconds'])} | {run['median_s']:.2f} | "
            f"{run['spread_s']:.2f} | "
            f"{', '.join(f'{s:.2f}' for s in run.get('cpu_seconds', ())) or '-'} | "
            f"{run['load_average']:.1f} | "
            f"{'yes' if run['met'] else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--waiting", type=int, default=200)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", default="latest", help="the run's name in the report")
    parser.add_argument("--code", type=Path, help="a checkout whose code to time (default: this)")
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/plane)")
    args = parser.parse_args(argv)
    code = args.code.resolve() if args.code is not None else None
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cluster.json"
        with path.open("w") as out:
            out.write(json.dumps(build(args.nodes, args.pods, args.waiting, args.tenants)))
            out.flush()
            os.fsync(out.fileno())  # written back before the first run reads it
        size_mb = path.stat().st_size / 1e6
        seconds, cpu = time_runs(path, args.runs, code)
    run = {
        "code": _code_of(code or Path(__file__).parent),
        "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "nodes": args.nodes,
        "pods": args.pods,
        "waiting": args.waiting,
        "file_mb": round(size_mb, 1),
        **summary(seconds, cpu),
        "load_average": round(os.getloadavg()[0], 1),
    }
    runs = dict(SUITE.load(args.out).get("status_scale", {}))
    runs[args.label] = run
    SUITE.write("status_scale", runs, args.out)
    print(json.dumps(run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
