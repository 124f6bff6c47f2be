"""Benchmark: carve mode (mode B churn) against the faithful baselines, a report, not a test.

migslice in carve mode (``M-carve``: every node in carve mode; the controller's own
``decide`` runs the carve planner in 15 s rounds with its default limits, carve mode's own
min pending (``--min-pending`` sweeps it, ``--intervals`` the rounds), 60 s cooldown per
node, four nodes in flight; the node agent's stand-in destroys and creates the
planned instances next to running ones after the carve time, the whole node taking no new
pod meanwhile, as ``prepare_node`` blocks a carving node) at carve times 2, 5, 10 and 30 s,
against migslice's MIG Manager mode, B5 nos, B5-catalog and B3 oracle-static (T_reconf 60 s)
and the per-pod carvers B6, B8 and B9 (each pod waiting the same carve time), at 95 %
offered load on 64 nodes x 8 GPUs, for the M1, M2 and synthetic mappings. Every policy sees
the same arrivals per seed, so differences are paired per seed.

Goals (the carve issue): p99 wait of the pods a carve was planned for <= carve time + 30 s;
acceptance by pods and by demanded slices >= B5 and >= B3; 0 disrupted pods (the agent's
stand-in raises on destroying an instance a pod holds, so a finished run destroyed none).

    python -m bench.packing.carve                          # 5 seeds (about 20 min here)
    python -m bench.packing.carve --nodes 16 --seeds 2 --lifetimes 6 --carve-times 5   # quick
    python -m bench.packing.carve --carve-times 2 --min-pending 5,10 --baselines= --add  # more rows

Writes the section ``carve`` of ``bench/packing/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.common.stats import ci, fmt, run_pool
from bench.packing.churn import aggregate, summary, workload_of
from bench.packing.packing_report import PER_POD
from bench.packing.suite import SUITE
from migslice.console import CommandError
from migslice.repartition import CarveSettings
from migslice.sim import GPU_MODEL, make_policy, mix_counts
from migslice.sim.churn import run_churn
from migslice.sim.churn_model import ChurnConfig
from migslice.sim.trace_files import DEFAULT_DATA_DIR

WORKLOADS = ("default/M1", "default/M2", "synthetic")
CARVE_TIMES = (2.0, 5.0, 10.0, 30.0)
BASELINES = ("migslice", "B5", "B5-catalog", "B3", "B6", "B8", "B9")
LOAD, T_RECONF = 95.0, 60.0
INTERVAL_S = 15.0
CONTEXT: dict[str, Any] = {}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--lifetimes", type=float, default=20.0, help="run length, mean lifetimes")
    parser.add_argument("--carve-times", default=",".join(f"{x:g}" for x in CARVE_TIMES))
    parser.add_argument(
        "--min-pending",
        default=f"{CarveSettings().min_pending_s:g}",
        help="M-carve's min pending times to sweep, s (--repartition-carve-min-pending-s)",
    )
    parser.add_argument(
        "--intervals",
        default=f"{INTERVAL_S:g}",
        help="M-carve's controller round intervals to sweep, s (--repartition-interval-s)",
    )
    parser.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help="baselines to run besides M-carve (empty: none)",
    )
    parser.add_argument(
        "--add",
        action="store_true",
        help="merge the new points into the existing report (same points replaced)",
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/packing)")
    parser.add_argument("--report-only", action="store_true")
    return parser.parse_args(argv)


Task = tuple[str, str, float, float, float, int]


def label(policy_id: str, t_carve: float, min_pending: float, interval: float) -> str:
    if policy_id in PER_POD:
        return f"{policy_id} {t_carve:g}s"
    if policy_id != "M-carve":
        return policy_id
    return f"M-carve {t_carve:g}s pending {min_pending:g}s rounds {interval:g}s"


def work(task: Task) -> dict[str, Any]:
    spec, policy_id, t_carve, min_pending, interval, seed = task
    began, cpu = time.monotonic(), time.process_time()
    workload = workload_of(CONTEXT["data_dir"], spec)
    base: ChurnConfig = CONTEXT["config"]
    config = replace(base, t_carve_s=t_carve)
    if policy_id == "M-carve":
        carve = replace(base.controller.carve, min_pending_s=min_pending)
        controller = replace(base.controller, carve=carve)
        config = replace(config, controller=controller, interval_s=interval)
    policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus=config.nodes * 8)
    result = run_churn(workload, policy, seed, config=config)
    return {
        "workload": spec,
        "policy": label(policy_id, t_carve, min_pending, interval),
        "t_carve": t_carve,
        "min_pending": min_pending,
        "interval": interval,
        "load": LOAD,
        "t_reconf": T_RECONF,
        "seed": seed,
        "result": summary(result),
        "cpu_s": time.process_time() - cpu,
        "wall_s": time.monotonic() - began,
    }


def paired(report: dict[str, Any], spec: str, policy: str, other: str) -> dict[str, Any]:
    """Per-seed differences (policy - other) in acceptance by pods and by slices, in pp."""
    by = {p["policy"]: p for p in report["points"] if p["workload"] == spec}
    if policy not in by or other not in by:
        return {}
    out = {}
    for metric in ("acceptance", "slice_acceptance"):
        a, b = by[policy]["per_seed"][metric], by[other]["per_seed"][metric]
        out[metric] = ci([100 * (x - y) for x, y in zip(a, b, strict=True)])
    return out


def markdown(report: dict[str, Any]) -> str:
    c = report["config"]
    lines = [
        "# Carve mode (mode B churn) against the faithful baselines",
        "",
        f"{c['nodes']} nodes x 8 A100-80GB GPUs = {c['gpus']} GPUs; seeds {c['seeds'][0]}-"
        f"{c['seeds'][-1]} ({len(c['seeds'])}); offered load {LOAD:g} %, {c['duration_s']:.0f} s "
        f"simulated (the first {c['warmup_s']:.0f} s left out), patience 300 s. M-carve: every "
        "node in carve mode, carve time, carve min pending and controller round interval as "
        "each row says, cooldown 60 s, 4 nodes in flight, the whole node off-limits while the "
        "node agent carves. migslice (MIG Manager mode), B5 nos and B5-catalog: T_reconf 60 s "
        "(migslice: min pending 30 s, rounds every 15 s, the label 90 s after its config is "
        "written); B3: never re-partitions; B6, B8 and "
        "B9 carve one instance per pod on GPUs in use, each pod starting the row's carve time "
        "after it is placed. New-shape pods: those a carve or re-partition was planned for, "
        "and every pod of B6, B8 and B9 (each is given an instance of its own); their wait "
        "runs from arrival to the pod's start, carve included, and the goal is judged alike "
        "for both. "
        '"Before the plan": the new-shape pods\' time from arrival to the carve or '
        "re-partition planned for them; the rest of their wait is the carve itself and the "
        "placement after it. Values: mean ± 95 % interval over seeds; differences are paired by "
        "seed (every policy sees the same arrivals).",
        "",
        f"Run: {c['wall_s'] / 60:.1f} min wall, {c['cpu_s'] / 60:.1f} min CPU on a 2-core "
        "machine shared with other work (timings are noisy). Produced by "
        "`python -m bench.packing.carve`.",
        "",
    ]
    for spec in report["workloads"]:
        lines += workload_section(report, spec)
    return "\n".join(lines) + "\n"


def workload_section(report: dict[str, Any], spec: str) -> list[str]:
    points = [p for p in report["points"] if p["workload"] == spec]
    lines = [
        f"## {spec}",
        "",
        "| policy | accepted, pods % | accepted, slices % | new-shape pods' wait p50 / p99 s "
        "| goal p99 ≤ t + 30 s | before the plan p50 / p99 s "
        "| carves or re-partitions / 20 placed | pods disrupted |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in sorted(points, key=order):
        waits = new_shape_waits(p)
        leads = None if is_per_pod(p) else p.get("repartition_leads")
        before = f"{fmt(leads['p50_s'], 1, 0)} / {fmt(leads['p99_s'], 1, 0)}" if leads else "—"
        p99 = waits["p99_s"]["mean"]
        goal = "—"
        if p["policy"].startswith("M-carve") or is_per_pod(p):
            limit = p["t_carve"] + 30
            goal = f"≤ {limit:g}: " + ("met" if p99 <= limit else f"MISSED by {p99 - limit:.0f} s")
        lines.append(
            f"| {p['name']}{suffix(p)} "
            f"| {fmt(p['acceptance'])} | {fmt(p['slice_acceptance'])} "
            f"| {fmt(waits['p50_s'], 1, 0)} / {fmt(waits['p99_s'], 1, 0)} | {goal} | {before} "
            f"| {fmt(p['repartitions_per_20_placed'], 1, 2)} | {p['disrupted_pods']} |"
        )
    lines += ["", "Paired differences, M-carve minus baseline, pp (by pods / by slices):", ""]
    lines += [
        "| carve time, min pending, rounds | vs B5 nos | vs B5-catalog | vs B3 oracle-static "
        "| vs migslice (MIG Manager) | vs B6 | vs B8 | vs B9 (same carve time) |"
    ]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for p in sorted(points, key=order):
        if not p["policy"].startswith("M-carve"):
            continue
        cells = []
        others = [
            "B5",
            "B5-catalog",
            "B3",
            "migslice",
            *(f"{b} {p['t_carve']:g}s" for b in PER_POD),
        ]
        for other in others:
            d = paired(report, spec, p["policy"], other)
            cells.append(
                f"{fmt(d['acceptance'], 1)} / {fmt(d['slice_acceptance'], 1)}" if d else "—"
            )
        lines.append(f"|{suffix(p)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def is_per_pod(point: dict[str, Any]) -> bool:
    return point["policy"].split()[0] in PER_POD


def new_shape_waits(point: dict[str, Any]) -> dict[str, Any]:
    """The waits of the pods that needed a new instance: those a carve or re-partition was
    planned for, and every pod of a per-pod carver (each is given an instance of its own when
    it is placed, so its wait, carve included, is a new shape's)."""
    return point["waits"] if is_per_pod(point) else point["repartition_waits"]


def suffix(point: dict[str, Any]) -> str:
    if is_per_pod(point):
        return f" {point['t_carve']:g} s"
    if not point["policy"].startswith("M-carve"):
        return ""
    return (
        f" {point['t_carve']:g} s, pending {point['min_pending']:g} s, "
        f"rounds {point['interval']:g} s"
    )


def order(point: dict[str, Any]) -> tuple[int, float, str, float, float]:
    """M-carve first, then the per-pod carvers, by carve time, then min pending and interval,
    longest first; the others last."""
    carve = point["policy"].startswith("M-carve")
    per_pod = is_per_pod(point)
    rank = 0 if carve else 1 if per_pod else 2
    return (
        rank,
        point["t_carve"],
        point["policy"],
        -point.get("min_pending", 0),
        -point.get("interval", 0),
    )


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        SUITE.render_files(SUITE.load(args.out), args.out or SUITE.folder)
        return 0
    config = ChurnConfig(nodes=args.nodes, duration_lifetimes=args.lifetimes)
    CONTEXT.update(data_dir=args.data_dir, config=config)
    specs = [s for s in args.workloads.split(",") if s]
    try:
        mixes = {s: mix_counts(workload_of(args.data_dir, s).pods) for s in specs}
    except CommandError as error:
        print(f"bench.packing.carve: {error}", file=sys.stderr)
        return 1
    try:
        times = floats(args.carve_times)
        pendings, intervals = floats(args.min_pending), floats(args.intervals)
    except ValueError as error:
        print(
            f"bench.packing.carve: --carve-times/--min-pending/--intervals: {error}",
            file=sys.stderr,
        )
        return 1
    variants = [("M-carve", t, mp, iv) for t in times for mp in pendings for iv in intervals]
    chosen = [b for b in args.baselines.split(",") if b]
    baselines = [(b, 0.0, 0.0, 0.0) for b in chosen if b not in PER_POD]
    baselines += [(b, t, 0.0, 0.0) for b in chosen if b in PER_POD for t in times]
    todo: list[Task] = [
        (spec, *variant, seed)
        for spec in specs
        for variant in [*variants, *baselines]
        for seed in range(args.seeds)
    ]
    todo.sort(key=lambda t: t[1] != "M-carve")
    started, results = time.monotonic(), []
    for n, r in enumerate(run_pool(work, todo, args.jobs), start=1):
        results.append(r)
        s = r["result"]
        print(
            f"[{n}/{len(todo)} {time.monotonic() - started:5.0f}s] {r['workload']} {r['policy']} "
            f"seed {r['seed']}: {100 * s['acceptance']:.1f}% of pods, "
            f"{100 * s['slice_acceptance']:.1f}% of slices ({r['cpu_s']:.1f}s)",
            flush=True,
        )
    points = aggregate(results)
    for p in points:
        first = next(r for r in results if r["policy"] == p["policy"])
        p.update({k: first[k] for k in ("t_carve", "min_pending", "interval")})
    wall_s, cpu_s = time.monotonic() - started, sum(r["cpu_s"] for r in results)
    if args.add:
        old = SUITE.read("carve", args.out)
        new = {(p["workload"], p["policy"]) for p in points}
        kept = [p for p in old["points"] if (p["workload"], p["policy"]) not in new]
        points = sorted([*kept, *points], key=lambda p: (p["workload"], p["policy"]))
        specs = [*old["workloads"], *(s for s in specs if s not in old["workloads"])]
        mixes = {**old["config"]["mixes"], **mixes}
        times = sorted({*old["config"]["carve_times_s"], *times})
        wall_s += old["config"]["wall_s"]
        cpu_s += old["config"]["cpu_s"]
    report = {
        "config": {
            "nodes": args.nodes,
            "gpus": args.nodes * 8,
            "seeds": list(range(args.seeds)),
            "duration_s": config.duration_s,
            "warmup_s": config.warmup_s,
            "carve_times_s": times,
            "mixes": mixes,
            "wall_s": wall_s,
            "cpu_s": cpu_s,
        },
        "workloads": specs,
        "points": points,
    }
    SUITE.write("carve", report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
