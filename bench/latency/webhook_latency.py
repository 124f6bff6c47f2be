"""Benchmark (not a test): /mutate latency over HTTPS under gunicorn, and the webhook's memory.

Builds a cluster file (default 5,000 GPU nodes, 20,000 pods, 50 tenants), starts
``migslice webhook --cluster-file`` with a fresh CA and serving certificate, then sends pod
CREATE AdmissionReviews (sized pods of every tenant) over keep-alive HTTPS connections at
concurrency 1 and 16, and reports p50/p99 and the resident memory of the webhook processes.

With ``--api`` the same cluster is put into a real kube-apiserver and etcd (the e2e harness)
and the webhook runs in-cluster against it: every admission also writes its tenant's quota
ledger (a ConfigMap, compare-and-swap), which is what this mode measures.

    python -m bench.latency.webhook_latency                          # full size
    python -m bench.latency.webhook_latency --nodes 200 --pods 800 --requests 200   # quick
    python -m bench.latency.webhook_latency --api --nodes 200 --pods 2000   # ledger writes
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import os
import random
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.common.plots import bars
from bench.latency.suite import SUITE
from harness.builders import (
    make_created_pod,
    make_node,
    make_pod,
    make_policy,
    make_review,
)
from harness.paths import REPO
from migslice.serving.certs import write_tls_bundle

SERVICE, NAMESPACE = "migslice-webhook", "migslice-system"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-NVL", "NVIDIA-A30")
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
SIZES = ("small", "medium", "large")
REQUEST_UIDS = itertools.count()


def cluster_documents(nodes: int, pods: int, tenants: int) -> list[dict[str, Any]]:
    """``tenants`` TenantPolicies (two namespaces each), ``nodes`` GPU nodes of four products
    and ``pods`` bound pods of random tenants (80 % of them with one MIG instance)."""
    rng = random.Random(7)
    documents: list[dict[str, Any]] = []
    for t in range(tenants):
        documents.append(
            make_policy(
                f"tenant-{t}",
                namespaces=[f"tenant-{t}", f"tenant-{t}-batch"],
                sizes={
                    "small": {"memory": "10Gi"},
                    "medium": {"memory": "20Gi", "computeSlices": 2},
                    "large": {"memory": "40Gi", "computeSlices": 3},
                },
                quota={"computeSlices": 100000, "memorySlices": 100000},
                maxSlicesPerPod=4,
            )
        )
    for n in range(nodes):
        documents.append(
            make_node(
                f"gpu-{n:05d}",
                product=PRODUCTS[n % len(PRODUCTS)],
                mig_capable=None,
                mig={"1g.10gb": 14, "2g.20gb": 6, "3g.40gb": 4},
                resources={"cpu": "128", "memory": "1Ti"},
                kubelet=False,
                with_type_meta=True,
            )
        )
    for p in range(pods):
        tenant = rng.randrange(tenants)
        gpu = rng.random() < 0.8
        documents.append(
            make_pod(
                f"pod-{p:06d}",
                namespace=f"tenant-{tenant}",
                tenant=f"tenant-{tenant}",
                limits={"cpu": "4", "memory": "16Gi"},
                profile=rng.choice(PROFILES) if gpu else None,
                node_name=f"gpu-{rng.randrange(nodes):05d}",
                phase="Running",
                image="x",
                scheduler_name=None,
                restart_policy=None,
                with_type_meta=True,
            )
        )
    return documents


def review_body(i: int, tenants: int) -> bytes:
    """A pod CREATE review of a sized pod of tenant ``i % tenants``, as kube-apiserver sends it."""
    tenant = f"tenant-{i % tenants}"
    pod = make_created_pod(
        namespace=tenant, annotations={"migslice.io/gpu-size": SIZES[i % len(SIZES)]}
    )
    return json.dumps(
        make_review(pod, uid=f"bench-{next(REQUEST_UIDS)}", namespace=tenant)
    ).encode()


class _LoopbackConnection(http.client.HTTPSConnection):
    """HTTPS to 127.0.0.1 with the Service name as SNI, also when it connects again (the
    server closes a kept-alive connection after its request limit)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(SERVER_NAME, port, context=context, timeout=10)
        self._tls_context = context

    def connect(self) -> None:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = self._tls_context.wrap_socket(raw, server_hostname=SERVER_NAME)


