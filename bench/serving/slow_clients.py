"""Benchmark (not a test): honest latency while 1,000 connections stall, and memory at the limit.

Starts the real ``migslice webhook`` and ``migslice extender`` (``--cluster-file``, TLS from
``migslice certs``, one worker each, as shipped) and, for each, measures honest requests
(``POST /mutate`` with a sized pod CREATE; ``POST /filter`` with 500 candidate names, as
kube-scheduler sends them) on a kept-alive connection and on fresh connections:

* unloaded;
* with 1,000 *idle* connections (TLS done, nothing sent; reconnecting when closed);
* with 1,000 *slow* connections (a request sent at 1 byte per second; reconnecting);
* with 1,000 *handshake* connections (a TLS ClientHello sent at 1 byte per second);
* with 3,000 *idle* connections (``--many-idle``): more than a table of 1,024 held, so a server
  that sheds them faces the holder reopening what it sheds.

The attacker is a separate process (asyncio, one task per connection); it reports how many
connections it holds open and how long the server let each live. Then it measures the worker's
resident memory in steady state and its peak (``VmHWM`` after ``clear_refs``) under requests
just below each body limit: an AdmissionReview shaped like kube-apiserver's largest (a pod of
many small fields, managedFields included), one of a pod with as many GPU containers as
kube-apiserver's 3 MiB request limit lets through (about 36,000 that ask only for a GPU: the
time it takes shows the webhook's work is linear in the pod) and ExtenderArgs with full
real-shaped Nodes.

    .venv/bin/python -m bench.serving.slow_clients                  # full size (a few minutes)
    .venv/bin/python -m bench.serving.slow_clients --quick          # small clusters, fewer requests

Writes the section ``slow_clients`` of ``bench/serving/report.json`` (and ``report.md``).
Timing on a shared machine is noisy.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.latency import webhook_latency
from bench.serving.slow_attack import Attacker, attacker_main, raise_fd_limit
from bench.serving.slow_bodies import (
    filter_bodies,
    largest_full_nodes,
    largest_review,
    most_gpu_containers_review,
    start_extender,
    write_stream,
)
from bench.serving.suite import SUITE
from harness.paths import REPO
from migslice.serving.certs import TlsBundle, write_tls_bundle
from migslice.serving.process import ServerProcess

NAMESPACE = "migslice-system"
MODES = ("idle", "slow", "handshake")
MIB = 1 << 20
FRESH_EVERY = 10  # one honest request in ten opens a new connection
ATTACK_ONLY_S = 5.0  # worker CPU with only the stalled connections, before honest requests


# -- the attacker (a child process) -----------------------------------------------------


# -- honest clients ------------------------------------------------------------------------


_CONTEXTS: dict[str, ssl.SSLContext] = {}


def connect(server: ServerProcess) -> http.client.HTTPSConnection:
    """A TLS connection trusting our CA, with the Service name as SNI (one context per CA:
    building one loads the CA file, which costs more than the handshake)."""
    context = _CONTEXTS.setdefault(str(server.bundle.ca_cert), server.context())
    connection = http.client.HTTPSConnection(
        server.server_name, server.port, timeout=30, context=context
    )
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connection.sock = context.wrap_socket(raw, server_hostname=server.server_name)
    return connection


Check = Callable[[int, bytes], None]


def timed_requests(
    server: ServerProcess, path: str, bodies: list[bytes], check: Check, fresh: bool
) -> list[float]:
    """One request after the other; on one kept-alive connection, or each on a new one."""
    kept, new = honest_load(server, path, bodies, check, 0.0, 1 if fresh else 0)
    return new if fresh else kept


def honest_load(
    server: ServerProcess,
    path: str,
    bodies: list[bytes],
    check: Check,
    min_s: float,
    fresh_every: int,
) -> tuple[list[float], list[float]]:
    """Requests one after the other, at least all of ``bodies`` and for at least ``min_s``
    (so that a phase spans the stalled connections' deadlines and reconnections). Every
    ``fresh_every``-th request goes over a new connection (TLS handshake included); the others
    over one kept-alive connection. Returns (kept-alive latencies, new-connection latencies)."""
    kept: list[float] = []
    new: list[float] = []
    connection: http.client.HTTPSConnection | None = None
    stop_at = time.monotonic() + min_s
    index = 0
    while index < len(bodies) or time.monotonic() < stop_at:
        body = bodies[index % len(bodies)]
        index += 1
        fresh = fresh_every > 0 and index % fresh_every == 0
        started = time.perf_counter()
        if fresh or connection is None:
            opened = connect(server)
            if not fresh:
                connection = opened
        use = opened if fresh else connection
        assert use is not None
        use.request("POST", path, body, {"Content-Type": "application/json"})
        reply = use.getresponse()
        payload = reply.read()
        (new if fresh else kept).append(time.perf_counter() - started)
        if fresh:
            use.close()
        elif reply.will_close:  # the server's --max-requests-per-connection: connect again
            use.close()
            connection = None
        check(reply.status, payload)
    if connection is not None:
        connection.close()
    return kept, new


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)

    def pct(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 2)

    return {
        "n": len(ordered),
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "max_ms": round(ordered[-1] * 1000, 2),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 2),
    }


# -- the two services ----------------------------------------------------------------------


def webhook_check(status: int, payload: bytes) -> None:
    if status != 200 or b'"allowed":true' not in payload.replace(b" ", b""):
        raise RuntimeError(f"/mutate answered {status}: {payload[:200]!r}")


def extender_check(status: int, payload: bytes) -> None:
    if status != 200 or json.loads(payload).get("Error"):
        raise RuntimeError(f"/filter answered {status}: {payload[:200]!r}")


# -- memory ----------------------------------------------------------------------------


def worker_pid(server: ServerProcess) -> int:
    assert server.process is not None
    pid = server.process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0])


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """CPU time (user + system) the process has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_under(server: ServerProcess, path: str, body: bytes, check: Check) -> dict[str, Any]:
    pid = worker_pid(server)
    steady = status_kib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    latencies = timed_requests(server, path, [body] * 3, check, fresh=False)
    peak = status_kib(pid, "VmHWM")
    return {
        "body_mib": round(len(body) / MIB, 2),
        "steady_rss_mib": round(steady / 1024, 1),
        "peak_rss_mib": round(peak / 1024, 1),
        "peak_over_steady": round(peak / steady, 2),
        "after_rss_mib": round(status_kib(pid, "VmRSS") / 1024, 1),
        "request_ms": round(statistics.fmean(latencies) * 1000, 1),
    }


# -- the run -------------------------------------------------------------------------------


def run_service(
    server: ServerProcess,
    path: str,
    bodies: list[bytes],
    check: Check,
    largest: list[tuple[str, str, bytes, Check]],
    args: argparse.Namespace,
    tmp: Path,
) -> dict[str, Any]:
    result: dict[str, Any] = {"phases": []}
    timed_requests(server, path, bodies[: args.warmup], check, fresh=False)
    pid = worker_pid(server)

    def measure(label: str, extra: dict[str, Any]) -> dict[str, Any]:
        cpu_before, started = cpu_s(pid), time.monotonic()
        kept, fresh = honest_load(server, path, bodies, check, args.phase_s, FRESH_EVERY)
        phase = {
            "load": label,
            "keepalive": summary(kept),
            "fresh_connection": summary(fresh),
            "worker_rss_mib": round(status_kib(pid, "VmRSS") / 1024, 1),
            "worker_cpu_percent": round(
                100 * (cpu_s(pid) - cpu_before) / (time.monotonic() - started), 1
            ),
            **extra,
        }
        result["phases"].append(phase)
        print(
            f"  {server.command:8} {label:16} kept-alive p50 {phase['keepalive']['p50_ms']:7.2f} "
            f"p99 {phase['keepalive']['p99_ms']:7.2f} ms | fresh p50 "
            f"{phase['fresh_connection']['p50_ms']:7.2f} p99 "
            f"{phase['fresh_connection']['p99_ms']:7.2f} ms | rss {phase['worker_rss_mib']} MiB"
            f" | cpu {phase['worker_cpu_percent']} %",
            flush=True,
        )
        return phase

    measure("unloaded", {})
    result["largest"] = []
    for label, largest_path, body, largest_check in largest:
        row = {"request": label, **peak_under(server, largest_path, body, largest_check)}
        result["largest"].append(row)
        print(
            f"  {server.command:8} {label}: {row['body_mib']} MiB body, steady "
            f"{row['steady_rss_mib']} MiB, peak {row['peak_rss_mib']} MiB "
            f"({row['peak_over_steady']}x)",
            flush=True,
        )
    attacks = [(mode, args.connections) for mode in MODES]
    attacks += [("idle", args.many_idle)] if args.many_idle else []
    for mode, connections in attacks:
        attack = f"{connections} {mode}"
        # Each attack is paired with an unloaded run just before it, and the pair repeated:
        # the machine is shared, and its background load drifts over minutes.
        for round_number in range(1, args.rounds + 1):
            baseline = measure(f"unloaded (before {attack} {round_number})", {})
            attacker = Attacker(mode, server, path, connections, tmp)
            try:
                before = attacker.wait_open(int(connections * 0.95), 60)
                cpu_before = cpu_s(pid)
                time.sleep(ATTACK_ONLY_S)
                attack_cpu = 100 * (cpu_s(pid) - cpu_before) / ATTACK_ONLY_S
                attacked = measure(
                    f"{attack} {round_number}",
                    {"attack_at_start": before, "attack_only_cpu_percent": round(attack_cpu, 1)},
                )
                attacked["attack_at_end"] = attacker.read()
                attacked["p99_over_unloaded"] = {
                    kind: round(attacked[kind]["p99_ms"] / baseline[kind]["p99_ms"], 2)
                    for kind in ("keepalive", "fresh_connection")
                }
            finally:
                result["phases"][-1]["attack_final"] = attacker.stop()
            time.sleep(2)
        ratios = [p["p99_over_unloaded"] for p in result["phases"] if "p99_over_unloaded" in p]
        ratios = ratios[-args.rounds :]
        result.setdefault("median_p99_over_unloaded", {})[attack] = {
            kind: statistics.median(r[kind] for r in ratios)
            for kind in ("keepalive", "fresh_connection")
        }
        median = result["median_p99_over_unloaded"][attack]
        print(f"  {server.command:8} {attack}: median p99 / unloaded p99 {median}", flush=True)
    return result


def expect_refusal_or_answer(expected: bytes) -> Check:
    def check(status: int, payload: bytes) -> None:
        if status not in (200, 400) or expected not in payload:
            raise RuntimeError(f"answered {status}: {payload[:200]!r}")

    return check


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attacker", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--path", default="/", help=argparse.SUPPRESS)
    parser.add_argument("--server-name", help=argparse.SUPPRESS)
    parser.add_argument("--cafile", help=argparse.SUPPRESS)
    parser.add_argument("--status", help=argparse.SUPPRESS)
    parser.add_argument("--ramp-s", type=float, default=4.0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small clusters, fewer requests")
    parser.add_argument("--connections", type=int, default=1000, help="stalled connections")
    parser.add_argument(
        "--many-idle",
        type=int,
        default=3000,
        help="idle connections of the last attack, past a table of 1,024 (0: none)",
    )
    parser.add_argument("--requests", type=int, default=1000, help="honest requests per phase")
    parser.add_argument(
        "--phase-s", type=float, default=15.0, help="each phase lasts at least this long"
    )
    parser.add_argument("--rounds", type=int, default=3, help="unloaded/attacked pairs per mode")
    parser.add_argument(
        "--only", nargs="*", choices=("webhook", "extender"), help="measure only these"
    )
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/serving)")
    args = parser.parse_args()
    if args.attacker:
        args.mode = args.attacker
        return attacker_main(args)
    raise_fd_limit()
    webhook_nodes, webhook_pods, tenants = (200, 800, 10) if args.quick else (5000, 20000, 50)
    extender_nodes, pods_per_node = (200, 8) if args.quick else (5000, 8)
    args.webhook_cluster = (webhook_nodes, webhook_pods, tenants)
    args.extender_cluster = (extender_nodes, pods_per_node)
    if args.quick:
        args.requests = min(args.requests, 300)
    args.warmup = min(300, args.requests)
    report: dict[str, Any] = {
        "connections": args.connections,
        "many_idle": args.many_idle,
        "requests_per_phase": args.requests,
        "phase_s": args.phase_s,
        "new_connection_every": FRESH_EVERY,
        "webhook_cluster": {"nodes": webhook_nodes, "pods": webhook_pods, "tenants": tenants},
        "extender_cluster": {"nodes": extender_nodes, "pods": extender_nodes * pods_per_node},
        "extender_started_as": (
            "bench.latency.extender_latency --serve (caches built as the informers do)"
        ),
        "server": "one worker, 8 threads, TLS, default limits",
        "machine": f"{os.cpu_count()} CPUs shared with other work; load average "
        + " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }
    if args.only and "slow_clients" in SUITE.load(args.out):  # refresh one service's part
        report = {**SUITE.read("slow_clients", args.out), **report}
    with tempfile.TemporaryDirectory() as scratch:
        for command in args.only or ("webhook", "extender"):
            report[command] = measure_service(command, args, Path(scratch))
    SUITE.write("slow_clients", report, args.out)
    return 0


def measure_service(command: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One server started as shipped, measured unloaded and under each kind of stall."""
    webhook_nodes, webhook_pods, tenants = args.webhook_cluster
    extender_nodes, pods_per_node = args.extender_cluster
    service = f"migslice-{command}"
    bundle: TlsBundle = write_tls_bundle(tmp / service, service, NAMESPACE)
    server = ServerProcess(
        command, [], bundle, tmp / f"{command}.log", f"{service}.{NAMESPACE}.svc", cwd=REPO
    )
    started = time.monotonic()
    if command == "webhook":
        # `migslice webhook --cluster-file`, as shipped.
        cluster = tmp / "webhook-cluster.yaml"
        documents = webhook_latency.cluster_documents(webhook_nodes, webhook_pods, tenants)
        write_stream(cluster, iter(documents))
        server.args = ["--cluster-file", str(cluster), "--log-level", "warning"]
        server.start(timeout_s=900)
    else:
        # The extender app with caches built through the informers' projections, as
        # bench/latency/extender_latency.py serves it: the memory of the in-cluster mode, not
        # of the YAML parse that `--cluster-file` mode keeps.
        start_extender(server, extender_nodes, pods_per_node)
    print(f"{command}: ready after {time.monotonic() - started:.0f}s", flush=True)
    try:
        if command == "webhook":
            from webhook import WebhookSettings

            path, check = "/mutate", webhook_check
            bodies = [webhook_latency.review_body(i, tenants) for i in range(args.requests)]
            largest = [
                ("largest AdmissionReview", "/mutate",
                 largest_review(WebhookSettings().max_body_bytes),
                 expect_refusal_or_answer(b'"uid":"bench-largest"')),
                ("pod of the most GPU containers", "/mutate",
                 most_gpu_containers_review(),
                 expect_refusal_or_answer(b'"uid":"bench-largest"')),
            ]  # fmt: skip
        else:
            from extender import ExtenderSettings

            limit = ExtenderSettings().max_body_bytes
            path, check = "/filter", extender_check
            bodies = filter_bodies(extender_nodes, args.requests)
            largest = [
                ("full Nodes at the limit", "/filter", largest_full_nodes(limit),
                 expect_refusal_or_answer(b'"Error":""')),
            ]  # fmt: skip
        return run_service(server, path, bodies, check, largest, args, tmp)
    finally:
        server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
