"""Each component's writes held to its scope, on the real API server, as each component runs:
with its ServiceAccount's token (the agent's bound to a pod on its node, as the kubelet's is),
under the RBAC and the ValidatingAdmissionPolicies of ``manifests/base`` (the chart's render;
the carving agent's from the chart with ``agent.carve=true``).

For each component a write inside its scope succeeds and writes outside it are refused, 403
with the policy's message (or RBAC's, where RBAC is the fence):

* the agent: its own Node's migslice.io/ annotations and labels, Events about that Node, the
  device plugin's pods on that Node; not another Node, not another key, not the spec, nothing
  without the node-name claim;
* the extender: the node labels and annotations and the pod annotation re-partitioning
  writes; not another key, not a pod's image, not Events outside ``default``;
* the webhook: its quota ledgers (ConfigMaps ``migslice-quota-<tenant>``); no other ConfigMap;
* the extender's steer: its own DeviceTaintRules (``migslice-steer-*``, key
  ``migslice.io/steer``, ``NoSchedule``); not another rule, not an evicting one.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from harness.api import ensure_namespace, wait_for
from harness.binaries import DEFAULT_BIN_DIR
from harness.controlplane import ControlPlane
from harness.install import render_chart
from harness.stack import BASE, NAMESPACE, service_account_kubeconfig, service_account_token
from migslice.names import GATE_LEASE_NAME, SYSTEM_NAMESPACE
from migslice.objects.claim_templates import migslice_claim_template
from migslice.objects.device_taint_rules import steer_rule

pytestmark = pytest.mark.e2e

GPU_OPERATOR = "gpu-operator"
CARVE_OBJECTS = {
    "migslice-agent-carve",
    "migslice-agent-device-plugin",
    "migslice-agent-own-node-device-plugin",
}


def as_account(control_plane: ControlPlane, account: str, token: str) -> k8s.CoreV1Api:
    """A CoreV1Api that authenticates with ``token``."""
    kubeconfig = service_account_kubeconfig(
        control_plane, f"{account}-{uuid.uuid4().hex[:6]}", token
    )
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


def refused(call: Callable[[], Any]) -> str:
    """The message of the 403 that ``call`` is answered with (fails if it is allowed)."""
    with pytest.raises(k8s.ApiException) as error:
        call()
    assert error.value.status == 403, error.value.body
    return message(error.value)


def message(error: k8s.ApiException) -> str:
    """The Status message of an API error."""
    return str(json.loads(error.body)["message"])


def enforced(call: Callable[[], Any]) -> str:
    """:func:`refused`, once kube-apiserver has picked up the policies just applied (``call``
    must write something new each time: a write that changes nothing passes any policy)."""

    def attempt() -> str | None:
        try:
            call()
        except k8s.ApiException as error:
            if error.status == 403:
                return message(error)
            raise
        return None

    return str(wait_for("the admission policies to be enforced", attempt, 20, 0.5))


def annotate(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


def label(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {key: value}}}


def event(about: dict[str, str], reason: str = "E2E") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{about['name']}.{uuid.uuid4().hex[:10]}"},
        "involvedObject": about,
        "reason": reason,
        "message": "least-privilege e2e",
        "type": "Normal",
        "source": {"component": "e2e"},
    }


def device_plugin_pod(node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"generateName": "nvidia-device-plugin-", "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": "plugin:1"}]},
    }


@pytest.fixture
def nodes(gpu_node: Callable[..., k8s.V1Node]) -> tuple[str, str]:
    """The agent's node and another one."""
    return gpu_node().metadata.name, gpu_node().metadata.name


@pytest.fixture
def carve_rbac(control_plane: ControlPlane, core_v1: k8s.CoreV1Api) -> Iterator[None]:
    ensure_namespace(core_v1, GPU_OPERATOR)
    documents = [
        d
        for d in render_chart(DEFAULT_BIN_DIR / "helm", "agent.carve=true")
        if d["metadata"]["name"] in CARVE_OBJECTS
    ]
    control_plane.apply(documents)
    yield


