"""The CRD and webhook manifests (rendered from the chart into manifests/base) validate against
the Kubernetes schemas of 1.30-1.37 (MutatingAdmissionPolicy from 1.36, where it is GA)."""

from __future__ import annotations

from pathlib import Path

import celpy
import kubernetes_validate
import pytest
import yaml

from harness.builders import make_created_pod
from tests import paths

ROOT = paths.ROOT
BASE = ROOT / "manifests" / "base"
FILES = [BASE / "crd" / "tenantpolicies.yaml", *sorted((BASE / "webhook").glob("*.yaml"))]
VERSIONS = ["1.30", "1.34", "1.37"]
INTRODUCED = {"MutatingAdmissionPolicy": (1, 36), "MutatingAdmissionPolicyBinding": (1, 36)}
"""Kinds of admissionregistration.k8s.io/v1 newer than the chart's oldest Kubernetes; the chart
renders them only from that version on (``migslice.failOpen``)."""


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_manifest_validates_strictly(path: Path, version: str) -> None:
    major, minor = (int(part) for part in version.split("."))
    for document in yaml.safe_load_all(path.read_text()):
        if (major, minor) < INTRODUCED.get(document["kind"], (0, 0)):
            continue
        kubernetes_validate.validate(document, version, strict=True)


def test_the_mutating_webhook_fails_closed_fast_and_spares_system_namespaces() -> None:
    config = yaml.safe_load((BASE / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())
    hook = config["webhooks"][0]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "NoneOnDryRun"
    assert hook["timeoutSeconds"] <= 5
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
    assert {"gpu-operator", "kube-system", "migslice-system"} <= set(excluded)
    assert hook["matchConditions"][0]["name"] == "asks-for-a-gpu"


def test_the_webhook_writes_tenantpolicy_status_ledgers_events_and_templates_nothing_else() -> None:
    documents = list(yaml.safe_load_all((BASE / "webhook" / "rbac.yaml").read_text()))
    writes = {
        (document["kind"], group, resource, verb)
        for document in documents
        if document["kind"] in ("ClusterRole", "Role")
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        if verb not in ("get", "list", "watch")
    }
    assert writes == {
        ("ClusterRole", "migslice.io", "tenantpolicies/status", "patch"),
        ("ClusterRole", "resource.k8s.io", "resourceclaimtemplates", "create"),
        ("Role", "", "configmaps", "create"),
        ("Role", "", "configmaps", "update"),
        ("Role", "", "events", "create"),
    }
    roles = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Role"}
    assert roles["migslice-webhook-ledgers"]["metadata"]["namespace"] == "migslice-system"
    # The Events of cluster-scoped objects (a TenantPolicy whose ledger was rebuilt) live there.
    assert roles["migslice-webhook-events"]["metadata"]["namespace"] == "default"


def test_the_claims_webhook_sees_claims_and_templates_of_the_same_namespaces() -> None:
    config = yaml.safe_load((BASE / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())
    pods, open_pods, claims, *_ = config["webhooks"]
    assert open_pods["name"] == "pods-fail-open.webhook.migslice.io"
    assert claims["name"] == "claims.webhook.migslice.io"
    # Fail-closed in fail-open namespaces too (docs/outages.md): every admitted namespace.
    assert claims["namespaceSelector"]["matchExpressions"] == [
        e for e in pods["namespaceSelector"]["matchExpressions"] if e["key"] != "migslice.io/outage"
    ]
    assert claims["failurePolicy"] == "Fail" and claims["sideEffects"] == "NoneOnDryRun"
    assert [(r["operations"], r["resources"]) for r in claims["rules"]] == [
        (["CREATE", "UPDATE"], ["resourceclaims"]),
        (["CREATE"], ["resourceclaimtemplates"]),
    ]
    assert {r["apiGroups"][0] for r in claims["rules"]} == {"resource.k8s.io"}
    assert "resourceClaims" in pods["matchConditions"][0]["expression"]


@pytest.mark.parametrize(
    "resource",
    [
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com",
        "deviceclass.resource.kubernetes.io/migslice-mig-1g.10gb",
        "deviceclass.resource.kubernetes.io/any-device",
    ],
)
def test_the_pod_webhooks_are_sent_pods_asking_a_device_class_implicit_resource(
    resource: str,
) -> None:
    """KEP-5004: any DeviceClass serves deviceclass.resource.kubernetes.io/<class>; a pod that
    asks for NVIDIA's devices so (and nothing under nvidia.com/) must reach the webhook, which
    refuses it in a tenant's namespace: filtered out by the matchConditions, it was never seen
    and ran without its policy's nodeSelector and schedulerName."""
    config = yaml.safe_load((BASE / "webhook" / "mutatingwebhookconfiguration.yaml").read_text())
    environment = celpy.Environment()
    for hook in config["webhooks"][:2]:  # the pod webhooks, fail-closed and fail-open
        (condition,) = hook["matchConditions"]
        program = environment.program(environment.compile(condition["expression"]))
        for limits, sent in (({resource: "1"}, True), ({"cpu": "1"}, False)):
            pod = celpy.json_to_cel(make_created_pod(limits=limits))
            assert bool(program.evaluate({"object": pod})) is sent, (hook["name"], limits)
