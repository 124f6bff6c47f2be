"""Benchmark: B7, the exact optimum on small clusters, and each policy's gap to it.

The ILP (benchmarks.md §5.5 B7, §5.6), solved with HiGHS through ``scipy.optimize.milp``
(the ``bench`` extra): for a cluster of ``N`` nodes x 8 GPUs and a list of pods known in
advance, choose each GPU's layout and each pod's node so that the placed compute slices are
the most possible::

    x[n, c] >= 0 integer   GPUs of node n with count-geometry c (the count vectors of the
                           maximal legal layouts; any layout is dominated by one of them)
    z[n, t] >= 0 integer   pods of kind t (profile, count) placed on node n
    sum_c x[n, c] <= 8                                  every node has 8 GPUs
    sum_n z[n, t] <= pods of kind t                     no more than arrived
    sum_t count_t [profile_t = p] z[n, t] <= sum_c cnt(c, p) x[n, c]   instances on node n
    slices(n) >= slices(n + 1)                          nodes are alike (symmetry)
    maximise sum_{n,t} slices_t z[n, t]

A k x 7g pod needs k 7g instances on one node, and a GPU has at most one, so it gets k GPUs
of one node, as in the simulator. Unlike the configuration LP it is exact: it knows which
node each instance is on. Unlike the policies it knows every pod in advance (offline).

Instances: for each workload, 100 random clusters of 2-8 nodes (16-64 GPUs) and the pods
drawn (seeded) until 130 % of their compute slices arrived; the gap at 100 % and 130 %
arrived is ``(OPT - policy) / OPT`` in compute slices, OPT solved for the pods that had
arrived by then.

    python -m bench.packing.exact                      # 100 instances per workload (about 10 min)
    python -m bench.packing.exact --instances 10       # quick

Writes the section ``exact`` of ``bench/packing/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from bench.common.stats import run_pool
from bench.packing.packing_report import HEADLINE
from bench.packing.suite import SUITE
from migslice.sim import GPU_MODEL, SaturationConfig, SimPod, make_policy, run_sequence
from migslice.sim.limits import count_geometries
from migslice.sim.saturation import sample_arrivals
from migslice.sim.trace_files import DEFAULT_DATA_DIR, load_workload

WORKLOADS = ("default/M1", "default/M2", "synthetic")
POLICIES = tuple(p for p in HEADLINE if p not in ("B4", "B0"))
"""The packing report's headline policies but the two that trail far behind."""
GPUS_PER_NODE = 8
TIME_LIMIT_S = 60.0
WORST_GOAL = 0.10
"""The goal's bound on the worst gap."""
CONTEXT: dict[str, Any] = {}


def optimum(pods: Sequence[SimPod], nodes: int) -> tuple[float, bool]:
    """The most compute slices ``pods`` can hold on ``nodes`` x 8 GPUs, and whether HiGHS
    proved it optimal (else the best bound it proved, an over-estimate)."""
    geometries = count_geometries(GPU_MODEL)
    kinds = sorted(Counter((p.profile, p.count) for p in pods).items())
    profiles = sorted({p for (p, _), _ in kinds} | {p for g in geometries for p, _ in g.counts})
    n_c, n_t = len(geometries), len(kinds)
    per_node = n_c + n_t
    size = nodes * per_node
    slices = [GPU_MODEL.profile(p).compute_slices * k for (p, k), _ in kinds]
    rows: list[np.ndarray] = []
    upper: list[float] = []

    def row() -> np.ndarray:
        return np.zeros(size)

    for n in range(nodes):
        r = row()
        r[n * per_node : n * per_node + n_c] = 1
        rows.append(r)
        upper.append(GPUS_PER_NODE)
        for profile in profiles:
            r = row()
            for j, g in enumerate(geometries):
                r[n * per_node + j] = -g.count(profile)
            for t, ((p, k), _) in enumerate(kinds):
                if p == profile:
                    r[n * per_node + n_c + t] = k
            rows.append(r)
            upper.append(0)
        if n + 1 < nodes:  # symmetry: node n holds at least what node n + 1 holds
            r = row()
            for t in range(n_t):
                r[n * per_node + n_c + t] = -slices[t]
                r[(n + 1) * per_node + n_c + t] = slices[t]
            rows.append(r)
            upper.append(0)
    for t, (_, count) in enumerate(kinds):
        r = row()
        for n in range(nodes):
            r[n * per_node + n_c + t] = 1
        rows.append(r)
        upper.append(count)
    objective = np.zeros(size)
    for n in range(nodes):
        for t in range(n_t):
            objective[n * per_node + n_c + t] = -slices[t]
    result = milp(
        objective,
        constraints=LinearConstraint(np.array(rows), -np.inf, np.array(upper)),
        integrality=np.ones(size),
        bounds=Bounds(0, np.inf),
        options={"time_limit": TIME_LIMIT_S},
    )
    if result.status == 0:
        return -float(result.fun), True
    bound = getattr(result, "mip_dual_bound", None)
    return (-float(bound) if bound is not None else float("nan")), False


