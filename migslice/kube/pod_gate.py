"""The gate reconciler's calls on pods (``webhook.gate.GateApi``): the JSON Patch that admits
a gated pod, its ``migslice.io/Admitted`` condition, and Events in its namespace.

RBAC (the chart's ``templates/webhook/outage-rbac.yaml``): ``patch`` on ``pods`` and
``pods/status``, ``create`` on ``events``, cluster-wide; ``get`` on ``namespaces`` (the
webhook's own ``rbac.yaml``), to confirm an opt-out before a pod is let go unadmitted.
Removing the gate is refused to every other user by the ValidatingAdmissionPolicy
``migslice-admission-gate-owner``.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from migslice.admission.gate import GatedPod, GateNote
from migslice.kube.events import record_namespaced_event
from migslice.kube.pod_touch import pod_path
from migslice.kube.transport import ApiError, KubernetesTransport
from migslice.objects.json import mapping

log = logging.getLogger(__name__)

JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
COMPONENT = "migslice-webhook"
CHANGED = frozenset({404, 409, 422})
"""Answers that mean the pod is not as decided (a failed ``test`` is 422, a gone pod 404)."""


class KubeGateApi:
    def __init__(self, transport: KubernetesTransport) -> None:
        self._transport = transport

    def patch_pod(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> bool:
        try:
            self._transport.patch_json(pod_path(namespace, name), patch, JSON_PATCH)
        except ApiError as error:
            if error.status in CHANGED:
                log.info("pod=%s/%s not patched: %s", namespace, name, error)
                return False
            raise
        return True

    def set_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> None:
        body = {"status": {"conditions": [dict(condition)]}}
        try:
            self._transport.patch_json(
                pod_path(namespace, name) + "/status", body, STRATEGIC_MERGE_PATCH
            )
        except ApiError as error:
            log.warning("condition not set on pod=%s/%s: %s", namespace, name, error)

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        path = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}"
        try:
            raw = self._transport.get_json(path, {})
        except ApiError as error:
            if error.status == 404:
                return None
            raise
        labels = mapping(mapping(raw.get("metadata")).get("labels"))
        return {key: value for key, value in labels.items() if isinstance(value, str)}

    def record_event(self, pod: GatedPod, note: GateNote) -> None:
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace,
            "name": pod.name,
            "uid": pod.uid,
        }
        record_namespaced_event(
            self._transport,
            pod.namespace,
            involved,
            note.reason,
            message=note.message,
            component=COMPONENT,
            warning=note.warning,
        )
