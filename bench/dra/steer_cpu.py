"""Benchmark: the extender's steer loop over 1,000 DynamicMIG nodes of 8 A100s (a report).

The loop (``extender/steer.py``) keeps migslice's DeviceTaintRules equal to every DynamicMIG
node's steer, in a thread of the extender process, beside the filter and prioritize calls. Its
rounds: the first steers every node; after that only the nodes that changed; every minute a
resync reads every node again; every 10 s, while a pod of several devices waits, a lift
review asks every node whether its steer keeps that pod off. This measures each kind of round
in process, with the extender's own index (``extender.state_from_objects``) over the objects
``bench/dra/memory.py`` serves (DynamicMIG ResourceSlices of NVIDIA's driver's shape, 2
allocated claims a GPU) and an API that, like kube-apiserver and the rules' watch, shows each
rule written back to the index. CPU seconds, the median of ``--rounds``.

    python -m bench.dra.steer_cpu                  # 1,000 nodes
    python -m bench.dra.steer_cpu --nodes 100

Writes the section ``steer_cpu`` of ``bench/dra/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.dra.memory import allocated_claim, dra_node
from bench.dra.suite import SUITE
from extender import ExtenderSettings, state_from_objects
from extender.steer import MAX_RULES, SteerLoop
from harness import dra_slices
from harness.dra_driver import MIG_CLASS
from harness.steer_rules import RulesApi
from migslice.inventory import ClusterIndex
from migslice.objects import parse_cluster_objects
from migslice.scheduling import PreparedNode

RawObject = dict[str, Any]
WAITING_CLAIM = "two-1g"


def cluster(nodes: int, gpus: int, claims_per_gpu: int) -> ClusterIndex[PreparedNode]:
    """The extender's index over ``nodes`` DynamicMIG nodes, their claims and one unallocated
    claim of two ``1g.10gb`` devices."""
    documents: list[RawObject] = [MIG_CLASS, waiting_claim()]
    for i in range(nodes):
        node = {"apiVersion": "v1", "kind": "Node", **dra_node(i)}
        name = node["metadata"]["name"]
        documents.append(node)
        documents.extend(
            dra_slices.node_slices(
                name, node["metadata"]["uid"], [dra_slices.a100(g) for g in range(gpus)]
            )
        )
        documents.extend(
            allocated_claim(name, g, 6 - k) for g in range(gpus) for k in range(claims_per_gpu)
        )
    return state_from_objects(parse_cluster_objects(documents), ExtenderSettings()).index


def waiting_claim() -> RawObject:
    claim = allocated_claim("none", 0, 0)
    claim["metadata"] = {"name": WAITING_CLAIM, "namespace": "team-a", "uid": "uid-two"}
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    del claim["status"]
    return claim


def waiting_pod() -> RawObject:
    """A pending pod of the two-device claim, as kube-apiserver lists it."""
    return {
        "metadata": {"name": "waits", "namespace": "team-a", "uid": "uid-waits"},
        "spec": {
            "schedulerName": "migslice-scheduler",
            "containers": [
                {"name": "main", "image": "train:1", "resources": {"claims": [{"name": "gpu"}]}}
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": WAITING_CLAIM}],
        },
        "status": {"phase": "Pending"},
    }


def cpu(call: Callable[[], object]) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def measure(nodes: int, gpus: int, claims_per_gpu: int, rounds: int) -> dict[str, Any]:
    index = cluster(nodes, gpus, claims_per_gpu)
    # Building the cluster leaves the collector's full passes due (2 million objects; the
    # extender's watch caches decode with the collector paused): paid here, not by the first
    # round, which they would triple.
    gc.collect()
    api = RulesApi(index)
    now = [0.0]
    loop = SteerLoop(index, api, clock=lambda: now[0], resync_s=60.0, lift_interval_s=10.0)
    first = cpu(loop.round)  # every node steered, its rules written
    settle = cpu(loop.round)  # the nodes the written rules changed
    quiet, resync, review = [], [], []
    for _ in range(rounds):
        quiet.append(cpu(loop.round))  # nothing changed
        now[0] += 60.0
        api.pending = []
        resync.append(cpu(loop.round))  # every node read again, the lift review with none
        now[0] += 10.0
        api.pending = [waiting_pod()]
        review.append(cpu(loop.round))  # the lift review over every node
    return {
        "nodes": nodes,
        "gpus": gpus,
        "claims_per_gpu": claims_per_gpu,
        "rules": len(api.rules),
        "capped_nodes": loop.stats.capped_nodes,
        "first_s": round(first, 3),
        "settle_s": round(settle, 3),
        "quiet_s": round(statistics.median(quiet), 4),
        "resync_s": round(statistics.median(resync), 4),
        "lift_review_s": round(statistics.median(review), 4),
    }


def markdown(report: dict[str, Any]) -> str:
    r = report["run"]
    return "\n".join(
        [
            "# The steer loop's CPU over DynamicMIG nodes (`bench/dra/steer_cpu.py`)",
            "",
            f"{r['nodes']} nodes x {r['gpus']} A100-80GB, DynamicMIG, {r['claims_per_gpu']} "
            f"allocated claims a GPU; {r['rules']} rules kept (at most {MAX_RULES}; "
            f"{r['capped_nodes']} nodes left to first fit past the cap). CPU seconds of one "
            f"round in the extender's process, the median of {report['rounds']} (the first "
            "two once).",
            "",
            "| round | when | CPU s |",
            "|---|---|---|",
            f"| first | at start: every node steered | {r['first_s']} |",
            f"| settle | the nodes the first round's rules changed | {r['settle_s']} |",
            f"| quiet | 20 ms after a change, here none | {r['quiet_s']} |",
            f"| resync | every minute: every node read again | {r['resync_s']} |",
            "| lift review | every 10 s while a pod of several devices waits: every node "
            f"asked | {r['lift_review_s']} |",
            "",
        ]
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--claims-per-gpu", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/dra)")
    args = parser.parse_args(argv)
    run = measure(args.nodes, args.gpus, args.claims_per_gpu, args.rounds)
    report = {"rounds": args.rounds, "run": run}
    SUITE.write("steer_cpu", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