def gpus_needed(pods: Sequence[SimPod]) -> int:
    """A lower bound on the GPUs ``pods`` hold when all are placed: their compute and memory
    slices, and one GPU per instance of 4 compute slices or more (two never share a GPU)."""
    compute = sum(p.compute_slices for p in pods)
    memory = sum(p.memory_slices for p in pods)
    large = sum(p.count for p in pods if GPU_MODEL.profile(p.profile).compute_slices >= 4)
    return max(-(-compute // 7), -(-memory // 8), large)


def forced_out(pods: Sequence[SimPod], gpus: int) -> dict[str, Any] | None:
    """The first multi-GPU job of ``pods`` that no policy placing every earlier pod can place:
    those pods need more than the cluster's GPUs less the job's (its position, its GPUs, the
    earlier pods' GPUs and their profiles); None when there is none."""
    for position, pod in enumerate(pods):
        if pod.count > 1 and gpus_needed(pods[:position]) > gpus - pod.count:
            before = Counter(p.profile for p in pods[:position] for _ in range(p.count))
            return {
                "position": position + 1,
                "count": pod.count,
                "profile": pod.profile,
                "gpus_before": gpus_needed(pods[:position]),
                "before": dict(sorted(before.items())),
            }
    return None


def work(task: tuple[str, int]) -> dict[str, Any]:
    spec, instance = task
    trace, _, mapping = spec.partition("/")
    workload = load_workload(
        CONTEXT["data_dir"], trace if mapping else "default", mapping or "synthetic"
    )
    rng = random.Random(instance)
    nodes = rng.randint(2, 8)
    gpus = nodes * GPUS_PER_NODE
    arrivals = sample_arrivals(workload, 7 * gpus, 130, seed=instance)
    at_100, total = [], 0
    for pod in arrivals:
        at_100.append(pod)
        total += pod.compute_slices
        if 100 * total >= 100 * 7 * gpus:
            break
    began = time.process_time()
    opt = {"100": optimum(at_100, nodes), "130": optimum(arrivals, nodes)}
    solve_s = time.process_time() - began
    config = SaturationConfig(nodes=nodes)
    out: dict[str, Any] = {
        "workload": spec,
        "instance": instance,
        "nodes": nodes,
        "pods": len(arrivals),
        "solve_s": solve_s,
        "optimal": all(o[1] for o in opt.values()),
        "opt": {k: v[0] for k, v in opt.items()},
        "forced": {"100": forced_out(at_100, gpus), "130": forced_out(arrivals, gpus)},
        "gaps": {},
    }
    for policy_id in CONTEXT["policies"]:
        policy = make_policy(policy_id, GPU_MODEL, workload.pods, gpus=gpus)
        result = run_sequence(arrivals, policy, config, workload=spec, seed=instance)
        out["gaps"][policy_id] = {}
        for load in ("100", "130"):
            placed = result.at(int(load)).slice_allocation * 7 * gpus
            best = opt[load][0]
            out["gaps"][policy_id][load] = (best - placed) / best if best else 0.0
    return out


def summarise(values: Sequence[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "n": len(ordered),
    }


def markdown(report: dict[str, Any]) -> str:
    meta = report["config"]
    lines = [
        "# Exactness benchmark (B7: the exact ILP optimum on small clusters)",
        "",
        f"{meta['instances']} random instances per workload: 2-8 nodes x 8 A100-80GB GPUs, pods "
        "drawn until 130 % of the cluster's compute slices arrived; OPT by HiGHS "
        f"(`scipy.optimize.milp`, {TIME_LIMIT_S:.0f} s limit; {meta['not_proven']} of "
        f"{meta['solved']} instance pairs not proven optimal, their bound used, which only "
        "widens the gap). Gap = (OPT - placed) / OPT in compute slices; goal: median "
        f"≤ 2 %, worst ≤ 10 %. {meta['wall_s'] / 60:.1f} min wall, ILP solving "
        f"{meta['solve_s']:.0f} s CPU. Produced by `python -m bench.packing.exact`.",
        "",
        "| workload | policy | gap @100 %: median / p90 / worst | @130 %: median / p90 / worst "
        "| worst @100 / @130 % where some policy is within 10 % "
        "| goal (median ≤ 2 %, worst ≤ 10 %) |",
        "|---|---|---|---|---|---|",
    ]
    instances = report.get("instances", [])
    unforced = _unforced_worst(instances)
    for spec, policies in report["gaps"].items():
        for policy_id, loads in policies.items():
            cells = []
            for load in ("100", "130"):
                s = loads[load]
                cells.append(
                    f"{100 * s['median']:.2f} / {100 * s['p90']:.2f} / {100 * s['max']:.2f}"
                )
            worst = max(loads[x]["max"] for x in loads)
            median = max(loads[x]["median"] for x in loads)
            ok = median <= 0.02 and worst <= WORST_GOAL
            verdict = (
                "met"
                if ok
                else (f"MISSED (median {100 * median:.2f} %, worst {100 * worst:.2f} %)")
            )
            kept = unforced.get((spec, policy_id))
            rest = "—" if kept is None else f"{100 * kept[0]:.2f} / {100 * kept[1]:.2f}"
            lines.append(
                f"| {spec} | {report['names'][policy_id]} | {cells[0]} | {cells[1]} | {rest} "
                f"| {verdict} |"
            )
    lines += _forced_note(instances)
    return "\n".join(lines) + "\n"


def _out_of_reach(instance: dict[str, Any]) -> bool:
    """Whether every policy misses the worst-case bound (10 %) on this instance, at 100 or
    130 % arrived."""
    gaps = instance["gaps"].values()
    return any(min(g[load] for g in gaps) > WORST_GOAL for load in ("100", "130"))


def _unforced_worst(instances: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[float, float]]:
    """(workload, policy) -> the worst gap at 100 and 130 % over the instances where some
    policy is within the worst-case bound."""
    worst: dict[tuple[str, str], tuple[float, float]] = {}
    for instance in instances:
        if _out_of_reach(instance):
            continue
        for policy_id, gaps in instance["gaps"].items():
            key = (instance["workload"], policy_id)
            old = worst.get(key, (0.0, 0.0))
            worst[key] = (max(old[0], gaps["100"]), max(old[1], gaps["130"]))
    return worst


def _forced_note(instances: list[dict[str, Any]]) -> list[str]:
    """The instances where no policy is within the worst-case bound, and why."""
    beyond = [i for i in instances if _out_of_reach(i)]
    if not beyond:
        return []
    lines = [
        "",
        f"**Why the worst ≤ 10 % is missed.** On {len(beyond)} of the {len(instances)} "
        "instances no policy comes within 10 % of OPT, the oracle-static B3 included (the "
        "column before the goal gives each policy's worst over the others). Where a "
        "multi-GPU job is named below it can be placed only by turning away earlier pods "
        "that fit: the pods before it hold more GPUs than the cluster has less the job's (a "
        "lower bound from their compute and memory slices, two instances of 4 compute slices "
        "or more never sharing a GPU). OPT, knowing the job comes, turns them away; a policy "
        "that places each pod that fits when it arrives cannot (mode A has no clock: a pod "
        "held back is a pod refused, and the large-job reserve holds back only pods smaller "
        "than a GPU).",
        "",
    ]
    for instance in beyond:
        forced = instance.get("forced") or {}
        job = forced.get("100") or forced.get("130")
        gaps = instance["gaps"].values()
        spread = "; ".join(
            f"every policy's gap at {load} % {100 * min(g[load] for g in gaps):.1f}-"
            f"{100 * max(g[load] for g in gaps):.1f} % (OPT {instance['opt'][load]:.0f} slices)"
            for load in ("100", "130")
        )
        if job is None:
            why = "no such job (the gap is the layout's)"
        else:
            before = ", ".join(f"{n} x {p}" for p, n in job["before"].items())
            why = (
                f"a {job['count']} x {job['profile']} job arrives as pod {job['position']}, "
                f"after {before} (at least {job['gpus_before']} GPUs)"
            )
        lines.append(
            f"- {instance['workload']} #{instance['instance']}, {instance['nodes']} nodes "
            f"({8 * instance['nodes']} GPUs): {why}; {spread}."
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/packing)")
    args = parser.parse_args(argv)
    policies = [p for p in args.policies.split(",") if p]
    CONTEXT.update(data_dir=args.data_dir, policies=policies)
    specs = [s for s in args.workloads.split(",") if s]
    started = time.monotonic()
    todo = [(spec, i) for spec in specs for i in range(args.instances)]
    results = []
    for n, r in enumerate(run_pool(work, todo, args.jobs), start=1):
        results.append(r)
        gap = r["gaps"].get("migslice", {}).get("130", float("nan"))
        print(
            f"[{n}/{len(todo)}] {r['workload']} #{r['instance']} ({r['nodes']} nodes, "
            f"{r['pods']} pods): migslice gap at 130% {100 * gap:.2f}% "
            f"(ILP {r['solve_s']:.1f}s)",
            flush=True,
        )
    names = {p: make_policy(p, GPU_MODEL, [SimPod("x", "1g.10gb")], gpus=8).name for p in policies}
    report = {
        "config": {
            "instances": args.instances,
            "wall_s": time.monotonic() - started,
            "solve_s": sum(r["solve_s"] for r in results),
            "solved": 2 * len(results),
            "not_proven": sum(not r["optimal"] for r in results),
        },
        "names": names,
        "gaps": {
            spec: {
                p: {
                    load: summarise([r["gaps"][p][load] for r in results if r["workload"] == spec])
                    for load in ("100", "130")
                }
                for p in policies
            }
            for spec in specs
        },
        "instances": results,
    }
    SUITE.write("exact", report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