def test_the_agent_writes_only_migslice_keys_of_its_own_node(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    nodes: tuple[str, str],
    carve_rbac: None,
) -> None:
    own, other = nodes
    rbac = BASE / "agent" / "rbac.yaml"
    agent = as_account(
        control_plane,
        "migslice-agent",
        service_account_token(control_plane, rbac, NAMESPACE, "migslice-agent", node=own),
    )
    unbound = as_account(
        control_plane,
        "migslice-agent",
        service_account_token(control_plane, rbac, NAMESPACE, "migslice-agent"),
    )
    said = enforced(lambda: agent.patch_node(other, annotate("migslice.io/gpu-layout", "{}")))
    assert f"migslice-agent on node {own} may change only its own Node, not {other}" in said
    # Inside its scope: its layout annotation and its carve journal.
    agent.patch_node(own, annotate("migslice.io/gpu-layout", '{"version": 1}'))
    agent.patch_node(own, annotate("migslice.io/carve-state", '{"state": "idle"}'))
    stored = core_v1.read_node(own).metadata
    assert stored.annotations["migslice.io/gpu-layout"] == '{"version": 1}'
    assert stored.annotations["migslice.io/carve-state"] == '{"state": "idle"}'
    # Outside it: any label (the quarantine, the repartition mode, the steer switch are the
    # controller's and the admin's), other annotations (the carve request is the
    # controller's), the spec, and anything without the node-name claim.
    for key, value in (
        ("nvidia.com/mig.config", "all-7g.80gb"),
        ("kubernetes.io/os", None),
        ("migslice.io/repartition-mode", "carve"),
        ("migslice.io/dra-steer", "off"),
    ):
        body = label(key, value)
        assert "may change no label" in refused(lambda: agent.patch_node(own, body))  # noqa: B023
    for key in ("node.alpha.kubernetes.io/ttl", "migslice.io/carve"):
        body = annotate(key, "0")
        assert "only the annotations migslice.io/gpu-layout and" in refused(
            lambda: agent.patch_node(own, body)  # noqa: B023
        )
    assert "spec, owners or finalizers" in refused(
        lambda: agent.patch_node(own, {"spec": {"unschedulable": True}})
    )
    assert "token bound to its pod on a node" in refused(
        lambda: unbound.patch_node(own, annotate("migslice.io/gpu-layout", "{}"))
    )
    # Events: about its own Node only.
    own_ref = {"apiVersion": "v1", "kind": "Node", "name": own, "uid": own}
    agent.create_namespaced_event("default", event(own_ref))
    assert "Events only about its own Node" in refused(
        lambda: agent.create_namespaced_event("default", event({**own_ref, "name": other}))
    )
    # Carving: the device plugin's pods on its node, nothing else.
    labels = {"app": "nvidia-device-plugin-daemonset"}
    mine = core_v1.create_namespaced_pod(GPU_OPERATOR, device_plugin_pod(own, labels))
    theirs = core_v1.create_namespaced_pod(GPU_OPERATOR, device_plugin_pod(other, labels))
    driver = core_v1.create_namespaced_pod(GPU_OPERATOR, device_plugin_pod(own, {"app": "driver"}))
    try:
        assert f"may delete only pods on its own node, not {theirs.metadata.name}" in refused(
            lambda: agent.delete_namespaced_pod(theirs.metadata.name, GPU_OPERATOR)
        )
        assert "only the device plugin's pods (app=nvidia-device-plugin-daemonset)" in refused(
            lambda: agent.delete_namespaced_pod(driver.metadata.name, GPU_OPERATOR)
        )
        agent.delete_namespaced_pod(mine.metadata.name, GPU_OPERATOR)
    finally:
        core_v1.delete_collection_namespaced_pod(GPU_OPERATOR, grace_period_seconds=0)


def test_the_extender_writes_only_what_repartitioning_writes(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    nodes: tuple[str, str],
    namespace: str,
) -> None:
    node, _ = nodes
    token = service_account_token(
        control_plane, BASE / "extender" / "rbac.yaml", NAMESPACE, "migslice-extender"
    )
    extender = as_account(control_plane, "migslice-extender", token)
    said = enforced(lambda: extender.patch_node(node, label("team", uuid.uuid4().hex)))
    assert "may change only the node labels nvidia.com/mig.config" in said
    # Inside its scope: MIG Manager's label and the pending state, a carve request, a
    # quarantine mark, the retry annotation on a pod, an Event on a Node.
    pending = {"nvidia.com/mig.config": "migslice-x", "nvidia.com/mig.config.state": "pending"}
    extender.patch_node(node, {"metadata": {"labels": pending}})
    extender.patch_node(node, annotate("migslice.io/carve", '{"plan": "p"}'))
    extender.patch_node(
        node,
        {
            "metadata": {
                "labels": {"migslice.io/repartition-quarantine": "timeout"},
                "annotations": {"migslice.io/repartition-quarantine": "e2e"},
            }
        },
    )
    assert core_v1.read_node(node).metadata.labels["nvidia.com/mig.config"] == "migslice-x"
    pod = core_v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"generateName": "pending-", "annotations": {"migslice.io/tenant": "t"}},
            "spec": {"containers": [{"name": "main", "image": "train:1"}]},
        },
    )
    name = pod.metadata.name
    extender.patch_namespaced_pod(
        name, namespace, annotate("migslice.io/repartitioned", "migslice-x")
    )
    extender.patch_namespaced_pod(name, namespace, annotate("migslice.io/retry", "hold-ended x"))
    extender.create_namespaced_event(
        "default", event({"apiVersion": "v1", "kind": "Node", "name": node, "uid": node})
    )
    # Outside it: the agent's annotation, the webhook's pod annotations (quota settles on
    # migslice.io/reservation), a pod's labels or image, Events in another namespace.
    assert "node annotations migslice.io/carve" in refused(
        lambda: extender.patch_node(node, annotate("migslice.io/gpu-layout", "{}"))
    )
    assert "spec, owners or finalizers" in refused(
        lambda: extender.patch_node(node, {"spec": {"unschedulable": True}})
    )
    said = refused(
        lambda: extender.patch_namespaced_pod(
            name, namespace, annotate("migslice.io/reservation", "forged")
        )
    )  # refused by the extender's own policy and by migslice-pod-reservation: either may answer
    assert (
        "only the pod annotations migslice.io/repartitioned, migslice.io/retry" in said
        or "is written by the migslice webhook only" in said
    ), said
    assert "only the pod annotations migslice.io/repartitioned, migslice.io/retry" in refused(
        lambda: extender.patch_namespaced_pod(name, namespace, annotate("migslice.io/tenant", None))
    )
    assert "spec, labels, owners or finalizers" in refused(
        lambda: extender.patch_namespaced_pod(name, namespace, label("team", "b"))
    )
    image = {"spec": {"containers": [{"name": "main", "image": "evil:1"}]}}
    assert "spec, labels, owners or finalizers" in refused(
        lambda: extender.patch_namespaced_pod(name, namespace, image)
    )
    assert "cannot create resource" in refused(
        lambda: extender.create_namespaced_event(
            namespace, event({"apiVersion": "v1", "kind": "Pod", "name": name, "uid": name})
        )
    )


