"""A test actor that plays kube-controller-manager's resourceclaim controller for pods that
name a ResourceClaimTemplate (this control plane runs no kube-controller-manager).

For each pod of its namespaces with a ``spec.resourceClaims`` entry naming a template and no
claim for it in ``status.resourceClaimStatuses``, it creates the claim as the controller does
(k8s.io/kubernetes ``pkg/controller/resourceclaim/controller.go``, ``handleClaim``):
``generateName: <pod>-<claim name>-`` (each part cut so the prefix stays within 57
characters), the template's ``spec.metadata`` labels and annotations plus
``resource.kubernetes.io/pod-claim-name: <claim name>``, the Pod as controlling owner, and
the template's ``spec.spec``; then it records the claim in the pod's status, which
kube-scheduler waits for. A create the API server refuses (a webhook's denial) is tried again
at the next round, as the controller's work queue does, and kept in :attr:`refusals`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

GROUP, VERSION = "resource.k8s.io", "v1"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
PREFIX_LENGTH = 57


@dataclass
class FakeClaimController:
    api: k8s.ApiClient
    namespaces: Sequence[str]
    interval_s: float = 0.2
    refusals: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> FakeClaimController:
        self._thread = threading.Thread(target=self._run, name="claim-controller", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for namespace in self.namespaces:
                try:
                    self.sync(namespace)
                except k8s.ApiException as error:
                    self.refusals.append(f"{namespace}: HTTP {error.status}")

    def sync(self, namespace: str) -> None:
        core = k8s.CoreV1Api(self.api)
        for pod in core.list_namespaced_pod(namespace).items:
            raw = self.api.sanitize_for_serialization(pod)
            self._claims_for(core, raw)

    def _claims_for(self, core: k8s.CoreV1Api, pod: dict[str, Any]) -> None:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        made = {s["name"] for s in statuses}
        changed = False
        for entry in spec.get("resourceClaims") or []:
            template = entry.get("resourceClaimTemplateName")
            if not template or entry["name"] in made:
                continue
            claim = self._create(metadata, entry["name"], template)
            if claim is None:
                continue
            statuses.append({"name": entry["name"], "resourceClaimName": claim})
            changed = True
        if changed:
            core.patch_namespaced_pod_status(
                metadata["name"],
                metadata["namespace"],
                {"status": {"resourceClaimStatuses": statuses}},
            )

    def _create(self, pod: dict[str, Any], name: str, template_name: str) -> str | None:
        objects = k8s.CustomObjectsApi(self.api)
        namespace = pod["namespace"]
        template = objects.get_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourceclaimtemplates", template_name
        )
        meta = (template.get("spec") or {}).get("metadata") or {}
        claim = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ResourceClaim",
            "metadata": {
                "generateName": generate_name(pod["name"], name),
                "namespace": namespace,
                "labels": dict(meta.get("labels") or {}),
                "annotations": {**(meta.get("annotations") or {}), POD_CLAIM_NAME: name},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": pod["name"],
                        "uid": pod["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": template["spec"]["spec"],
        }
        try:
            created = objects.create_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", claim
            )
        except k8s.ApiException as error:
            self.refusals.append(f"{namespace}/{pod['name']} {name}: {error.status} {error.body}")
            return None
        self.created.append(f"{namespace}/{created['metadata']['name']}")
        return str(created["metadata"]["name"])


def generate_name(pod: str, claim: str) -> str:
    """``<pod>-<claim>-``, both cut in proportion so that it stays within 57 characters."""
    if len(pod) + len(claim) + 2 <= PREFIX_LENGTH:
        return f"{pod}-{claim}-"
    room = PREFIX_LENGTH - 2
    pod_room = max(1, room * len(pod) // (len(pod) + len(claim)))
    return f"{pod[:pod_room]}-{claim[: room - pod_room]}-"
