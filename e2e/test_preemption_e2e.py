"""The extender beside kube-scheduler's preemption, on the real v1.37.2 control plane.

* A preemptor counts on the node it was nominated to as kube-scheduler counts it (never for
  itself): one victim is enough. Counted against itself, it found the node it had cleared
  full and kube-scheduler evicted a second low-priority pod elsewhere.
* While the extender's caches are blind it answers every node unresolvable: kube-scheduler
  preempts nothing. Answered failed, a high-priority pod evicted a running pod on every full
  node while a node with free instances stayed empty.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.test_scheduling_e2e import mig_pod
from harness.api import wait_for
from harness.scheduler import Scheduler

pytestmark = pytest.mark.e2e

LOW, HIGH = "migslice-e2e-low", "migslice-e2e-high"


@pytest.fixture
def priorities(k8s_api: k8s.ApiClient) -> Iterator[None]:
    api = k8s.SchedulingV1Api(k8s_api)
    for name, value in ((LOW, 10), (HIGH, 1000)):
        try:
            api.create_priority_class({"metadata": {"name": name}, "value": value})
        except k8s.ApiException as error:
            if error.status != 409:
                raise
    yield


def full_nodes(
    core_v1: k8s.CoreV1Api, namespace: str, gpu_node: Callable[..., k8s.V1Node], count: int
) -> list[str]:
    """``count`` nodes with one 1g.10gb each, held by a low-priority pod; the pods' names."""
    victims = []
    for _ in range(count):
        node = gpu_node({"nvidia.com/mig-1g.10gb": 1}, labels={"nvidia.com/gpu.count": "1"})
        victim = mig_pod("1g.10gb")
        victim["spec"]["nodeName"] = node.metadata.name
        victim["spec"]["priorityClassName"] = LOW
        victim["spec"]["terminationGracePeriodSeconds"] = 0
        victims.append(core_v1.create_namespaced_pod(namespace, victim).metadata.name)
    return victims


def high_priority_pod(core_v1: k8s.CoreV1Api, namespace: str) -> str:
    pod = mig_pod("1g.10gb")
    pod["spec"]["priorityClassName"] = HIGH
    return str(core_v1.create_namespaced_pod(namespace, pod).metadata.name)


def left(core_v1: k8s.CoreV1Api, namespace: str, names: list[str]) -> list[str]:
    there = {p.metadata.name for p in core_v1.list_namespaced_pod(namespace).items}
    return [n for n in names if n in there]


def events(core_v1: k8s.CoreV1Api, namespace: str) -> list[tuple[str, str, str]]:
    found = core_v1.list_namespaced_event(namespace).items
    return [(e.involved_object.name, e.reason, e.message) for e in found]


def test_one_victim_is_enough_for_a_preemptor(
    migslice_scheduler: Scheduler,
    priorities: None,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    victims = full_nodes(core_v1, namespace, gpu_node, 2)
    name = high_priority_pod(core_v1, namespace)
    wait_for(
        "the preemptor to bind",
        lambda: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
        60,
    )
    time.sleep(3)  # a second preemption would have begun by now
    assert len(left(core_v1, namespace, victims)) == 1, events(core_v1, namespace)


def test_a_blind_extender_starts_no_preemption(
    migslice_scheduler: Scheduler,
    extender: Any,
    priorities: None,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    """The extender loses its mig-parted ConfigMap watch (its RoleBinding is gone): blind."""
    rbac = k8s.RbacAuthorizationV1Api(k8s_api)
    name, where = "migslice-extender-mig-config", "gpu-operator"
    binding = k8s_api.sanitize_for_serialization(rbac.read_namespaced_role_binding(name, where))
    binding["metadata"] = {"name": name, "namespace": where}
    rbac.delete_namespaced_role_binding(name, where)
    try:
        wait_for(
            "the extender to be blind", lambda: extender.request("GET", "/readyz")[0] == 503, 150
        )
        gpu_node({"nvidia.com/mig-1g.10gb": 7}, labels={"nvidia.com/gpu.count": "1"})
        victims = full_nodes(core_v1, namespace, gpu_node, 2)
        pod = high_priority_pod(core_v1, namespace)
        wait_for(
            "kube-scheduler to try the pod",
            lambda: any(
                n == pod and r == "FailedScheduling" for n, r, _ in events(core_v1, namespace)
            ),
            30,
        )
        time.sleep(10)  # kube-scheduler retries it after its backoff
        assert left(core_v1, namespace, victims) == victims, events(core_v1, namespace)
    finally:
        rbac.create_namespaced_role_binding(where, binding)
