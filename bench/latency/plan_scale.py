"""Benchmark (not a test): one decision of the repartition controller against cluster size and
the number of pending pods.

Each loop the controller reads its snapshot (node states, pending pods, the mig-parted file)
and calls :func:`migslice.repartition.decide` with Python's cyclic collector held off
(``extender.controller.decide_paused``); this measures that call, made the same way. The
cluster is built from objects shaped as kube-apiserver serves them (``harness.builders``:
Nodes of two GPU products, each with the node agent's ``migslice.io/gpu-layout``; bound pods;
pending pods ``Unschedulable`` for two minutes) and read by the controller's own readers
(:func:`migslice.repartition.snapshot.node_states`, :func:`pending_pods`): on every node GPUs
0-3 hold a ``4g.40gb`` and a ``3g.40gb`` that pods use, GPUs 4-7 are idle with seven free
``1g.10gb``; the pending pods ask ``2g.20gb``, ``3g.40gb``, ``4g.40gb`` and ``7g.80gb`` in
turn, which no free instance serves, so each needs a re-partition, and the shipped budgets
(MIG Manager: one node per GPU product at a time; carve: four nodes) hold most of them back.
Both modes: MIG Manager (the default) and carve (every node in carve mode). Each round also
measures the next decision over the same nodes with the controller's
:class:`~migslice.repartition.CarveMemo`, as each loop decides again while pods wait.

The MIG Manager planner used to walk every idle GPU of the cluster for each node it looked at,
for each pending pod: 94 s for one decision at 2,000 nodes and 50 pods (README).

    .venv/bin/python -m bench.latency.plan_scale
    .venv/bin/python -m bench.latency.plan_scale --nodes 200 --pending 50      # quick

Writes the section ``plan_scale`` of ``bench/latency/report.json`` (and ``report.md``). CPU
seconds of one decision, the median of ``--rounds``; a shared machine's times are noisy.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.latency.suite import SUITE
from harness.builders import make_node, make_pod, unschedulable
from migslice.kube.informer import collection_paused
from migslice.mig import CATALOG, place
from migslice.names import MODE_CARVE, MODE_MIG_MANAGER
from migslice.objects import AgentGpu, AgentInstance, AgentReport, render_layout_annotation
from migslice.repartition import (
    CarveMemo,
    ControllerSettings,
    RepartitionRecord,
    Step,
    decide,
    node_states,
    pending_pods,
)
from migslice.repartition.settings import CarveSettings

PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3")
MODEL = CATALOG.get("A100-80GB")
PENDING_PROFILES = ("2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
NOW = datetime.datetime(2026, 12, 1, 12, 0, tzinfo=datetime.UTC)
WAITED = (NOW - datetime.timedelta(seconds=120)).strftime("%Y-%m-%dT%H:%M:%SZ")


def cluster(nodes: int, pending: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``nodes`` Nodes, and their bound pods with ``pending`` unschedulable pods after them."""
    used = (place(MODEL, "4g.40gb", 0), place(MODEL, "3g.40gb", 4))
    free = tuple(place(MODEL, "1g.10gb", i) for i in range(7))
    raw_nodes: list[dict[str, Any]] = []
    raw_pods: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"gpu-{n:05d}"
        product = PRODUCTS[n % len(PRODUCTS)]
        gpus = tuple(
            AgentGpu(
                g,
                True,
                tuple(AgentInstance(p.profile, p.start, p.size, g < 4) for p in used)
                if g < 4
                else tuple(AgentInstance(p.profile, p.start, p.size, False) for p in free),
            )
            for g in range(8)
        )
        raw_nodes.append(
            make_node(
                name,
                product=product,
                mig={"4g.40gb": 4, "3g.40gb": 4, "1g.10gb": 28},
                layout_annotation=render_layout_annotation(AgentReport(product, gpus)),
            )
        )
        for g in range(4):
            for profile in ("4g.40gb", "3g.40gb"):
                pod = f"{name}-{g}-{profile[:2]}"
                raw_pods.append(make_pod(pod, profile=profile, node_name=name, phase="Running"))
    raw_pods.extend(
        unschedulable(
            make_pod(f"wait-{i:05d}", profile=PENDING_PROFILES[i % len(PENDING_PROFILES)]), WAITED
        )
        for i in range(pending)
    )
    return raw_nodes, raw_pods


