"""Benchmark: how the simulator's cost grows with the cluster (time and memory per run).

One mode A run (130 % arrived, seed 0) per policy, workload and cluster size (64, 256 and
776 nodes = 512, 2,048 and 6,208 GPUs), each in a fresh process so that its peak resident
memory is its own (``ru_maxrss``). CPU time is the process's; wall time is noisy on a shared
machine. Before the placement indexes the migslice policy took 1.3 s, 20.6 s and 194 s at
these sizes (quadratic); near-linear cost per pod means about 12 x from 512 to 6,208 GPUs.

    python -m bench.packing.scale                  # about 5 min here
    python -m bench.packing.scale --nodes 64,256   # quick

Writes the section ``scale`` of ``bench/packing/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.packing.suite import SUITE
from migslice.sim import GPU_MODEL, SaturationConfig, make_policy, run_saturation
from migslice.sim.trace_files import DEFAULT_DATA_DIR, load_workload

SIZES = (64, 256, 776)
POLICIES = (
    "migslice",
    "M-carve",
    "M-dra",
    "B5",
    "B5-catalog",
    "B6",
    "B8",
    "B9",
    "B3",
    "B4",
    "B0",
)
WORKLOADS = ("default/M1", "synthetic")
BEFORE_S = {64: 1.3, 256: 20.6, 776: 194.0}
"""The migslice policy, default/M1, before this simulator (the issue's measurements)."""


def one(spec: str, policy_id: str, nodes: int, *, data_dir: Path) -> dict[str, Any]:
    """One run in this (fresh) process: CPU and wall seconds, peak memory, pods."""
    trace, _, mapping = spec.partition("/")
    workload = load_workload(data_dir, trace if mapping else "default", mapping or "synthetic")
    config = SaturationConfig(nodes=nodes)
    policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus=nodes * 8)
    began, cpu = time.monotonic(), time.process_time()
    result = run_saturation(workload, policy, 0, config=config)
    return {
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - began,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "pods": result.arrived_pods,
        "slice_allocation_130": result.at(130).slice_allocation,
    }


def child(queue: Any, task: tuple[str, str, int, Path]) -> None:
    spec, policy_id, nodes, data_dir = task
    queue.put(one(spec, policy_id, nodes, data_dir=data_dir))


def measure(spec: str, policy_id: str, nodes: int, *, data_dir: Path) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue, (spec, policy_id, nodes, data_dir)))
    process.start()
    result: dict[str, Any] = queue.get()
    process.join()
    return result


def markdown(report: dict[str, Any]) -> str:
    rows = report["runs"]
    sizes = sorted({r["nodes"] for r in rows})
    lines = [
        "# Simulator scale (mode A, one run per cell, seed 0)",
        "",
        "CPU seconds per run (peak resident MiB of the process) for 130 % arrived; each run in "
        "a fresh process. Measured on a 2-core machine shared with other work: CPU time is the "
        "run's own, wall time varied by up to 3x. Produced by `python -m bench.packing.scale`.",
        "",
        "| workload | policy | "
        + " | ".join(f"{8 * n:,} GPUs" for n in sizes)
        + f" | growth {8 * sizes[0]:,} -> {8 * sizes[-1]:,} GPUs |",
        "|---|---|" + "---|" * (len(sizes) + 1),
    ]
    for spec in dict.fromkeys(r["workload"] for r in rows):
        for policy in dict.fromkeys(r["policy"] for r in rows):
            cells = {r["nodes"]: r for r in rows if r["workload"] == spec and r["policy"] == policy}
            if not cells:
                continue
            text = [
                f"{cells[n]['cpu_s']:.2f} s ({cells[n]['max_rss_mib']:.0f} MiB, "
                f"{cells[n]['pods']:,} pods)"
                if n in cells
                else "—"
                for n in sizes
            ]
            growth = (
                f"{cells[sizes[-1]]['cpu_s'] / cells[sizes[0]]['cpu_s']:.1f} x"
                if sizes[0] in cells and sizes[-1] in cells and cells[sizes[0]]["cpu_s"]
                else "—"
            )
            lines.append(f"| {spec} | {policy} | " + " | ".join(text) + f" | {growth} |")
    lines += [
        "",
        "Before (the issue's measurement of the previous simulator, migslice, default/M1): "
        + ", ".join(f"{BEFORE_S[n]:g} s at {8 * n:,} GPUs" for n in sorted(BEFORE_S))
        + ".",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--nodes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/packing)")
    args = parser.parse_args(argv)
    runs = []
    for spec in args.workloads.split(","):
        for policy in args.policies.split(","):
            for nodes in (int(n) for n in args.nodes.split(",")):
                result = measure(spec, policy, nodes, data_dir=args.data_dir)
                runs.append({"workload": spec, "policy": policy, "nodes": nodes, **result})
                print(
                    f"{spec} {policy} {8 * nodes} GPUs: {result['cpu_s']:.2f}s CPU, "
                    f"{result['max_rss_mib']:.0f} MiB",
                    flush=True,
                )
    report = {"runs": runs, "before_s": BEFORE_S}
    SUITE.write("scale", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
