"""/metrics of a server run with several gunicorn workers (``--workers``): each worker keeps
its own registry, and a scrape reads the one worker whose connection it got, under the same
series for all of them (an extender of 2 workers given 40 filter calls read 19 or 21 in 20
scrapes, never 40). The server says so when it starts, with what to do instead: one worker
per pod, scaled by replicas, as the chart runs it."""

from __future__ import annotations

from pathlib import Path

from harness.builders import make_node
from tests.serving.test_serving_services import start


def test_a_server_of_several_workers_says_its_metrics_are_per_worker(tmp_path: Path) -> None:
    node = {"apiVersion": "v1", "kind": "Node", **make_node("gpu-a", mig={"1g.10gb": 7})}
    server = start("extender", tmp_path, [node])  # --workers 2
    try:
        logged = (tmp_path / "extender.log").read_text()
    finally:
        server.stop()
    assert "--workers 2: each worker keeps its own metrics" in logged, logged[-2000:]
    assert "run one worker per pod and scale with replicas" in logged
