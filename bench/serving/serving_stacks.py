"""Benchmark (not a test): which serving stack holds a Flask app against stalled clients.

The same small Flask app (``POST /echo`` of a 1 KB JSON document) runs under each stack with
TLS and one worker process: gunicorn ``gthread`` (8 threads; what migslice used before),
gunicorn ``gevent``, gunicorn's asyncio ``asgi`` worker with the app wrapped by ``a2wsgi``,
``uvicorn`` with ``a2wsgi``, and migslice's own event-loop worker. For each: honest requests
unloaded, then with 1,000 idle and 1,000 slow (1 byte per second) connections held by
``bench.serving.slow_clients``'s attacker; whether the stalled connections get closed; and the
worker's resident memory with them open. Honest requests time out after 5 s and each phase
stops after ``--phase-s`` seconds, so a stack that stalls costs a bounded time.

The other stacks are not migslice dependencies; install them in a separate environment:

    python3 -m venv /tmp/stacks && /tmp/stacks/bin/pip install gunicorn gevent uvicorn a2wsgi flask
    .venv/bin/python -m bench.serving.serving_stacks --other-python /tmp/stacks/bin/python

Writes the section ``serving_stacks`` of ``bench/serving/report.json`` (and ``report.md``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.serving.slow_clients import Attacker, raise_fd_limit, status_kib
from bench.serving.suite import SUITE
from harness.paths import REPO
from migslice.serving.certs import TlsBundle, write_tls_bundle

STACKS = ("gthread", "gevent", "gasgi", "uvicorn", "migslice")
SERVICE, NAMESPACE = "probe", "migslice-system"

LAUNCHER = """
import sys
from flask import Flask, jsonify, request

stack, port, cert, key = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def make_app():
    app = Flask("probe")

    @app.post("/echo")
    def echo():
        return jsonify(keys=len(request.get_json(force=True)))

    app.add_url_rule("/healthz", "healthz", lambda: "ok")
    return app

if stack == "migslice":
    from migslice.serving import ServerOptions, serve
    serve(make_app, ServerOptions(host="127.0.0.1", port=port, tls_cert=cert, tls_key=key))
elif stack == "uvicorn":
    import uvicorn
    from a2wsgi import WSGIMiddleware
    uvicorn.run(WSGIMiddleware(make_app(), workers=8), host="127.0.0.1", port=port,
                ssl_certfile=cert, ssl_keyfile=key, log_level="warning", timeout_keep_alive=60)
else:
    from gunicorn.app.base import BaseApplication

    class App(BaseApplication):
        def load_config(self):
            settings = {"bind": f"127.0.0.1:{port}", "workers": 1, "certfile": cert,
                        "keyfile": key, "loglevel": "warning", "control_socket_disable": True,
                        "keepalive": 60, "timeout": 30}
            settings.update({"gthread": {"worker_class": "gthread", "threads": 8},
                             "gevent": {"worker_class": "gevent", "worker_connections": 1000},
                             "gasgi": {"worker_class": "asgi", "worker_connections": 1000}}[stack])
            for name, value in settings.items():
                self.cfg.set(name, value)

        def load(self):
            if stack == "gasgi":
                from a2wsgi import WSGIMiddleware
                return WSGIMiddleware(make_app(), workers=8)
            return make_app()

    App().run()