def test_the_webhook_writes_only_its_quota_ledgers(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    token = service_account_token(
        control_plane, BASE / "webhook" / "rbac.yaml", NAMESPACE, "migslice-webhook"
    )
    webhook = as_account(control_plane, "migslice-webhook", token)
    said = enforced(
        lambda: webhook.create_namespaced_config_map(
            NAMESPACE, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(generate_name="e2e-not-a-ledger-"))
        )
    )
    assert (
        "migslice-webhook may write only its quota ledgers (ConfigMaps migslice-quota-<tenant>),"
        f" not ConfigMap {NAMESPACE}/e2e-not-a-ledger-"
    ) in said
    other = f"e2e-not-a-ledger-{uuid.uuid4().hex[:6]}"
    ledger = f"migslice-quota-e2e-{uuid.uuid4().hex[:6]}"
    created = webhook.create_namespaced_config_map(
        NAMESPACE, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=ledger))
    )
    created.data = {"charges.json": '{"charges": []}'}
    webhook.replace_namespaced_config_map(ledger, NAMESPACE, created)
    core_v1.create_namespaced_config_map(
        NAMESPACE, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=other))
    )
    try:
        existing = webhook.read_namespaced_config_map(other, NAMESPACE)  # reading stays open
        existing.data = {"config.yaml": "forged"}
        assert "may write only its quota ledgers" in refused(
            lambda: webhook.replace_namespaced_config_map(other, NAMESPACE, existing)
        )
        assert "cannot create resource" in refused(
            lambda: webhook.create_namespaced_config_map(
                "default", k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="migslice-quota-x"))
            )
        )
    finally:
        core_v1.delete_namespaced_config_map(other, NAMESPACE)
        core_v1.delete_namespaced_config_map(ledger, NAMESPACE)


