"""Node annotations and Node Events through the API server (the agent's NodeStore)."""

from __future__ import annotations

from migslice.kube.events import record_node_event
from migslice.kube.transport import KubernetesTransport

LAYOUT_FIELD_MANAGER = "migslice-agent-layout"
"""The field manager of the agent's layout writes: its managedFields entry owns that one
annotation, so its time is the layout's last write (``migslice doctor`` judges freshness by it;
the default manager, the User-Agent's ``migslice``, is shared with the extender's node writes)."""


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
            f"/api/v1/nodes/{node}",
            {"metadata": {"annotations": {key: value}}},
            query={"fieldManager": LAYOUT_FIELD_MANAGER},
        )

    def record_warning(self, node: str, reason: str, message: str) -> None:
        """A ``Warning`` Event on the Node; failures are logged."""
        record_node_event(
            self._transport, node, reason, message=message, component=self._component, warning=True
        )
