"""Scheduling through the real kube-scheduler calling our extender over TLS.

The shipped configuration keeps ``ignoredByScheduler: false`` for every MIG resource: the
device plugin's allocatable stays the authority for counts (kube-scheduler's own accounting of
assumed pods is race-free), and the extender is asked about the nodes that have a free
instance — it rejects those a MIG Manager is re-partitioning, whose GPU model or product the
pod cannot use, and scores the rest by fragmentation.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from harness.api import ensure_namespace, wait_for
from harness.builders import make_pod
from harness.migmanager import CONFIG_LABEL, STATE_LABEL, FakeMigManager
from harness.scheduler import Scheduler
from harness.stack import Server, scheduler_configuration
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted

pytestmark = pytest.mark.e2e


def mig_pod(profile: str, count: int = 1) -> dict[str, Any]:
    """A pod as the webhook leaves it: a concrete MIG resource, our scheduler."""
    return make_pod(
        None,
        generate_name="infer-",
        namespace=None,
        stored=False,
        tenant=None,
        limits={},
        profile=profile,
        count=count,
        image="infer:1",
        restart_policy=None,
        with_type_meta=True,
    )


def scheduled_condition(core_v1: k8s.CoreV1Api, namespace: str, name: str) -> Any:
    pod = core_v1.read_namespaced_pod(name, namespace)
    for condition in pod.status.conditions or ():
        if condition.type == "PodScheduled":
            return condition
    return None


def failed_scheduling_messages(core_v1: k8s.CoreV1Api, namespace: str, name: str) -> list[str]:
    events = core_v1.list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason=FailedScheduling"
    )
    return [e.message for e in events.items]


@pytest.fixture
def mig_config_map(core_v1: k8s.CoreV1Api) -> Iterator[Callable[[str], None]]:
    """Factory: publish a mig-parted file where MIG Manager (our actor) reads it."""
    ensure_namespace(core_v1, "gpu-operator")
    written: list[bool] = []

    def publish(text: str) -> None:
        body = {"metadata": {"name": "migslice-mig-config"}, "data": {"config.yaml": text}}
        if written:
            core_v1.replace_namespaced_config_map("migslice-mig-config", "gpu-operator", body)
        else:
            core_v1.create_namespaced_config_map("gpu-operator", body)
            written.append(True)

    yield publish
    if written:
        core_v1.delete_namespaced_config_map("migslice-mig-config", "gpu-operator")


def test_a_pod_waits_with_the_extender_reason_until_mig_manager_repartitions(
    migslice_scheduler: Scheduler,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
    mig_config_map: Callable[[str], None],
) -> None:
    model = CATALOG.get("A100-80GB")
    sliced = gpu_node({"nvidia.com/mig-1g.10gb": 7})
    # MIG Manager has started on this node: the device plugin still advertises the old slices.
    busy = gpu_node(
        {"nvidia.com/mig-3g.40gb": 2},
        labels={CONFIG_LABEL: "all-3g.40gb", STATE_LABEL: "pending"},
    )
    pod = core_v1.create_namespaced_pod(namespace, mig_pod("3g.40gb"))
    name = pod.metadata.name

    def unschedulable() -> Any:
        condition = scheduled_condition(core_v1, namespace, name)
        return condition if condition and condition.status == "False" else None

    condition = wait_for("PodScheduled=False", unschedulable, 30)
    assert condition.reason == "Unschedulable"
    assert "nodes are available" in condition.message
    assert "Insufficient nvidia.com/mig-3g.40gb" in condition.message
    assert "being re-partitioned" in condition.message
    assert any(
        "being re-partitioned" in m for m in failed_scheduling_messages(core_v1, namespace, name)
    )
    assert core_v1.read_namespaced_pod(name, namespace).spec.node_name is None

    # An admin (later: the repartition controller) asks for 2 x 3g.40gb on the sliced node's
    # GPU 0; the actor playing MIG Manager applies it.
    layout = [place(model, "3g.40gb", 0), place(model, "3g.40gb", 4)]
    mig_config_map(render_mig_parted({"two-3g": mig_parted_entries(model, {0: layout})}))
    with FakeMigManager(k8s_api, nodes=frozenset({sliced.metadata.name})):
        core_v1.patch_node(
            sliced.metadata.name,
            {"metadata": {"labels": {CONFIG_LABEL: "two-3g", "nvidia.com/gpu.count": "1"}}},
        )
        touches: list[float] = []

        def bound_or_touched() -> str | None:
            """Bound yet? Else touch the pod every 2 s once MIG Manager is done: the admin
            plays the repartition controller here, which touches the pods it served (see
            docs/repartition.md), since kube-scheduler retries a pod the extender rejected
            only on a later cluster event."""
            node_name: str | None = core_v1.read_namespaced_pod(name, namespace).spec.node_name
            if node_name:
                return node_name
            state = core_v1.read_node(sliced.metadata.name).metadata.labels.get(STATE_LABEL)
            if state == "success" and (not touches or time.monotonic() - touches[-1] > 2):
                touches.append(time.monotonic())
                core_v1.patch_namespaced_pod(
                    name, namespace, {"metadata": {"annotations": {"example.com/touched": "1"}}}
                )
            return None

        bound = wait_for("the pod to bind after the re-partition", bound_or_touched, 60)
    assert bound == sliced.metadata.name
    assert bound != busy.metadata.name
    labels = core_v1.read_node(sliced.metadata.name).metadata.labels
    assert labels[STATE_LABEL] == "success"


def test_the_extender_prefers_the_node_that_keeps_whole_gpus_free(
    migslice_scheduler: Scheduler,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    config = yaml.safe_load(migslice_scheduler.config_path.read_text())
    (extender,) = config["extenders"]  # the shipped placement: the best-fit filter alone
    assert extender["filterVerb"] == "filter-best-fit" and "prioritizeVerb" not in extender
    keeps_whole_gpus_free(core_v1, namespace, gpu_node, "migslice-scheduler")


def test_the_weighted_placement_prefers_it_too_through_prioritize(
    extender: Server,
    scheduler: Callable[..., Scheduler],
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    config = scheduler_configuration(
        extender.bundle, extender.url, ["scheduler.placement=weighted"]
    )
    (hook,) = config["extenders"]
    assert (hook["filterVerb"], hook["prioritizeVerb"]) == ("filter", "prioritize")
    config["profiles"] = [{"schedulerName": "migslice-weighted"}]
    scheduler(config, name="migslice-weighted")
    before = answered_by_verb(extender)
    keeps_whole_gpus_free(core_v1, namespace, gpu_node, "migslice-weighted")
    after = answered_by_verb(extender)
    for verb in ("filter", "prioritize"):  # one of each per pod
        assert after.get(verb, 0) - before.get(verb, 0) >= 3, (before, after)


def answered_by_verb(extender: Server) -> dict[str, float]:
    """``migslice_extender_requests_total`` answered ok, by verb, from the extender's /metrics."""
    status, text = extender.request("GET", "/metrics")
    assert status == 200
    found: dict[str, float] = {}
    for match in re.finditer(
        r'^migslice_extender_requests_total\{outcome="ok",verb="([^"]+)"\} (\S+)$', text, re.M
    ):
        found[match[1]] = float(match[2])
    return found


