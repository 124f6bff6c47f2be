"""Benchmark: ``migslice status --cluster-file`` on 5,000 nodes and 40,000 pods (goal: <= 3 s).

Builds the cluster with the tests' shared builders (tests/builders.py): 5,000 A100-80GB nodes
of 8 GPUs, half ``all-1g.10gb`` and half ``all-balanced``, 40,000 bound GPU pods (about half
the instances), 200 waiting pods of four shapes, 20 tenants; writes it as one JSON ``List``
(as ``kubectl get nodes,pods,tenantpolicies -A -o json`` would) into a temporary folder (not
kept: about 60 MB), then times the whole command, in a fresh process each run (file read,
inventory, tenants, maps, waiting reasons, rendering), 3 runs, and reports the spread.

    python -m bench.status_scale            # about a minute here
    python -m bench.status_scale --nodes 500 --pods 4000

Writes ``bench/reports/status_scale.json`` and ``status_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness.builders import make_mig_config_map, make_node, make_pod, make_policy, unschedulable

REPORTS = Path(__file__).parent / "reports"
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


def build(nodes: int, pods: int, waiting: int, tenants: int) -> dict[str, Any]:
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
    step = max(1, len(slots) // pods)
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
        profile = ("3g.40gb", "7g.80gb", "2g.20gb", "4g.40gb")[index % 4]
        pod = make_pod(
            f"w-{index}", namespace=f"team-{index % tenants}", profile=profile, with_type_meta=True
        )
        items.append(unschedulable(pod))
    return {"apiVersion": "v1", "kind": "List", "items": items}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--waiting", type=int, default=200)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cluster.json"
        path.write_text(json.dumps(build(args.nodes, args.pods, args.waiting, args.tenants)))
        size_mb = path.stat().st_size / 1e6
        seconds = []
        for _ in range(args.runs):
            started = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "migslice.cli", "status", "--cluster-file", str(path)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            seconds.append(time.perf_counter() - started)
    report = {
        "nodes": args.nodes,
        "pods": args.pods,
        "waiting": args.waiting,
        "fileMB": round(size_mb, 1),
        "seconds": [round(s, 2) for s in seconds],
        "median_s": round(statistics.median(seconds), 2),
        "spread_s": round(max(seconds) - min(seconds), 2),
    }
    REPORTS.mkdir(exist_ok=True)
    (REPORTS / "status_scale.json").write_text(json.dumps(report, indent=2) + "\n")
    (REPORTS / "status_scale.md").write_text(
        "# migslice status at scale\n\n"
        f"{args.nodes} nodes, {args.pods} bound pods, {args.waiting} waiting, a "
        f"{size_mb:.0f} MB cluster file (JSON List); `migslice status --cluster-file`, whole "
        f"process, {args.runs} runs: {', '.join(f'{s:.2f}' for s in seconds)} s (median "
        f"{report['median_s']} s, spread {report['spread_s']} s). Goal: <= 3 s.\n"
    )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
