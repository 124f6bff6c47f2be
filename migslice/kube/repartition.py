"""The API calls of the repartition controller: the mig-parted ConfigMap (read, and update with
optimistic concurrency), pending pods, a node and its pods read fresh, node labels, Events."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping

from migslice.kube.events import record_node_event
from migslice.kube.pod_touch import touch_pod
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.names import QUARANTINE_ANNOTATION, QUARANTINE_LABEL, QUARANTINE_TIMEOUT

log = logging.getLogger(__name__)

COMPONENT = "migslice-repartition"


class KubeRepartitionApi:
    """What the controller reads and writes, as raw JSON (see :mod:`extender.repartition`)."""

    def __init__(
        self,
        transport: KubernetesTransport,
        config_map_namespace: str,
        config_map_name: str,
        conflict_attempts: int = 5,
    ) -> None:
        self._transport = transport
        self._cm_path = f"/api/v1/namespaces/{config_map_namespace}/configmaps/{config_map_name}"
        self._attempts = conflict_attempts

    def read_config_map(self) -> RawObject | None:
        """The mig-parted ConfigMap; None when it does not exist."""
        try:
            return self._transport.get_json(self._cm_path, {})
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def update_config_map(
        self, mutate: Callable[[RawObject], RawObject | None]
    ) -> RawObject | None:
        """Read, ``mutate`` (a copy; None: give up), write back with the read resourceVersion.

        On 409 Conflict (someone wrote in between) it reads again and calls ``mutate`` on the
        new object, up to ``conflict_attempts`` times. Returns the stored object, or None when
        the ConfigMap is gone or ``mutate`` gave up.
        """
        for attempt in range(1, self._attempts + 1):
            current = self.read_config_map()
            if current is None:
                return None
            wanted = mutate(copy.deepcopy(current))
            if wanted is None:
                return None
            metadata = wanted.setdefault("metadata", {})
            metadata["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
            try:
                return self._transport.put_json(self._cm_path, wanted)
            except ApiError as error:
                if error.status != 409 or attempt == self._attempts:
                    raise
                log.info("ConfigMap changed while updating it (409 Conflict); reading again")
        return None

    def list_pending_pods(self, scheduler_name: str) -> list[RawObject]:
        """Pods of ``scheduler_name`` that are not on a node and still Pending."""
        selector = f"spec.nodeName=,spec.schedulerName={scheduler_name},status.phase=Pending"
        return self._list("/api/v1/pods", selector)

    def read_node(self, name: str) -> RawObject | None:
        try:
            return self._transport.get_json(f"/api/v1/nodes/{name}", {})
        except ApiError as error:
            if error.status == 404:
                return None
            raise

    def list_pods_on_node(self, name: str) -> list[RawObject]:
        """The node's pods that are bound and not finished (they may hold GPU slices)."""
        selector = f"spec.nodeName={name},status.phase!=Succeeded,status.phase!=Failed"
        return self._list("/api/v1/pods", selector)

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        """Merge-patch labels of a Node (None removes one)."""
        self._transport.patch_json(f"/api/v1/nodes/{name}", {"metadata": {"labels": dict(labels)}})

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch annotations of a Node (None removes one): the carve requests."""
        self._transport.patch_json(
            f"/api/v1/nodes/{name}", {"metadata": {"annotations": dict(annotations)}}
        )

    def record_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on the Node; failures are logged."""
        record_node_event(
            self._transport, node, reason, message=message, component=COMPONENT, warning=warning
        )

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool:
        """Merge-patch annotations onto a pod (``namespace/name``; with ``uid``, only the pod
        of that uid) so that kube-scheduler tries it again at once
        (:mod:`migslice.kube.pod_touch`); False if it is gone."""
        namespace, _, name = pod_key.partition("/")
        return touch_pod(self._transport, namespace, name, annotations, uid=uid)

    def mark_quarantine(self, node: str, note: str | None) -> None:
        """Set (``note``: the annotation) or remove the node's quarantine label and annotation."""
        label = QUARANTINE_TIMEOUT if note is not None else None
        self._transport.patch_json(
            f"/api/v1/nodes/{node}",
            {
                "metadata": {
                    "labels": {QUARANTINE_LABEL: label},
                    "annotations": {QUARANTINE_ANNOTATION: note},
                }
            },
        )

    def _list(self, path: str, field_selector: str) -> list[RawObject]:
        items: list[RawObject] = []
        token = ""
        while True:
            query = {"fieldSelector": field_selector, "limit": "500"}
            if token:
                query["continue"] = token
            page = self._transport.get_json(path, query)
            items.extend(item for item in page.get("items") or () if isinstance(item, dict))
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return items
