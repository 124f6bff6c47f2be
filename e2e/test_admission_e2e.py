"""Admission through the real kube-apiserver: our webhook, our CRD, the shipped configurations."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from harness.api import ensure_namespace, wait_for
from harness.builders import make_pod, make_policy
from harness.stack import MANIFESTS, Server, load_manifests

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"


def policy(name: str, namespaces: list[str], **spec: Any) -> dict[str, Any]:
    """A hardware-isolated policy with two sizes; ``spec`` keys replace or add to it."""
    fields: dict[str, Any] = {
        "isolation": "hardware",
        "tiers": ["mig"],
        "sizes": {
            "small": {"memory": "10Gi", "computeSlices": 1},
            "medium": {"memory": "20Gi", "computeSlices": 2},
        },
        "defaultSize": "small",
    }
    return make_policy(name, namespaces=namespaces, **{**fields, **spec})


def gpu_pod(size: str | None = None, **annotations: str) -> dict[str, Any]:
    """A pod as a team writes it: a size annotation, no GPU resource, no scheduler."""
    notes = dict(annotations)
    if size:
        notes["migslice.io/gpu-size"] = size
    return make_pod(
        None,
        generate_name="train-",
        namespace=None,
        stored=False,
        tenant=None,
        annotations=notes,
        limits={},
        scheduler_name=None,
        restart_policy=None,
        with_type_meta=True,
    )


def api_message(error: k8s.ApiException) -> str:
    """The message kubectl prints for a failed request (the Status object's message)."""
    return str(json.loads(error.body)["message"])


@pytest.fixture
def custom(k8s_api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(k8s_api)


@pytest.fixture
def tenant(
    webhook: Server, custom: k8s.CustomObjectsApi, tenant_namespace: str
) -> Iterator[Callable[..., str]]:
    """Factory: a TenantPolicy for the test's namespace; deleted afterwards."""
    created: list[str] = []

    def make(**spec: Any) -> str:
        name = f"team-{uuid.uuid4().hex[:6]}"
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, policy(name, [tenant_namespace], **spec)
        )
        created.append(name)
        return name

    yield make
    for name in created:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def create_pod_when_webhook_knows(
    core_v1: k8s.CoreV1Api, tenant_namespace: str, body: dict[str, Any]
) -> k8s.V1Pod:
    """Create a pod, retrying while the webhook's caches have not yet seen the new policy/node."""

    def attempt() -> k8s.V1Pod | None:
        try:
            return core_v1.create_namespaced_pod(tenant_namespace, body)
        except k8s.ApiException as error:
            message = api_message(error)
            if error.status == 403 and (
                "no TenantPolicy" in message or "products in the cluster: none" in message
            ):
                return None
            raise

    created: k8s.V1Pod = wait_for("the webhook to see the new TenantPolicy", attempt, 15)
    return created


def test_a_sized_pod_is_mutated_and_bound_where_its_slice_is_free(
    tenant: Callable[..., str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
    migslice_scheduler: object,
) -> None:
    full = gpu_node({"nvidia.com/mig-1g.10gb": 7})
    free = gpu_node({"nvidia.com/mig-2g.20gb": 3, "nvidia.com/mig-1g.10gb": 1})
    name = tenant()
    pod = create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("medium"))
    assert pod.metadata.name.startswith("train-")
    limits = pod.spec.containers[0].resources.limits
    assert limits == {"nvidia.com/mig-2g.20gb": "1"}
    assert pod.metadata.annotations["migslice.io/tenant"] == name
    assert pod.metadata.annotations["migslice.io/profile"] == "2g.20gb"
    assert pod.metadata.annotations["migslice.io/policy"].startswith(f"{name}@")
    assert pod.spec.scheduler_name == "migslice-scheduler"

    bound = wait_for(
        "the pod to be bound",
        lambda: core_v1.read_namespaced_pod(pod.metadata.name, tenant_namespace).spec.node_name,
        30,
    )
    assert bound == free.metadata.name
    assert bound != full.metadata.name


def test_a_quota_denial_reaches_the_user_as_the_api_error(
    tenant: Callable[..., str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({"nvidia.com/mig-2g.20gb": 3})
    name = tenant(quota={"computeSlices": 2})
    create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("medium"))
    with pytest.raises(k8s.ApiException) as denied:
        core_v1.create_namespaced_pod(tenant_namespace, gpu_pod("medium"))
    assert denied.value.status == 403
    message = api_message(denied.value)
    assert message.startswith('admission webhook "pods.webhook.migslice.io" denied the request: ')
    assert f'tenant "{name}" would use 4 compute slices' in message
    assert "allows 2 (spec.quota.computeSlices)" in message


def test_the_policy_status_shows_the_admitted_usage_against_the_quota(
    tenant: Callable[..., str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
    custom: k8s.CustomObjectsApi,
) -> None:
    gpu_node({"nvidia.com/mig-2g.20gb": 3})
    name = tenant(quota={"computeSlices": 8})
    create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("medium"))

    def current_status() -> dict[str, Any] | None:
        policy = custom.get_cluster_custom_object_status(GROUP, VERSION, PLURAL, name)
        status = policy.get("status") or {}
        if status.get("quotaSummary") != "2/8 compute slices":
            return None
        if status.get("observedGeneration") != policy["metadata"]["generation"]:
            return None
        return dict(status)

    status = wait_for("the TenantPolicy status to show the pod", current_status, 15)
    assert status["used"] == {
        "instances": 1,
        "computeSlices": 2,
        "memorySlices": 2,
        "profiles": {"2g.20gb": 1},
    }
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["Ready"]["reason"] == "Active"
    assert conditions["QuotaExhausted"]["status"] == "False"
    assert conditions["QuotaExhausted"]["message"] == f'tenant "{name}" uses 2/8 compute slices'


def test_an_unknown_size_is_refused_with_the_sizes_that_exist(
    tenant: Callable[..., str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({"nvidia.com/mig-1g.10gb": 7})
    tenant()
    create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("small"))
    with pytest.raises(k8s.ApiException) as denied:
        core_v1.create_namespaced_pod(tenant_namespace, gpu_pod("huge"))
    message = api_message(denied.value)
    assert "huge" in message
    assert "medium" in message and "small" in message


def test_an_invalid_policy_is_refused_by_the_schema_and_by_cel(
    webhook: Server, custom: k8s.CustomObjectsApi
) -> None:
    bad_enum = policy("bad-enum", ["x"], isolation="bulletproof")
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad_enum)
    assert refused.value.status == 422
    assert 'spec.isolation: Unsupported value: "bulletproof"' in api_message(refused.value)

    bad_default = policy("bad-default", ["x"], defaultSize="gigantic")
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad_default)
    assert refused.value.status == 422
    assert "spec.defaultSize must name one of spec.sizes" in api_message(refused.value)

    # An empty list is present to CEL's has(): [] namespaces alone select nothing.
    no_namespaces = policy("no-namespaces", [])
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, no_namespaces)
    assert refused.value.status == 422
    assert "spec.namespaces or spec.namespaceSelector must select" in api_message(refused.value)

    # A node selector value every pod of the tenant would carry and be refused for.
    bad_pool = policy("bad-pool", ["x"], nodeSelector={"pool": "gpu pool a"})
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, bad_pool)
    assert refused.value.status == 422
    assert "spec.nodeSelector.pool" in api_message(refused.value)


