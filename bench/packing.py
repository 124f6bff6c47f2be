"""Benchmark: packing quality in mode A (FGD-style saturation), a report, not a test.

For each workload (the Alibaba v2023 default trace mapped by M1 and M2, and the synthetic
MIG-friendly mix), each policy (B0-B5 baselines, migslice, and two migslice proposals) and
each seed: sample pods with replacement until arrived demand is 130 % of the cluster's compute
slices, place them one by one (no departures), and record slice allocation per arrived load.
The configuration-LP limit (benchmarks.md §5.6) is computed for each workload. GPU side only.

    python -m bench.packing                         # 64 nodes x 8 GPUs, 3 seeds (minutes)
    python -m bench.packing --fgd-scale             # 776 nodes, 10 seeds (hours)
    python -m bench.packing --nodes 8 --seeds 1     # quick

Writes ``bench/reports/packing.json``, ``packing.md`` and ``packing.png`` (needs matplotlib,
the ``bench`` extra; the plot is skipped with a note without it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from migslice.console import CommandError
from migslice.sim import (
    GPU_MODEL,
    POLICY_IDS,
    RunResult,
    SaturationConfig,
    limit_curve,
    limit_first_failure_pct,
    make_policy,
    mix_counts,
    run_saturation,
)
from migslice.sim.command import DEFAULT_DATA_DIR, load_workload

REPORTS = Path(__file__).parent / "reports"
MAPPINGS = ("M1", "M2", "synthetic")
TABLE_LOADS = (50, 80, 90, 100, 110, 130)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--trace", default="default", help="openb_pod_list_<TRACE>.csv")
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument(
        "--fgd-scale", action="store_true", help="776 nodes (6,208 GPUs) and 10 seeds, as FGD"
    )
    parser.add_argument("--policies", default=",".join(POLICY_IDS))
    parser.add_argument("--mappings", default=",".join(MAPPINGS))
    parser.add_argument("--out", type=Path, default=REPORTS)
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite packing.md/.png from packing.json"
    )
    args = parser.parse_args(argv)
    if args.fgd_scale:
        args.nodes, args.seeds = 776, 10
    return args


def summarise(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def run_workload(mapping: str, args: argparse.Namespace, policies: Sequence[str]) -> dict[str, Any]:
    workload = load_workload(args.data_dir, args.trace, mapping)
    config = SaturationConfig(nodes=args.nodes)
    gpus = args.nodes * config.gpus_per_node
    started = time.monotonic()
    limits = limit_curve(workload.pods, GPU_MODEL, gpus, range(1, config.max_load_pct + 1))
    limit_ff = limit_first_failure_pct(workload.pods, GPU_MODEL, gpus)
    print(
        f"[{workload.name}] {len(workload.pods)} GPU pods to sample "
        f"({workload.skipped_cpu_only} CPU-only skipped); LP limit at 100%: "
        f"{100 * limits[99].slice_allocation:.2f}%, first failure {limit_ff:.1f}% "
        f"({time.monotonic() - started:.1f}s)",
        flush=True,
    )
    results: dict[str, list[RunResult]] = {}
    names: dict[str, str] = {}
    for policy_id in policies:
        policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus)
        names[policy_id] = policy.name
        for seed in range(args.seeds):
            began = time.monotonic()
            result = run_saturation(workload, policy, seed, config)
            results.setdefault(policy_id, []).append(result)
            print(
                f"[{workload.name}] {policy.name}, seed {seed}: "
                f"{100 * result.at(100).slice_allocation:.1f}% at 100%, "
                f"{100 * result.at(130).slice_allocation:.1f}% at 130%, "
                f"{result.placed_pods}/{result.arrived_pods} placed "
                f"({time.monotonic() - began:.1f}s)",
                flush=True,
            )
    return {
        "workload": workload.name,
        "mapping": mapping,
        "gpu_pods": len(workload.pods),
        "skipped_cpu_only": workload.skipped_cpu_only,
        "mix": mix_counts(workload.pods),
        "limit": {
            "slice_allocation": [p.slice_allocation for p in limits],
            "first_failure_pct": limit_ff,
        },
        "policies": {
            policy_id: aggregate(names[policy_id], runs) for policy_id, runs in results.items()
        },
    }


def aggregate(name: str, runs: Sequence[RunResult]) -> dict[str, Any]:
    failures = [r.first_failure_pct for r in runs if r.first_failure_pct is not None]
    return {
        "name": name,
        "seeds": [r.seed for r in runs],
        "at": {
            str(load): {
                "slice_allocation": summarise([r.at(load).slice_allocation for r in runs]),
                "memory_allocation": summarise([r.at(load).memory_allocation for r in runs]),
                "demand_allocation": summarise([r.at(load).demand_allocation for r in runs]),
                "unallocated_gpus": summarise([r.at(load).unallocated_gpus for r in runs]),
            }
            for load in TABLE_LOADS
        },
        "curve": [
            statistics.fmean(r.points[i].slice_allocation for r in runs)
            for i in range(len(runs[0].points))
        ],
        "demand_curve": [
            statistics.fmean(r.points[i].demand_allocation for r in runs)
            for i in range(len(runs[0].points))
        ],
        "first_failure_pct": summarise(failures) if failures else None,
        "runs_without_failure": len(runs) - len(failures),
        "placed_pods": summarise([r.placed_pods for r in runs]),
        "arrived_pods": summarise([r.arrived_pods for r in runs]),
        "gpus_repartitioned_per_1k_pods": summarise([r.repartitions_per_1k_pods for r in runs]),
        "repartition_operations": summarise([r.repartition_operations for r in runs]),
        "disrupted_pods": sum(r.disrupted_pods for r in runs),
    }


# -- report -------------------------------------------------------------------------------


def pct(value: float) -> str:
    return f"{100 * value:.1f}"


def spread(summary: dict[str, float], scale: float = 100.0, digits: int = 1) -> str:
    mean, low, high = (summary[k] * scale for k in ("mean", "min", "max"))
    if round(high - low, digits) == 0:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def markdown(report: dict[str, Any]) -> str:
    meta = report["config"]
    lines = [
        "# Packing benchmark (mode A, FGD-style saturation)",
        "",
        f"{meta['nodes']} nodes x 8 A100-80GB GPUs = {meta['gpus']} GPUs, GPU side only; "
        f"trace `openb_pod_list_{meta['trace']}.csv`; seeds {meta['seeds']}; "
        f"{meta['duration_s']:.0f} s on this machine. Pods are drawn with replacement until "
        "arrived demand (compute slices of the mapped profiles) reaches 130 % of the cluster's "
        "compute slices; none depart. Values are means over seeds (min-max when they differ).",
        "Produced by `python -m bench.packing`; see docs/benchmarks.md, section Packing.",
        "",
    ]
    for block in report["workloads"]:
        limit = block["limit"]
        lines += [
            f"## {block['workload']}",
            "",
            f"GPU pods sampled from: {block['gpu_pods']} (mix by pod: "
            + ", ".join(f"{p} {n}" for p, n in block["mix"].items())
            + f"; {block['skipped_cpu_only']} CPU-only pods skipped). LP limit: "
            f"{pct(limit['slice_allocation'][99])} % at 100 %, "
            f"{pct(limit['slice_allocation'][129])} % at 130 %, all demand placeable up to "
            f"{limit['first_failure_pct']:.1f} % arrived.",
            "",
            "| policy | slice alloc. @100 % | @130 % | memory @130 % | demand placed @130 % "
            "| unalloc. GPU-eq. @100 % | @130 % | first failure (% arrived) "
            "| GPUs re-partitioned / 1k pods | pods disrupted |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for policy in block["policies"].values():
            at100, at130 = policy["at"]["100"], policy["at"]["130"]
            failure = policy["first_failure_pct"]
            failure_text = "none" if failure is None else spread(failure, 1.0)
            if failure is not None and policy["runs_without_failure"]:
                failure_text += f" ({policy['runs_without_failure']} seeds: none)"
            lines.append(
                f"| {policy['name']} | {spread(at100['slice_allocation'])} "
                f"| {spread(at130['slice_allocation'])} | {spread(at130['memory_allocation'])} "
                f"| {spread(at130['demand_allocation'])} "
                f"| {spread(at100['unallocated_gpus'], 1.0)} "
                f"| {spread(at130['unallocated_gpus'], 1.0)} | {failure_text} "
                f"| {spread(policy['gpus_repartitioned_per_1k_pods'], 1.0)} "
                f"| {policy['disrupted_pods']} |"
            )
        lines += ["", *goal_lines(block), ""]
    return "\n".join(lines) + "\n"


def goal_lines(block: dict[str, Any]) -> list[str]:
    """benchmarks.md §5.7 gates and goals, for migslice and its proposals."""
    policies = block["policies"]
    limit = block["limit"]
    out: list[str] = []
    for candidate in ("migslice", "migslice-packed", "migslice-proposed"):
        if candidate not in policies:
            continue
        mine = policies[candidate]
        checks: list[str] = []

        def alloc(policy: dict[str, Any], load: int) -> float:
            value: float = policy["at"][str(load)]["slice_allocation"]["mean"]
            return value

        if "B5" in policies:
            ok = all(alloc(mine, load) >= alloc(policies["B5"], load) - 1e-9 for load in (100, 130))
            checks.append(f"≥ B5 at 100/130 %: {'yes' if ok else 'no'}")
        if "B4" in policies:
            gain = 100 * (alloc(mine, 100) - alloc(policies["B4"], 100))
            checks.append(f"≥ B4 + 2 pp at 100 %: {'yes' if gain >= 2 else 'no'} ({gain:+.1f} pp)")
            unalloc_b4 = 1 - alloc(policies["B4"], 130)
            if unalloc_b4 > 0:
                cut = 100 * (1 - (1 - alloc(mine, 130)) / unalloc_b4)
                checks.append(
                    f"≥ 30 % fewer unallocated slices than B4 at 130 %: "
                    f"{'yes' if cut >= 30 else 'no'} ({cut:.0f} %)"
                )
        gaps = [
            100 * (limit["slice_allocation"][load - 1] - alloc(mine, load)) for load in (100, 130)
        ]
        checks.append(
            f"≤ 3 pp below the LP limit at 100/130 %: {'yes' if max(gaps) <= 3 else 'no'} "
            f"({gaps[0]:.1f} / {gaps[1]:.1f} pp)"
        )
        failure = mine["first_failure_pct"]
        mean_failure = 130.0 if failure is None else failure["mean"]
        ratio = 100 * mean_failure / limit["first_failure_pct"]
        checks.append(
            f"first failure ≥ 95 % of the limit's: {'yes' if ratio >= 95 else 'no'} ({ratio:.0f} %)"
        )
        checks.append(f"0 pods disrupted: {'yes' if mine['disrupted_pods'] == 0 else 'no'}")
        out.append(f"- **{mine['name']}** vs §5.7: " + "; ".join(checks) + ".")
    return out


def plot(report: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'); plot skipped"
    blocks = report["workloads"]
    figure, axes = plt.subplots(1, len(blocks), figsize=(6.2 * len(blocks), 6.0), squeeze=False)
    for axis, block in zip(axes[0], blocks, strict=True):
        loads = list(range(1, len(block["limit"]["slice_allocation"]) + 1))
        axis.plot(
            loads,
            [100 * v for v in block["limit"]["slice_allocation"]],
            "k--",
            linewidth=1.2,
            label="LP limit (§5.6)" if axis is axes[0][0] else None,
        )
        for n, (policy_id, policy) in enumerate(block["policies"].items()):
            style = "-" if policy_id.startswith("migslice") else (0, (3, 1.5))
            width = 2.6 if policy_id == "migslice" else 1.5
            # A whole GPU counts as 7 allocated slices whatever the pod asked for, so B0 is
            # drawn by the demand its pods placed (its slice allocation is in the tables).
            curve = policy["demand_curve"] if policy_id == "B0" else policy["curve"]
            label = policy["name"] + (" (demand placed)" if policy_id == "B0" else "")
            axis.plot(
                loads[: len(curve)],
                [100 * v for v in curve],
                linestyle=style,
                linewidth=width,
                color=f"C{n}",
                label=label if axis is axes[0][0] else None,
            )
        axis.set_title(block["workload"])
        axis.set_xlabel("arrived load (% of cluster compute slices)")
        axis.set_ylabel("slice allocation (%)")
        axis.set_xlim(0, 130)
        axis.set_ylim(0, 102)
        axis.grid(alpha=0.3)
    figure.legend(loc="lower center", ncol=4, fontsize=8, frameon=False)
    figure.suptitle(
        f"Mode A packing, {report['config']['gpus']} A100-80GB GPUs, "
        f"mean of {len(report['config']['seeds'])} seeds"
    )
    figure.tight_layout(rect=(0, 0.12, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"wrote {path}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        report = json.loads((args.out / "packing.json").read_text())
        (args.out / "packing.md").write_text(markdown(report))
        print(plot(report, args.out / "packing.png"))
        return 0
    policies = [p for p in args.policies.split(",") if p]
    unknown = [p for p in policies if p not in POLICY_IDS]
    if unknown:
        print(f"unknown policies {unknown}; known: {', '.join(POLICY_IDS)}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        blocks = [run_workload(m, args, policies) for m in args.mappings.split(",") if m]
    except CommandError as error:
        print(f"bench.packing: {error}", file=sys.stderr)
        return 1
    report = {
        "config": {
            "nodes": args.nodes,
            "gpus": args.nodes * 8,
            "gpu_model": GPU_MODEL.key,
            "trace": args.trace,
            "seeds": list(range(args.seeds)),
            "max_load_pct": 130,
            "duration_s": time.monotonic() - started,
        },
        "workloads": blocks,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "packing.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "packing.md").write_text(markdown(report))
    print(plot(report, args.out / "packing.png"))
    print(f"wrote {args.out / 'packing.json'} and {args.out / 'packing.md'}")
    print(f"total {report['config']['duration_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
