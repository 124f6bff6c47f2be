"""The steer's rules outliving the extender (docs/dra.md, "The steer": "While no extender runs,
its last rules stay: they keep the profile's preferred device and everything after it open, so
one-device claims still fit"). The rules are those the steer writes for an idle one-GPU A100
node, written here as the extender writes them, and no extender runs: what a crash loop, a
replica count of 0, ``helm uninstall`` or ``dra.steer.enabled=false`` leaves behind.

Run: .venv/bin/pytest e2e/test_dra_steer_orphaned_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s

from harness import dra_slices
from harness.api import wait_for
from harness.dra_driver import (
    FakeDraDriver,
    allocated_devices,
    claim_objects,
    ensure_mig_class,
    read_cluster,
    wanted_steer,
)
from harness.scheduler import Scheduler
from migslice.objects.device_taint_rules import steer_rule, steer_rule_name

pytestmark = pytest.mark.e2e

DRA = ("resource.k8s.io", "v1")


def _unschedulable(core_v1: k8s.CoreV1Api, namespace: str, name: str) -> bool:
    pod = core_v1.read_namespaced_pod(name, namespace)
    return any(
        c.type == "PodScheduled" and c.reason == "Unschedulable"
        for c in pod.status.conditions or ()
    )


@pytest.fixture
def steered_idle_node(
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    gpu_node: Callable[..., k8s.V1Node],
) -> Iterator[str]:
    objects = k8s.CustomObjectsApi(k8s_api)
    ensure_mig_class(objects)
    node = str(gpu_node({}, gfd_labels={}).metadata.name)
    driver = FakeDraDriver(k8s_api, node, [dra_slices.a100(0)])
    driver.publish()
    index = read_cluster(core_v1, objects, [node])
    state = index.state_of(node)
    assert state is not None and state.dra is not None
    profiles = {
        d.name(g.minor): d.profile for g in state.dra.pool.gpus for d in g.devices if d.profile
    }
    devices = wanted_steer(index, [node])[node]
    for device in devices:
        objects.create_cluster_custom_object(
            *DRA, "devicetaintrules", steer_rule(node, device, profiles[device])
        )
    time.sleep(2)  # kube-scheduler's slice tracker sees the rules
    yield node
    for device in devices:
        objects.delete_cluster_custom_object(
            *DRA, "devicetaintrules", steer_rule_name(node, device)
        )
    driver.withdraw()


@pytest.mark.xfail(
    strict=True,
    reason="the steer's rules have no lifetime: with no extender, nothing lifts or re-steers them",
)
def test_without_the_extender_its_last_rules_keep_a_second_one_device_claim_off_a_node_with_room(
    core_v1: k8s.CoreV1Api,
    k8s_api: k8s.ApiClient,
    default_scheduler: Scheduler,
    steered_idle_node: str,
    namespace: str,
) -> None:
    objects = k8s.CustomObjectsApi(k8s_api)
    for name in ("a", "b"):
        claim, pod = claim_objects(name, namespace, "1g.10gb")
        objects.create_namespaced_custom_object(*DRA, namespace, "resourceclaims", claim)
        core_v1.create_namespaced_pod(namespace, pod)
        wait_for(
            f"pod {name} bound or unschedulable",
            lambda name=name: (
                core_v1.read_namespaced_pod(name, namespace).spec.node_name
                or _unschedulable(core_v1, namespace, name)
            ),
            timeout=60,
        )
    assert allocated_devices(objects, namespace, "a") == ["gpu-0-mig-1g10gb-19-6"]
    # The GPU has six free 1g.10gb placements (starts 0-5), all tainted by rules no one lifts.
    assert allocated_devices(objects, namespace, "b") == ["gpu-0-mig-1g10gb-19-5"], (
        "a one-device 1g.10gb claim stays unschedulable on a node with 6 free 1g placements"
    )


@pytest.mark.xfail(
    strict=True,
    reason="the steer's rules have no lifetime: with no extender, nothing lifts or re-steers them",
)
def test_without_the_extender_a_claim_of_two_devices_never_fits_an_idle_gpu(
    core_v1: k8s.CoreV1Api,
    k8s_api: k8s.ApiClient,
    default_scheduler: Scheduler,
    steered_idle_node: str,
    namespace: str,
) -> None:
    objects = k8s.CustomObjectsApi(k8s_api)
    claim, pod = claim_objects("pair", namespace, "1g.10gb", count=2)
    objects.create_namespaced_custom_object(*DRA, namespace, "resourceclaims", claim)
    core_v1.create_namespaced_pod(namespace, pod)
    wait_for(
        "pod pair bound or unschedulable",
        lambda: (
            core_v1.read_namespaced_pod("pair", namespace).spec.node_name
            or _unschedulable(core_v1, namespace, "pair")
        ),
        timeout=60,
    )
    assert core_v1.read_namespaced_pod("pair", namespace).spec.node_name == steered_idle_node, (
        "two 1g.10gb on an idle A100 stay unschedulable: only the preferred 1g is untainted"
    )
