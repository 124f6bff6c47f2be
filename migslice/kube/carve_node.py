"""What the carving node agent asks of the API server, for its own node only: the Node (with
the carve request), its carve journal annotation, the pods bound there, the device plugin
pod on the node (deleted, so that the DaemonSet starts it again and it advertises the new MIG
devices), and Warning Events.

RBAC (``manifests/agent/rbac.yaml``): ``get``/``patch`` nodes (already the agent's),
``list`` pods (field selector ``spec.nodeName``), ``delete`` pods in the device plugin's
namespace only (a Role there), ``create`` events.
"""

from __future__ import annotations

import datetime

from migslice.kube.events import record_node_event
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.names import CARVE_STATE_ANNOTATION, DEVICE_PLUGIN_SELECTOR, GPU_OPERATOR_NAMESPACE
from migslice.objects.times import condition_time


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

    def restart_device_plugin(self) -> frozenset[str]:
        """Delete the device plugin pods on this node; the UIDs of the pods it replaces (those
        deleted, and those already terminating). Their DaemonSet starts new ones, which
        enumerate the GPUs' MIG devices afresh (the plugin reads them only when it starts:
        NVIDIA/k8s-device-plugin#992; MIG Manager restarts it the same way)."""
        replaced: set[str] = set()
        for pod in self._plugin_pods():
            metadata = pod.get("metadata") or {}
            name, uid = metadata.get("name"), metadata.get("uid")
            if not isinstance(name, str):
                continue
            if isinstance(uid, str):
                replaced.add(uid)
            if metadata.get("deletionTimestamp"):
                continue
            try:
                self._transport.delete_json(f"{self._plugin_path}/{name}")
            except ApiError as error:
                if error.status != 404:
                    raise
        return frozenset(replaced)

    def device_plugin_ready_at(self, replaced: frozenset[str]) -> datetime.datetime | None:
        """When a device plugin pod on this node that replaces none of ``replaced`` (and is not
        terminating) became Ready, by the kubelet's clock; None while there is none."""
        found = [
            condition_time(pod, "Ready", "lastTransitionTime")
            for pod in self._plugin_pods()
            if (pod.get("metadata") or {}).get("uid") not in replaced
            and not (pod.get("metadata") or {}).get("deletionTimestamp")
        ]
        ready = [at for at in found if at is not None]
        return max(ready) if ready else None

    @property
    def _plugin_path(self) -> str:
        return f"/api/v1/namespaces/{self._namespace}/pods"

    def _plugin_pods(self) -> list[RawObject]:
        query = {"fieldSelector": f"spec.nodeName={self._node}", "labelSelector": self._selector}
        return self._list(self._plugin_path, query)

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
