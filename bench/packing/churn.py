"""Benchmark: churn / steady state (mode B) with production settings, a report, not a test.

For each workload (the Alibaba v2023 default trace mapped by M1, and the synthetic mix), each
policy (migslice and B5 nos, which re-partition; B3 oracle-static and B4 stock mixed geometry,
which never do) and each seed: Poisson arrivals, lognormal lifetimes (median 236 s, p90
4,012 s), a FIFO pending queue with 300 s patience, on 64 nodes x 8 GPUs. migslice's
re-partitions are decided by the controller's own ``decide`` in 15 s rounds with its default
limits (30 s pending, 600 s cooldown, one node in flight, the label 90 s after its config is
written, for MIG Manager's copy of the ConfigMap), B5's by nos's batching windows;
either way the node takes no pod until the MIG Manager stand-in reports success after
T_reconf (``migslice/sim/churn.py``). Two sweeps around the base point (95 % load, T_reconf
60 s): offered load 70-110 % and T_reconf 15 s-10 min.

    python -m bench.packing.churn      # both sweeps, 5 seeds (about 20 min here)
    python -m bench.packing.churn --nodes 16 --seeds 2 --lifetimes 6 --loads 95 --t-reconf 60

Writes the section ``churn`` of ``bench/packing/report.json`` (``report.md``, ``report.png``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.common.stats import ci, run_pool
from bench.packing.suite import SUITE
from migslice.console import CommandError
from migslice.sim import GPU_MODEL, Workload, make_policy, mix_counts
from migslice.sim.churn import run_churn
from migslice.sim.churn_model import ChurnConfig, ChurnResult
from migslice.sim.trace_files import DEFAULT_DATA_DIR, load_workload

WORKLOADS = ("default/M1", "synthetic")
RESHAPING = ("migslice", "B5", "B5-catalog")
"""Policies whose re-partitions take T_reconf (the T_reconf sweep runs them)."""
CARVING = ("M-carve", "M-dra", "M-dra-reserve", "B6", "B8", "B9")
"""Policies that carve instances next to running ones, each taking the carve time."""
STATIC = ("B3", "B4")
LOADS = (70.0, 85.0, 95.0, 110.0)
T_RECONF = (15.0, 60.0, 120.0, 300.0, 600.0)
BASE_LOAD, BASE_T = 95.0, 60.0

CONTEXT: dict[str, Any] = {}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--lifetimes", type=float, default=20.0, help="run length, mean lifetimes")
    parser.add_argument("--warmup", type=float, default=2.0, help="warm-up, mean lifetimes")
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS))
    parser.add_argument("--t-reconf", default=",".join(f"{x:g}" for x in T_RECONF))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/packing)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--policies", default=",".join((*RESHAPING, *CARVING, *STATIC)))
    parser.add_argument(
        "--add",
        action="store_true",
        help="run only the given policies and put their points into the section churn",
    )
    return parser.parse_args(argv)


def points(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    """(policy, load, T_reconf): the load sweep at the base T_reconf for every policy, the
    T_reconf sweep at the base load for the policies that re-partition."""
    loads = [float(x) for x in args.loads.split(",") if x]
    times = [float(x) for x in args.t_reconf.split(",") if x]
    base_t = BASE_T if BASE_T in times else times[0]
    base_load = BASE_LOAD if BASE_LOAD in loads else loads[0]
    chosen = [p for p in args.policies.split(",") if p]
    found = {(p, load, base_t) for p in chosen for load in loads}
    found |= {(p, base_load, t) for p in chosen if p in RESHAPING for t in times}
    return sorted(found)


def workload_of(data_dir: Path, spec: str) -> Workload:
    """``default/M1`` is a trace and a mapping; ``synthetic`` the synthetic mix."""
    trace, _, mapping = spec.partition("/")
    if not mapping:
        return load_workload(data_dir, "default", "synthetic")
    return load_workload(data_dir, trace, mapping)


def work(task: tuple[str, str, float, float, int]) -> dict[str, Any]:
    spec, policy_id, load, t_reconf, seed = task
    began, cpu = time.monotonic(), time.process_time()
    workload = workload_of(CONTEXT["data_dir"], spec)
    config: ChurnConfig = replace(CONTEXT["config"], load_pct=load, t_reconf_s=t_reconf)
    gpus = config.nodes * config.gpus_per_node
    policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus=gpus)
    result = run_churn(workload, policy, seed, config=config)
    return {
        "workload": spec,
        "policy": policy_id,
        "load": load,
        "t_reconf": t_reconf,
        "seed": seed,
        "result": summary(result),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - began,
    }


def summary(result: ChurnResult) -> dict[str, Any]:
    window_s = result.duration_s - result.warmup_s
    gpu_days = result.gpus * window_s / 86_400
    node_s = result.nodes * window_s
    return {
        "name": result.policy,
        "arrived_pods": result.arrived_pods,
        "acceptance": result.acceptance,
        "slice_acceptance": result.slice_acceptance,
        "slice_allocation": result.slice_allocation,
        "mean_pending": result.mean_pending,
        "waits": asdict(result.waits),
        "repartition_waits": asdict(result.repartition_waits),
        "repartition_leads": asdict(result.repartition_leads),
        "repartitions": result.repartitions,
        "gpus_repartitioned": result.gpus_repartitioned,
        "repartitions_per_20_placed": 20 * result.repartitions_per_placed_pod,
        "disrupted_pods": result.disrupted_pods,
        "creates_per_gpu_day": result.instance_creates / gpu_days,
        "destroys_per_gpu_day": result.instance_destroys / gpu_days,
        "blocked_node_pct": 100 * result.blocked_node_s / node_s,
        "classes": [
            {
                "name": c.name,
                "arrived": c.arrived,
                "acceptance": c.acceptance,
                "slice_acceptance": c.slice_acceptance,
                "p99_s": c.waits.p99_s,
            }
            for c in result.classes
        ],
    }


METRICS = (
    "acceptance",
    "slice_acceptance",
    "slice_allocation",
    "mean_pending",
    "repartitions_per_20_placed",
    "gpus_repartitioned",
    "creates_per_gpu_day",
    "destroys_per_gpu_day",
    "blocked_node_pct",
)


def aggregate(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple[str, str, float, float], list[dict[str, Any]]] = {}
    for r in sorted(results, key=lambda r: r["seed"]):
        groups.setdefault((r["workload"], r["policy"], r["load"], r["t_reconf"]), []).append(r)
    out = []
    for (spec, policy_id, load, t_reconf), runs in sorted(groups.items()):
        summaries = [r["result"] for r in runs]
        classes = {c["name"] for s in summaries for c in s["classes"]}
        out.append(
            {
                "workload": spec,
                "policy": policy_id,
                "name": summaries[0]["name"],
                "load": load,
                "t_reconf": t_reconf,
                "seeds": [r["seed"] for r in runs],
                **{m: ci([s[m] for s in summaries]) for m in METRICS},
                "per_seed": {
                    m: [s[m] for s in summaries] for m in ("acceptance", "slice_acceptance")
                },
                "waits": {
                    k: ci([s["waits"][k] for s in summaries]) for k in ("p50_s", "p90_s", "p99_s")
                },
                "repartition_waits": {
                    k: ci(
                        [
                            s["repartition_waits"][k]
                            for s in summaries
                            if s["repartition_waits"]["count"]
                        ]
                        or [0.0]
                    )
                    for k in ("p50_s", "p99_s")
                },
                "repartition_leads": {
                    k: ci(
                        [
                            s["repartition_leads"][k]
                            for s in summaries
                            if s["repartition_leads"]["count"]
                        ]
                        or [0.0]
                    )
                    for k in ("p50_s", "p99_s")
                },
                "classes": {
                    name: {
                        k: ci([c[k] for s in summaries for c in s["classes"] if c["name"] == name])
                        for k in ("acceptance", "slice_acceptance", "p99_s")
                    }
                    for name in sorted(classes)
                },
                "arrived_pods": ci([s["arrived_pods"] for s in summaries]),
                "disrupted_pods": sum(s["disrupted_pods"] for s in summaries),
                "cpu_s": ci([r["cpu_s"] for r in runs]),
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        SUITE.render_files(SUITE.load(args.out), args.out or SUITE.folder)
        return 0
    config = ChurnConfig(
        nodes=args.nodes, duration_lifetimes=args.lifetimes, warmup_lifetimes=args.warmup
    )
    CONTEXT.update(data_dir=args.data_dir, config=config)
    specs = [s for s in args.workloads.split(",") if s]
    try:
        mixes = {s: mix_counts(workload_of(args.data_dir, s).pods) for s in specs}
    except CommandError as error:
        print(f"bench.packing.churn: {error}", file=sys.stderr)
        return 1
    todo = [
        (spec, policy, load, t, seed)
        for spec in specs
        for policy, load, t in points(args)
        for seed in range(args.seeds)
    ]
    todo.sort(key=lambda t: (t[1] not in ("migslice", "M-carve"), t[0] != "synthetic"))
    started = time.monotonic()
    results = []
    for n, r in enumerate(run_pool(work, todo, args.jobs), start=1):
        results.append(r)
        s = r["result"]
        print(
            f"[{n}/{len(todo)} {time.monotonic() - started:5.0f}s] {r['workload']} {r['policy']} "
            f"load {r['load']:g} T {r['t_reconf']:g}s seed {r['seed']}: accepted "
            f"{100 * s['acceptance']:.1f}% of pods, {100 * s['slice_acceptance']:.1f}% of slices "
            f"({r['cpu_s']:.1f}s)",
            flush=True,
        )
    report = {
        "config": run_config(
            args, config, mixes, results=results, wall_s=time.monotonic() - started
        ),
        "points": aggregate(results),
    }
    if args.add:
        report = add_points(SUITE.read("churn", args.out), report)
    SUITE.write("churn", report, args.out)
    print(f"total {report['config']['wall_s']:.0f}s wall, {report['config']['cpu_s']:.0f}s CPU")
    return 0


def run_config(
    args: argparse.Namespace,
    config: ChurnConfig,
    mixes: dict[str, dict[str, int]],
    *,
    results: list[dict[str, Any]],
    wall_s: float,
) -> dict[str, Any]:
    return {
        "nodes": args.nodes,
        "gpus": args.nodes * 8,
        "seeds": list(range(args.seeds)),
        "duration_s": config.duration_s,
        "warmup_s": config.warmup_s,
        "patience_s": config.patience_s,
        "interval_s": config.interval_s,
        "controller": asdict(config.controller),
        "batch_idle_s": config.batch_idle_s,
        "batch_timeout_s": config.batch_timeout_s,
        "t_carve_s": config.t_carve_s,
        "base": {"load": BASE_LOAD, "t_reconf": BASE_T},
        "wall_s": wall_s,
        "cpu_s": sum(r["cpu_s"] for r in results),
        "mixes": mixes,
    }


def add_points(report: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The existing ``report`` with ``new``'s points put in (same workload, policy, load and
    T_reconf replaced); its CPU time that of the points it now holds (a replaced point's
    runs no longer count)."""
    if report["config"]["seeds"] != new["config"]["seeds"]:
        raise SystemExit("bench.packing.churn --add: the seeds must be those of the report")
    key = ("workload", "policy", "load", "t_reconf")
    fresh = {tuple(p[k] for k in key): p for p in new["points"]}
    kept = [p for p in report["points"] if tuple(p[k] for k in key) not in fresh]
    report["points"] = sorted([*kept, *fresh.values()], key=lambda p: tuple(p[k] for k in key))
    report["config"]["cpu_s"] = sum(p["cpu_s"]["mean"] * p["cpu_s"]["n"] for p in report["points"])
    report["config"]["added"] = sorted({p["policy"] for p in new["points"]})
    return report


if __name__ == "__main__":
    sys.exit(main())
