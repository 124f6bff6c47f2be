"""The fake DRA driver against the real control plane: kube-apiserver accepts its slices as
NVIDIA's driver writes them, and the real kube-scheduler allocates from them first-fit, in the
driver's order (the lowest free start of the profile on the lowest-PCI GPU); on a static-MIG
H100 it takes the published instances in the slice's order, as migslice predicts.

Run: .venv/bin/pytest e2e/test_dra_driver_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

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
    steer_rules,
)
from harness.scheduler import Scheduler
from migslice.inventory.first_fit import Wanted, first_fit

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mig_class(k8s_api: k8s.ApiClient) -> Iterator[None]:
    ensure_mig_class(k8s.CustomObjectsApi(k8s_api))
    yield


def test_the_real_allocator_takes_the_fake_drivers_devices_first_fit(
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    default_scheduler: Scheduler,
    gpu_node: Callable[..., k8s.V1Node],
    namespace: str,
    mig_class: None,
) -> None:
    # Left to first fit: the extender, where one runs in this session, does not steer it.
    node = gpu_node({}, labels={"migslice.io/dra-steer": "off"}).metadata.name
    driver = FakeDraDriver(k8s_api, node, [dra_slices.a100(0), dra_slices.a100(1)])
    stored = driver.publish()
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in stored] == [3, 3, 3]
    assert "sharedCounters" in stored[0]["spec"] and "devices" not in stored[0]["spec"]
    objects = k8s.CustomObjectsApi(k8s_api)
    try:
        wanted = [("a", "1g.10gb"), ("b", "1g.10gb"), ("c", "4g.40gb"), ("d", "7g.80gb")]
        for name, profile in wanted:
            claim, pod = claim_objects(name, namespace, profile)
            objects.create_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", claim
            )
            core_v1.create_namespaced_pod(namespace, pod)
            if name != "d":
                wait_for(
                    f"pod {name} bound",
                    lambda name=name: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
                    timeout=60,
                )
        unschedulable = wait_for(
            "pod d reported unschedulable",
            lambda: [
                c
                for c in (core_v1.read_namespaced_pod("d", namespace).status.conditions or ())
                if c.type == "PodScheduled" and c.reason == "Unschedulable"
            ],
            timeout=60,
        )
        devices = {name: allocated_devices(objects, namespace, name) for name, _ in wanted}
        # First fit: both 1g on GPU 0 from start 0, which also takes GPU 0's only 4g and 7g
        # placements; the 4g goes to GPU 1, and the 7g then fits nowhere on this node,
        # though 12 of its 16 memory slices are free.
        assert devices["a"] == ["gpu-0-mig-1g10gb-19-0"]
        assert devices["b"] == ["gpu-0-mig-1g10gb-19-1"]
        assert devices["c"] == ["gpu-1-mig-4g40gb-5-0"]
        assert devices["d"] == []
        assert "claim" in unschedulable[0].message.lower(), unschedulable[0].message
    finally:
        driver.withdraw()


def test_a_static_mig_h100_node_serves_its_instances_as_migslice_predicts_and_is_not_steered(
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    migslice_scheduler: Scheduler,
    gpu_node: Callable[..., k8s.V1Node],
    namespace: str,
    mig_class: None,
) -> None:
    node = str(gpu_node({}, gfd_labels={}).metadata.name)
    layout = [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]
    driver = FakeDraDriver(k8s_api, node, [dra_slices.h100(0)], dynamic=False, layouts=[layout])
    driver.publish()
    objects = k8s.CustomObjectsApi(k8s_api)
    try:
        wanted = [("s1", "1g.10gb"), ("s2", "3g.40gb"), ("s3", "1g.10gb"), ("s4", "1g.10gb")]
        for name, profile in wanted:
            # migslice's prediction, from what the API server holds before the claim.
            state = read_cluster(core_v1, objects, [node]).state_of(node)
            assert state is not None and state.dra is not None and state.dra.use is not None
            predicted = first_fit(state.dra.pool, Wanted.mig(profile), state.dra.use)
            claim, pod = claim_objects(name, namespace, profile, scheduler="migslice-scheduler")
            objects.create_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", claim
            )
            core_v1.create_namespaced_pod(namespace, pod)
            if predicted is None:
                wait_for(
                    f"pod {name} reported unschedulable",
                    lambda name=name: [
                        c
                        for c in core_v1.read_namespaced_pod(name, namespace).status.conditions
                        or ()
                        if c.reason == "Unschedulable"
                    ],
                    timeout=60,
                )
                assert allocated_devices(objects, namespace, name) == []
                continue
            wait_for(
                f"pod {name} bound",
                lambda name=name: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
                timeout=60,
            )
            assert allocated_devices(objects, namespace, name) == [predicted.name]
        # The two 1g.10gb instances, the 3g.40gb: the third 1g.10gb finds none.
        assert allocated_devices(objects, namespace, "s4") == []
        # Static instances strand nothing whichever a claim takes: no steer rule here.
        assert steer_rules(objects, [node]) == {node: set()}
    finally:
        driver.withdraw()
