"""The extender's cache lag under node and pod churn, for ``bench.plane.cluster``.

Two kinds of change run side by side, each at ``per_minute`` changes a minute, every change
on a node no other change touches at that moment:

* node: ``nvidia.com/mig.config.state`` of a node set to ``pending`` (the extender must call
  the node unresolvable, "being re-partitioned"), later back to ``success``;
* pod: a pod bound to a node takes one instance of a profile (a probe pod asking for as many
  instances as were free must now fail there), later is deleted (it fits again).

The lag of a change is the time from the API server's answer to the write until the
extender's ``/filter`` first answers with the change, polled every millisecond or so over a
kept-alive HTTPS connection (so it includes up to one probe's round trip).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.plane.api import Api
from bench.plane.objects import ClusterPlan, NodePlan, pod_body

CHURN_NAMESPACE = "bench-churn"
TIMEOUT_S = 10.0


class Prober:
    """``/filter`` calls to the extender, one kept-alive connection per thread."""

    def __init__(self, url: str, ca: Path, server_name: str) -> None:
        self.port = int(url.rsplit(":", 1)[1])
        self.context = ssl.create_default_context(cafile=str(ca))
        self.server_name = server_name
        self._local = threading.local()

    def filter(self, pod: dict[str, Any], node: str) -> dict[str, Any]:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10)
            raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            # http.client sends headers and body apart: without this, Nagle's algorithm holds
            # the body until the server's delayed ACK (~40 ms), as Go's clients never do.
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.sock = self.context.wrap_socket(raw, server_hostname=self.server_name)
            self._local.connection = connection
        body = orjson.dumps({"Pod": pod, "NodeNames": [node], "Nodes": None})
        connection.request(
            "POST", "/filter", body=body, headers={"Content-Type": "application/json"}
        )
        return dict(orjson.loads(connection.getresponse().read()))


def probe_pod(resource: str, count: int) -> dict[str, Any]:
    pod = pod_body("churn-probe-0", CHURN_NAMESPACE, "1g.10gb", node=None)
    main = pod["spec"]["containers"][0]["resources"]
    for part in ("limits", "requests"):
        main[part] = {k: v for k, v in main[part].items() if not k.startswith("nvidia.com/")}
        main[part][resource] = str(count)
    return pod


def fits(answer: dict[str, Any]) -> bool:
    return bool(answer.get("NodeNames"))


def repartitioning(answer: dict[str, Any]) -> bool:
    reasons = (answer.get("FailedAndUnresolvableNodes") or {}).values()
    return any("re-partitioned" in reason for reason in reasons)


@dataclass
class ChurnResult:
    lags_ms: dict[str, list[float]] = field(default_factory=lambda: {"node": [], "pod": []})
    timeouts: dict[str, int] = field(default_factory=lambda: {"node": 0, "pod": 0})


def wait_for(
    prober: Prober, pod: dict[str, Any], node: str, *, seen: Callable[[dict[str, Any]], bool]
) -> float | None:
    """Seconds until the extender's answer satisfies ``seen``; None after TIMEOUT_S."""
    began = time.monotonic()
    while time.monotonic() - began < TIMEOUT_S:
        if seen(prober.filter(pod, node)):
            return time.monotonic()
        time.sleep(0.001)
    return None


class Churn:
    def __init__(self, api: Api, prober: Prober, plan: ClusterPlan, *, per_minute: int) -> None:
        self.api = api
        self.prober = prober
        self.interval_s = 60.0 / per_minute
        self.result = ChurnResult()
        half = len(plan.nodes) // 2
        self.node_targets = plan.nodes[:half]
        self.pod_targets = [n for n in plan.nodes[half:] if any(n.free().values())]
        self._lock = threading.Lock()
        self._next = {"node": 0, "pod": 0}

    def _record(self, kind: str, write_done: float, seen_at: float | None) -> None:
        with self._lock:
            if seen_at is None:
                self.result.timeouts[kind] += 1
            else:
                self.result.lags_ms[kind].append(1000 * max(0.0, seen_at - write_done))

    def node_change(self, node: NodePlan) -> None:
        resource, _ = next(iter(node.allocatable().items()))
        pod = probe_pod(resource, 1)
        path = f"/api/v1/nodes/{node.name}"
        for state, seen in (
            ("pending", repartitioning),
            ("success", lambda a: not repartitioning(a)),
        ):
            self.api.merge_patch(
                path, {"metadata": {"labels": {"nvidia.com/mig.config.state": state}}}
            )
            done = time.monotonic()
            self._record("node", done, wait_for(self.prober, pod, node.name, seen=seen))

    def pod_change(self, node: NodePlan, number: int) -> None:
        resource, free = next((r, c) for r, c in node.free().items() if c > 0)
        profile = resource.removeprefix("nvidia.com/mig-")
        probe = probe_pod(resource, free)
        base = f"/api/v1/namespaces/{CHURN_NAMESPACE}/pods"
        name = f"churn-{number:06d}"
        self.api.create(base, pod_body(name, CHURN_NAMESPACE, profile, node=node.name))
        done = time.monotonic()
        self._record(
            "pod", done, wait_for(self.prober, probe, node.name, seen=lambda a: not fits(a))
        )
        self.api.delete(f"{base}/{name}")
        done = time.monotonic()
        self._record("pod", done, wait_for(self.prober, probe, node.name, seen=fits))

    def _worker(self, kind: str, started: float, changes: int) -> None:
        targets = self.node_targets if kind == "node" else self.pod_targets
        while True:
            with self._lock:
                k = self._next[kind]
                self._next[kind] += 1
            if k >= changes:
                return
            delay = started + 2 * k * self.interval_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            target = targets[k % len(targets)]
            if kind == "node":
                self.node_change(target)
            else:
                self.pod_change(target, k)

    def round_trip_ms(self, calls: int = 50) -> dict[str, float]:
        """The probe's own ``/filter`` round trip with nothing changing: the floor of a lag."""
        node = self.node_targets[0]
        pod = probe_pod(next(iter(node.allocatable())), 1)
        times = []
        for _ in range(calls):
            began = time.monotonic()
            self.prober.filter(pod, node.name)
            times.append(1000 * (time.monotonic() - began))
        times.sort()
        return {"p50_ms": round(statistics.median(times), 1), "max_ms": round(times[-1], 1)}

    def run(self, duration_s: float, threads_per_kind: int = 3) -> dict[str, Any]:
        """Churn for ``duration_s``; lag percentiles per kind."""
        floor = self.round_trip_ms()
        changes = int(duration_s / self.interval_s) // 2  # each change is two writes
        started = time.monotonic()
        workers = [
            threading.Thread(target=self._worker, args=(kind, started, changes), daemon=True)
            for kind in ("node", "pod")
            for _ in range(threads_per_kind)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        elapsed = time.monotonic() - started
        summary: dict[str, Any] = {"duration_s": round(elapsed, 1), "probe_round_trip": floor}
        for kind, lags in self.result.lags_ms.items():
            ordered = sorted(lags)
            summary[kind] = {
                "changes": len(ordered) + self.result.timeouts[kind],
                "per_minute": round(60 * (len(ordered) + self.result.timeouts[kind]) / elapsed),
                "timeouts": self.result.timeouts[kind],
                "p50_ms": round(statistics.median(ordered), 1) if ordered else None,
                "p99_ms": round(ordered[int(0.99 * (len(ordered) - 1))], 1) if ordered else None,
                "max_ms": round(ordered[-1], 1) if ordered else None,
            }
        return summary