"""


@dataclass
class Target:
    """What the attacker needs to know about a server."""

    command: str
    port: int
    server_name: str
    bundle: TlsBundle


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def honest(target: Target, context: ssl.SSLContext, count: int, budget_s: float) -> dict[str, Any]:
    """``count`` requests on kept-alive connections (reconnecting after a failure)."""
    body = json.dumps({f"key-{i}": "v" * 20 for i in range(40)}).encode()
    latencies: list[float] = []
    failures = 0
    connection: http.client.HTTPSConnection | None = None
    stop_at = time.monotonic() + budget_s
    while len(latencies) + failures < count and time.monotonic() < stop_at:
        started = time.perf_counter()
        try:
            if connection is None:
                connection = http.client.HTTPSConnection(
                    target.server_name, target.port, timeout=5, context=context
                )
                raw = socket.create_connection(("127.0.0.1", target.port), timeout=5)
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's clients do
                connection.sock = context.wrap_socket(raw, server_hostname=target.server_name)
            connection.request("POST", "/echo", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            reply.read()
            if reply.status != 200:
                raise OSError(f"HTTP {reply.status}")
            latencies.append(time.perf_counter() - started)
            if reply.will_close:
                connection.close()
                connection = None
        except (OSError, http.client.HTTPException):
            failures += 1
            if connection is not None:
                connection.close()
            connection = None
    if connection is not None:
        connection.close()
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        return round(ordered[int(q * (len(ordered) - 1))] * 1000, 2) if ordered else None

    return {"answered": len(ordered), "failed": failures, "p50_ms": pct(0.5), "p99_ms": pct(0.99)}


def worker_rss_mib(process: subprocess.Popen[bytes]) -> float:
    pid = process.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return round(status_kib(int(children[0]) if children else pid, "VmRSS") / 1024, 1)


def run_stack(stack: str, python: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    bundle = write_tls_bundle(tmp / stack, SERVICE, NAMESPACE)
    target = Target(stack, free_port(), f"{SERVICE}.{NAMESPACE}.svc", bundle)
    process = subprocess.Popen(
        [python, "-c", LAUNCHER, stack, str(target.port), str(bundle.cert), str(bundle.key)],
        cwd=REPO,
    )
    context = ssl.create_default_context(cafile=str(bundle.ca_cert))
    result: dict[str, Any] = {"stack": stack, "phases": []}
    try:
        deadline = time.monotonic() + 60
        while honest(target, context, 1, 2)["answered"] == 0:
            if process.poll() is not None or time.monotonic() > deadline:
                return {**result, "error": "did not start"}
            time.sleep(0.5)
        honest(target, context, 100, 10)  # warm-up
        result["phases"].append(
            {"load": "unloaded", **honest(target, context, args.requests, args.phase_s)}
        )
        result["phases"][-1]["worker_rss_mib"] = worker_rss_mib(process)
        for mode in ("idle", "slow"):
            attacker = Attacker(mode, target, "/echo", args.connections, tmp)  # type: ignore[arg-type]
            try:
                attacker.wait_open(int(args.connections * 0.95), 30)
                phase = {"load": f"{args.connections} {mode}"}
                phase.update(honest(target, context, args.requests, args.phase_s))
                phase["worker_rss_mib"] = worker_rss_mib(process)
                time.sleep(max(0.0, args.hold_s))  # let deadlines act on the stalled ones
                phase["attack"] = attacker.read()
            finally:
                phase["attack_final"] = attacker.stop()
            result["phases"].append(phase)
            print(stack, phase, flush=True)
            time.sleep(2)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--other-python", default=sys.executable, help="python with the stacks")
    parser.add_argument("--stacks", nargs="*", default=list(STACKS), choices=STACKS)
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--phase-s", type=float, default=20.0)
    parser.add_argument("--hold-s", type=float, default=15.0)
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/serving)")
    args = parser.parse_args()
    raise_fd_limit()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for stack in args.stacks:
            python = sys.executable if stack == "migslice" else args.other_python
            results.append(run_stack(stack, python, args, Path(scratch)))
    report = {"connections": args.connections, "requests_per_phase": args.requests,
              "phase_budget_s": args.phase_s, "stacks": results}  # fmt: skip
    SUITE.write("serving_stacks", report, args.out)
    return 0


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "# Serving stacks under stalled connections (`bench/serving/serving_stacks.py`)",
        "",
        "| stack | load | answered | failed | p50 ms | p99 ms | stalled open | "
        "closed by server | stalled lifetime p50 / max s | worker RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in report["stacks"]:
        for phase in result.get("phases", []):
            attack = phase.get("attack", {})
            final = phase.get("attack_final", {})
            life = final.get("lifetime_s", {})
            rows.append(
                f"| {result['stack']} | {phase['load']} | {phase['answered']} | "
                f"{phase['failed']} | {phase['p50_ms']} | {phase['p99_ms']} | "
                f"{attack.get('open', '-')} | {final.get('closed_by_server', '-')} | "
                f"{life.get('p50', '-')} / {life.get('max', '-')} | {phase['worker_rss_mib']} |"
            )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