def test_an_invalid_policy_is_refused_by_the_validating_webhook(
    webhook: Server, custom: k8s.CustomObjectsApi, core_v1: k8s.CoreV1Api
) -> None:
    impossible = policy(
        "too-big", ["too-big-ns"], sizes={"huge": {"memory": "4000Gi"}}, defaultSize="huge"
    )
    with pytest.raises(k8s.ApiException) as refused:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, impossible)
    message = api_message(refused.value)
    assert 'admission webhook "tenantpolicies.webhook.migslice.io" denied the request' in message
    assert "huge" in message

    ensure_namespace(core_v1, "shared-ns")
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy("first", ["shared-ns"]))
    try:
        second = policy("second", ["shared-ns"])

        def refused_for_overlap() -> str:
            try:
                custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, second)
            except k8s.ApiException as error:
                return api_message(error)
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "second")
            return ""

        message = wait_for("the overlap to be refused", refused_for_overlap, 15)
        assert "shared-ns" in message and "first" in message
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "first")


def test_a_policy_in_a_namespace_conflict_can_be_annotated_and_deleted_with_a_finalizer(
    webhook: Server, custom: k8s.CustomObjectsApi, core_v1: k8s.CoreV1Api
) -> None:
    """A conflict that arises after both policies were admitted (a namespace labelled into
    another policy's selector) keeps /validate refusing spec changes, but not an UPDATE that
    leaves the spec alone. Measured before: the annotation was refused, and so was the
    removal of the finalizer of a policy being deleted (the garbage collector's patch in a
    foreground deletion): the policy stayed Terminating, still selecting the namespace."""
    namespace = f"conflict-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core_v1, namespace)
    by_label = policy(f"{namespace}-a", [], namespaceSelector={"matchLabels": {"team": namespace}})
    del by_label["spec"]["namespaces"]
    by_name = policy(f"{namespace}-b", [namespace])
    name = by_name["metadata"]["name"]
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, by_label)
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, by_name)
    try:
        core_v1.patch_namespace(namespace, {"metadata": {"labels": {"team": namespace}}})

        tries = itertools.cycle(range(2, 10))

        def refused_for_the_conflict() -> str:
            # a new value each try: a try admitted before the webhook saw the label would
            # leave every later same-value patch an UPDATE with the spec unchanged, allowed
            try:
                custom.patch_cluster_custom_object(
                    GROUP, VERSION, PLURAL, name, {"spec": {"maxSlicesPerPod": next(tries)}}
                )
            except k8s.ApiException as error:
                return api_message(error)
            return ""

        message = wait_for("the webhook to see the conflict", refused_for_the_conflict, 15)
        assert f'namespace {namespace} already belongs to TenantPolicy "{namespace}-a"' in message

        hold = {"metadata": {"annotations": {"note": "moving"}, "finalizers": ["e2e/hold"]}}
        custom.patch_cluster_custom_object(GROUP, VERSION, PLURAL, name, hold)
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        custom.patch_cluster_custom_object(
            GROUP, VERSION, PLURAL, name, {"metadata": {"finalizers": None}}
        )
        with pytest.raises(k8s.ApiException) as gone:
            custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        assert gone.value.status == 404
    finally:
        for left in (f"{namespace}-a", name):
            try:
                custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, left)
            except k8s.ApiException as error:
                if error.status != 404:
                    raise


