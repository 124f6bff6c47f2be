"""Whole GPUs stay whole on the real control plane: over Nodes of every shape GPU Feature
Discovery labels (``harness.gfd_shapes``: MIG mixed, single, single with MIG-INVALID, none,
time-sliced with and without renaming, MIG mixed with a time-sliced MIG resource, MIG single
time-sliced), a dedicated tenant's pods are admitted by the real webhook and bound by the real
kube-scheduler with the extender only on an unshared, non-MIG GPU, a shared tenant's never on a
MIG slice, and a MIG tenant's never on a time-sliced MIG instance. More pods than those GPUs
hold are created, so the rest are tried against every node and stay Unschedulable.

Run: .venv/bin/pytest e2e/test_gfd_shapes_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from harness.api import wait_for
from harness.builders import make_pod, make_policy
from harness.gfd_shapes import DEDICATED, MIG, SHAPES, SHARED
from harness.stack import Server

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"


@pytest.fixture
def shapes(gpu_node: Callable[..., k8s.V1Node]) -> dict[str, str]:
    """One Node per shape, as GFD labels it and its device plugin advertises; shape -> name."""
    suffix = uuid.uuid4().hex[:6]
    names = {}
    for shape, (_, labels, product, allocatable) in SHAPES.items():
        gfd = {
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": "1",
            "nvidia.com/gpu.memory": "40960",
            "nvidia.com/mig.capable": "true",
            **labels,
        }
        name = f"gfd-{shape}-{suffix}"
        gpu_node(allocatable, name=name, gfd_labels=gfd)
        names[shape] = name
    return names


@pytest.fixture
def tenant(
    webhook: Server, k8s_api: k8s.ApiClient, tenant_namespace: str
) -> Iterator[Callable[[dict[str, Any]], str]]:
    """Factory: a TenantPolicy with ``spec`` for the test's namespace; deleted afterwards."""
    custom = k8s.CustomObjectsApi(k8s_api)
    created: list[str] = []

    def make(spec: dict[str, Any]) -> str:
        name = f"team-{uuid.uuid4().hex[:6]}"
        policy = make_policy(name, namespaces=[tenant_namespace], **spec)
        del policy["metadata"]["uid"], policy["metadata"]["generation"]
        custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy)
        created.append(name)
        return name

    yield make
    for name in created:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)


def create_sized(core_v1: k8s.CoreV1Api, namespace: str, size: str) -> str:
    """Create a pod of ``size`` as its team writes it, once the webhook knows the policy and the
    nodes; returns its name."""
    body = make_pod(
        None,
        generate_name=f"{size}-",
        namespace=None,
        stored=False,
        tenant=None,
        annotations={"migslice.io/gpu-size": size},
        limits={},
        scheduler_name=None,
        restart_policy=None,
        with_type_meta=True,
    )

    def attempt() -> str | None:
        try:
            return str(core_v1.create_namespaced_pod(namespace, body).metadata.name)
        except k8s.ApiException as error:
            message = str(json.loads(error.body)["message"])
            if error.status == 403 and (
                "no TenantPolicy" in message or "products in the cluster" in message
            ):
                return None
            raise

    created: str = wait_for("the webhook to see the policy and the nodes", attempt, 20)
    return created


def settle(core_v1: k8s.CoreV1Api, namespace: str, names: list[str]) -> dict[str, str | None]:
    """Wait until every pod is bound or marked Unschedulable; pod -> node (None: waiting)."""

    def placed() -> dict[str, str | None] | None:
        found: dict[str, str | None] = {}
        for name in names:
            pod = core_v1.read_namespaced_pod(name, namespace)
            unschedulable = any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in pod.status.conditions or ()
            )
            if not (pod.spec.node_name or unschedulable):
                return None
            found[name] = pod.spec.node_name
        return found

    result: dict[str, str | None] = wait_for("every pod bound or Unschedulable", placed, 90)
    return result


def placed_pods(
    tenant: Callable[[dict[str, Any]], str],
    core_v1: k8s.CoreV1Api,
    namespace: str,
    spec: dict[str, Any],
    size: str,
    count: int,
) -> tuple[dict[str, str], dict[str, str | None]]:
    """``count`` pods of ``size`` under a policy of ``spec``, each bound or Unschedulable: the
    first pod's GPU limits as the webhook set them, and pod -> node (None: waiting)."""
    tenant(spec)
    names = [create_sized(core_v1, namespace, size) for _ in range(count)]
    limits = core_v1.read_namespaced_pod(names[0], namespace).spec.containers[0].resources.limits
    return dict(limits), settle(core_v1, namespace, names)


def test_a_dedicated_tenant_lands_only_on_whole_unshared_gpus(
    shapes: dict[str, str],
    tenant: Callable[[dict[str, Any]], str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    migslice_scheduler: object,
) -> None:
    limits, placed = placed_pods(tenant, core_v1, tenant_namespace, DEDICATED, "full", 4)
    assert limits == {"nvidia.com/gpu": "1"}
    whole = {shapes["mixed"], shapes["none"]}
    mine = set(shapes.values())
    # Both whole GPUs are used, one pod each; nothing lands on a slice or a replica.
    assert sorted(n for n in placed.values() if n in mine) == sorted(whole), placed
    assert not {n for n in placed.values() if n} & (mine - whole), placed
    assert sum(1 for n in placed.values() if n is None) >= 2, placed


def test_a_shared_tenant_never_lands_on_a_mig_slice(
    shapes: dict[str, str],
    tenant: Callable[[dict[str, Any]], str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    migslice_scheduler: object,
) -> None:
    limits, placed = placed_pods(tenant, core_v1, tenant_namespace, SHARED, "notebook", 6)
    assert limits == {"nvidia.com/gpu.shared": "1"}
    # The renamed time-sliced GPU's four replicas, and never the MIG slice's shared replicas.
    on_mine = [n for n in placed.values() if n in set(shapes.values())]
    assert on_mine == [shapes["time-sliced-renamed"]] * 4, placed
    assert sum(1 for n in placed.values() if n is None) >= 2, placed


def test_a_mig_tenant_never_lands_on_a_time_sliced_mig_instance(
    shapes: dict[str, str],
    tenant: Callable[[dict[str, Any]], str],
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    migslice_scheduler: object,
) -> None:
    limits, placed = placed_pods(tenant, core_v1, tenant_namespace, MIG, "medium", 4)
    assert limits == {"nvidia.com/mig-3g.20gb": "1"}
    # The two 3g.20gb instances of the mixed node, never the four replicas of the time-sliced.
    on_mine = [n for n in placed.values() if n in set(shapes.values())]
    assert on_mine == [shapes["mixed"]] * 2, placed
    assert sum(1 for n in placed.values() if n is None) >= 2, placed
