"""The latency suite's call benchmarks: what ``bench.latency.call_floor`` sends and tables,
the Go caller against migslice's server, the watch events ``bench.latency.extender_latency``
applies, and ``bench.latency.call_cpu``'s parts of a call."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from bench.latency.call_floor import bodies, build_caller, measure
from bench.latency.call_floor import render as render_call_floor
from bench.plane.nulls import Floor, go_binary
from bench.plane.procs import server_processes
from migslice.scheduling import demand_of


def test_the_isolated_call_bench_sends_what_kube_scheduler_sends_and_tables_each_server() -> None:
    calls = bodies(500, 3)
    args = orjson.loads(calls[0])
    assert set(args) == {"Pod", "Nodes", "NodeNames"}
    assert args["Nodes"] is None and len(set(args["NodeNames"])) == 100
    assert "managedFields" not in args["Pod"]["metadata"]  # kube-scheduler drops them
    assert demand_of(args["Pod"]).units  # a GPU pod the extender decides on
    figures = {
        "calls": 10,
        "server_cpu_ms_per_call": 0.4,
        "caller_cpu_ms_per_call": 0.3,
        "mean_ms": 0.6,
        "p50_ms": 0.5,
        "p99_ms": 2.0,
        "answer_bytes_mean": 120,
        "answering_on_core_ms_per_call": 0.35,
        "answering_waiting_ms_per_call": 0.01,
        "answering_timeslices_per_call": 1.1,
    }
    results = {
        "nodes": 500,
        "body_bytes_mean": 8821,
        "servers": {"go": figures, "python": figures, "extender": figures},
    }
    text = render_call_floor(results)
    row = "| Go null extender (net/http) | 0.4 | 0.3 | 0.6 | 0.5 | 2.0 | 120 | 10 "
    row += "| 0.35 / 0.01 | 1.1 |"
    assert row in text
    assert "| migslice extender | 0.4 |" in text


@pytest.mark.skipif(not Path(go_binary()).exists() and not shutil.which("go"), reason="no Go")
def test_the_go_caller_speaks_the_protocol_our_server_answers(tmp_path: Path) -> None:
    """``bench/plane/caller`` marshals ExtenderArgs and decodes the answers as kube-scheduler does;
    against the Python null extender (migslice's real server) it counts every call."""
    from migslice.serving.certs import write_tls_bundle

    bundle = write_tls_bundle(tmp_path, "migslice-extender", "migslice-system", (), ["127.0.0.1"])
    caller = build_caller(tmp_path)
    calls = tmp_path / "calls.jsonl"
    calls.write_bytes(b"\n".join(bodies(500, 4)) + b"\n")
    floor = Floor("python", cert=bundle.cert, key=bundle.key, ca=bundle.ca_cert, workdir=tmp_path)
    try:
        floor.wait_ready()
        pid = server_processes(floor.process.pid)["worker"]
        url = f"{floor.url}/filter-best-fit"
        figures = measure(caller, url, bundle.ca_cert, calls, pid, rounds=2, thread=pid)
    finally:
        floor.stop()
    assert figures["calls"] == 8
    assert figures["caller_cpu_ms_per_call"] > 0 and figures["server_cpu_ms_per_call"] >= 0
    assert 0 < figures["p50_ms"] <= figures["p99_ms"] and figures["mean_ms"] > 0
    # {"NodeNames":[<first name>],"FailedNodes":{},"Error":""}
    assert 60 < figures["answer_bytes_mean"] < 120
    # the event loop's thread answered: it ran, and was woken at least once a call
    assert figures["answering_on_core_ms_per_call"] > 0
    assert figures["answering_timeslices_per_call"] >= 1


def test_the_latency_server_applies_watch_events_as_the_pod_informer_does() -> None:
    """``bench.latency.extender_latency --watch-events-per-s``: a pass of the events binds its pods
    (each node derived again at once, on the applying thread), the next pass deletes them."""
    from bench.latency.extender_latency import apply_events, raw_node, watch_events
    from extender import ExtenderSettings, state_from_objects
    from migslice.objects import ClusterObjects

    objects = ClusterObjects(nodes=tuple(raw_node(i) for i in range(4)))
    index = state_from_objects(objects, ExtenderSettings()).index
    before = {name: index.get(name) for name in index.node_names()}
    lines = watch_events(4, count=4)
    assert apply_events(index, lines, 0, 4) == 4
    assert index.pod_count == 4
    bound = {name: index.get(name) for name in index.node_names()}
    assert all(bound[name] != before[name] for name in before)  # derived as they arrived
    assert apply_events(index, lines, 4, 4) == 8
    assert index.pod_count == 0
    assert {name: index.get(name) for name in index.node_names()} == before


def test_call_cpu_answers_every_call_through_the_extenders_app_and_reports_its_parts() -> None:
    from bench.latency.call_cpu import measure as measure_call_cpu
    from bench.latency.call_cpu import render as render_call_cpu

    results = measure_call_cpu(nodes=120, calls=30, rounds=1)
    assert results["calls"] == 30 and results["nodes"] == 120
    for part in ("call_us", "decode_us", "demand_us", "demand_known_shape_us", "best_fit_us"):
        assert results[part] > 0
    assert f"| {results['call_us']} | {results['decode_us']} |" in render_call_cpu(results)
