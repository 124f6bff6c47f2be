"""The fake DRA driver against the real control plane: kube-apiserver accepts its slices as
NVIDIA's driver writes them, and the real kube-scheduler allocates from them first-fit, in the
driver's order (the lowest free start of the profile on the lowest-PCI GPU).

Run: .venv/bin/pytest e2e/test_dra_driver_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s

from harness import dra_slices
from harness.api import wait_for
from harness.dra_driver import MIG_CLASS, FakeDraDriver, allocated_devices, claim_objects
from harness.scheduler import Scheduler

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def mig_class(k8s_api: k8s.ApiClient) -> Iterator[None]:
    objects = k8s.CustomObjectsApi(k8s_api)
    try:
        objects.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", MIG_CLASS)
    except k8s.ApiException as error:
        if error.status != 409:
            raise
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