def test_the_webhook_creates_only_migslices_claim_templates(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    """It may create a template in any namespace (a tenant's first sized pod needs one there):
    migslice's of one profile, and no other a pod could be pointed at."""
    token = service_account_token(
        control_plane, BASE / "webhook" / "rbac.yaml", NAMESPACE, "migslice-webhook"
    )
    kubeconfig = service_account_kubeconfig(
        control_plane, f"migslice-webhook-{uuid.uuid4().hex[:6]}", token
    )
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(str(kubeconfig), client_configuration=configuration)
    webhook = k8s.CustomObjectsApi(k8s.ApiClient(configuration))
    namespace = f"templates-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace)
    ours = migslice_claim_template(namespace, "1g.10gb")

    def create(body: dict[str, Any]) -> Any:
        return webhook.create_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaimtemplates", body
        )

    wide = copy.deepcopy(ours)
    wide["metadata"]["name"] = "gpu-anything"
    said = enforced(
        lambda: create(
            {**wide, "metadata": {**wide["metadata"], "name": f"x-{uuid.uuid4().hex[:6]}"}}
        )
    )
    assert "may create only the migslice ResourceClaimTemplate of a profile" in said, said
    shared = copy.deepcopy(ours)
    shared["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 7
    assert "may create only the migslice" in refused(lambda: create(shared))
    other = copy.deepcopy(ours)
    other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "gpu.nvidia.com"
    assert "may create only the migslice" in refused(lambda: create(other))
    create(ours)  # its own
    core_v1.delete_namespace(namespace)


def test_the_webhook_records_events_only_about_pods_and_tenant_policies(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    token = service_account_token(
        control_plane, BASE / "webhook" / "rbac.yaml", NAMESPACE, "migslice-webhook"
    )
    webhook = as_account(control_plane, "migslice-webhook", token)
    namespace = f"events-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace)
    node = {"apiVersion": "v1", "kind": "Node", "name": "gpu-x", "uid": "gpu-x"}
    said = enforced(lambda: webhook.create_namespaced_event("default", event(node)))
    assert "may record Events only about a Pod or a TenantPolicy, not about Node" in said, said
    pod = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": "p", "uid": "u"}
    webhook.create_namespaced_event(namespace, event(pod))  # the gate's
    secret = {"apiVersion": "v1", "kind": "Secret", "namespace": namespace, "name": "s"}
    assert "not about Secret" in refused(
        lambda: webhook.create_namespaced_event(namespace, event(secret))
    )
    policy = {"apiVersion": "migslice.io/v1alpha1", "kind": "TenantPolicy", "name": "t"}
    webhook.create_namespaced_event("default", event(policy))  # QuotaLedgerRebuilt's
    core_v1.delete_namespace(namespace)


def test_only_the_webhook_changes_a_pods_reservation(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, tmp_path: Path
) -> None:
    """A tenant who may update its namespace's pods changes their annotations, but not
    migslice.io/reservation, which names the admission the pod was charged under: not through
    the pod, its status (an update of pods/status keeps annotations changed) or a binding (a
    Binding's annotations are written onto its pod)."""
    control_plane.apply(BASE / "webhook" / "admission-policy.yaml")
    namespace = f"tenant-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace)
    account = "tenant-editor"
    rbac = tmp_path / "rbac.yaml"
    rbac.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": namespace},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": account, "namespace": namespace},
                    "rules": [
                        {
                            "apiGroups": [""],
                            # pods/status and pods/binding: a custom role may grant them
                            # (a tenant's own operator or scheduler), and each writes a pod's
                            # annotations too
                            "resources": ["pods", "pods/status", "pods/binding"],
                            "verbs": ["get", "create", "update", "patch"],
                        }
                    ],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": account, "namespace": namespace},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": account,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": account, "namespace": namespace}
                    ],
                },
            ]
        )
    )
    tenant = as_account(
        control_plane, account, service_account_token(control_plane, rbac, namespace, account)
    )
    notes = {"migslice.io/reservation": "uid-of-its-admission"}
    pod = {
        "metadata": {"name": "train", "annotations": notes},
        "spec": {"containers": [{"name": "c", "image": "train:1"}]},
    }
    core_v1.create_namespaced_pod(namespace, pod)  # as stored after the webhook
    try:
        said = enforced(
            lambda: tenant.patch_namespaced_pod(
                "train", namespace, annotate("migslice.io/reservation", uuid.uuid4().hex)
            )
        )
        assert "migslice.io/reservation of pod" in said and "webhook only" in said, said
        assert "webhook only" in refused(
            lambda: tenant.patch_namespaced_pod(
                "train", namespace, annotate("migslice.io/reservation", None)
            )
        )
        kept = core_v1.read_namespaced_pod("train", namespace).metadata.annotations
        assert "webhook only" in refused(
            lambda: tenant.patch_namespaced_pod_status(
                "train", namespace, annotate("migslice.io/reservation", uuid.uuid4().hex)
            )
        )
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "train", "annotations": {"migslice.io/reservation": "x"}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-1"},
        }
        assert "webhook only" in refused(
            lambda: tenant.create_namespaced_pod_binding(
                "train", namespace, binding, _preload_content=False
            )
        )
        stored = core_v1.read_namespaced_pod("train", namespace)
        assert stored.metadata.annotations == kept and not stored.spec.node_name
        tenant.patch_namespaced_pod("train", namespace, annotate("team.example.com/owner", "a"))
    finally:
        core_v1.delete_namespace(namespace)


