"""Node annotations and Node Events through the API server (the agent's NodeStore)."""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

from migslice.kube.transport import ApiError, KubernetesTransport

log = logging.getLogger(__name__)


class KubeNodeStore:
    """Reads and writes one annotation of a Node (merge patch), and records Node Events."""

    def __init__(self, transport: KubernetesTransport, component: str = "migslice-agent") -> None:
        self._transport = transport
        self._component = component

    def read_annotation(self, node: str, key: str) -> str | None:
        document = self._transport.get_json(f"/api/v1/nodes/{node}", {})
        annotations = (document.get("metadata") or {}).get("annotations") or {}
        value = annotations.get(key)
        return value if isinstance(value, str) else None

    def write_annotation(self, node: str, key: str, value: str) -> None:
        self._transport.patch_json(
            f"/api/v1/nodes/{node}", {"metadata": {"annotations": {key: value}}}
        )

    def record_warning(self, node: str, reason: str, message: str) -> None:
        """A ``Warning`` Event on the Node (in ``default``, where node events live)."""
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{node}.{uuid.uuid4().hex[:12]}", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "reason": reason,
            "message": message[:1024],
            "type": "Warning",
            "source": {"component": self._component, "host": node},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._transport.post_json("/api/v1/namespaces/default/events", event)
        except ApiError as error:
            log.warning("event not recorded node=%s reason=%s: %s", node, reason, error)
