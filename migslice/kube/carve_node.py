"""What the carving node agent asks of the API server, for its own node only: the Node (with
the carve request), its carve journal annotation, the pods bound there, the device plugin
pod on the node (deleted, so that the DaemonSet starts it again and it advertises the new MIG
devices), and Warning Events.

RBAC (``manifests/agent/rbac.yaml``): ``get``/``patch`` nodes (already the agent's),
``list`` pods (field selector ``spec.nodeName``), ``delete`` pods in the device plugin's
namespace only (a Role there), ``create`` events.
"""

from __future__ import annotations

from migslice.kube.events import record_node_event
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.names import CARVE_STATE_ANNOTATION, DEVICE_PLUGIN_SELECTOR, GPU_OPERATOR_NAMESPACE


class KubeCarveNode:
    """One node seen by its agent (the ``CarveNode`` port of :mod:`agent.carve.carver`)."""

    def __init__(
        self,
        transport: KubernetesTransport,
        node: str,
        *,
        device_plugin_namespace: str = GPU_OPERATOR_NAMESPACE,
        device_plugin_selector: str = DEVICE_PLUGIN_SELECTOR,
    ) -> None:
        self._transport = transport
        self._node = node
        self._namespace = device_plugin_namespace
        self._selector = device_plugin_selector

    def read_node(self) -> RawObject:
        return self._transport.get_json(f"/api/v1/nodes/{self._node}", {})

    def write_status(self, text: str) -> None:
        self._transport.patch_json(
            f"/api/v1/nodes/{self._node}",
            {"metadata": {"annotations": {CARVE_STATE_ANNOTATION: text}}},
        )

    def pods_on_node(self) -> list[RawObject]:
        """Pods bound to the node and not finished (they may hold MIG devices)."""
        selector = f"spec.nodeName={self._node},status.phase!=Succeeded,status.phase!=Failed"
        return self._list("/api/v1/pods", {"fieldSelector": selector})

    def restart_device_plugin(self) -> int:
        """Delete the device plugin pods on this node; how many. Their DaemonSet starts new
        ones, which enumerate the GPUs' MIG devices afresh (the plugin reads them only when it
        starts: NVIDIA/k8s-device-plugin#992; MIG Manager restarts it the same way)."""
        path = f"/api/v1/namespaces/{self._namespace}/pods"
        query = {"fieldSelector": f"spec.nodeName={self._node}", "labelSelector": self._selector}
        deleted = 0
        for pod in self._list(path, query):
            name = (pod.get("metadata") or {}).get("name")
            if not isinstance(name, str) or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                self._transport.delete_json(f"{path}/{name}")
                deleted += 1
            except ApiError as error:
                if error.status != 404:
                    raise
        return deleted

    def record_warning(self, reason: str, message: str) -> None:
        record_node_event(
            self._transport,
            self._node,
            reason,
            message=message,
            component="migslice-agent",
            warning=True,
        )

    def _list(self, path: str, query: dict[str, str]) -> list[RawObject]:
        page = self._transport.get_json(path, query)
        return [item for item in page.get("items") or () if isinstance(item, dict)]