def test_the_certificate_jobs_write_only_the_four_certificates(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    token = service_account_token(
        control_plane, BASE / "certs" / "rbac.yaml", NAMESPACE, "migslice-certs"
    )
    certs = as_account(control_plane, "migslice-certs", token)

    def secret(name: str = "", generate: str = "") -> k8s.V1Secret:
        return k8s.V1Secret(
            metadata=k8s.V1ObjectMeta(name=name or None, generate_name=generate or None),
            string_data={"x": "y"},
        )

    said = enforced(
        lambda: certs.create_namespaced_secret(NAMESPACE, secret(generate="e2e-not-a-cert-"))
    )
    assert "migslice-certs may write only the certificates of migslice-webhook" in said
    name = "migslice-extender-client"
    try:
        certs.create_namespaced_secret(NAMESPACE, secret(name))
        certs.replace_namespaced_secret(
            name, NAMESPACE, certs.read_namespaced_secret(name, NAMESPACE)
        )
    finally:
        core_v1.delete_namespaced_secret(name, NAMESPACE)


@contextlib.contextmanager
def gate_lease_held(control_plane: ControlPlane) -> Iterator[None]:
    """The admission gate's Lease held by this test, so that no webhook of the session (the
    ``webhook`` fixture's, if an earlier module started it) acts as the gate reconciler
    meanwhile: it would let a gated pod of a namespace labelled ``migslice.io/admission=disabled``
    go, as it should, under the test's feet. Its elector asks the Lease before every round
    (every 2 s), so one round at most was under way when the Lease changed hands."""
    leases = k8s.CoordinationV1Api(control_plane.api_client())
    now = datetime.datetime.now(datetime.UTC)
    spec = {"holderIdentity": f"e2e-{uuid.uuid4().hex[:6]}", "leaseDurationSeconds": 3600,
            "acquireTime": now, "renewTime": now}  # fmt: skip
    try:
        lease = leases.read_namespaced_lease(GATE_LEASE_NAME, SYSTEM_NAMESPACE)
        lease.spec = k8s.V1LeaseSpec(**spec)
        leases.replace_namespaced_lease(GATE_LEASE_NAME, SYSTEM_NAMESPACE, lease)
        time.sleep(3)  # a round already under way ends
    except k8s.ApiException as error:
        if error.status != 404:
            raise
        body = {"metadata": {"name": GATE_LEASE_NAME}, "spec": spec}
        leases.create_namespaced_lease(SYSTEM_NAMESPACE, body)
    try:
        yield
    finally:
        leases.delete_namespaced_lease(GATE_LEASE_NAME, SYSTEM_NAMESPACE)


def test_the_webhooks_pod_writes_are_an_admission_and_no_more(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    """The gate reconciler patches pods cluster-wide (any namespace may be fail-open): it may
    remove the gate migslice.io/admission and write migslice.io/ annotations, never labels,
    images or another gate."""
    token = service_account_token(
        control_plane, BASE / "webhook" / "rbac.yaml", NAMESPACE, "migslice-webhook"
    )
    webhook = as_account(control_plane, "migslice-webhook", token)
    namespace = f"e2e-gated-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace, {"migslice.io/admission": "disabled"})
    ensure_namespace(core_v1, SYSTEM_NAMESPACE)
    with gate_lease_held(control_plane):
        _gated_pod_writes(core_v1, webhook, namespace)


def _gated_pod_writes(core_v1: k8s.CoreV1Api, webhook: k8s.CoreV1Api, namespace: str) -> None:
    pod = core_v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "gated", "labels": {"app": "train"}},
            "spec": {
                "schedulingGates": [{"name": "migslice.io/admission"}, {"name": "other/gate"}],
                "containers": [{"name": "main", "image": "cuda:12"}],
            },
        },
    )
    try:
        assert "may not change a pod's labels" in enforced(
            lambda: webhook.patch_namespaced_pod(
                "gated", namespace, label("app", uuid.uuid4().hex[:6])
            )
        )
        assert "may not change a pod's images" in refused(
            lambda: webhook.patch_namespaced_pod(
                "gated",
                namespace,
                {"spec": {"containers": [{"name": "main", "image": "forged:1"}]}},
            )
        )
        # a dangling owner has the garbage collector delete the pod; a finalizer holds it
        dangling = {"kind": "Job", "apiVersion": "batch/v1", "name": "x", "uid": str(uuid.uuid4())}
        for forged in ({"ownerReferences": [dangling]}, {"finalizers": ["example.com/hold"]}):
            assert "may not change a pod's owners or finalizers" in refused(
                lambda forged=forged: webhook.patch_namespaced_pod(
                    "gated", namespace, {"metadata": forged}
                )
            )
        for status in ({"nominatedNodeName": "gpu-1"}, {"message": "forged", "reason": "X"}):
            assert "migslice-webhook" in refused(
                lambda status=status: webhook.patch_namespaced_pod_status(
                    "gated", namespace, {"status": status}
                )
            )
        only_other = [{"op": "replace", "path": "/spec/schedulingGates",
                       "value": [{"name": "migslice.io/admission"}]}]  # fmt: skip
        assert "may remove only the scheduling gate migslice.io/admission" in refused(
            lambda: webhook.patch_namespaced_pod("gated", namespace, only_other)
        )
        admit = [
            {"op": "replace", "path": "/spec/schedulingGates", "value": [{"name": "other/gate"}]},
            {"op": "add", "path": "/metadata/annotations",
             "value": {"migslice.io/tenant": "team-a"}},
        ]  # fmt: skip
        webhook.patch_namespaced_pod("gated", namespace, admit)  # a list: a JSON Patch
        stored = core_v1.read_namespaced_pod("gated", namespace)
        assert [g.name for g in stored.spec.scheduling_gates] == ["other/gate"]
        assert stored.metadata.annotations["migslice.io/tenant"] == "team-a"
        assert pod.metadata.uid == stored.metadata.uid
    finally:
        core_v1.delete_namespaced_pod("gated", namespace, grace_period_seconds=0)


