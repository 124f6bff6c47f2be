"""Benchmark (not a test): admission latency and TenantPolicy status against the number of
policies.

For each count of TenantPolicies (default 10, 100, 500 and 1,000; each selecting two
namespaces of its own, as in ``bench/latency/webhook_latency.py``), it fills the webhook's state
with that many policies, ``--nodes`` GPU nodes and ``--pods`` pods, then measures in one process:

* admission: ``POST /mutate`` through the webhook's Flask app (decision, quota charge in the
  in-process ledger, JSON Patch; no TLS or sockets, which ``webhook_latency.py`` measures), p50
  and p99 over ``--requests`` sized pod CREATEs spread over every tenant;
* status, whole round: every policy changed (a new generation each), then one
  ``policy_statuses`` call computing all of them (what the status writer does after a restart);
* status, one change: a pod of one tenant changes, then one call (what follows most events).

The former status writer compared every policy with every other across every namespace: one
computation took 33 ms at 25 policies, 1.3 s at 100 and 9.9 s at 200, under the admission lock.

    .venv/bin/python -m bench.latency.policy_scale
    .venv/bin/python -m bench.latency.policy_scale --policies 10 100 --requests 500     # quick

Writes the section ``policy_scale`` of ``bench/latency/report.json`` (and ``report.md``).
Timing on a shared machine is noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.latency.suite import SUITE
from bench.latency.webhook_latency import cluster_documents, review_body
from migslice.objects.clusterfile import parse_cluster_objects
from webhook import ClusterState, create_app

ROUNDS = 5


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(policies: int, *, nodes: int, pods: int, requests: int) -> dict[str, Any]:
    documents = cluster_documents(nodes, pods, policies)
    state = ClusterState()
    started = time.perf_counter()
    state.load(parse_cluster_objects(documents))
    load_s = time.perf_counter() - started
    raw_policies = [d for d in documents if d["kind"] == "TenantPolicy"]
    now = datetime.now(UTC)
    state.policy_statuses(now)  # the first round after loading

    whole: list[float] = []
    for generation in range(2, 2 + ROUNDS):
        for raw in raw_policies:
            raw["metadata"]["generation"] = generation
            state.upsert_policy(raw)
        started = time.perf_counter()
        computed = state.policy_statuses(now)
        whole.append(time.perf_counter() - started)
    assert len(computed) == policies, (len(computed), policies)

    client = create_app(state=state).test_client()
    latencies: list[float] = []
    for i in range(requests + 200):
        body = review_body(i, policies)
        started = time.perf_counter()
        response = client.post("/mutate", data=body, content_type="application/json")
        elapsed = time.perf_counter() - started
        answer = response.get_json()
        if response.status_code != 200 or not answer["response"]["allowed"]:
            raise RuntimeError(f"admission {i} not allowed: {response.status_code} {answer}")
        if i >= 200:  # warm-up
            latencies.append(elapsed)

    one: list[float] = []
    pod = next(
        d
        for d in documents
        if d["kind"] == "Pod"
        and any(
            k.startswith("nvidia.com/") for k in d["spec"]["containers"][0]["resources"]["limits"]
        )
    )
    state.policy_statuses(now)  # what the admissions touched
    for phase in ("Running", "Succeeded") * ROUNDS:
        pod["status"]["phase"] = phase
        state.upsert_pod(pod)
        started = time.perf_counter()
        state.policy_statuses(now)
        one.append(time.perf_counter() - started)
    return {
        "policies": policies,
        "nodes": nodes,
        "pods": pods,
        "load_s": round(load_s, 2),
        "admission_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "admission_p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
        "status_whole_round_ms": round(statistics.median(whole) * 1000, 2),
        "status_whole_round_max_ms": round(max(whole) * 1000, 2),
        "status_one_change_ms": round(statistics.median(one) * 1000, 3),
    }


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "# Admission against the number of TenantPolicies (`bench/latency/policy_scale.py`)",
        "",
        f"{report['nodes']} nodes, {report['pods']} pods; {report['requests']} admissions per "
        f"count (after 200 to warm up); status rounds: median of {ROUNDS}. One process, no "
        "TLS; shared machine, times noisy.",
        "",
        "| TenantPolicies | admission p50 ms | admission p99 ms | status, every policy: ms "
        "(max) | status, one change: ms |",
        "|---|---|---|---|---|",
    ]
    for row in report["runs"]:
        rows.append(
            f"| {row['policies']} | {row['admission_p50_ms']} | {row['admission_p99_ms']} | "
            f"{row['status_whole_round_ms']} ({row['status_whole_round_max_ms']}) | "
            f"{row['status_one_change_ms']} |"
        )
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", type=int, nargs="+", default=[10, 100, 500, 1000])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=8000)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    args = parser.parse_args(argv)
    runs = []
    for count in args.policies:
        run = measure(count, nodes=args.nodes, pods=args.pods, requests=args.requests)
        print(run, flush=True)
        runs.append(run)
    report = {"nodes": args.nodes, "pods": args.pods, "requests": args.requests, "runs": runs}
    SUITE.write("policy_scale", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