def test_with_the_webhook_down_gpu_pods_are_refused_and_others_pass(
    webhook: Server,
    tenant: Callable[..., str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({"nvidia.com/mig-1g.10gb": 7})
    tenant()
    create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("small"))
    webhook.stop()
    try:
        with pytest.raises(k8s.ApiException) as refused:
            core_v1.create_namespaced_pod(tenant_namespace, gpu_pod("small"))
        assert refused.value.status == 500
        message = api_message(refused.value)
        assert 'failed calling webhook "pods.webhook.migslice.io"' in message

        direct = gpu_pod()
        direct["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
        with pytest.raises(k8s.ApiException):
            core_v1.create_namespaced_pod(tenant_namespace, direct)

        plain = core_v1.create_namespaced_pod(tenant_namespace, gpu_pod())
        assert plain.metadata.annotations is None
        assert plain.spec.containers[0].resources.limits is None
    finally:
        webhook.start()


def test_every_shipped_manifest_is_accepted_by_the_api_server(
    webhook: Server,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    """Server-side dry-run of every object in manifests/ (example pods after their policies).

    cert-manager's kinds are the one exception: cert-manager is not installed here.
    """
    from kubernetes.dynamic import DynamicClient

    dynamic = DynamicClient(k8s_api)
    documents = [
        (path, document)
        for path in sorted(MANIFESTS.rglob("*.yaml"))
        if path.name != "kustomization.yaml"
        for document in load_manifests(path)
    ]
    for _, document in documents:
        namespace = document["metadata"].get("namespace")
        if namespace:
            ensure_namespace(core_v1, namespace)

    def dry_run(path: Path, document: dict[str, Any]) -> str:
        if document["kind"].endswith("WebhookConfiguration"):
            # The live ones point at the test's URL; apply would merge url and service.
            document = {**document, "metadata": {**document["metadata"], "name": "dry-run"}}
        resource = dynamic.resources.get(api_version=document["apiVersion"], kind=document["kind"])
        kwargs: dict[str, Any] = {
            "dry_run": "All",
            "field_manager": "e2e-dry-run",
            "force_conflicts": True,
        }
        if resource.namespaced:
            kwargs["namespace"] = document["metadata"].get("namespace", "migslice-system")
        try:
            if "name" in document["metadata"]:
                dynamic.server_side_apply(resource, body=document, **kwargs)
            else:  # generateName: only create can name it
                del kwargs["force_conflicts"]
                dynamic.create(resource, body=document, **kwargs)
        except k8s.ApiException as error:
            return f"{path.relative_to(MANIFESTS)} {document['kind']}: {api_message(error)}"
        return ""

    skipped, checked = [], 0
    pods = [(p, d) for p, d in documents if d["kind"] == "Pod"]
    for path, document in documents:
        if document["kind"] == "Pod":
            continue
        if document["apiVersion"].startswith("cert-manager.io/"):
            skipped.append(document["kind"])
            continue
        problem = dry_run(path, document)
        assert not problem, problem
        checked += 1

    gpu_node({"nvidia.com/mig-2g.20gb": 3, "nvidia.com/mig-1g.10gb": 1})
    examples = [d for _, d in documents if d["kind"] == "TenantPolicy"]
    for example in examples:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, example)
    try:
        for path, document in pods:
            problems: list[str] = []

            def passes(
                path: Path = path, document: dict[str, Any] = document, seen: list[str] = problems
            ) -> bool:
                seen.append(dry_run(path, document))
                return not seen[-1]

            try:
                wait_for(f"{path.name} to pass the webhook", passes, 15)
            except TimeoutError:
                pytest.fail(problems[-1])
            checked += 1
    finally:
        for example in examples:
            custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, example["metadata"]["name"])
    assert sorted(set(skipped)) == ["Certificate", "Issuer"]
    assert checked >= 15
