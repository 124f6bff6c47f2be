"""Events on Nodes (core/v1 Event in ``default``, where node events live)."""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

from migslice.kube.transport import ApiError, KubernetesTransport
from migslice.objects.times import format_time

log = logging.getLogger(__name__)


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
    now = format_time(datetime.datetime.now(datetime.UTC))
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{node}.{uuid.uuid4().hex[:12]}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
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
        transport.post_json("/api/v1/namespaces/default/events", event)
    except ApiError as error:
        log.warning("event not recorded node=%s reason=%s: %s", node, reason, error)
