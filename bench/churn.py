"""Benchmark: churn / steady state (mode B), a report, not a test.

For each workload (the Alibaba v2023 default trace mapped by M1, and the synthetic MIG-friendly
mix), each policy (migslice and B5 nos-like, which re-partition; B3 oracle-static and B4
best-fit all-balanced for reference) and each seed: Poisson arrivals at 95 % offered load,
lognormal lifetimes (median 236 s, p90 4,012 s), a FIFO pending queue with 300 s patience,
re-partitions usable T_reconf = 15 s after they are decided (``migslice/sim/churn.py``).

    python -m bench.churn                           # 48 nodes, 20 mean lifetimes, 2 seeds
    python -m bench.churn --nodes 64                # the size asked for (about 7 min here)
    python -m bench.churn --nodes 8 --lifetimes 5   # quick

Writes ``bench/reports/churn.json`` and ``churn.md``.
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
from migslice.sim import GPU_MODEL, make_policy, mix_counts
from migslice.sim.churn import run_churn
from migslice.sim.churn_model import ChurnConfig, ChurnResult, Lifetimes
from migslice.sim.command import DEFAULT_DATA_DIR, load_workload

REPORTS = Path(__file__).parent / "reports"
MAPPINGS = ("M1", "synthetic")
POLICIES = ("migslice", "B5", "B3", "B4")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--trace", default="default", help="openb_pod_list_<TRACE>.csv")
    parser.add_argument("--nodes", type=int, default=48)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--load", type=float, default=95.0, help="offered load, %% of slices")
    parser.add_argument("--t-reconf", type=float, default=15.0, help="seconds")
    parser.add_argument("--patience", type=float, default=300.0, help="seconds")
    parser.add_argument("--lifetimes", type=float, default=20.0, help="run length, mean lifetimes")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up, mean lifetimes")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--mappings", default=",".join(MAPPINGS))
    parser.add_argument("--out", type=Path, default=REPORTS)
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite churn.md from churn.json"
    )
    return parser.parse_args(argv)


def summarise(values: Sequence[float]) -> dict[str, float]:
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def run_workload(
    mapping: str, args: argparse.Namespace, config: ChurnConfig, policies: Sequence[str]
) -> dict[str, Any]:
    workload = load_workload(args.data_dir, args.trace, mapping)
    gpus = config.nodes * config.gpus_per_node
    results: dict[str, list[ChurnResult]] = {}
    names: dict[str, str] = {}
    for policy_id in policies:
        policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus)
        names[policy_id] = policy.name
        for seed in range(args.seeds):
            began = time.monotonic()
            result = run_churn(workload, policy, seed, config)
            results.setdefault(policy_id, []).append(result)
            print(
                f"[{workload.name}] {policy.name}, seed {seed}: acceptance "
                f"{100 * result.acceptance:.1f}% of {result.arrived_pods}, slice alloc. "
                f"{100 * result.slice_allocation:.1f}%, wait p99 {result.waits.p99_s:.0f}s, "
                f"{result.repartitions} re-partitions, {result.disrupted_pods} disrupted "
                f"({time.monotonic() - began:.1f}s)",
                flush=True,
            )
    return {
        "workload": workload.name,
        "mapping": mapping,
        "mix": mix_counts(workload.pods),
        "policies": {
            policy_id: aggregate(names[policy_id], runs) for policy_id, runs in results.items()
        },
    }


def aggregate(name: str, runs: Sequence[ChurnResult]) -> dict[str, Any]:
    def waits(pick: str) -> dict[str, Any]:
        chosen = [getattr(r, pick) for r in runs]
        with_pods = [w for w in chosen if w.count]
        return {
            "count": sum(w.count for w in chosen),
            **{
                key: summarise([getattr(w, key) for w in with_pods]) if with_pods else None
                for key in ("mean_s", "p50_s", "p99_s")
            },
        }

    return {
        "name": name,
        "seeds": [r.seed for r in runs],
        "arrival_rate_per_s": summarise([r.arrival_rate_per_s for r in runs]),
        "arrived_pods": summarise([r.arrived_pods for r in runs]),
        "placed_pods": summarise([r.placed_pods for r in runs]),
        "abandoned_pods": summarise([r.abandoned_pods for r in runs]),
        "acceptance": summarise([r.acceptance for r in runs]),
        "slice_allocation": summarise([r.slice_allocation for r in runs]),
        "mean_pending": summarise([r.mean_pending for r in runs]),
        "waits": waits("waits"),
        "repartition_waits": waits("repartition_waits"),
        "repartition_delays": waits("repartition_delays"),
        "repartition_share": summarise([r.repartition_share for r in runs]),
        "repartitions": summarise([r.repartitions for r in runs]),
        "gpus_repartitioned": summarise([r.gpus_repartitioned for r in runs]),
        "repartitions_per_20_placed": summarise([20 * r.repartitions_per_placed_pod for r in runs]),
        "disrupted_pods": sum(r.disrupted_pods for r in runs),
    }


# -- report -------------------------------------------------------------------------------


def spread(summary: dict[str, float] | None, scale: float = 1.0, digits: int = 1) -> str:
    if summary is None:
        return "—"
    mean, low, high = (summary[k] * scale for k in ("mean", "min", "max"))
    if round(high - low, digits) == 0:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def markdown(report: dict[str, Any]) -> str:
    meta = report["config"]
    lines = [
        "# Churn benchmark (mode B, steady state)",
        "",
        f"{meta['nodes']} nodes x 8 A100-80GB GPUs = {meta['gpus']} GPUs, GPU side only; "
        f"trace `openb_pod_list_{meta['trace']}.csv`; seeds {meta['seeds']}; "
        f"{meta['wall_s']:.0f} s on this machine. Offered load {meta['load_pct']:.0f} % of "
        f"compute slices; lifetimes lognormal (median {meta['median_s']:.0f} s, p90 "
        f"{meta['p90_s']:.0f} s, mean {meta['mean_lifetime_s']:.0f} s), started in steady "
        f"state; {meta['duration_s']:.0f} s simulated ({meta['lifetimes']:.0f} mean lifetimes), "
        f"the first {meta['warmup_s']:.0f} s excluded; T_reconf {meta['t_reconf_s']:.0f} s; "
        f"patience {meta['patience_s']:.0f} s (a pod not placed by then gives up). Values are "
        "means over seeds (min-max when they differ); wait percentiles are taken per seed.",
        "Produced by `python -m bench.churn`; see docs/benchmarks.md, section Churn.",
        "",
    ]
    for block in report["workloads"]:
        lines += [
            f"## {block['workload']}",
            "",
            "Mix by pod: " + ", ".join(f"{p} {n}" for p, n in block["mix"].items()) + ".",
            "",
            "| policy | arrived pods | acceptance % | slice alloc. % | mean pending "
            "| wait mean / p50 / p99 s | pods needing a re-partition % "
            "| their wait mean / p50 / p99 s | of which after the decision, p50 / p99 s "
            "| re-partitions / 20 placed | GPUs re-partitioned | pods disrupted |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for policy in block["policies"].values():
            w, rw = policy["waits"], policy["repartition_waits"]
            rd = policy["repartition_delays"]
            lines.append(
                f"| {policy['name']} | {spread(policy['arrived_pods'], digits=0)} "
                f"| {spread(policy['acceptance'], 100)} "
                f"| {spread(policy['slice_allocation'], 100)} "
                f"| {spread(policy['mean_pending'])} "
                f"| {spread(w['mean_s'])} / {spread(w['p50_s'])} / {spread(w['p99_s'])} "
                f"| {spread(policy['repartition_share'], 100)} "
                f"| {spread(rw['mean_s'])} / {spread(rw['p50_s'])} / {spread(rw['p99_s'])} "
                f"| {spread(rd['p50_s'])} / {spread(rd['p99_s'])} "
                f"| {spread(policy['repartitions_per_20_placed'], digits=2)} "
                f"| {spread(policy['gpus_repartitioned'], digits=0)} "
                f"| {policy['disrupted_pods']} |"
            )
        lines += ["", *goal_lines(block, meta["t_reconf_s"]), ""]
    return "\n".join(lines) + "\n"


def goal_lines(block: dict[str, Any], t_reconf_s: float) -> list[str]:
    """benchmarks.md §5.7, churn goals, for migslice."""
    policies = block["policies"]
    if "migslice" not in policies:
        return []
    mine = policies["migslice"]
    checks: list[str] = []
    if "B5" in policies:
        gain = 100 * (mine["acceptance"]["mean"] - policies["B5"]["acceptance"]["mean"])
        checks.append(f"acceptance ≥ B5 + 5 pp: {'yes' if gain >= 5 else 'no'} ({gain:+.1f} pp)")
    per20 = mine["repartitions_per_20_placed"]["mean"]
    checks.append(
        f"≤ 1 re-partition per 20 placements: {'yes' if per20 <= 1 else 'no'} ({per20:.2f})"
    )
    p99 = mine["repartition_waits"]["p99_s"]
    after = mine["repartition_delays"]["p99_s"]
    if p99 is not None and after is not None:
        worst = p99["max"]
        ok = worst <= t_reconf_s + 30
        checks.append(
            f"p99 wait of pods needing a re-partition ≤ T_reconf + 30 s: "
            f"{'yes' if ok else 'no'} (worst seed {worst:.0f} s from arrival; "
            f"{after['max']:.0f} s from the re-partition decision)"
        )
    checks.append(f"0 pods disrupted: {'yes' if mine['disrupted_pods'] == 0 else 'no'}")
    return ["- **migslice** vs §5.7 (churn): " + "; ".join(checks) + "."]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        report = json.loads((args.out / "churn.json").read_text())
        (args.out / "churn.md").write_text(markdown(report))
        return 0
    policies = [p for p in args.policies.split(",") if p]
    config = ChurnConfig(
        nodes=args.nodes,
        load_pct=args.load,
        t_reconf_s=args.t_reconf,
        patience_s=args.patience,
        duration_lifetimes=args.lifetimes,
        warmup_lifetimes=args.warmup,
    )
    started = time.monotonic()
    try:
        blocks = [run_workload(m, args, config, policies) for m in args.mappings.split(",") if m]
    except (CommandError, ValueError) as error:
        print(f"bench.churn: {error}", file=sys.stderr)
        return 1
    lifetimes: Lifetimes = config.lifetimes
    report = {
        "config": {
            "nodes": args.nodes,
            "gpus": args.nodes * config.gpus_per_node,
            "gpu_model": GPU_MODEL.key,
            "trace": args.trace,
            "seeds": list(range(args.seeds)),
            "load_pct": config.load_pct,
            "t_reconf_s": config.t_reconf_s,
            "patience_s": config.patience_s,
            "median_s": lifetimes.median_s,
            "p90_s": lifetimes.p90_s,
            "mean_lifetime_s": lifetimes.mean_s,
            "lifetimes": config.duration_lifetimes,
            "duration_s": config.duration_s,
            "warmup_s": config.warmup_s,
            "wall_s": time.monotonic() - started,
        },
        "workloads": blocks,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "churn.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "churn.md").write_text(markdown(report))
    print(f"wrote {args.out / 'churn.json'} and {args.out / 'churn.md'}")
    print(f"total {report['config']['wall_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
