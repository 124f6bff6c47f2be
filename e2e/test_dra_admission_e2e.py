"""Tenant policy on DRA, against the real kube-apiserver and kube-scheduler (v1.37.2) with
migslice's webhook and extender, the fake NVIDIA DRA driver (harness/dra_driver.py) publishing
DynamicMIG A100-80GB and H100-80GB nodes without GPU Feature Discovery labels, and a fake
resourceclaim controller (harness/claim_controller.py):

* kube-apiserver enforces the CRD's CEL rule on ``spec.deviceAPI``;
* a sized pod of a ``deviceAPI: ResourceClaim`` tenant gets a claim from migslice's template
  (created by the webhook), charged at its CREATE, allocated on a DRA node;
* a pod asking for ``nvidia.com/mig-1g.10gb`` lands on a DRA node through migslice's
  DeviceClass (kube-scheduler's ``<pod>-extended-resources-*`` claim), charged once;
* a tenant's own claims are denied by profile, by isolation (an MPS config) and by quota;
* three webhook replicas, one SIGKILLed in a burst of claim creates: never a claim over quota,
  exactly the quota once the dead replica's charges are settled.

Run: MIGSLICE_E2E_BIN=... .venv/bin/pytest e2e/test_dra_admission_e2e.py -m e2e -p no:cacheprovider
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import api_message, gpu_pod, policy
from e2e.test_install_e2e import fresh_workdir
from harness import dra_slices
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.claim_controller import FakeClaimController
from harness.controlplane import ControlPlane
from harness.dra_driver import FakeDraDriver, ensure_mig_class, settled, steer_rules
from harness.faults import Balancer, is_webhook_unavailable, kill_tree
from harness.image import Image
from harness.stack import (
    BASE,
    Server,
    load_manifests,
    migslice_server,
    tls_bundle,
    webhook_configurations,
)

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"
DRA = ("resource.k8s.io", "v1")


def install_classes(control_plane: ControlPlane) -> None:
    """migslice's DeviceClasses as the chart renders them, and NVIDIA's mig.nvidia.com."""
    control_plane.apply(BASE / "dra" / "deviceclasses.yaml")
    ensure_mig_class(k8s.CustomObjectsApi(control_plane.api_client()))


@pytest.fixture(scope="module")
def device_classes(control_plane: ControlPlane) -> Iterator[None]:
    """The classes for this module's scenarios, removed afterwards: with a class naming
    ``nvidia.com/mig-3g.40gb``, kube-scheduler reports a device-plugin node without that
    resource as "cannot allocate all claims" rather than "Insufficient ...", which other
    modules' scenarios read."""
    install_classes(control_plane)
    yield
    objects = k8s.CustomObjectsApi(control_plane.api_client())
    for document in load_manifests(BASE / "dra" / "deviceclasses.yaml"):
        objects.delete_cluster_custom_object(*DRA, "deviceclasses", document["metadata"]["name"])


@pytest.fixture
def custom(k8s_api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(k8s_api)


@pytest.fixture
def dra_node(
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    gpu_node: Callable[..., k8s.V1Node],
    extender: Server,
) -> Iterator[Callable[..., str]]:
    """Factory: a node without GFD labels or GPU allocatable whose fake DRA driver publishes
    ``gpus`` (DynamicMIG), once the extender's steer of it is written; its slices are
    withdrawn afterwards."""
    drivers: list[FakeDraDriver] = []
    objects = k8s.CustomObjectsApi(k8s_api)

    def make(gpus: list[dra_slices.Gpu]) -> str:
        node = str(gpu_node({}, name=f"dra-{uuid.uuid4().hex[:6]}", gfd_labels={}).metadata.name)
        driver = FakeDraDriver(k8s_api, node, gpus)
        driver.publish()
        drivers.append(driver)
        wait_for(
            "the steer of the node",
            lambda: settled(core_v1, objects, [node]) and steer_rules(objects, [node])[node],
            60,
        )
        return node

    yield make
    for driver in drivers:
        driver.withdraw()


@pytest.fixture
def tenant(
    webhook: Server, custom: k8s.CustomObjectsApi, tenant_namespace: str
) -> Iterator[Callable[..., str]]:
    """Factory: a TenantPolicy for the test's namespace, once the webhook wrote its status."""
    created: list[str] = []

    def make(**spec: Any) -> str:
        name = f"team-{uuid.uuid4().hex[:6]}"
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, policy(name, [tenant_namespace], **spec)
        )
        created.append(name)
        wait_for(f"the webhook to see TenantPolicy {name}", lambda: used(custom, name), 30)
        return name

    yield make
    for name in created:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def used(custom: k8s.CustomObjectsApi, name: str) -> dict[str, Any] | None:
    status = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {}
    found: dict[str, Any] | None = status.get("used")
    return found