def measure(nodes: int, pending: int, mode: str, rounds: int) -> dict[str, Any]:
    """One decision's CPU seconds (median and max of ``rounds``) and what it decided."""
    raw_nodes, raw_pods = cluster(nodes, pending)
    states = node_states(raw_nodes, raw_pods, {})
    demand = pending_pods(raw_pods, NOW)
    if len(demand) != pending:
        raise RuntimeError(f"{len(demand)} pending pods read, {pending} built")
    settings = ControllerSettings(carve=CarveSettings(default_mode=mode))
    # The states just built are the collector's young objects: its first full collection
    # would walk them all (0.4 s at 5,000 nodes) inside whichever decision it lands in. A
    # controller decides over states that have long been old; so do these.
    gc.collect()
    spent: list[float] = []
    again: list[float] = []
    for _ in range(rounds):
        memo = CarveMemo()  # the controller's, kept between its decisions
        for times in (spent, again):
            started = time.process_time()
            step = one_decision(states, demand, settings, memo)
            times.append(time.process_time() - started)
    kept = memo_size(states, demand, settings)
    if step.carve_plan is not None:
        changed, served = (
            len(step.carve_plan.changes),
            sum(len(c.serves) for c in step.carve_plan.changes),
        )
    elif step.plan is not None:
        changed, served = len(step.plan.changes), sum(len(c.serves) for c in step.plan.changes)
    else:
        changed = served = 0
    return {
        "nodes": nodes,
        "pending": pending,
        "mode": mode,
        "decision_s": round(statistics.median(spent), 4),
        "decision_max_s": round(max(spent), 4),
        "next_decision_s": round(statistics.median(again), 4),
        "memo_mib": round(kept / 2**20, 3),
        "step": step.kind.value,
        "nodes_changed": changed,
        "pods_served": served,
    }


def one_decision(states: Any, demand: Any, settings: ControllerSettings, memo: CarveMemo) -> Step:
    """``decide`` as the controller calls it with nothing in flight, the collector held off
    as its ``decide_paused`` holds it (the services' modules are not the lab's to import),
    ``memo`` its carve memo."""
    with collection_paused():
        return decide(
            RepartitionRecord(),
            states,
            demand,
            file_configs=(),
            now=NOW.timestamp(),
            settings=settings,
            carve_memo=memo,
        )


def memo_size(states: Any, demand: Any, settings: ControllerSettings) -> int:
    """Bytes a decision leaves in a new carve memo (allocations still held after it)."""
    gc.collect()
    tracemalloc.start()
    memo = CarveMemo()
    one_decision(states, demand, settings, memo)
    gc.collect()
    kept, _ = tracemalloc.get_traced_memory()  # while ``memo`` is still held
    tracemalloc.stop()
    del memo
    return kept


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "# One repartition decision against the cluster's size (`bench/latency/plan_scale.py`)",
        "",
        "`decide` as the controller calls it each loop: nodes of 8 GPUs (A100-80GB or "
        "H100-80GB; 4 in use, 4 idle), pending pods that each need a re-partition, the shipped "
        "budgets (MIG Manager: one node per GPU product at a time; carve: four nodes). CPU "
        f"seconds, median of {report['rounds']} rounds (max in brackets), and of the next "
        "decision over the same nodes with the controller's carve memo (what the carve "
        "planner learned about nodes unchanged since; the MIG Manager planner keeps nothing), "
        "as each loop decides while pods wait that no plan serves, and what that memo keeps "
        "(tracemalloc; the decision's lru caches warm); shared machine, "
        "times noisy.",
        "",
        "| nodes | pending pods | mode | one decision, s | the next, nothing changed, s | "
        "carve memo, MiB | decided | nodes in the plan | pods it serves |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["runs"]:
        rows.append(
            f"| {row['nodes']} | {row['pending']} | {row['mode']} | {row['decision_s']} "
            f"({row['decision_max_s']}) | {row.get('next_decision_s', '-')} | "
            f"{row.get('memo_mib', '-')} | {row['step']} | "
            f"{row['nodes_changed']} | "
            f"{row['pods_served']} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--pending", type=int, nargs="+", default=[50, 500])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    args = parser.parse_args(argv)
    runs = []
    for nodes in args.nodes:
        for pending in args.pending:
            for mode in (MODE_MIG_MANAGER, MODE_CARVE):
                run = measure(nodes, pending, mode, args.rounds)
                print(run, flush=True)
                runs.append(run)
    report = {"rounds": args.rounds, "runs": runs}
    SUITE.write("plan_scale", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