def test_the_extender_creates_and_deletes_only_its_steer_rules(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    token = service_account_token(
        control_plane, BASE / "extender" / "rbac.yaml", NAMESPACE, "migslice-extender"
    )
    extender = k8s.CustomObjectsApi(
        as_account(control_plane, "migslice-extender", token).api_client
    )
    admin = k8s.CustomObjectsApi(core_v1.api_client)
    dra = ("resource.k8s.io", "v1", "devicetaintrules")
    pool = f"node-{uuid.uuid4().hex[:6]}"

    def evicting() -> Any:
        rule = steer_rule(pool, f"gpu-0-mig-1g10gb-19-{uuid.uuid4().hex[:4]}", "1g.10gb")
        rule["spec"]["taint"]["effect"] = "NoExecute"
        return extender.create_cluster_custom_object(*dra, rule)

    said = enforced(evicting)
    assert "may create only its steer rules" in said
    # Inside its scope: a steer rule, created and deleted.
    mine = steer_rule(pool, "gpu-0-mig-1g10gb-19-0", "1g.10gb")
    extender.create_cluster_custom_object(*dra, mine)
    try:
        extender.delete_cluster_custom_object(*dra, mine["metadata"]["name"])
    except k8s.ApiException as error:
        # A running extender's steer deletes a rule of a pool no node has, as its own.
        assert error.status == 404, error.body
    # Outside it: another name, another key, an admin's rule.
    renamed = steer_rule(pool, "gpu-0-mig-1g10gb-19-1", "1g.10gb")
    renamed["metadata"]["name"] = f"health-{pool}"
    assert "only its steer rules" in refused(
        lambda: extender.create_cluster_custom_object(*dra, renamed)
    )
    rekeyed = steer_rule(pool, "gpu-0-mig-1g10gb-19-2", "1g.10gb")
    rekeyed["spec"]["taint"]["key"] = "example.com/unhealthy"
    assert "only its steer rules" in refused(
        lambda: extender.create_cluster_custom_object(*dra, rekeyed)
    )
    admins = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"maintenance-{pool}"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": pool},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    admin.create_cluster_custom_object(*dra, admins)
    try:
        assert "delete only rules named migslice-steer-*" in refused(
            lambda: extender.delete_cluster_custom_object(*dra, admins["metadata"]["name"])
        )
    finally:
        admin.delete_cluster_custom_object(*dra, admins["metadata"]["name"])
    # A steer rule an admin edited (effect None) is still the extender's to delete, so that
    # the steer can write it again as its own.
    edited = steer_rule(pool, "gpu-0-mig-1g10gb-19-3", "1g.10gb")
    edited["spec"]["taint"]["effect"] = "None"
    admin.create_cluster_custom_object(*dra, edited)
    try:
        extender.delete_cluster_custom_object(*dra, edited["metadata"]["name"])
    except k8s.ApiException as error:
        assert error.status == 404, error.body  # a running extender's steer deleted it first


def test_the_certificate_jobs_change_only_the_ca_bundle_of_the_webhook_configurations(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    """The certificate Jobs' ClusterRole grants ``patch`` of the webhook configurations named
    migslice-webhook, which RBAC cannot narrow to ``caBundle``: without a policy the Jobs'
    ServiceAccount (kept for good by ``kubectl apply -k manifests``, where Helm's hook
    deletion does not run) could set ``failurePolicy: Ignore``, a ``namespaceSelector`` that
    matches nothing or another ``clientConfig``, switching migslice's admission off for every
    tenant. It may put a CA into ``caBundle`` and nothing else."""
    token = service_account_token(
        control_plane, BASE / "certs" / "rbac.yaml", NAMESPACE, "migslice-certs"
    )
    admission = k8s.AdmissionregistrationV1Api(core_v1.api_client)
    certs = k8s.AdmissionregistrationV1Api(
        as_account(control_plane, "migslice-certs", token).api_client
    )
    name = "migslice-webhook"
    created = False
    original = None  # the caBundle of the stack's configuration, put back afterwards
    try:
        found = admission.read_mutating_webhook_configuration(name)
        original = found.webhooks[0].client_config.ca_bundle
    except k8s.ApiException as error:
        assert error.status == 404, error.body
        # Calls nothing this session creates (no object carries the label it selects).
        admission.create_mutating_webhook_configuration(
            {
                "metadata": {"name": name},
                "webhooks": [
                    {
                        "name": "pods.webhook.migslice.io",
                        "admissionReviewVersions": ["v1"],
                        "sideEffects": "NoneOnDryRun",
                        "failurePolicy": "Fail",
                        "clientConfig": {
                            "service": {"name": name, "namespace": NAMESPACE, "path": "/mutate"}
                        },
                        "objectSelector": {"matchLabels": {"e2e.migslice.io/never": "x"}},
                        "rules": [
                            {
                                "operations": ["CREATE"],
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods"],
                            }
                        ],
                    }
                ],
            }
        )
        created = True
    try:

        def replace(field: str, value: Any) -> Callable[[], Any]:
            ops = [{"op": "replace", "path": f"/webhooks/0/{field}", "value": value}]
            return lambda: certs.patch_mutating_webhook_configuration(name, ops)

        bypasses = [
            replace("failurePolicy", "Ignore"),
            replace("namespaceSelector", {"matchLabels": {"e2e.migslice.io/nowhere": "x"}}),
            # the whole clientConfig: the configuration may carry a url (the e2e stack's)
            replace(
                "clientConfig",
                {"service": {"name": "elsewhere", "namespace": "default", "path": "/x"}},
            ),
            replace("rules", []),
        ]
        said = enforced(bypasses[0])
        assert "migslice-certs may change only the caBundle" in said
        for bypass in bypasses[1:]:
            assert "migslice-certs may change only the caBundle" in refused(bypass)
        # Inside its scope: the caBundle, as `migslice certs --webhook-configuration` writes it.
        bundle = base64.b64encode(f"e2e {uuid.uuid4().hex}".encode()).decode()
        certs.patch_mutating_webhook_configuration(
            name,
            [
                {"op": "test", "path": "/webhooks/0/name", "value": "pods.webhook.migslice.io"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": bundle},
            ],
        )
        stored = admission.read_mutating_webhook_configuration(name)
        assert stored.webhooks[0].failure_policy == "Fail"
    finally:
        if created:
            admission.delete_mutating_webhook_configuration(name)
        elif original is not None:  # the other scenarios call the webhook through it
            path = "/webhooks/0/clientConfig/caBundle"
            admission.patch_mutating_webhook_configuration(
                name, [{"op": "add", "path": path, "value": original}]
            )


def test_the_webhooks_status_writes_are_its_condition_and_no_more(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api
) -> None:
    """The gate reconciler may patch pods/status of any pod: only its condition
    migslice.io/Admitted, never another status field (container statuses and their readiness,
    the pod's IPs, its start time, the resources kube-scheduler and the kubelet account)."""
    token = service_account_token(
        control_plane, BASE / "webhook" / "rbac.yaml", NAMESPACE, "migslice-webhook"
    )
    webhook = as_account(control_plane, "migslice-webhook", token)
    namespace = f"e2e-status-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace, {"migslice.io/admission": "disabled"})
    core_v1.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "running"},
            "spec": {"nodeName": "gpu-x", "containers": [{"name": "main", "image": "cuda:12"}]},
        },
    )
    core_v1.patch_namespaced_pod_status(
        "running",
        namespace,
        {"status": {"phase": "Running", "podIP": "10.1.2.3", "podIPs": [{"ip": "10.1.2.3"}]}},
    )
    try:
        running = {
            "name": "main",
            "image": "cuda:12",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }
        forged = [
            {"containerStatuses": [running]},
            {"podIPs": [{"ip": "10.1.2.3"}, {"ip": "fd00::66"}]},
            {"startTime": "2026-01-01T00:00:00Z"},
        ]
        said = enforced(
            lambda: webhook.patch_namespaced_pod_status("running", namespace, {"status": forged[0]})
        )
        assert "may set only a pod's condition migslice.io/Admitted" in said
        for status in forged[1:]:
            assert "may set only a pod's condition migslice.io/Admitted" in refused(
                lambda status=status: webhook.patch_namespaced_pod_status(
                    "running", namespace, {"status": status}
                )
            )
        condition = {"type": "migslice.io/Admitted", "status": "False", "reason": "E2E"}
        webhook.patch_namespaced_pod_status(
            "running", namespace, {"status": {"conditions": [condition]}}
        )
    finally:
        core_v1.delete_namespaced_pod("running", namespace, grace_period_seconds=0)


