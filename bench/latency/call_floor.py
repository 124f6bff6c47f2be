"""Benchmark: one extender call on three servers, in isolation (a report, not a test).

A caller shaped like kube-scheduler's HTTPExtender (``bench/plane/caller/main.go``: Go's net/http on
one kept-alive TLS connection, the ExtenderArgs marshalled and the answer decoded with
encoding/json, each failed node turned into a status) sends the same ``/filter-best-fit``
calls, one after the other, to:

* ``go``: the Go null extender of ``bench/plane/nulls.py`` (the protocol, the least a
  server adds);
* ``python``: the Python null extender there (migslice's serving stack: TLS, asyncio, h11, the
  WSGI app inline, the ExtenderArgs decoded; no decision);
* ``extender``: migslice's extender on ``--nodes`` 8-GPU nodes with 8 bound pods each
  (``bench.latency.extender_latency``'s server, the verbs inline as the extender command serves
  them).

Each call carries the pod ``bench.plane.cluster`` creates (as kube-scheduler sends it: no
managedFields) and 100 names of the extender's nodes. Reported per server: the CPU its
serving process spent per call (``/proc``: the Go process, the Python worker), the caller's
CPU per call (what the answer costs kube-scheduler), the round trip's p50 and p99, the
answer's size, and the answering thread's time on a core and waiting for one and its
timeslices per call (the kernel's schedstat; the event loop's thread of a Python server, every
thread of the Go null). ``bench.plane.cluster --floor`` runs the same three inside a cluster, where
they share the cores with kube-scheduler, kube-apiserver and etcd.

    python -m bench.latency.call_floor   # the section call_floor of bench/latency/report.json
"""

from __future__ import annotations

import argparse
import json
import random
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.latency import extender_latency
from bench.latency.suite import SUITE
from bench.plane.nulls import Floor, build_go, stop_process
from bench.plane.objects import pod_body
from bench.plane.procs import cpu_s, sched_s, server_processes
from harness.paths import REPO

SERVERS = ("go", "python", "extender")
MIX = ("1g.10gb", "2g.20gb", "3g.40gb")
CALLER_SOURCE = REPO / "bench" / "plane" / "caller" / "main.go"


def build_caller(out: Path) -> Path:
    """``bench/plane/caller/main.go`` built into ``out`` with the e2e's Go toolchain."""
    return build_go(out, CALLER_SOURCE, "migslice-bench-caller")


def bodies(nodes: int, count: int) -> list[bytes]:
    rng = random.Random(11)
    found = []
    for n in range(count):
        pod = pod_body(f"run-{n:05d}", "bench-runs", MIX[n % len(MIX)], node=None)
        names = [extender_latency.node_name(i) for i in rng.sample(range(nodes), 100)]
        found.append(orjson.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}))
    return found


