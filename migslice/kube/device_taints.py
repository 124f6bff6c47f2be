"""The steer's writes: migslice's DeviceTaintRules (``resource.k8s.io/v1``), and the pending pods
whose claims may need a steer lifted. A create of a rule that exists, or a delete of one that
is gone, is what another writer already did: not an error."""

from __future__ import annotations

from collections.abc import Mapping

from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.names import DRA_API

RULES = f"{DRA_API}/devicetaintrules"


class KubeSteerApi:
    """``SteerApi`` (``extender.steer``) over the Kubernetes API."""

    def __init__(self, transport: KubernetesTransport) -> None:
        self._transport = transport

    def create_rule(self, body: Mapping[str, object]) -> bool:
        """Create the rule; False when one of that name exists already."""
        try:
            self._transport.post_json(RULES, body)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True

    def delete_rule(self, name: str) -> bool:
        """Delete the rule; False when it is gone already."""
        try:
            self._transport.delete_json(f"{RULES}/{name}")
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def list_pending_pods(self) -> list[RawObject]:
        """Pods of any scheduler that are not on a node and still Pending."""
        items: list[RawObject] = []
        token = ""
        while True:
            query = {"fieldSelector": "spec.nodeName=,status.phase=Pending", "limit": "500"}
            if token:
                query["continue"] = token
            page = self._transport.get_json("/api/v1/pods", query)
            items.extend(item for item in page.get("items") or () if isinstance(item, dict))
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return items
