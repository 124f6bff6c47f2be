"""Events (core/v1 Event) about Nodes and other cluster-scoped objects, in ``default``, where
the events of cluster-scoped objects live, and about namespaced objects (Pods) in theirs."""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from migslice.kube.transport import ApiError, KubernetesTransport
from migslice.objects.times import format_time

log = logging.getLogger(__name__)
_SUBJECTS = {"Node": "node", "Pod": "pod", "TenantPolicy": "tenant"}
"""The log field of an object an Event is about (docs/operate.md, "Logs")."""


def record_node_event(
    transport: KubernetesTransport,
    node: str,
    reason: str,
    *,
    message: str,
    component: str,
    warning: bool = False,
) -> None:
    """Create a ``Normal`` or ``Warning`` Event about ``node``; a failure is logged only."""
    involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
    record_event(transport, involved, reason, message=message, component=component, warning=warning)


def record_event(
    transport: KubernetesTransport,
    involved: Mapping[str, str],
    reason: str,
    *,
    message: str,
    component: str,
    warning: bool = False,
) -> None:
    """An Event about the cluster-scoped object ``involved`` (``apiVersion``, ``kind``,
    ``name``, ``uid``); a failure is logged only."""
    record_namespaced_event(
        transport,
        "default",
        involved,
        reason,
        message=message,
        component=component,
        warning=warning,
    )


def record_namespaced_event(
    transport: KubernetesTransport,
    namespace: str,
    involved: Mapping[str, str],
    reason: str,
    *,
    message: str,
    component: str,
    warning: bool = False,
) -> None:
    """An Event in ``namespace`` about ``involved`` (an object of that namespace, such as a
    Pod, or a cluster-scoped one in ``default``); a failure is logged only."""
    now = format_time(datetime.datetime.now(datetime.UTC))
    name = involved["name"]
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": dict(involved),
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    try:
        transport.post_json(f"/api/v1/namespaces/{namespace}/events", event)
    except ApiError as error:
        kind = involved.get("kind", "object")
        log.warning(
            "event not recorded %s=%s reason=%s: %s",
            _SUBJECTS.get(kind, kind.lower()),
            name,
            reason,
            error,
        )