def keeps_whole_gpus_free(
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
    scheduler_name: str,
) -> None:
    # Both nodes have a free 1g.10gb; one already runs a 1g pod, so placing there keeps the
    # other node's GPU untouched.
    used = gpu_node({"nvidia.com/mig-1g.10gb": 7}, labels={"nvidia.com/gpu.count": "1"})
    idle = gpu_node({"nvidia.com/mig-1g.10gb": 7}, labels={"nvidia.com/gpu.count": "1"})
    first = mig_pod("1g.10gb")
    first["spec"]["nodeName"] = used.metadata.name
    core_v1.create_namespaced_pod(namespace, first)
    asks = [mig_pod("1g.10gb") for _ in range(3)]
    for ask in asks:
        ask["spec"]["schedulerName"] = scheduler_name
    pods = [core_v1.create_namespaced_pod(namespace, ask) for ask in asks]
    for pod in pods:
        bound = wait_for(
            "bind",
            lambda pod=pod: (
                core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name
            ),
            30,
        )
        assert bound == used.metadata.name, f"{pod.metadata.name} went to the idle node"
    assert idle.metadata.name


def test_with_the_extender_down_nothing_binds_until_it_is_back(
    migslice_scheduler: Scheduler,
    extender: Server,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({"nvidia.com/mig-2g.20gb": 3})
    extender.stop()
    try:
        pod = core_v1.create_namespaced_pod(namespace, mig_pod("2g.20gb"))
        name = pod.metadata.name

        def extender_error() -> list[str]:
            return [
                m
                for m in failed_scheduling_messages(core_v1, namespace, name)
                if "extender" in m.lower() or "connection refused" in m
            ]

        messages = wait_for("a FailedScheduling event about the extender", extender_error, 30)
        assert any("connection refused" in m or "filter" in m for m in messages), messages
        assert core_v1.read_namespaced_pod(name, namespace).spec.node_name is None
    finally:
        extender.start()
    bound = wait_for(
        "the pod to bind once the extender is back",
        lambda: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
        60,
    )
    assert bound


def test_pods_without_gpu_demand_pass_the_extender_on_every_node(
    migslice_scheduler: Scheduler,
    extender: Server,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    """The extender has no managedResources (kube-scheduler then asks it about every pod of
    migslice-scheduler: pods asking ResourceClaims name no resource it could match); a pod
    without GPU demand passes every node at once, caches blind or not."""
    node = gpu_node({"nvidia.com/mig-1g.10gb": 7})
    plain = mig_pod("1g.10gb")
    plain["metadata"]["generateName"] = f"cpu-{uuid.uuid4().hex[:4]}-"
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m"}}
    pod = core_v1.create_namespaced_pod(namespace, plain)
    bound = wait_for(
        "a CPU pod to bind through the extender",
        lambda: core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name,
        30,
    )
    assert bound == node.metadata.name
