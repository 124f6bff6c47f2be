"""Smoke test of the e2e control plane: a real kube-scheduler places MIG-requesting pods.

Run: .venv/bin/pytest e2e/test_controlplane_smoke.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from harness.api import wait_for
from harness.builders import make_pod
from harness.controlplane import ControlPlane
from harness.scheduler import Scheduler

pytestmark = pytest.mark.e2e

MIG_1G = "nvidia.com/mig-1g.10gb"


def mig_pod(amount: int, *, scheduler_name: str | None = None) -> dict[str, Any]:
    return make_pod(
        None,
        generate_name="mig-smoke-",
        namespace=None,
        stored=False,
        tenant=None,
        limits={MIG_1G: str(amount)},
        container="cuda",
        image="cuda:12.4.1-base-ubuntu22.04",
        command=["nvidia-smi", "-L"],
        restart_policy="Never",
        scheduler_name=scheduler_name or None,
    )


def test_apiserver_serves_and_node_is_schedulable(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    version = k8s.VersionApi(control_plane.api_client()).get_code()
    assert version.git_version.startswith("v1.")
    node = gpu_node({MIG_1G: 7})
    assert node.status.allocatable[MIG_1G] == "7"
    assert node.status.capacity[MIG_1G] == "7"
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert node.metadata.labels["nvidia.com/mig.strategy"] == "mixed"
    assert not node.spec.taints, f"fake node must not be tainted: {node.spec.taints}"
    assert not node.spec.unschedulable
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"


def test_pod_requesting_mig_is_bound(
    default_scheduler: Scheduler,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    node = gpu_node({MIG_1G: 7})
    pod = core_v1.create_namespaced_pod(namespace, mig_pod(1))
    assert pod.metadata.name.startswith("mig-smoke-")

    def node_name() -> str | None:
        return core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name

    assert wait_for("the pod to be bound", node_name, timeout=30) == node.metadata.name
    bound = core_v1.read_namespaced_pod(pod.metadata.name, namespace)
    conds = {c.type: c for c in bound.status.conditions or ()}
    assert conds["PodScheduled"].status == "True"
    assert bound.status.phase == "Pending"  # no kubelet runs it


def test_pod_requesting_more_than_any_node_stays_pending(
    default_scheduler: Scheduler,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({MIG_1G: 7})
    pod = core_v1.create_namespaced_pod(namespace, mig_pod(8))
    name = pod.metadata.name

    def unschedulable() -> k8s.V1PodCondition | None:
        p = core_v1.read_namespaced_pod(name, namespace)
        for c in p.status.conditions or ():
            if c.type == "PodScheduled" and c.status == "False":
                return c
        return None

    cond = wait_for("PodScheduled=False", unschedulable, timeout=30)
    assert cond.reason == "Unschedulable"
    assert f"Insufficient {MIG_1G}" in cond.message

    def failed_scheduling() -> list[k8s.CoreV1Event]:
        events = core_v1.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return [e for e in events if e.reason == "FailedScheduling"]

    events = wait_for("a FailedScheduling event", failed_scheduling, timeout=30)
    assert f"Insufficient {MIG_1G}" in events[0].message
    assert core_v1.read_namespaced_pod(name, namespace).spec.node_name is None