def test_only_who_may_update_tenant_policies_takes_a_namespace_out_of_migslice(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, tmp_path: Path
) -> None:
    """A namespace self-service role (create and label namespaces, nothing of migslice's):
    its namespaces come and go and take any other label, but not migslice.io/admission or
    migslice.io/outage, which take a namespace out of admission or make it fail-open, not
    even through the Namespace's status or finalize (an update of either keeps label changes).
    A cluster admin (who may update TenantPolicies) sets them."""
    control_plane.apply(BASE / "webhook" / "admission-policy.yaml")
    account = f"ns-self-service-{uuid.uuid4().hex[:6]}"
    rbac = tmp_path / "rbac.yaml"
    rbac.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": account, "namespace": "default"},
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": account},
                    "rules": [
                        {
                            "apiGroups": [""],
                            # with the subresources whose updates keep label changes
                            "resources": ["namespaces", "namespaces/status", "namespaces/finalize"],
                            "verbs": ["get", "create", "update", "patch"],
                        }
                    ],
                },
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": account},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": account,
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": account, "namespace": "default"}
                    ],
                },
            ]
        )
    )
    tenant = as_account(
        control_plane, account, service_account_token(control_plane, rbac, "default", account)
    )
    name = f"self-served-{uuid.uuid4().hex[:6]}"

    def opt_out() -> Any:
        labels = {"migslice.io/admission": "disabled"}
        body = {"metadata": {"name": f"{name}-{uuid.uuid4().hex[:4]}", "labels": labels}}
        return tenant.create_namespace(body)

    said = enforced(opt_out)
    assert "only who may update TenantPolicies may set or change the label" in said, said
    assert "migslice.io/admission" in said
    tenant.create_namespace({"metadata": {"name": name, "labels": {"team": "a"}}})
    try:
        tenant.patch_namespace(name, label("team", "b"))  # other labels: as before
        said = refused(lambda: tenant.patch_namespace(name, label("migslice.io/outage", "open")))
        assert "migslice.io/outage" in said and f"of Namespace {name}" in said
        core_v1.patch_namespace(name, label("migslice.io/outage", "open"))  # a cluster admin
        assert "migslice.io/outage" in refused(
            lambda: tenant.patch_namespace(name, label("migslice.io/outage", None))
        )
        opted_out = label("migslice.io/admission", "disabled")
        assert "migslice.io/admission" in refused(
            lambda: tenant.patch_namespace_status(name, opted_out)
        )
        stored = tenant.read_namespace(name)
        stored.metadata.labels["migslice.io/admission"] = "disabled"
        assert "migslice.io/admission" in refused(
            lambda: tenant.replace_namespace_finalize(name, stored)
        )
        labels = core_v1.read_namespace(name).metadata.labels
        assert "migslice.io/admission" not in labels and labels["migslice.io/outage"] == "open"
    finally:
        core_v1.delete_namespace(name)


