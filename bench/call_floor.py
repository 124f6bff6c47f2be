"""Benchmark: one extender call on three servers, in isolation (a report, not a test).

One client on one kept-alive TLS connection (``TCP_NODELAY``, as kube-scheduler's Go client)
sends the same ``/filter-best-fit`` calls, one after the other, to:

* ``go``: the Go null extender of ``bench/cluster_floor.py`` (the protocol, the least a
  server adds);
* ``python``: the Python null extender there (migslice's serving stack: TLS, asyncio, h11, the
  WSGI app inline, the ExtenderArgs decoded; no decision);
* ``extender``: migslice's extender on ``--nodes`` 8-GPU nodes with 8 bound pods each
  (``bench.extender_latency``'s server, the verbs inline as the extender command serves
  them).

Each call carries the pod ``bench.cluster`` creates (as kube-scheduler sends it: no
managedFields) and 100 names of the extender's nodes. Reported per server: the CPU its
serving process spent per call (``/proc``: the Go process, the Python worker) and the round
trip's p50 and p99. ``bench.cluster --floor`` runs the same three inside a cluster, where
they share the cores with kube-scheduler, kube-apiserver and etcd.

    python -m bench.call_floor                     # writes bench/reports/call_floor.{json,md}
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import extender_latency
from bench.cluster_floor import Floor, stop_process
from bench.cluster_pods import pod_body
from bench.cluster_procs import cpu_s, server_processes

REPORTS = Path(__file__).parent / "reports"
SERVERS = ("go", "python", "extender")
MIX = ("1g.10gb", "2g.20gb", "3g.40gb")


class Connection(http.client.HTTPSConnection):
    """A kept-alive TLS connection with Nagle's algorithm off, opened again (as Go's client
    does) when the server closes it after its requests per connection."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__("127.0.0.1", port, timeout=30, context=context)

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, body: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "User-Agent": "Go-http-client/1.1"}
        self.request("POST", "/filter-best-fit", body=body, headers=headers)
        reply = self.getresponse()
        data = reply.read()
        if reply.status != 200:
            raise RuntimeError(f"/filter-best-fit answered HTTP {reply.status}: {data[:200]!r}")
        return data


def bodies(nodes: int, count: int) -> list[bytes]:
    rng = random.Random(11)
    found = []
    for n in range(count):
        pod = pod_body(f"run-{n:05d}", "bench-runs", MIX[n % len(MIX)], node=None)
        names = [extender_latency.node_name(i) for i in rng.sample(range(nodes), 100)]
        found.append(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
    return found


def measure(connection: Connection, pid: int, calls: list[bytes], rounds: int) -> dict[str, float]:
    for body in calls[:50]:  # warm: the extender's kept decisions, the connection
        connection.call(body)
    times = []
    began = cpu_s(pid)
    for _ in range(rounds):
        for body in calls:
            started = time.perf_counter()
            answer = orjson.loads(connection.call(body))
            times.append(time.perf_counter() - started)
            if answer.get("Error"):
                raise RuntimeError(f"the server answered Error: {answer['Error']}")
    spent = cpu_s(pid) - began
    times.sort()
    return {
        "calls": len(times),
        "server_cpu_ms_per_call": round(1000 * spent / len(times), 3),
        "p50_ms": round(1000 * statistics.median(times), 3),
        "p99_ms": round(1000 * times[int(0.99 * (len(times) - 1))], 3),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from migslice.serving.certs import write_tls_bundle

    results: dict[str, Any] = {"nodes": args.nodes, "names_per_call": 100, "servers": {}}
    calls = bodies(args.nodes, args.calls)
    results["body_bytes_mean"] = round(statistics.mean(len(b) for b in calls))
    with tempfile.TemporaryDirectory() as scratch:
        bundle = write_tls_bundle(
            scratch, "migslice-extender", "migslice-system", (), ["127.0.0.1"]
        )
        context = ssl.create_default_context(cafile=str(bundle.ca_cert))
        for server in SERVERS:
            process: Any
            if server == "extender":
                options = argparse.Namespace(pods_per_node=8, threads=8)
                process, port = extender_latency.start_server(
                    options, args.nodes, (str(bundle.cert), str(bundle.key))
                )
                extender_latency.wait_ready(
                    lambda at=port: extender_latency.Client(at, context), process, 300
                )
            else:
                floor = Floor(
                    server, cert=bundle.cert, key=bundle.key, ca=bundle.ca_cert,
                    workdir=Path(scratch),
                )  # fmt: skip
                floor.wait_ready()
                process, port = floor.process, floor.port
            try:
                pid = process.pid if server == "go" else server_processes(process.pid)["worker"]
                figures = measure(Connection(port, context), pid, calls, args.rounds)
            finally:
                stop_process(process)
            results["servers"][server] = figures
            print(f"{server}: {json.dumps(figures)}", flush=True)
    return results


def render(results: dict[str, Any]) -> str:
    lines = [
        "# One extender call on three servers, in isolation (`bench/call_floor.py`)",
        "",
        f"`/filter-best-fit` with the cluster benchmark's pod and 100 names "
        f"({results['body_bytes_mean']} bytes a call), one kept-alive TLS connection, "
        f"{results['nodes']} nodes behind the extender. Written {results.get('when', '')}.",
        "",
        "| server | CPU per call ms | round trip p50 ms | p99 ms | calls |",
        "|---|---|---|---|---|",
    ]
    names = {
        "go": "Go null extender (net/http)",
        "python": "Python null extender (migslice's server, no decision)",
        "extender": "migslice extender",
    }
    for server, figures in results["servers"].items():
        lines.append(
            f"| {names[server]} | {figures['server_cpu_ms_per_call']} | {figures['p50_ms']} "
            f"| {figures['p99_ms']} | {figures['calls']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--calls", type=int, default=300, help="distinct calls per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPORTS)
    args = parser.parse_args(argv)
    results = run(args)
    results["when"] = time.strftime("%Y-%m-%d %H:%M")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "call_floor.json").write_text(json.dumps(results, indent=1) + "\n")
    (args.out / "call_floor.md").write_text(render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
