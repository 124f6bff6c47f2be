"""The NVIDIA GPU Operator's ClusterPolicy through the API server: list it, and record a
Warning Event on it."""

from __future__ import annotations

from migslice import names
from migslice.kube.events import record_event
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject

GROUP_VERSION = f"{names.CLUSTER_POLICY_GROUP}/{names.CLUSTER_POLICY_VERSION}"
DISCOVERY_PATH = f"/apis/{GROUP_VERSION}"
CLUSTER_POLICIES_PATH = f"{DISCOVERY_PATH}/{names.CLUSTER_POLICY_PLURAL}"
RESOURCE = f"{names.CLUSTER_POLICY_PLURAL}.{GROUP_VERSION}"


class GpuOperatorUnreadableError(Exception):
    """The ClusterPolicies could not be read for lack of rights (403)."""


class GpuOperatorUnknownError(Exception):
    """The ClusterPolicies were not read this time, and that says nothing of whether the GPU
    Operator is there: an answer that may pass (a 5xx, a 429, no connection, a timeout) or a
    404 while the API server's discovery still lists the resource (an API server restarting
    serves a CRD's objects only once it has read the CRDs again)."""


class KubeClusterPolicyApi:
    """ClusterPolicies (``clusterpolicies.nvidia.com/v1``), read as raw JSON."""

    def __init__(self, transport: KubernetesTransport, component: str) -> None:
        self._transport = transport
        self._component = component

    def list_cluster_policies(self) -> list[RawObject] | None:
        """Every ClusterPolicy; None when the API server does not serve the resource (the
        GPU Operator's CRD is not installed: a 404, and discovery does not list it).
        GpuOperatorUnreadableError on 403; GpuOperatorUnknownError on any other failure."""
        try:
            listed = self._transport.get_json(CLUSTER_POLICIES_PATH, {})
        except ApiError as error:
            if error.status == 403:
                raise GpuOperatorUnreadableError(str(error)) from None
            if error.status == 404 and not self._discovery_lists():
                return None
            if error.status == 404:
                raise GpuOperatorUnknownError(
                    f"{error}, while discovery lists {RESOURCE}"
                ) from None
            raise GpuOperatorUnknownError(str(error)) from None
        return [item for item in listed.get("items") or () if isinstance(item, dict)]

    def _discovery_lists(self) -> bool:
        """Whether the API server's discovery of ``nvidia.com/v1`` lists ClusterPolicies
        (False when it serves no such group version); GpuOperatorUnknownError when it
        cannot be read."""
        try:
            found = self._transport.get_json(DISCOVERY_PATH, {})
        except ApiError as error:
            if error.status == 404:
                return False
            raise GpuOperatorUnknownError(
                f"HTTP 404 on {CLUSTER_POLICIES_PATH}; discovery of {GROUP_VERSION} unread: {error}"
            ) from None
        resources = found.get("resources")
        listed = resources if isinstance(resources, list) else []
        return any(
            isinstance(r, dict) and r.get("name") == names.CLUSTER_POLICY_PLURAL for r in listed
        )

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
