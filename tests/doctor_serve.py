"""Serve a :class:`tests.doctor_cluster.DoctorCluster` the way kube-apiserver answers doctor's
GETs (objects, lists, 404 Status, the service proxy's ``/healthz``), over a real local HTTP
server, and run doctor's checks against it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding
from migslice.doctor.reading import ClusterReader
from migslice.doctor.registry import CHECKS
from migslice.doctor.run import run_check
from migslice.kube import KubernetesTransport
from tests.doctor_cluster import DoctorCluster
from tests.local_api import Answer, Request, local_api


def status(code: int, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "code": code,
    }


def answer_from(
    cluster: DoctorCluster,
    errors: dict[str, tuple[int, str]] | None = None,
    held: dict[str, threading.Event] | None = None,
) -> Answer:
    """``errors``: path -> (status, message) answered instead; ``held``: path -> an Event the
    answer waits for (an API server that does not answer until the test says so)."""

    def answer(request: Request) -> tuple[int, Any]:
        path = request.path
        if path in (held or {}):
            (held or {})[path].wait(30)
        if path in (errors or {}):
            code, message = (errors or {})[path]
            return code, status(code, message)
        if path == "/version":
            return 200, {"major": "1", "minor": "34", "gitVersion": "v1.34.4"}
        if path in cluster.healthz:
            return cluster.healthz[path]
        found = cluster.objects.get(path)
        if found is None:
            return 404, status(404, f"{path} not found")
        if isinstance(found, list):
            return 200, {"kind": "List", "metadata": {"resourceVersion": "9"}, "items": found}
        return 200, found

    return answer


@contextmanager
def served(cluster: DoctorCluster, **kw: Any) -> Iterator[KubernetesTransport]:
    with local_api(answer_from(cluster, **kw)) as transport:
        yield transport


def judge(
    cluster: DoctorCluster,
    name: str,
    *,
    now: float | None = None,
    direct: bool = False,
    pending_bound_s: float = 600.0,
    **kw: Any,
) -> Finding:
    """One check, read through the local API server and judged (at ``cluster.now`` unless
    ``now`` says otherwise)."""
    (check,) = [c for c in CHECKS if c.name == name]
    when = cluster.now if now is None else now
    settings = Settings(now=when, pending_bound_s=pending_bound_s)
    with served(cluster, **kw) as transport:
        reader = ClusterReader(transport, direct=direct, timeout_s=5.0)
        return run_check(check, reader, settings, 5.0)