def connect(port: int, context: ssl.SSLContext) -> http.client.HTTPSConnection:
    connection = _LoopbackConnection(port, context)
    connection.connect()
    return connection


def is_ready(port: int, context: ssl.SSLContext) -> bool:
    """GET /readyz answers 200 (caches synced and following the API server)."""
    try:
        connection = connect(port, context)
    except OSError:
        return False
    try:
        connection.request("GET", "/readyz")
        reply = connection.getresponse()
        reply.read()
        return reply.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


Admitted = Callable[[bytes, bytes], None]
"""Called (untimed) with each review and its answer: kube-apiserver storing the pod."""


def run_load(
    port: int,
    context: ssl.SSLContext,
    concurrency: int,
    requests: int,
    tenants: int,
    *,
    admitted: Admitted | None = None,
) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    per_thread = max(1, requests // concurrency)

    def worker(offset: int) -> None:
        connection = connect(port, context)
        mine: list[float] = []
        for k in range(per_thread):
            body = review_body(offset * per_thread + k, tenants)
            started = time.perf_counter()
            connection.request("POST", "/mutate", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            payload = reply.read()
            mine.append(time.perf_counter() - started)
            if reply.status != 200 or b'"allowed":true' not in payload.replace(b" ", b""):
                raise RuntimeError(f"unexpected answer {reply.status}: {payload[:300]!r}")
            if admitted is not None:
                admitted(body, payload)
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(c) for c in text]
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def markdown(report: dict[str, Any]) -> str:
    """The run's table (and, in-cluster, kube-apiserver's own round trips)."""
    api = report.get("source", "").startswith("kube-apiserver")
    title = (
        "# Webhook latency with the quota ledger write, against kube-apiserver (`--api`)"
        if api
        else "# Webhook latency over HTTPS, from a cluster file "
        "(`bench/latency/webhook_latency.py`)"
    )
    rows = [
        title,
        "",
        "| nodes | pods | concurrency | p50 ms | p99 ms | mean ms | req/s | worker RSS MiB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    worker_rss = max(report["rss_mib"]["workers"], default=0)
    for level in report["levels"]:
        rows.append(
            f"| {report['nodes']} | {report['pods']} | {level['concurrency']} | "
            f"{level['p50_ms']} | {level['p99_ms']} | {level['mean_ms']} | "
            f"{level['throughput_rps']} | {worker_rss} |"
        )
    trips = report.get("apiserver_round_trips")
    if trips:
        rows.append("")
        rows.append(
            f"kube-apiserver alone, same run: ConfigMap PUT p50 {trips['put_p50_ms']} ms, "
            f"p99 {trips['put_p99_ms']} ms; GET p50 {trips['get_p50_ms']} ms, "
            f"p99 {trips['get_p99_ms']} ms"
        )
    return "\n".join(rows) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--requests", type=int, default=2000, help="requests per concurrency level")
    parser.add_argument("--threads", type=int, default=16, help="gunicorn threads")
    parser.add_argument(
        "--api",
        action="store_true",
        help="serve in-cluster against a real kube-apiserver (quota ledger writes included)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="folder of report.json (default bench/latency); the section is webhook_latency, "
        "with --api webhook_latency_api",
    )
    args = parser.parse_args()
    args.section = "webhook_latency_api" if args.api else "webhook_latency"
    report: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "tenants": args.tenants,
        "requests_per_level": args.requests,
        "gunicorn": {"workers": 1, "threads": args.threads, "tls": True},
        "source": "kube-apiserver, quota ledger writes" if args.api else "cluster file",
        "levels": [],
    }
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        directory = Path(tmp)
        documents = cluster_documents(args.nodes, args.pods, args.tenants)
        admitted: Admitted | None = None
        if args.api:
            from bench.plane.apiserver_cluster import PodStore, api_cluster, round_trips

            plane = stack.enter_context(api_cluster(directory / "control-plane", documents))
            source = ["--kubeconfig", str(plane.kubeconfig), "--status-interval-s", "0"]
            admitted = PodStore(plane)
            report["apiserver_round_trips"] = round_trips(plane)
            print(f"kube-apiserver alone: {report['apiserver_round_trips']}")
        else:
            cluster = directory / "cluster.yaml"
            with cluster.open("w") as out:
                for document in documents:
                    out.write("---\n")
                    out.write(json.dumps(document))
                    out.write("\n")
            source = ["--cluster-file", str(cluster)]
        measure(args, report, directory, source, admitted)
    return 0


def measure(
    args: argparse.Namespace,
    report: dict[str, Any],
    directory: Path,
    source: list[str],
    admitted: Admitted | None = None,
) -> None:
    """Start the webhook on ``source``, load it at concurrency 1 and 16, write the report;
    ``admitted`` stores each admitted pod (in-cluster, as kube-apiserver would)."""
    bundle = write_tls_bundle(directory, SERVICE, NAMESPACE)
    port = 20000 + os.getpid() % 20000
    command = [
        sys.executable,
        "-m",
        "migslice.cli",
        "webhook",
        *source,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--tls-cert",
        str(bundle.cert),
        "--tls-key",
        str(bundle.key),
        "--threads",
        str(args.threads),
        "--log-level",
        "warning",
    ]
    started = time.monotonic()
    server = subprocess.Popen(command, cwd=REPO)
    context = ssl.create_default_context(cafile=str(bundle.ca_cert))
    try:
        while not is_ready(port, context):
            if server.poll() is not None or time.monotonic() - started > 600:
                raise RuntimeError("the webhook did not become ready")
            time.sleep(0.5)
        # The worker builds the state from the file before it accepts: probe until it answers.
        run_load(port, context, 1, 5, args.tenants, admitted=admitted)
        ready_s = time.monotonic() - started
        report["startup_s"] = round(ready_s, 1)
        run_load(port, context, 4, 200, args.tenants, admitted=admitted)  # warm-up
        print(
            f"cluster: {args.nodes} nodes, {args.pods} pods, {args.tenants} tenants; "
            f"webhook ready after {ready_s:.1f}s"
        )
        for concurrency in (1, 16):
            latencies = run_load(
                port, context, concurrency, args.requests, args.tenants, admitted=admitted
            )
            wall = sum(latencies) / concurrency
            report["levels"].append(
                {
                    "concurrency": concurrency,
                    "n": len(latencies),
                    "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
                    "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
                    "mean_ms": round(statistics.fmean(latencies) * 1000, 2),
                    "throughput_rps": round(len(latencies) / wall),
                }
            )
            print(
                f"concurrency {concurrency:>2}: n={len(latencies)} "
                f"p50={percentile(latencies, 0.50) * 1000:.2f} ms "
                f"p99={percentile(latencies, 0.99) * 1000:.2f} ms "
                f"mean={statistics.fmean(latencies) * 1000:.2f} ms "
                f"throughput~{len(latencies) / wall:.0f} req/s"
            )
        workers = children(server.pid)
        report["rss_mib"] = {
            "master": round(rss_mib(server.pid)),
            "workers": [round(rss_mib(pid)) for pid in workers],
        }
        SUITE.write(args.section, report, args.out)
        print(
            f"rss: master {rss_mib(server.pid):.0f} MiB; "
            + ", ".join(f"worker {pid} {rss_mib(pid):.0f} MiB" for pid in workers)
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    raise SystemExit(main())


def plot(report: dict[str, Any], path: Path) -> str:
    """p50 and p99 of one admission per concurrency level."""
    api = report.get("source", "").startswith("kube-apiserver")
    levels = report["levels"]
    return bars(
        path,
        title=(
            f"Webhook {'with the ledger write (kube-apiserver)' if api else 'from a cluster file'}"
            f" ({report['nodes']} nodes, {report['pods']} pods)"
        ),
        groups=[f"concurrency {level['concurrency']}" for level in levels],
        series={
            "p50": [level["p50_ms"] for level in levels],
            "p99": [level["p99_ms"] for level in levels],
        },
        ylabel="ms per admission",
    )
