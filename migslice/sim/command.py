"""``migslice simulate``: one policy, one workload, mode A saturation, a metrics table.

The workload comes from :mod:`migslice.sim.trace_files` (the trace read from disk; the packing
suite, ``bench/packing/``, reads it there too).
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from migslice import console
from migslice.console import format_table
from migslice.sim import (
    GPU_MODEL,
    POLICY_IDS,
    TRACE_FOLDER,
    LoadPoint,
    RunResult,
    SaturationConfig,
    limit_curve,
    make_policy,
    run_saturation,
)
from migslice.sim.trace_files import DEFAULT_DATA_DIR, MAPPINGS, load_workload

_TRACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def trace_name(text: str) -> str:
    """The ``<TRACE>`` of ``openb_pod_list_<TRACE>.csv``: a file-name part, no folder."""
    if not _TRACE_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a trace name (letters, digits, '_', '.' and '-', at most 100, "
            "no '/': it names openb_pod_list_<TRACE>.csv in the data folder)"
        )
    return text


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=console.file_path,
        default=DEFAULT_DATA_DIR,
        help=f"folder holding {TRACE_FOLDER}/ (default: %(default)s)",
    )
    parser.add_argument(
        "--trace",
        default="default",
        type=trace_name,
        help="pod list openb_pod_list_<TRACE>.csv (default: %(default)s)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policy", choices=POLICY_IDS, default="migslice")
    parser.add_argument("--mapping", choices=MAPPINGS, default="M1")
    parser.add_argument(
        "--nodes", type=console.count(1, 100_000), default=64, help="8-GPU A100-80GB nodes"
    )
    parser.add_argument("--seed", type=console.count(0, 2**64 - 1), default=0)
    add_workload_arguments(parser)


def run_simulate(args: argparse.Namespace) -> int:
    workload = load_workload(args.data_dir, args.trace, args.mapping)
    config = SaturationConfig(nodes=args.nodes)
    gpus = args.nodes * config.gpus_per_node
    policy = make_policy(args.policy, GPU_MODEL, workload.pods, gpus=gpus)
    print(
        f"simulating policy={policy.name!r} workload={workload.name} nodes={args.nodes} "
        f"gpus={gpus} seed={args.seed}"
        + (
            f" (skipped {workload.skipped_cpu_only} CPU-only pods)"
            if workload.skipped_cpu_only
            else ""
        ),
        file=sys.stderr,
    )
    started = time.monotonic()

    def progress(point: LoadPoint) -> None:
        print(
            f"  arrived {point.arrived_pct:3d}%: slice allocation "
            f"{100 * point.slice_allocation:5.1f}%, {point.failed_pods} failed "
            f"({time.monotonic() - started:.1f}s)",
            file=sys.stderr,
        )

    result = run_saturation(workload, policy, args.seed, config=config, progress=progress)
    limits = {
        p.arrived_pct: p.slice_allocation
        for p in limit_curve(workload.pods, GPU_MODEL, gpus, arrived_pcts=range(10, 131, 10))
    }
    print(results_table(result, limits))
    first = result.first_failure_pct
    print(
        f"first failure at {'none' if first is None else f'{first:.1f}% arrived'}; "
        f"{result.gpus_repartitioned} GPUs re-partitioned "
        f"({result.repartitions_per_1k_pods:.1f} per 1,000 placed pods); "
        f"{result.disrupted_pods} pods disrupted; {time.monotonic() - started:.1f}s"
    )
    return 0


def results_table(result: RunResult, limits: dict[int, float]) -> str:
    """Every tenth load point of ``result`` beside the LP limit (``limits``, per load)."""
    rows = [
        (
            f"{p.arrived_pct}%",
            f"{100 * p.slice_allocation:.1f}%",
            f"{100 * p.memory_allocation:.1f}%",
            f"{100 * p.demand_allocation:.1f}%",
            f"{p.unallocated_gpus:.1f}",
            f"{100 * limits[p.arrived_pct]:.1f}%",
            p.placed_pods,
            p.failed_pods,
        )
        for p in result.points
        if p.arrived_pct % 10 == 0
    ]
    header = (
        "arrived",
        "slice alloc",
        "memory alloc",
        "demand placed",
        "unalloc GPUs",
        "LP limit",
        "placed",
        "failed",
    )
    return format_table(header, rows)


COMMAND = console.Command(
    "simulate",
    help="simulate one placement policy on a workload trace (packing, mode A)",
    description=(
        "Samples pods (with replacement, seeded) from a workload until arrived demand is "
        "130% of the cluster's compute slices, places each with the policy (no "
        "departures), and prints slice allocation per arrived load. GPU side only. "
        "Policies: B0 whole-GPU, B1 all-1g, B2 all-balanced first-fit, B3 oracle-static, "
        "B4 best-fit on mig-parted's stock configs, B5 nos's partitioner (and its variants), "
        "B6 FGD for MIG, B8 HAMi v2.10's MIG, B9 NVIDIA's DRA driver allocated first fit "
        "(and their variants), migslice (extender score + repartition controller), M-carve "
        "(migslice in carve mode), M-dra (migslice on DRA DynamicMIG; -reserve: with the "
        "large-job reserve); see docs/benchmarks.md. The traces are read from --data-dir; "
        "--mapping synthetic needs none."
    ),
    add_arguments=add_arguments,
    run=run_simulate,
)
COMMANDS = (COMMAND,)
