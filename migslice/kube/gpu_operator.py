"""The NVIDIA GPU Operator's ClusterPolicy through the API server: list it, and record a
Warning Event on it."""

from __future__ import annotations

from migslice import names
from migslice.kube.events import record_event
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject

CLUSTER_POLICIES_PATH = (
    f"/apis/{names.CLUSTER_POLICY_GROUP}/{names.CLUSTER_POLICY_VERSION}/"
    f"{names.CLUSTER_POLICY_PLURAL}"
)


class GpuOperatorUnreadableError(Exception):
    """The ClusterPolicies could not be read for lack of rights (403)."""


class KubeClusterPolicyApi:
    """ClusterPolicies (``clusterpolicies.nvidia.com/v1``), read as raw JSON."""

    def __init__(self, transport: KubernetesTransport, component: str) -> None:
        self._transport = transport
        self._component = component

    def list_cluster_policies(self) -> list[RawObject] | None:
        """Every ClusterPolicy; None when the API server does not serve the resource (the
        GPU Operator's CRD is not installed). GpuOperatorUnreadableError on 403."""
        try:
            listed = self._transport.get_json(CLUSTER_POLICIES_PATH, {})
        except ApiError as error:
            if error.status == 404:
                return None
            if error.status == 403:
                raise GpuOperatorUnreadableError(str(error)) from None
            raise
        return [item for item in listed.get("items") or () if isinstance(item, dict)]

    def record_warning(self, policy_name: str, policy_uid: str, reason: str, message: str) -> None:
        """A Warning Event on the ClusterPolicy (``kubectl describe clusterpolicy`` shows it);
        a failure is logged only."""
        involved = {
            "apiVersion": f"{names.CLUSTER_POLICY_GROUP}/{names.CLUSTER_POLICY_VERSION}",
            "kind": "ClusterPolicy",
            "name": policy_name,
            "uid": policy_uid,
        }
        record_event(
            self._transport,
            involved,
            reason,
            message=message,
            component=self._component,
            warning=True,
        )