def retrying(create: Callable[[], Any], timeout_s: float = 20) -> Any:
    """``create()``, again while the webhook has not seen the policy, the node's slices or a
    DeviceClass yet (its caches follow within a second)."""
    waiting = ("no TenantPolicy", "products in the cluster: none", "no GPU product", "not known")

    def attempt() -> Any:
        try:
            return create()
        except k8s.ApiException as error:
            if error.status in (403, 422) and any(w in api_message(error) for w in waiting):
                return None
            raise

    return wait_for("the webhook to know the cluster", attempt, timeout_s)


def claim(name: str, profile: str, **exactly: Any) -> dict[str, Any]:
    request = {
        "deviceClassName": "mig.nvidia.com",
        "selectors": [
            {"cel": {"expression": f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"}}
        ],
        **exactly,
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }


def results(custom: k8s.CustomObjectsApi, namespace: str, name: str) -> list[dict[str, Any]]:
    stored = custom.get_namespaced_custom_object(*DRA, namespace, "resourceclaims", name)
    allocation = (stored.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def test_kube_apiserver_refuses_a_resource_claim_policy_with_another_tier(
    webhook: Server, custom: k8s.CustomObjectsApi
) -> None:
    body = policy("dra-tiers", ["dra-tiers"], deviceAPI="ResourceClaim", tiers=["mig", "dedicated"])
    with pytest.raises(k8s.ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
    assert caught.value.status == 422
    assert "spec.deviceAPI ResourceClaim serves only the mig tier" in api_message(caught.value)


def test_a_sized_pod_of_a_claim_tenant_gets_a_claim_from_migslices_template_on_a_dra_node(
    tenant: Callable[..., str],
    dra_node: Callable[..., str],
    device_classes: None,
    migslice_scheduler: object,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    tenant_namespace: str,
) -> None:
    node = dra_node([dra_slices.a100(0)])
    name = tenant(deviceAPI="ResourceClaim", quota={"computeSlices": 4})
    with FakeClaimController(k8s_api, [tenant_namespace]) as controller:
        pod = retrying(lambda: core_v1.create_namespaced_pod(tenant_namespace, gpu_pod("medium")))
        assert pod.spec.scheduler_name == "migslice-scheduler"
        assert [(c.name, c.resource_claim_template_name) for c in pod.spec.resource_claims] == [
            ("migslice-gpu", "migslice-mig-2g.20gb")
        ]
        container = pod.spec.containers[0].resources
        assert [c.name for c in container.claims] == ["migslice-gpu"]
        assert not container.limits
        template = custom.get_namespaced_custom_object(
            *DRA, tenant_namespace, "resourceclaimtemplates", "migslice-mig-2g.20gb"
        )
        request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert request["deviceClassName"] == "migslice-mig-2g.20gb"
        bound = wait_for(
            "the pod bound",
            lambda: core_v1.read_namespaced_pod(pod.metadata.name, tenant_namespace).spec.node_name,
            60,
        )
        (made,) = controller.created
    claim_name = made.partition("/")[2]
    assert bound == node
    (result,) = results(custom, tenant_namespace, claim_name)
    # Steered: first fit would take 2g@0, which ends the GPU's 4g and 7g placements.
    assert (result["pool"], result["device"]) == (node, "gpu-0-mig-2g20gb-14-4")
    stored = custom.get_namespaced_custom_object(
        *DRA, tenant_namespace, "resourceclaims", claim_name
    )
    assert stored["metadata"]["annotations"]["migslice.io/tenant"] == name
    assert stored["metadata"]["annotations"]["migslice.io/reservation"]
    wait_for(
        "usage to count the claim", lambda: (used(custom, name) or {}).get("computeSlices") == 2, 20
    )
    # The claim holds 2 of 4 compute slices: a tenant's own 3g.40gb claim (3) is over quota.
    with pytest.raises(k8s.ApiException) as caught:
        custom.create_namespaced_custom_object(
            *DRA, tenant_namespace, "resourceclaims", claim("big", "3g.40gb")
        )
    assert f'tenant "{name}" would use 5 compute slices' in api_message(caught.value)
    custom.delete_namespaced_custom_object(*DRA, tenant_namespace, "resourceclaims", claim_name)


def test_an_extended_resource_pod_lands_on_a_dra_node_through_migslices_class_charged_once(
    tenant: Callable[..., str],
    dra_node: Callable[..., str],
    device_classes: None,
    migslice_scheduler: object,
    core_v1: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    tenant_namespace: str,
) -> None:
    node = dra_node([dra_slices.h100(0)])
    name = tenant(quota={"instances": 1})
    pod = retrying(lambda: core_v1.create_namespaced_pod(tenant_namespace, gpu_pod("small")))
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/mig-1g.10gb": "1"}
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    operators = [t.match_expressions[-1].operator for t in terms.node_selector_terms]
    assert operators == ["In", "DoesNotExist"]  # the DRA node has no GFD label
    read = core_v1.read_namespaced_pod
    bound = wait_for(
        "the pod bound", lambda: read(pod.metadata.name, tenant_namespace).spec.node_name, 60
    )
    assert bound == node
    status = core_v1.api_client.sanitize_for_serialization(
        read(pod.metadata.name, tenant_namespace)
    )
    special = status["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    assert special.startswith(f"{pod.metadata.name}-extended-resources-")
    (result,) = results(custom, tenant_namespace, special)
    assert (result["pool"], result["device"]) == (node, "gpu-0-mig-1g10gb-19-6")  # steered
    stored = custom.get_namespaced_custom_object(*DRA, tenant_namespace, "resourceclaims", special)
    assert "migslice.io/reservation" not in (stored["metadata"].get("annotations") or {})
    time.sleep(2)  # the status writer runs every second
    assert (used(custom, name) or {}).get("instances") == 1  # the pod, not its claim again
    custom.delete_namespaced_custom_object(*DRA, tenant_namespace, "resourceclaims", special)


def test_a_tenants_own_claims_are_denied_by_profile_isolation_and_quota(
    tenant: Callable[..., str],
    dra_node: Callable[..., str],
    device_classes: None,
    custom: k8s.CustomObjectsApi,
    tenant_namespace: str,
) -> None:
    dra_node([dra_slices.a100(0)])
    name = tenant(allowedProfiles=["1g.10gb", "2g.20gb"], quota={"instances": 1})

    def create(body: dict[str, Any]) -> Any:
        return custom.create_namespaced_custom_object(
            *DRA, tenant_namespace, "resourceclaims", body
        )

    first = retrying(lambda: create(claim("small-1", "1g.10gb")))
    assert first["metadata"]["annotations"]["migslice.io/reservation"]
    mps = claim("shared", "1g.10gb")
    mps["spec"]["devices"]["config"] = [
        {
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "MigDeviceConfig",
                    "sharing": {"strategy": "MPS"},
                },
            }
        }
    ]
    denials = {}
    for label, body in (
        ("profile", claim("train-1", "3g.40gb")),
        ("isolation", mps),
        ("quota", claim("small-2", "1g.10gb")),
    ):
        with pytest.raises(k8s.ApiException) as caught:
            create(body)
        denials[label] = api_message(caught.value)
    assert (
        f'claim {tenant_namespace}/train-1 asks for 3g.40gb; policy "{name}" allows 1g.10gb, '
        "2g.20gb (spec.allowedProfiles)"
    ) in denials["profile"]
    assert (
        f"claim {tenant_namespace}/shared asks for sharing strategy MPS (the claim's config); "
        f'policy "{name}" is isolation: hardware (spec.isolation)'
    ) in denials["isolation"]
    assert f'tenant "{name}" would use 2 GPU instances' in denials["quota"]
    assert "(spec.quota.instances)" in denials["quota"]


def test_a_hardware_tenants_claim_reserved_for_one_pod_is_not_reserved_for_a_second(
    tenant: Callable[..., str],
    dra_node: Callable[..., str],
    device_classes: None,
    migslice_scheduler: object,
    core_v1: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    tenant_namespace: str,
) -> None:
    """kube-scheduler reserves the claim for the pod it places (a status update the
    reservations hook judges and lets through); a second consumer added to the same claim, as
    kube-scheduler adds one for a second pod naming it that two webhook replicas both
    admitted, is refused by kube-apiserver with the webhook's reason."""
    node = dra_node([dra_slices.a100(0)])
    name = tenant(quota={"instances": 2})
    retrying(
        lambda: custom.create_namespaced_custom_object(
            *DRA, tenant_namespace, "resourceclaims", claim("mine", "1g.10gb")
        )
    )
    pod = gpu_pod()
    pod["metadata"]["generateName"] = "one-"
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "mine"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    created = core_v1.create_namespaced_pod(tenant_namespace, pod)
    read = core_v1.read_namespaced_pod
    bound = wait_for(
        "the pod bound", lambda: read(created.metadata.name, tenant_namespace).spec.node_name, 60
    )
    assert bound == node
    stored = custom.get_namespaced_custom_object(*DRA, tenant_namespace, "resourceclaims", "mine")
    reserved = stored["status"]["reservedFor"]
    assert [r["name"] for r in reserved] == [created.metadata.name]
    second = {"resource": "pods", "name": "two", "uid": str(uuid.uuid4())}
    with pytest.raises(k8s.ApiException) as caught:
        custom.patch_namespaced_custom_object_status(
            *DRA,
            tenant_namespace,
            "resourceclaims",
            "mine",
            {"status": {"reservedFor": [*reserved, second]}},
        )
    message = api_message(caught.value)
    assert f"claim {tenant_namespace}/mine cannot be reserved for pod two" in message, message
    assert f'policy "{name}" is isolation: hardware (spec.isolation)' in message
    core_v1.delete_namespaced_pod(created.metadata.name, tenant_namespace, grace_period_seconds=0)


# -- three replicas, one killed in a burst of claim creates -------------------------------------


@pytest.fixture(scope="module")
def plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(fresh_workdir("dra-admission-faults"), e2e_bin) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        install_classes(control_plane)
        core = k8s.CoreV1Api(control_plane.api_client())
        ensure_namespace(core, "migslice-system")
        register_gpu_node(control_plane.api_client(), "gpu-a100", {"nvidia.com/mig-1g.10gb": 7})
        yield control_plane


def create_claim(objects: k8s.CustomObjectsApi, namespace: str) -> tuple[str, str, int]:
    """(admitted name | "", denial | "", retries): one claim create, retried while the webhook
    cannot answer (a replica died with the request; failurePolicy Fail)."""
    body = claim("", "1g.10gb")
    body["metadata"] = {"generateName": "burst-"}
    retries = 0
    for _ in range(60):
        try:
            created = objects.create_namespaced_custom_object(
                *DRA, namespace, "resourceclaims", body
            )
        except k8s.ApiException as error:
            if is_webhook_unavailable(error):
                retries += 1
                time.sleep(0.2)
                continue
            return "", api_message(error), retries
        return str(created["metadata"]["name"]), "", retries
    return "", "unavailable", retries


def test_claims_on_three_replicas_one_killed_mid_burst_never_exceed_the_quota(
    plane: ControlPlane, migslice_image: Image | None
) -> None:
    core = k8s.CoreV1Api(plane.api_client())
    objects = k8s.CustomObjectsApi(plane.api_client())
    bundle = tls_bundle(plane, "migslice-webhook")
    hold = ["--status-interval-s", "1", "--quota-hold-s", "8"]
    servers = [
        migslice_server(
            plane,
            "webhook",
            [*hold, *(["--workers", "2"] if i == 2 else [])],
            rbac_manifest=BASE / "webhook" / "rbac.yaml",
            account="migslice-webhook",
            image=migslice_image,
            bundle=bundle,
            replica=f"webhook-{i}",
        )
        for i in range(3)
    ]
    for server in servers:
        server.start()
    quota = 12
    namespace = f"t-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core, namespace)
    try:
        with Balancer([s.port for s in servers]) as balancer:
            plane.apply(webhook_configurations(bundle, f"https://127.0.0.1:{balancer.port}"))
            objects.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, policy(namespace, [namespace], quota={"instances": quota})
            )
            wait_for("the policy's status", lambda: used(objects, namespace), 30)
            retrying(lambda: create_claim(objects, namespace)[0] or None)
            done = [0]
            lock = threading.Lock()

            def one(_: int) -> tuple[str, str, int]:
                outcome = create_claim(objects, namespace)
                with lock:
                    done[0] += 1
                    if done[0] == 20:
                        assert servers[1].process is not None
                        kill_tree(servers[1].process.pid)
                return outcome

            with ThreadPoolExecutor(16) as pool:
                outcomes = list(pool.map(one, range(60)))
            stored = len(
                objects.list_namespaced_custom_object(*DRA, namespace, "resourceclaims")["items"]
            )
            assert stored <= quota
            time.sleep(8 + 5 + 2)  # the dead replica's charges: held 8 s, settled every 5 s
            while create_claim(objects, namespace)[0]:
                stored += 1
                assert stored <= quota
            final = objects.list_namespaced_custom_object(*DRA, namespace, "resourceclaims")
    finally:
        for server in servers:
            server.stop()
    assert len(final["items"]) == quota
    denied = [d for _, d, _ in outcomes if d]
    assert denied and all("(spec.quota.instances)" in d for d in denied), denied[:3]
    print(
        "\nclaims burst: "
        + json.dumps(
            {
                "admitted": sum(1 for a, _, _ in outcomes if a),
                "denied": len(denied),
                "retried": sum(r for _, _, r in outcomes),
            }
        )
    )