def measure(
    caller: Path, url: str, ca: Path, calls: Path, pid: int, rounds: int, *, thread: int | None
) -> dict[str, Any]:
    """Send ``calls`` ``rounds`` times through the Go caller, after a warm-up of 50 (the
    extender's kept decisions, the connection); the server's CPU is read around the rest, and
    the schedstat of its answering thread ``thread`` (None: every thread of ``pid``)."""
    command = [
        str(caller), "-url", url, "-ca", str(ca), "-bodies", str(calls),
        "-rounds", str(rounds), "-warm", "50", "-hold",
    ]  # fmt: skip
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as process:
        assert process.stdin is not None and process.stdout is not None
        warm = process.stdout.readline()
        if not warm.startswith('{"warm"'):
            raise RuntimeError(f"the caller stopped in its warm-up: {warm!r}")
        began, sched_began = cpu_s(pid), sched_s(pid, thread)
        process.stdin.write("go\n")
        process.stdin.flush()
        answer = process.stdout.readline()
        spent, sched = cpu_s(pid) - began, sched_s(pid, thread)
        process.stdin.close()
        if process.wait(60) != 0 or not answer:
            raise RuntimeError(f"the caller failed (exit {process.returncode}); see its stderr")
    figures = json.loads(answer)
    count = int(figures["calls"])
    return {
        "calls": count,
        "server_cpu_ms_per_call": round(1000 * spent / count, 3),
        "answering_on_core_ms_per_call": round(
            1000 * (sched.on_core_s - sched_began.on_core_s) / count, 3
        ),
        "answering_waiting_ms_per_call": round(
            1000 * (sched.waiting_s - sched_began.waiting_s) / count, 3
        ),
        "answering_timeslices_per_call": round(
            (sched.timeslices - sched_began.timeslices) / count, 2
        ),
        "caller_cpu_ms_per_call": round(figures["caller_cpu_ms_per_call"], 3),
        "mean_ms": round(figures["mean_ms"], 3),
        "p50_ms": round(figures["p50_ms"], 3),
        "p99_ms": round(figures["p99_ms"], 3),
        "answer_bytes_mean": round(figures["answer_bytes_mean"]),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from migslice.serving.certs import write_tls_bundle

    results: dict[str, Any] = {
        "nodes": args.nodes,
        "names_per_call": 100,
        "watch_events_per_s": args.watch_events_per_s,
        "servers": {},
    }
    calls = bodies(args.nodes, args.calls)
    results["body_bytes_mean"] = round(statistics.mean(len(b) for b in calls))
    with tempfile.TemporaryDirectory() as scratch:
        bundle = write_tls_bundle(
            scratch, "migslice-extender", "migslice-system", (), ["127.0.0.1"]
        )
        context = ssl.create_default_context(cafile=str(bundle.ca_cert))
        caller = build_caller(Path(scratch))
        calls_path = Path(scratch) / "calls.jsonl"
        calls_path.write_bytes(b"\n".join(calls) + b"\n")
        for server in args.servers:
            process: Any
            if server == "extender":
                options = argparse.Namespace(
                    pods_per_node=8, threads=8, watch_events_per_s=args.watch_events_per_s
                )
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
                url = f"https://127.0.0.1:{port}/filter-best-fit"
                # The event loop's thread (the worker's main thread) answers in Python.
                thread = None if server == "go" else pid
                figures = measure(
                    caller, url, bundle.ca_cert, calls_path, pid, args.rounds, thread=thread
                )
            finally:
                stop_process(process)
            results["servers"][server] = figures
            print(f"{server}: {json.dumps(figures)}", flush=True)
    return results


def render(results: dict[str, Any]) -> str:
    watch = results.get("watch_events_per_s") or 0
    lines = [
        "# One extender call on three servers, in isolation (`bench/latency/call_floor.py`)",
        "",
        f"`/filter-best-fit` with the cluster benchmark's pod and 100 names "
        f"({results['body_bytes_mean']} bytes a call), one kept-alive TLS connection, "
        f"{results['nodes']} nodes behind the extender"
        + (f", which applies {watch:g} pod watch events a second meanwhile" if watch else "")
        + f". Written {results.get('when', '')}.",
        "",
        "| server | server CPU per call ms | caller CPU per call ms | round trip mean ms "
        "| p50 ms | p99 ms | answer bytes | calls | answering thread on a core / waiting ms "
        "| timeslices |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    names = {
        "go": "Go null extender (net/http)",
        "python": "Python null extender (migslice's server, no decision)",
        "extender": "migslice extender",
    }
    for server, figures in results["servers"].items():
        lines.append(
            f"| {names[server]} | {figures['server_cpu_ms_per_call']} "
            f"| {figures.get('caller_cpu_ms_per_call', '-')} | {figures.get('mean_ms', '-')} "
            f"| {figures['p50_ms']} | {figures['p99_ms']} "
            f"| {figures.get('answer_bytes_mean', '-')} | {figures['calls']} "
            f"| {figures.get('answering_on_core_ms_per_call', '-')} / "
            f"{figures.get('answering_waiting_ms_per_call', '-')} "
            f"| {figures.get('answering_timeslices_per_call', '-')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--calls", type=int, default=300, help="distinct calls per round")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--watch-events-per-s",
        type=float,
        default=0.0,
        help="pod watch events a second the extender applies on its own thread while it "
        "answers (a cluster binding 200 pods a second sends it about 200)",
    )
    parser.add_argument(
        "--servers", nargs="+", choices=SERVERS, default=list(SERVERS), help="servers to call"
    )
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    args = parser.parse_args(argv)
    results = run(args)
    results["when"] = time.strftime("%Y-%m-%d %H:%M")
    SUITE.write("call_floor", results, args.out)
    print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
