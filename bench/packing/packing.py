"""Benchmark: packing quality in mode A (FGD-style saturation), a report, not a test.

The whole matrix of benchmarks.md §5.1-§5.3 at FGD's scale: every trace the design names
(``default``, ``gpushare40``-``100``, ``multigpu20``-``50``) under the mappings M1 and M2
(M3 and M4 on ``default`` too), and the synthetic MIG-friendly mix; every policy (B0-B6 and
migslice, plus the B5 tie-break and placement variants on the headline workloads); 776 nodes
x 8 A100-80GB GPUs (6,208 GPUs); 10 seeds; pods drawn until 130 % of the cluster's compute
slices have arrived, none departing. The LP limit (§5.6) is solved for the pods each seed
actually drew. Values are means over seeds with 95 % confidence intervals (Student's t).

    python -m bench.packing.packing                          # the full matrix (about 30 min here)
    python -m bench.packing.packing --nodes 64 --seeds 3 --workloads default/M1,synthetic   # quick
    python -m bench.packing.packing --report-only            # render report.md/.png again
    python -m bench.packing.packing --percentage-of-nodes-to-score 100,0,30,10 --nodes 5000
        # migslice only, under kube-scheduler's node sampling: the section sampling

The ``cpu*`` and ``gpuspec*`` traces carry the same GPU pods as ``default`` (checked at
start) and are not run twice. Writes the section ``packing`` of ``bench/packing/report.json``,
rendered into ``report.md`` and ``report.png`` (the plot needs matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.common.stats import ci, run_pool
from bench.packing.suite import SUITE
from migslice.console import CommandError
from migslice.sim import (
    GPU_MODEL,
    Policy,
    SaturationConfig,
    SimPod,
    Workload,
    limit_curve,
    make_policy,
    mix_counts,
    parse_pod_list,
    run_sequence,
    sample_arrivals,
)
from migslice.sim.limits import sampled_first_failure_pct, sampled_limit
from migslice.sim.ours import Migslice
from migslice.sim.sampling import num_feasible_nodes_to_find
from migslice.sim.tenants import jain_index
from migslice.sim.trace import TRACE_FOLDER
from migslice.sim.trace_files import DEFAULT_DATA_DIR, load_workload

TABLE_LOADS = (50, 80, 90, 100, 110, 130)
WORKLOADS = (
    "default/M1",
    "default/M2",
    "default/M3",
    "default/M4",
    *(f"gpushare{n}/{m}" for n in (40, 60, 80, 100) for m in ("M1", "M2")),
    *(f"multigpu{n}/{m}" for n in (20, 30, 40, 50) for m in ("M1", "M2")),
    "synthetic",
)
POLICIES = (
    "B0",
    "B1",
    "B2",
    "B3",
    "B4",
    "B5",
    "B5-catalog",
    "B6",
    "B8",
    "B9",
    "migslice",
    "M-carve",
    "M-dra",
    "M-dra-reserve",
)
SENSITIVITY = (
    "B5-table",
    "B5-most",
    "B5-fewest",
    "B5-random-node",
    "B9-random-node",
    "B9-least-allocated",
)
CLASS_LOADS = (100, 130)
QUOTA = "quota"
"""A run id's suffix ``+quota``: the policy with each tenant's quota (``quotas`` on)."""
TENANT_MIN_SHARE = 0.01
"""Tenants with fewer than this share of the arrived pods are left out of the fairness index
(the default trace's 7 ``Guaranteed`` pods would make it the luck of 1 or 2 draws)."""
LARGE = ("7g", "multi-GPU")
"""Large jobs: a whole GPU's instance, or several."""
SENSITIVITY_WORKLOADS = ("default/M1", "default/M2", "synthetic")
TENANT_WORKLOADS = ("default/M1", "default/M2", "gpushare100/M1")
"""Where the tenants table runs each policy a second time with its quotas (``+quota``)."""
TENANT_POLICIES = ("B3", "B5", "B5-catalog", "B6", "B8", "B9", "migslice", "M-carve", "M-dra")
SAME_AS_DEFAULT = ("cpu050", "cpu100", "cpu200", "cpu250", "gpuspec10", "gpuspec20", "gpuspec33")

CONTEXT: dict[str, Any] = {}
"""Set in the parent before the pool forks: data dir, nodes, workload cache."""
ARRIVALS_KEPT = 8
"""Arrival sequences a worker keeps (:func:`arrivals`); 8 of 23,550 pods: about 25 MiB."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--nodes", type=int, default=776)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (at most 2)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument(
        "--sensitivity",
        help=f"variants run on {', '.join(SENSITIVITY_WORKLOADS)} (default: all; none with --add)",
    )
    parser.add_argument(
        "--quota-policies",
        help=f"policies run again with tenant quotas (+quota) on {', '.join(TENANT_WORKLOADS)} "
        "(default: the tenants table's; none with --add)",
    )
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/packing)")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument(
        "--percentage-of-nodes-to-score",
        default="",
        help="comma-separated kube-scheduler settings (0 = adaptive): run migslice under each "
        "and write the report's section sampling instead of its section packing",
    )
    parser.add_argument(
        "--partitioned-ahead",
        action="store_true",
        help="with --percentage-of-nodes-to-score: start every GPU partitioned (B4's stock "
        "configs) instead of unpartitioned",
    )
    parser.add_argument(
        "--add",
        action="store_true",
        help="run only the given policies and add them to the report's section packing",
    )
    args = parser.parse_args(argv)
    if args.sensitivity is None:
        args.sensitivity = "" if args.add else ",".join(SENSITIVITY)
    if args.quota_policies is None:
        args.quota_policies = "" if args.add else ",".join(TENANT_POLICIES)
    return args


def workload(spec: str) -> Workload:
    cache: dict[str, Workload] = CONTEXT.setdefault("workloads", {})
    if spec not in cache:
        trace, _, mapping = spec.partition("/")
        if spec == "synthetic":
            trace, mapping = "default", "synthetic"
        cache[spec] = load_workload(CONTEXT["data_dir"], trace, mapping)
    return cache[spec]


def arrivals(spec: str, seed: int, capacity_slices: int, load_pct: int) -> tuple[SimPod, ...]:
    """A seed's arrivals, drawn once per worker for every policy run on them (the tasks of
    one workload and seed come together); the last few kept."""
    cache: dict[tuple[str, int, int, int], tuple[SimPod, ...]]
    cache = CONTEXT.setdefault("arrivals", {})
    key = (spec, seed, capacity_slices, load_pct)
    if key not in cache:
        while len(cache) >= ARRIVALS_KEPT:
            cache.pop(next(iter(cache)))
        cache[key] = sample_arrivals(workload(spec), capacity_slices, load_pct, seed=seed)
    return cache[key]


def policy_for(name: str, spec: str, gpus: int) -> Policy:
    """The policy for a workload, made once per worker (a policy is a value; some, B3's
    oracle geometry, are worked out from the workload's pods)."""
    cache: dict[tuple[str, str, int], Policy] = CONTEXT.setdefault("policies", {})
    key = (name, spec, gpus)
    if key not in cache:
        cache[key] = make_policy(name, GPU_MODEL, workload(spec).pods, gpus=gpus)
    return cache[key]


def work(task: tuple[str, str, str, int]) -> dict[str, Any]:
    """One task in a worker: a policy run, the limit of a seed's pods, or the expected-mix
    limit curve (seed -1)."""
    kind, spec, policy_id, seed = task
    began, cpu = time.monotonic(), time.process_time()
    config = SaturationConfig(nodes=CONTEXT["nodes"])
    gpus = config.nodes * config.gpus_per_node
    pods = workload(spec)
    out: dict[str, Any] = {"kind": kind, "workload": spec, "policy": policy_id, "seed": seed}
    if kind == "curve":
        curve = limit_curve(pods.pods, GPU_MODEL, gpus, arrived_pcts=range(1, 131))
        out["curve"] = [p.slice_allocation for p in curve]
    elif kind == "limit":
        drawn = arrivals(spec, seed, 7 * gpus, 130)
        points = sampled_limit(drawn, GPU_MODEL, gpus, arrived_pcts=TABLE_LOADS)
        out["at"] = {str(p.arrived_pct): p.slice_allocation for p in points}
        out["first_failure_pct"] = sampled_first_failure_pct(drawn, GPU_MODEL, gpus)
    else:
        name, _, pct = policy_id.partition("@")
        name, _, variant = name.partition("+")
        if variant == QUOTA:
            config = replace(config, quotas=True)
        policy = policy_for(name, spec, gpus)
        if pct and isinstance(policy, Migslice):
            policy = replace(policy, percentage_of_nodes_to_score=int(pct))
        if CONTEXT.get("partitioned_ahead") and isinstance(policy, Migslice):
            policy = replace(policy, partitioned_ahead=True)
        capacity = GPU_MODEL.compute_slices * gpus
        drawn = arrivals(spec, seed, capacity, config.max_load_pct)
        result = run_sequence(drawn, policy, config, model=GPU_MODEL, workload=pods.name, seed=seed)
        if result.sampling is not None:
            out["sampling"] = asdict(result.sampling)
        out.update(
            name=policy.name + (", tenant quotas" if config.quotas else ""),
            at={
                str(load): {
                    "slice_allocation": result.at(load).slice_allocation,
                    "memory_allocation": result.at(load).memory_allocation,
                    "demand_allocation": result.at(load).demand_allocation,
                    "unallocated_gpus": result.at(load).unallocated_gpus,
                }
                for load in TABLE_LOADS
            },
            curve=[p.slice_allocation for p in result.points],
            demand_curve=[p.demand_allocation for p in result.points],
            first_failure_pct=result.first_failure_pct,
            placed_pods=result.placed_pods,
            arrived_pods=result.arrived_pods,
            gpus_repartitioned_per_1k_pods=result.repartitions_per_1k_pods,
            creates_per_1k_pods=1000.0 * result.instances_created / max(1, result.placed_pods),
            disrupted_pods=result.disrupted_pods,
            classes={str(load): [list(c) for c in result.at(load).classes] for load in CLASS_LOADS},
            class_slices={
                str(load): [list(c) for c in result.at(load).class_slices] for load in CLASS_LOADS
            },
            tenants=[list(t) for t in result.at(130).tenants],
        )
    out["cpu_s"] = time.process_time() - cpu
    out["wall_s"] = time.monotonic() - began
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def tasks(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    specs = [s for s in args.workloads.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    extra = [p for p in args.sensitivity.split(",") if p]
    found: list[tuple[str, str, str, int]] = []
    if not args.add:
        found.extend(("curve", s, "", -1) for s in specs)
    for spec in specs:
        chosen = policies + [p for p in extra if spec in SENSITIVITY_WORKLOADS]
        if spec in TENANT_WORKLOADS:
            chosen += [f"{p}+{QUOTA}" for p in args.quota_policies.split(",") if p]
        for seed in range(args.seeds):
            if not args.add:
                found.append(("limit", spec, "", seed))
            found.extend(("run", spec, p, seed) for p in chosen)
    cost = {"M-carve": 8, "migslice": 5, "B5": 3, "synthetic": 3}  # rough: long ones first
    found.sort(key=lambda t: -cost.get(t[2], 1) * cost.get(t[1], 1))
    return found


def same_gpu_pods(data_dir: Path) -> list[str]:
    """The traces whose GPU pods (num_gpu, gpu_milli) are those of ``default``."""
    folder = data_dir / TRACE_FOLDER

    def gpu_pods(name: str) -> Counter[tuple[int, int]]:
        pods = parse_pod_list((folder / f"openb_pod_list_{name}.csv").read_text())
        return Counter((p.num_gpu, p.gpu_milli) for p in pods if not p.is_cpu_only)

    default = gpu_pods("default")
    return [t for t in SAME_AS_DEFAULT if gpu_pods(t) == default]


def aggregate(results: list[dict[str, Any]], specs: Sequence[str]) -> list[dict[str, Any]]:
    blocks = []
    for spec in specs:
        mine = [r for r in results if r["workload"] == spec]
        [curve] = [r["curve"] for r in mine if r["kind"] == "curve"]
        limits = sorted((r for r in mine if r["kind"] == "limit"), key=lambda r: r["seed"])
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in sorted((r for r in mine if r["kind"] == "run"), key=lambda r: r["seed"]):
            runs.setdefault(r["policy"], []).append(r)
        pods = workload(spec)
        blocks.append(
            {
                "workload": spec,
                "gpu_pods": len(pods.pods),
                "skipped_cpu_only": pods.skipped_cpu_only,
                "mix": mix_counts(pods.pods),
                "limit": {
                    "expected_curve": curve,
                    "at": {str(x): ci([r["at"][str(x)] for r in limits]) for x in TABLE_LOADS},
                    "per_seed": {str(x): [r["at"][str(x)] for r in limits] for x in TABLE_LOADS},
                    "first_failure_pct": ci([r["first_failure_pct"] for r in limits]),
                    "first_failure_per_seed": [r["first_failure_pct"] for r in limits],
                },
                "policies": {p: summarise(rs) for p, rs in runs.items()},
            }
        )
    return blocks


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    metrics = ("slice_allocation", "memory_allocation", "demand_allocation", "unallocated_gpus")
    length = min(len(r["curve"]) for r in runs)
    failures = [r["first_failure_pct"] for r in runs]
    return {
        "name": runs[0]["name"],
        "seeds": [r["seed"] for r in runs],
        "at": {
            str(x): {m: ci([r["at"][str(x)][m] for r in runs]) for m in metrics}
            for x in TABLE_LOADS
        },
        "per_seed": {
            str(x): [r["at"][str(x)]["slice_allocation"] for r in runs] for x in TABLE_LOADS
        },
        "curve": [ci([r["curve"][i] for r in runs]) for i in range(length)],
        "demand_curve": [
            statistics.fmean(r["demand_curve"][i] for r in runs) for i in range(length)
        ],
        "first_failure_pct": ci([130.0 if f is None else f for f in failures]),
        "first_failure_per_seed": [130.0 if f is None else f for f in failures],
        "gpus_repartitioned_per_1k_pods": ci([r["gpus_repartitioned_per_1k_pods"] for r in runs]),
        "creates_per_1k_pods": ci([r["creates_per_1k_pods"] for r in runs]),
        "disrupted_pods": sum(r["disrupted_pods"] for r in runs),
        "accepted": {
            str(x): ci([accepted(r["classes"][str(x)]) for r in runs]) for x in CLASS_LOADS
        },
        "large_accepted": {
            str(x): ci([accepted(r["classes"][str(x)], LARGE) for r in runs]) for x in CLASS_LOADS
        },
        "accepted_per_seed": {
            str(x): [accepted(r["classes"][str(x)]) for r in runs] for x in CLASS_LOADS
        },
        "large_accepted_per_seed": {
            str(x): [accepted(r["classes"][str(x)], LARGE) for r in runs] for x in CLASS_LOADS
        },
        **large_slices(runs),
        "class_accepted": {
            str(x): {
                name: ci([accepted(r["classes"][str(x)], (name,)) for r in runs])
                for name in sorted({c[0] for r in runs for c in r["classes"][str(x)]}, key=order)
            }
            for x in CLASS_LOADS
        },
        "placed_pods": ci([r["placed_pods"] for r in runs]),
        "cpu_s": ci([r["cpu_s"] for r in runs]),
        **tenant_summary(runs),
    }


def large_slices(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """7g and multi-GPU acceptance counted by the compute slices those pods asked for (an
    ``8 x 7g`` job weighs 56, a ``7g`` pod 7), per load and seed; nothing for runs recorded
    without it."""
    if not all("class_slices" in r for r in runs):
        return {}
    per_seed = {
        str(x): [accepted(r["class_slices"][str(x)], LARGE) for r in runs] for x in CLASS_LOADS
    }
    return {
        "large_slices_accepted": {x: ci(v) for x, v in per_seed.items()},
        "large_slices_accepted_per_seed": per_seed,
    }


def tenant_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """At 130 %: per tenant, pods accepted and denied by quota (% of its arrived), and Jain's
    index of the tenants' acceptance (those with at least :data:`TENANT_MIN_SHARE` of the pods)
    per seed; nothing for runs recorded without tenants."""
    if not all(r.get("tenants") for r in runs):
        return {}
    names = sorted({t[0] for r in runs for t in r["tenants"]})

    def share(r: dict[str, Any], tenant: str, column: int) -> float | None:
        row = next((t for t in r["tenants"] if t[0] == tenant), None)
        return None if row is None or not row[1] else row[column] / row[1]

    def jain(r: dict[str, Any]) -> float:
        total = sum(t[1] for t in r["tenants"])
        kept = [t[2] / t[1] for t in r["tenants"] if t[1] >= TENANT_MIN_SHARE * total]
        return jain_index(kept) or 1.0

    return {
        "tenant_arrived": {
            n: sum(t[1] for r in runs for t in r["tenants"] if t[0] == n) for n in names
        },
        "tenant_accepted": {
            n: ci([x for r in runs if (x := share(r, n, 2)) is not None]) for n in names
        },
        "tenant_denied": {
            n: ci([x for r in runs if (x := share(r, n, 3)) is not None]) for n in names
        },
        "jain": ci([jain(r) for r in runs]),
    }


def accepted(classes: list[list[Any]], names: Sequence[str] = ()) -> float:
    """Placed / arrived over the size classes ``names`` (all when empty): pods, or compute
    slices for rows of ``class_slices``."""
    rows = [c for c in classes if not names or c[0] in names]
    arrived = sum(c[1] for c in rows)
    return sum(c[2] for c in rows) / arrived if arrived else 1.0


def order(size: str) -> tuple[bool, int]:
    """Size classes smallest first, multi-GPU last."""
    return (size == LARGE[1], int(size[:-1]) if size != LARGE[1] else 0)


def compact(value: Any) -> Any:
    """The report with floats rounded to 6 places and each curve as two lists (the JSON
    shrinks from 6 MB to under 2 MB)."""
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list) and value and isinstance(value[0], dict) and "ci" in value[0]:
        return {
            "mean": [round(c["mean"], 6) for c in value],
            "ci": [round(c["ci"], 6) for c in value],
        }
    if isinstance(value, list):
        return [compact(v) for v in value]
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items()}
    return value


def write(report: dict[str, Any], out: Path | None) -> None:
    SUITE.write("packing", compact(report), out)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report_only:
        SUITE.render_files(SUITE.load(args.out), args.out or SUITE.folder)
        return 0
    if args.partitioned_ahead and not args.percentage_of_nodes_to_score:
        print(
            "bench.packing.packing: --partitioned-ahead needs --percentage-of-nodes-to-score "
            "(e.g. --percentage-of-nodes-to-score 100,1)",
            file=sys.stderr,
        )
        return 2
    CONTEXT.update(
        data_dir=args.data_dir, nodes=args.nodes, partitioned_ahead=args.partitioned_ahead
    )
    if args.percentage_of_nodes_to_score:
        try:
            settings = parse_percentages(args.percentage_of_nodes_to_score)
        except ValueError as error:
            print(
                f"bench.packing.packing: --percentage-of-nodes-to-score: {error}", file=sys.stderr
            )
            return 2
        args.policies = ",".join(f"migslice@{p}" for p in settings)
        args.sensitivity, args.quota_policies, args.add = "", "", True
    specs = [s for s in args.workloads.split(",") if s]
    started, cpu_before = time.monotonic(), time.process_time()
    try:
        for spec in specs:
            workload(spec)
        same = same_gpu_pods(args.data_dir)
    except CommandError as error:
        print(f"bench.packing.packing: {error}", file=sys.stderr)
        return 1
    todo = tasks(args)
    results: list[dict[str, Any]] = []
    for n, result in enumerate(run_pool(work, todo, args.jobs), start=1):
        results.append(result)
        if result["kind"] == "run":
            at = result["at"]
            print(
                f"[{n}/{len(todo)} {time.monotonic() - started:5.0f}s] {result['workload']} "
                f"{result['policy']} seed {result['seed']}: "
                f"{100 * at['100']['slice_allocation']:.1f}% at 100%, "
                f"{100 * at['130']['slice_allocation']:.1f}% at 130% ({result['cpu_s']:.1f}s)",
                flush=True,
            )
    if args.percentage_of_nodes_to_score:
        write_sampling(args, specs, results, started=started)
        return 0
    if args.add:
        report = add_runs(args, results)
    else:
        report = new_report(args, specs, results, same, started=started, cpu_before=cpu_before)
    write(report, args.out)
    print(f"total {time.monotonic() - started:.0f}s wall")
    return 0


def parse_percentages(text: str) -> list[int]:
    """``100,0,30``: kube-scheduler's percentageOfNodesToScore values, each 0..100."""
    values = []
    for part in text.split(","):
        if not part.strip().isdigit() or not 0 <= int(part) <= 100:
            raise ValueError(f"{part!r} is not a whole number 0..100 (e.g. 100,0,30)")
        values.append(int(part))
    return values


def write_sampling(
    args: argparse.Namespace, specs: Sequence[str], results: list[dict[str, Any]], *, started: float
) -> None:
    """The sampling comparison: per setting and workload, slice allocation at 100 % and
    130 % arrived (paired deltas vs the first setting), names per extender call, nodes
    processed per cycle and pods the sample left pending."""
    blocks: dict[str, dict[str, Any]] = {}
    for spec in specs:
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in sorted((r for r in results if r["workload"] == spec), key=lambda r: r["seed"]):
            runs.setdefault(r["policy"].partition("@")[2], []).append(r)
        blocks[spec] = runs
    report = {
        "config": {
            "nodes": args.nodes,
            "seeds": list(range(args.seeds)),
            "settings": args.percentage_of_nodes_to_score,
            "partitioned_ahead": args.partitioned_ahead,
            "wall_s": time.monotonic() - started,
        },
        "workloads": {
            spec: {pct: sampling_row(rs, runs) for pct, rs in runs.items()}
            for spec, runs in blocks.items()
        },
    }
    SUITE.write("sampling", compact(report), args.out)


def sampling_row(
    runs: list[dict[str, Any]], every: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    base = next(iter(every.values()))
    row: dict[str, Any] = {}
    for load in ("100", "130"):
        mine = [100 * r["at"][load]["slice_allocation"] for r in runs]
        ref = [100 * r["at"][load]["slice_allocation"] for r in base]
        row[load] = ci(mine)
        row[f"delta_{load}"] = ci([a - b for a, b in zip(mine, ref, strict=True)])
    tallies = [r["sampling"] for r in runs]
    cycles = sum(t["cycles"] for t in tallies)
    row["names_per_call"] = sum(t["names"] for t in tallies) / max(
        1, sum(t["calls"] for t in tallies)
    )
    row["processed_per_cycle"] = sum(t["processed"] for t in tallies) / cycles
    row["left_pending"] = sum(t["left_pending"] for t in tallies)
    row["placed_pods"] = sum(r["placed_pods"] for r in runs)
    return row


def sampling_markdown(report: dict[str, Any]) -> str:
    config = report["config"]
    lines = [
        f"# Packing under kube-scheduler's node sampling ({config['nodes']} nodes"
        + (", GPUs partitioned ahead)" if config.get("partitioned_ahead") else ")"),
        "",
        (
            "Every GPU starts partitioned with B4's geometry (node n: mig-parted stock config "
            "n mod 7); the planner re-shapes idle GPUs from there. "
            if config.get("partitioned_ahead")
            else ""
        )
        + f"migslice in mode A (bench.packing.packing's saturation run), seeds "
        f"{config['seeds'][0]}-{config['seeds'][-1]} ({len(config['seeds'])}); "
        "kube-scheduler's percentageOfNodesToScore modelled by migslice.sim.sampling. "
        "Slice allocation in %, mean ± 95 % interval over seeds; Δ: paired per seed against "
        f"the first setting, in pp. Names: node names per extender call (mean over scheduling "
        "cycles in which kube-scheduler calls the extender; most: numFeasibleNodesToFind); "
        "processed: nodes kube-scheduler's filters looked at per cycle; left pending: "
        "pods whose sample held no node the extender accepts while another node could take "
        "them (all seeds together). "
        f"Run: {config['wall_s'] / 60:.1f} min wall on a shared 2-core machine.",
        f"Produced by `python -m bench.packing.packing --percentage-of-nodes-to-score "
        f"{config['settings']} --nodes {config['nodes']} --seeds {len(config['seeds'])} "
        f"--workloads {','.join(report['workloads'])}"
        + (" --partitioned-ahead`." if config.get("partitioned_ahead") else "`."),
        "",
        "| workload | setting | most names per call | names per call | processed per cycle | "
        "at 100 % | Δ pp | at 130 % | Δ pp | left pending / placed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(c: dict[str, float]) -> str:
        return f"{c['mean']:.2f} ± {c['ci']:.2f}"

    order = [str(p) for p in parse_percentages(config["settings"])]
    for spec, rows in report["workloads"].items():
        for pct, row in sorted(rows.items(), key=lambda item: order.index(item[0])):
            label = "0 (adaptive)" if pct == "0" else pct
            most = num_feasible_nodes_to_find(int(pct), config["nodes"])
            lines.append(
                f"| {spec} | {label} | {most} | {row['names_per_call']:.1f} | "
                f"{row['processed_per_cycle']:.0f} | {cell(row['100'])} | "
                f"{cell(row['delta_100'])} | {cell(row['130'])} | {cell(row['delta_130'])} | "
                f"{row['left_pending']} / {row['placed_pods']} |"
            )
    return "\n".join(lines) + "\n"


def add_runs(args: argparse.Namespace, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The existing report with these runs' policies added (or replaced) per workload."""
    report = SUITE.read("packing", args.out)
    if report["config"]["nodes"] != args.nodes or len(report["config"]["seeds"]) != args.seeds:
        raise SystemExit("bench.packing.packing --add: nodes and seeds must be those of the report")
    for block in report["workloads"]:
        runs: dict[str, list[dict[str, Any]]] = {}
        for r in sorted(results, key=lambda r: r["seed"]):
            if r["workload"] == block["workload"]:
                runs.setdefault(r["policy"], []).append(r)
        block["policies"].update({p: summarise(rs) for p, rs in runs.items()})
    report["config"]["cpu_s"] += sum(r["cpu_s"] for r in results)
    report["config"]["added"] = sorted({r["policy"] for r in results})
    return report


def new_report(
    args: argparse.Namespace,
    specs: Sequence[str],
    results: list[dict[str, Any]],
    same: list[str],
    *,
    started: float,
    cpu_before: float,
) -> dict[str, Any]:
    return {
        "config": {
            "nodes": args.nodes,
            "gpus": args.nodes * 8,
            "gpu_model": GPU_MODEL.key,
            "seeds": list(range(args.seeds)),
            "jobs": args.jobs,
            "max_load_pct": 130,
            "wall_s": time.monotonic() - started,
            "cpu_s": sum(r["cpu_s"] for r in results) + time.process_time() - cpu_before,
            "max_worker_rss_mib": max(r["max_rss_mib"] for r in results),
            "same_gpu_pods_as_default": same,
        },
        "workloads": aggregate(results, specs),
    }


if __name__ == "__main__":
    sys.exit(main())
