"""Touching a pending pod: a merge patch of annotations onto it, the one pod update migslice
writes so that kube-scheduler tries the pod again.

kube-scheduler retries a pod its extender rejected (every node failed, no plugin named) only
on a later cluster event, and an update of the pod itself is one (v1.37 ``PriorityQueue.Update``:
a pod no plugin rejected is worth requeuing on any event). In a quiet cluster the next event
may be minutes away: the unschedulable pool is flushed after
``podMaxInUnschedulablePodsDuration``, 5 minutes by default. The repartition controller touches
the pods a re-partition served; the extender touches the pods it held back or could not judge,
once that reason ends (``extender.retries``).

RBAC: ``patch`` on ``pods`` (the extender's ClusterRole). The migslice webhook admits pods on
CREATE only, so a touch is not admitted again.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping

from migslice.kube.transport import ApiError, KubernetesTransport

log = logging.getLogger(__name__)

GONE = frozenset({404, 409, 422})
"""Answers that mean the pod is not the one meant: 404 gone, 409 or 422 another pod of the
same name (its ``metadata.uid`` is immutable, so a patch that names the old one fails)."""


def pod_path(namespace: str, name: str) -> str:
    """The pod's API path; each name one path segment whatever a caller sent (``x/status`` is
    never the status subresource)."""
    quoted = (urllib.parse.quote(part, safe="") for part in (namespace, name))
    return "/api/v1/namespaces/{}/pods/{}".format(*quoted)


def touch_pod(
    transport: KubernetesTransport,
    namespace: str,
    name: str,
    annotations: Mapping[str, str],
    *,
    uid: str = "",
) -> bool:
    """Merge-patch ``annotations`` onto the pod ``namespace/name``; with ``uid``, only onto the
    pod of that uid. False when that pod is gone; other API errors are raised."""
    metadata: dict[str, object] = {"annotations": dict(annotations)}
    if uid:
        metadata["uid"] = uid
    path = pod_path(namespace, name)
    try:
        transport.patch_json(path, {"metadata": metadata})
    except ApiError as error:
        if error.status in (GONE if uid else {404}):
            log.info("pod=%s/%s not touched: %s", namespace, name, error)
            return False
        raise
    return True
