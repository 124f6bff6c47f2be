"""Benchmark: the extender's CPU per pod at cluster scale, in process (a report, not a test).

Builds the extender's state over the cluster's objects (``extender.state_from_objects``, what
a cluster file's extender serves: every node derived once), then plays kube-scheduler for
``--pods`` pods: for each, one
``/filter`` and one ``/prioritize`` through the WSGI app with ``--candidates`` node names
(``nodeCacheCapable: true``), then binds the pod to its best-scored node as the pod watch
would report it (churn: the next pod sees that node changed). CPU is this thread's CPU time
(``time.thread_time``) per call: parse, decide, encode; no sockets, TLS or HTTP parsing (see
``bench.latency.extender_latency`` for those). Node names look like cloud node names; pods ask for a
mix of profiles, some for two units.

    python -m bench.latency.extender_cpu                          # 5,000 nodes, 40,000 pods
    python -m bench.latency.extender_cpu --nodes 500 --pods 100   # quick
    python -m bench.latency.extender_cpu --profile 25             # and the top functions by CPU

Writes the section ``extender_cpu`` of ``bench/latency/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import random
import sys
import time
from pathlib import Path
from typing import Any

from bench.latency.extender_latency import bound_pods, node_name, raw_node, raw_pod
from bench.latency.suite import SUITE

MIX = (("1g.10gb", 1, 0.45), ("2g.20gb", 1, 0.25), ("3g.40gb", 1, 0.2), ("1g.10gb", 2, 0.1))


def pick_ask(rng: random.Random) -> tuple[str, int]:
    point = rng.random()
    for profile, count, share in MIX:
        if point < share:
            return profile, count
        point -= share
    return MIX[0][0], MIX[0][1]


def build_state(nodes: int, pods_per_node: int) -> tuple[Any, dict[str, float]]:
    """The extender's state over the cluster (``extender.state_from_objects``: every node
    projected, the pods projected and held, every node derived once); the CPU seconds of
    making the objects and of building the state from them."""
    from extender import ExtenderSettings, state_from_objects
    from migslice.objects import ClusterObjects

    started = time.process_time()
    objects = ClusterObjects(
        nodes=tuple(raw_node(i) for i in range(nodes)),
        pods=tuple(bound_pods(nodes, pods_per_node, 1)),
    )
    times = {"objects_s": time.process_time() - started}
    mark = time.process_time()
    state = state_from_objects(objects, ExtenderSettings())
    times["state_s"] = time.process_time() - mark
    times["startup_cpu_s"] = time.process_time() - started
    return state, times


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 3)

    return {
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1] * 1000, 3),
        "mean_ms": round(sum(ordered) / len(ordered) * 1000, 3),
    }


def play(state: Any, args: argparse.Namespace) -> dict[str, Any]:
    from extender import ExtenderSettings, create_app
    from migslice.objects import pod_facts_from_raw

    client = create_app(ExtenderSettings(), state).test_client()
    rng = random.Random(11)
    names = [node_name(i) for i in range(args.nodes)]
    timings: dict[str, list[float]] = {"filter": [], "prioritize": []}
    fits = bound = 0
    for n in range(args.pods):
        profile, count = pick_ask(rng)
        pod = raw_pod(f"new-{n}", profile, None, count=count)
        chosen = rng.sample(names, min(args.candidates, len(names)))
        body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": chosen}).encode()
        answers = {}
        for verb in ("filter", "prioritize"):
            started = time.thread_time()
            response = client.post(f"/{verb}", data=body, content_type="application/json")
            timings[verb].append(time.thread_time() - started)
            answers[verb] = response.get_json()
        kept = set(answers["filter"]["NodeNames"] or ())
        fits += len(kept)
        ranked = [h for h in answers["prioritize"] if h["Host"] in kept]
        if ranked and args.churn:
            best = max(ranked, key=lambda h: h["Score"])["Host"]
            facts = pod_facts_from_raw(raw_pod(f"new-{n}", profile, best, count=count))
            if facts is not None:
                state.index.upsert_pod(facts)
                bound += 1
    pairs = [f + p for f, p in zip(timings["filter"], timings["prioritize"], strict=True)]
    return {
        "filter": percentiles(timings["filter"]),
        "prioritize": percentiles(timings["prioritize"]),
        "cpu_per_pod": percentiles(pairs),
        "mean_fits_per_pod": round(fits / max(1, args.pods), 1),
        "pods_bound": bound,
    }


def markdown(report: dict[str, Any]) -> str:
    s, r = report["settings"], report["result"]
    start = report["startup"]
    lines = [
        "# The extender's CPU per call, in process (`bench/latency/extender_cpu.py`)",
        "",
        f"{s['nodes']} nodes, {s['nodes'] * s['pods_per_node']} bound pods, {s['pods']} pods "
        f"played with {s['candidates']} names each, churn {s['churn']}; CPU ms "
        "(this thread's CPU time per call; shared machine, noisy).",
        "",
        "| what | p50 ms | p99 ms | max ms | mean ms |",
        "|---|---|---|---|---|",
    ]
    for key in ("filter", "prioritize", "cpu_per_pod"):
        v = r[key]
        lines.append(f"| {key} | {v['p50_ms']} | {v['p99_ms']} | {v['max_ms']} | {v['mean_ms']} |")
    lines += ["", "| start-up step | CPU s |", "|---|---|"]
    lines += [f"| {key} | {value:.2f} |" for key, value in start.items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--pods", type=int, default=300, help="pods to filter and prioritize")
    parser.add_argument("--candidates", type=int, default=3000)
    parser.add_argument("--no-churn", dest="churn", action="store_false")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions")
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    args = parser.parse_args()
    state, startup = build_state(args.nodes, args.pods_per_node)
    print(json.dumps({k: round(v, 2) for k, v in startup.items()}), flush=True)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = play(state, args)
    if profiler:
        profiler.disable()
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile)
        print(text.getvalue())
    report = {
        "benchmark": "extender_cpu",
        "settings": {
            "nodes": args.nodes,
            "pods_per_node": args.pods_per_node,
            "pods": args.pods,
            "candidates": args.candidates,
            "churn": args.churn,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "startup": {k: round(v, 2) for k, v in startup.items()},
        "result": result,
    }
    SUITE.write("extender_cpu", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
