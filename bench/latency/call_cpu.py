"""Benchmark: one ``/filter-best-fit`` call's own Python, in process (a report, not a test).

Builds ``bench.latency.extender_latency``'s extender state (``--nodes`` 8-GPU nodes with 8
bound pods each, every node derived once as the informers' warm-up does) and answers
``bench.latency.call_floor``'s calls (the pod ``bench.plane.cluster`` creates and 100 names
each) through the extender's WSGI app, as the event loop answers a verb inline: no sockets, TLS
or HTTP parsing (``bench.latency.call_floor`` adds those). After one warm-up pass, which keeps
every decision, each of ``--rounds`` passes times all calls; the report gives the best pass's
mean per call, for the whole call and for its parts (the body's decode, the pod's demand read
anew and read by the extender's ``DemandReader`` for a pod shape it has seen, the best-fit
decision). The body is handed over as migslice's server buffers it. The best pass is the one
the machine disturbed least.

    python -m bench.latency.call_cpu     # the section call_cpu of bench/latency/report.json
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.latency import call_floor, extender_latency
from bench.latency.suite import SUITE


def build_app(nodes: int) -> tuple[Any, Any]:
    """The extender's app over a warmed state of ``nodes`` nodes, and that state."""
    from extender import ExtenderSettings, create_app

    state = extender_latency.warm_state(nodes, 8)
    return create_app(ExtenderSettings(), state), state


def best_us(run: Callable[[], int], rounds: int) -> float:
    """The lowest mean microseconds per item over ``rounds`` passes of ``run`` (which returns
    how many items it handled)."""
    found = []
    for _ in range(rounds):
        started = time.perf_counter()
        items = run()
        found.append((time.perf_counter() - started) / items * 1e6)
    return round(min(found), 1)


def measure(nodes: int, calls: int, rounds: int) -> dict[str, Any]:
    from migslice.scheduling import DemandReader, demand_of
    from migslice.serving.wsgi import BODY_LIMIT

    app, state = build_app(nodes)
    bodies = call_floor.bodies(nodes, calls)

    def call(body: bytes) -> list[bytes]:
        environ = {
            "PATH_INFO": "/filter-best-fit",
            "REQUEST_METHOD": "POST",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
            BODY_LIMIT: len(body),  # as our server hands over a body it buffered
        }
        return list(app.wsgi_app(environ, lambda status, headers: None))

    def calls_pass() -> int:
        for body in bodies:
            call(body)
        return len(bodies)

    def decode_pass() -> int:
        for body in bodies:
            orjson.loads(body)
        return len(bodies)

    args = [orjson.loads(body) for body in bodies]
    demands = [demand_of(a["Pod"]) for a in args]

    def demand_pass() -> int:
        for a in args:
            demand_of(a["Pod"])
        return len(args)

    reader = DemandReader()
    for a in args:
        reader.read(a["Pod"])

    def reader_pass() -> int:
        for a in args:
            reader.read(a["Pod"])
        return len(args)

    def best_fit_pass() -> int:
        for a, demand in zip(args, demands, strict=True):
            state.decisions.best_fit(demand, a["NodeNames"])
        return len(args)

    for body in bodies:  # the warm-up: every decision kept, every answer checked
        answer = orjson.loads(b"".join(call(body)))
        if answer.get("Error") or not answer.get("NodeNames"):
            raise RuntimeError(f"the extender did not place the bench's pod: {answer}")
    return {
        "nodes": nodes,
        "calls": calls,
        "rounds": rounds,
        "body_bytes_mean": round(sum(map(len, bodies)) / len(bodies)),
        "call_us": best_us(calls_pass, rounds),
        "decode_us": best_us(decode_pass, rounds),
        "demand_us": best_us(demand_pass, rounds),
        "demand_known_shape_us": best_us(reader_pass, rounds),
        "best_fit_us": best_us(best_fit_pass, rounds),
        "when": time.strftime("%Y-%m-%d %H:%M"),
    }


def render(results: dict[str, Any]) -> str:
    return (
        "# One `/filter-best-fit` call's own Python, in process (`bench/latency/call_cpu.py`)\n\n"
        f"{results['nodes']} nodes, {results['calls']} calls of 100 names "
        f"({results['body_bytes_mean']} bytes each), best of {results['rounds']} passes, "
        f"written {results['when']}. Microseconds per call.\n\n"
        "| whole call (WSGI) | body decode | pod demand, read anew | pod demand, known shape "
        "(what a call reads) | best-fit decision |\n"
        "|---|---|---|---|---|\n"
        f"| {results['call_us']} | {results['decode_us']} | {results['demand_us']} "
        f"| {results.get('demand_known_shape_us', '-')} | {results['best_fit_us']} |\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/latency)")
    args = parser.parse_args(argv)
    results = measure(args.nodes, args.calls, args.rounds)
    SUITE.write("call_cpu", results, args.out)
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