def test_the_cleanup_job_deletes_only_steer_rules_and_only_removes_migslices_node_keys(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    nodes: tuple[str, str],
    tmp_path: Path,
) -> None:
    """The chart's post-delete hook (``migslice cleanup``): its RBAC and policies, from the
    chart (manifests/ has no uninstall hook), hold it to deleting the steer's rules and to
    removing migslice's node keys."""
    folder = tmp_path / "cleanup"
    folder.mkdir()
    documents = [
        d
        for d in render_chart(DEFAULT_BIN_DIR / "helm")
        if d["metadata"]["name"].startswith("migslice-cleanup")
    ]
    for name, kinds in (
        ("rbac.yaml", {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}),
        (
            "admission-policy.yaml",
            {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
        ),
    ):
        chosen = [d for d in documents if d["kind"] in kinds]
        (folder / name).write_text(yaml.safe_dump_all(chosen))
    token = service_account_token(
        control_plane, folder / "rbac.yaml", NAMESPACE, "migslice-cleanup"
    )
    cleanup = as_account(control_plane, "migslice-cleanup", token)
    rules = k8s.CustomObjectsApi(cleanup.api_client)
    admin = k8s.CustomObjectsApi(core_v1.api_client)
    dra = ("resource.k8s.io", "v1", "devicetaintrules")
    pool = f"node-{uuid.uuid4().hex[:6]}"
    made: list[str] = []

    def made_by_admin(rule: dict[str, Any]) -> str:
        admin.create_cluster_custom_object(*dra, rule)
        made.append(rule["metadata"]["name"])
        return str(rule["metadata"]["name"])

    def an_admins_rule() -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": f"maintenance-{pool}-{uuid.uuid4().hex[:6]}"},
            "spec": {
                "deviceSelector": {"driver": "gpu.nvidia.com", "pool": pool},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
            },
        }

    unlabelled = steer_rule(pool, "gpu-0-mig-1g10gb-19-9", "1g.10gb")
    del unlabelled["metadata"]["labels"]
    try:
        said = enforced(
            lambda: rules.delete_cluster_custom_object(*dra, made_by_admin(an_admins_rule()))
        )
        assert "migslice-cleanup may only delete the steer rules" in said
        name = made_by_admin(unlabelled)
        assert "may only delete the steer rules" in refused(
            lambda: rules.delete_cluster_custom_object(*dra, name)
        )
    finally:
        for name in made:
            try:
                admin.delete_cluster_custom_object(*dra, name)
            except k8s.ApiException as error:
                assert error.status == 404, error.body  # deleted before the policy held
    mine = steer_rule(pool, "gpu-0-mig-1g10gb-19-8", "1g.10gb")
    admin.create_cluster_custom_object(*dra, mine)
    try:
        rules.delete_cluster_custom_object(*dra, mine["metadata"]["name"])
    except k8s.ApiException as error:
        assert error.status == 404, error.body  # a running extender's steer deleted it first
    node, _ = nodes
    core_v1.patch_node(
        node,
        {
            "metadata": {
                "labels": {
                    "migslice.io/repartition-quarantine": "timeout",
                    "nvidia.com/mig.config": "all-1g.10gb",
                },
                "annotations": {"migslice.io/gpu-layout": "{}", "example.com/note": "x"},
            }
        },
    )
    assert "may only remove the node labels" in refused(
        lambda: cleanup.patch_node(node, label("nvidia.com/mig.config", None))
    )
    assert "may only remove the node annotations" in refused(
        lambda: cleanup.patch_node(node, annotate("example.com/note", None))
    )
    assert "may only remove the node labels" in refused(
        lambda: cleanup.patch_node(node, label("migslice.io/repartition-quarantine", "x"))
    )
    assert "may only remove the node annotations" in refused(
        lambda: cleanup.patch_node(node, annotate("migslice.io/carve", "{}"))
    )
    cleanup.patch_node(node, label("migslice.io/repartition-quarantine", None))
    cleanup.patch_node(node, annotate("migslice.io/gpu-layout", None))
    after = core_v1.read_node(node).metadata
    assert "migslice.io/repartition-quarantine" not in (after.labels or {})
    assert "migslice.io/gpu-layout" not in (after.annotations or {})
