"""The chart's objects for outages (docs/outages.md), in its default render (manifests/base):
fail-closed and fail-open webhooks over disjoint namespaces, the admission gate's policies,
the gate reconciler's RBAC and flags, the extender's ignorable choice."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from manifests import render
from migslice import names
from tests import paths

BASE = paths.ROOT / "manifests" / "base"
OPEN = {"key": names.OUTAGE_LABEL, "operator": "In", "values": [names.OUTAGE_OPEN]}
CLOSED = {"key": names.OUTAGE_LABEL, "operator": "NotIn", "values": [names.OUTAGE_OPEN]}
WEBHOOK_USER = f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:migslice-webhook"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((BASE / "webhook" / name).read_text()) if d]


def one(name: str, kind: str, object_name: str) -> dict[str, Any]:
    (found,) = [
        d for d in documents(name) if d["kind"] == kind and d["metadata"]["name"] == object_name
    ]
    return found


def hooks() -> list[dict[str, Any]]:
    config = one(
        "mutatingwebhookconfiguration.yaml", "MutatingWebhookConfiguration", "migslice-webhook"
    )
    return list(config["webhooks"])


def policy(kind: str, name: str) -> dict[str, Any]:
    return one("outage-policies.yaml", kind, name)


def selector(binding: dict[str, Any]) -> list[dict[str, Any]]:
    return list(binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"])


def test_fail_closed_and_fail_open_namespaces_get_one_webhook_each_and_the_same_filter() -> None:
    closed, opened, claims, *_ = hooks()
    assert claims["name"] == "claims.webhook.migslice.io"
    assert closed["failurePolicy"] == "Fail" and opened["failurePolicy"] == "Ignore"
    assert closed["namespaceSelector"]["matchExpressions"][-1] == CLOSED
    assert opened["namespaceSelector"]["matchExpressions"][-1] == OPEN
    admitted = closed["namespaceSelector"]["matchExpressions"][:-1]
    assert opened["namespaceSelector"]["matchExpressions"][:-1] == admitted
    assert opened["matchConditions"] == closed["matchConditions"]
    same = ("clientConfig", "rules", "sideEffects", "reinvocationPolicy", "timeoutSeconds")
    assert {k: opened[k] for k in same} == {k: closed[k] for k in same}


def test_claim_reservations_are_judged_fail_closed_and_fail_open_as_pods_are() -> None:
    closed, opened, _, reserving, reserving_open = hooks()
    assert reserving["name"] == "claim-reservations.webhook.migslice.io"
    assert reserving["failurePolicy"] == "Fail" and reserving_open["failurePolicy"] == "Ignore"
    assert reserving["namespaceSelector"] == closed["namespaceSelector"]
    assert reserving_open["namespaceSelector"] == opened["namespaceSelector"]
    for hook in (reserving, reserving_open):
        (rule,) = hook["rules"]
        assert rule["operations"] == ["UPDATE"] and rule["resources"] == ["resourceclaims/status"]
        assert hook["sideEffects"] == "None"  # it writes nothing, dryRun or not
        (condition,) = hook["matchConditions"]
        assert "oldObject.status.reservedFor.exists(o, o.uid == r.uid)" in condition["expression"]


def test_the_gate_policy_gates_every_gpu_pod_of_fail_open_namespaces_before_the_webhook() -> None:
    gate = policy("MutatingAdmissionPolicy", names.GATE_POLICY)["spec"]
    assert gate["failurePolicy"] == "Fail"
    assert gate["reinvocationPolicy"] == "Never"  # never put back after the webhook removed it
    assert gate["matchConstraints"]["resourceRules"][0]["operations"] == ["CREATE"]
    # The webhooks are sent pods that only name ResourceClaims too; the gate is not put on
    # those: their claims go through the claims webhook, fail-closed, and are what is charged.
    (webhook_condition,) = hooks()[0]["matchConditions"]
    (gate_condition,) = gate["matchConditions"]
    claims = "|| (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)"
    assert webhook_condition["expression"] == f"{gate_condition['expression']}\n{claims}"
    (mutation,) = gate["mutations"]
    expression = mutation["applyConfiguration"]["expression"]
    assert f'name: "{names.ADMISSION_GATE}"' in expression
    assert f'"{names.SCHEDULER_NAME}"' in expression
    binding = policy("MutatingAdmissionPolicyBinding", names.GATE_POLICY)
    assert binding["spec"]["policyName"] == names.GATE_POLICY
    assert selector(binding) == hooks()[1]["namespaceSelector"]["matchExpressions"]


def test_a_sized_pod_still_gated_at_validation_is_refused_in_fail_open_namespaces() -> None:
    unavailable = policy("ValidatingAdmissionPolicy", names.UNAVAILABLE_POLICY)["spec"]
    sized, gated = unavailable["matchConditions"]
    listed = sized["expression"].split("[", 1)[1].split("]", 1)[0]
    assert [a.strip().strip('"') for a in listed.split(",")] == list(names.INPUT_ANNOTATIONS)
    assert f"g.name == '{names.ADMISSION_GATE}'" in gated["expression"]
    (validation,) = unavailable["validations"]
    assert validation["expression"] == "false"
    assert "migslice is unavailable" in validation["message"]
    assert "create it again" in validation["messageExpression"]
    binding = policy("ValidatingAdmissionPolicyBinding", names.UNAVAILABLE_POLICY)
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert selector(binding) == hooks()[1]["namespaceSelector"]["matchExpressions"]


def test_only_the_webhooks_service_account_may_remove_the_gate_wherever_the_webhook_admits() -> (
    None
):
    owner = policy("ValidatingAdmissionPolicy", names.GATE_OWNER_POLICY)["spec"]
    assert owner["matchConstraints"]["resourceRules"][0]["operations"] == ["UPDATE"]
    conditions = {c["name"]: c["expression"] for c in owner["matchConditions"]}
    assert "oldObject.spec.schedulingGates" in conditions["was-gated"]
    assert conditions["gate-removed"].startswith("!(")
    assert conditions["not-the-webhook"] == f"request.userInfo.username != '{WEBHOOK_USER}'"
    deployment = one("deployment.yaml", "Deployment", "migslice-webhook")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "migslice-webhook"
    binding = policy("ValidatingAdmissionPolicyBinding", names.GATE_OWNER_POLICY)
    assert binding["spec"]["validationActions"] == ["Deny"]
    # Every namespace the webhook admits, open or not: a namespace relabelled closed keeps
    # its gated pods gated.
    assert selector(binding) == hooks()[0]["namespaceSelector"]["matchExpressions"][:-1]


def test_the_gate_reconciler_may_patch_pods_record_events_and_hold_its_lease_only() -> None:
    rules = {
        (d["kind"], d["metadata"].get("namespace", ""), group, resource, verb, named)
        for d in documents("outage-rbac.yaml")
        if d["kind"] in ("ClusterRole", "Role")
        for rule in d["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for named in rule.get("resourceNames", ["*"])
    }
    lease = ("Role", names.SYSTEM_NAMESPACE, "coordination.k8s.io", "leases")
    assert rules == {
        ("ClusterRole", "", "", "pods", "patch", "*"),
        ("ClusterRole", "", "", "pods/status", "patch", "*"),
        ("ClusterRole", "", "", "events", "create", "*"),
        # create cannot be limited by name; reading and renewing are, to its own Lease: any
        # other in the namespace (kube-scheduler's, the repartition's) could be taken over
        (*lease, "create", "*"),
        (*lease, "get", names.GATE_LEASE_NAME),
        (*lease, "update", names.GATE_LEASE_NAME),
    }
    subjects = [
        subject
        for d in documents("outage-rbac.yaml")
        if d["kind"].endswith("Binding")
        for subject in d["subjects"]
    ]
    assert subjects and all(s["name"] == "migslice-webhook" for s in subjects)
    (container,) = one("deployment.yaml", "Deployment", "migslice-webhook")["spec"]["template"][
        "spec"
    ]["containers"]
    lease = f"--gate-lease={names.SYSTEM_NAMESPACE}/{names.GATE_LEASE_NAME}"
    assert lease in container["args"]


def test_the_extender_is_not_ignorable_by_default() -> None:
    (config_map,) = [
        d
        for d in yaml.safe_load_all((BASE / "scheduler" / "configmap.yaml").read_text())
        if d and d["kind"] == "ConfigMap"
    ]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    (extender,) = config["extenders"]
    assert extender["ignorable"] is False
    values = yaml.safe_load((paths.ROOT / "charts" / "migslice" / "values.yaml").read_text())
    assert values["extender"]["ignorable"] is False
    assert values["outage"]["failOpen"]["enabled"] is True


HELM = render.default_helm()
HELM_TEMPLATE = (HELM, "template", "migslice", str(paths.ROOT / "charts" / "migslice"))
GATE_KEEPERS = {
    ("ValidatingAdmissionPolicy", "migslice-admission-gate-owner"),
    ("ValidatingAdmissionPolicyBinding", "migslice-admission-gate-owner"),
    ("ValidatingAdmissionPolicy", "migslice-webhook-pod-writes"),
    ("ValidatingAdmissionPolicyBinding", "migslice-webhook-pod-writes"),
    ("ClusterRole", "migslice-webhook-gate"),
    ("ClusterRoleBinding", "migslice-webhook-gate"),
    ("Role", "migslice-webhook-gate-lease"),
    ("RoleBinding", "migslice-webhook-gate-lease"),
}


def _webhook_args(documents: list[dict[str, Any]]) -> list[str]:
    (deployment,) = [
        d
        for d in documents
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "migslice-webhook"
    ]
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.skipif(not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)")
def test_turning_fail_open_off_keeps_admitting_the_pods_already_gated() -> None:
    """`helm upgrade --set outage.failOpen.enabled=false` (or a rollback to such a revision)
    on a cluster where fail-open namespaces have pods behind the gate migslice.io/admission
    (the webhook was down, or their tenant is at quota): the gate stays on them, and only the
    webhook's gate reconciler removes it. Off, they would wait gated forever (and anyone
    could remove the gate, past quota). So fail-open off drops what puts the gate on new pods
    (the MutatingAdmissionPolicy, the fail-open webhooks, the sized-pod refusal), and keeps
    the reconciler, its RBAC and Lease, and the policies that keep the gate the webhook's."""
    text = render.helm_template(HELM, ("outage.failOpen.enabled=false",))
    off = [d for _, d in render.split_render(text)]
    found = {(d["kind"], d["metadata"]["name"]) for d in off}
    assert GATE_KEEPERS <= found
    args = _webhook_args(off)
    assert f"--gate-lease={names.SYSTEM_NAMESPACE}/{names.GATE_LEASE_NAME}" in args
    assert not [a for a in args if a.startswith("--gate-interval-s")]
    # Nothing puts the gate on a new pod.
    assert (
        not {
            ("MutatingAdmissionPolicy", names.GATE_POLICY),
            ("ValidatingAdmissionPolicy", names.UNAVAILABLE_POLICY),
        }
        & found
    )
    (config,) = [d for d in off if d["kind"] == "MutatingWebhookConfiguration"]
    assert "fail-open" not in str([h["name"] for h in config["webhooks"]])
    # Before 1.36 no MutatingAdmissionPolicy could have gated a pod: no reconciler there.
    old = subprocess.run(
        [*HELM_TEMPLATE, "--kube-version", "v1.35.3", "-n", names.SYSTEM_NAMESPACE],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    older = [d for d in yaml.safe_load_all(old) if d]
    assert not GATE_KEEPERS & {(d["kind"], d["metadata"]["name"]) for d in older}
    assert "--gate-interval-s=0" in _webhook_args(older)
