"""A free instance leaves a waiting pod to the scheduler only on a node kube-scheduler would
put the pod on: not cordoned, no taint the pod does not tolerate, its node selector and
affinity met, and on a DRA node a DeviceClass that serves its extended resource. Elsewhere it
serves no one, and the pod is re-partition demand like any other."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from harness import dra_slices as gen
from harness.builders import (
    DEFAULT_TOLERATIONS,
    make_mig_config_map,
    make_node,
    make_pod,
    unschedulable,
)
from migslice.mig import place
from migslice.objects.clusterfile import ClusterObjects
from migslice.repartition import eligible_demand, pending_pods, plan, plan_carve
from migslice.repartition.snapshot import node_states
from tests.carve_builders import MODEL, carve_node_raw
from tests.dra_objects import make_dra_node, migslice_classes

NOW = datetime.datetime(2025, 6, 1, tzinfo=datetime.UTC)
LEFT = "a free instance exists; left to the scheduler"
CORDONED = {  # `kubectl cordon`, and the taint the node lifecycle controller adds for it
    "unschedulable": True,
    "taints": [
        {
            "key": "node.kubernetes.io/unschedulable",
            "effect": "NoSchedule",
            "timeAdded": "2025-05-31T00:00:00Z",
        }
    ],
}
DEDICATED = {"taints": [{"key": "dedicated", "value": "team-c", "effect": "NoSchedule"}]}


def waiting_pod(**spec: Any) -> dict[str, Any]:
    """A 3g.40gb pod kube-scheduler marked Unschedulable, as kube-apiserver serves it."""
    pod = make_pod("train", namespace="research", profile="3g.40gb")
    pod["spec"] = {**pod["spec"], "tolerations": list(DEFAULT_TOLERATIONS), **spec}
    return unschedulable(pod)


def cluster(free_node: dict[str, Any], pod: dict[str, Any]) -> ClusterObjects:
    """``free_node``, with a free 3g.40gb instance, and ``idle``, whose idle all-1g GPU a plan
    may re-shape; ``pod`` waits."""
    idle = make_node("idle", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb")
    return ClusterObjects(
        nodes=(free_node, idle), pods=(pod,), config_maps=(make_mig_config_map(),)
    )


def free_3g(**spec: Any) -> dict[str, Any]:
    return make_node(
        "free-3g",
        gpu_count=1,
        mig={"3g.40gb": 2},
        config="all-3g.40gb",
        extra_labels={"pool": "shared"},
        spec=spec,
    )


def eligibility(objects: ClusterObjects) -> dict[str, str]:
    """The waiting pods' keys: ``waiting`` (re-partition demand) or why they are not."""
    states = node_states(objects.nodes, objects.pods, {}, dra=objects)
    waiting, unserved = eligible_demand(pending_pods(objects.pods, NOW), states, 30.0)
    return {**{pod.key: "waiting" for pod in waiting}, **dict(unserved)}


@pytest.mark.parametrize(
    ("node", "pod", "expected"),
    [
        (free_3g(), waiting_pod(), LEFT),
        (free_3g(**CORDONED), waiting_pod(), "waiting"),
        (free_3g(**DEDICATED), waiting_pod(), "waiting"),
        (
            free_3g(**DEDICATED),
            waiting_pod(
                tolerations=[
                    *DEFAULT_TOLERATIONS,
                    {"key": "dedicated", "operator": "Equal", "value": "team-c"},
                ]
            ),
            LEFT,
        ),
        (free_3g(), waiting_pod(nodeSelector={"pool": "team-a"}), "waiting"),
        (free_3g(), waiting_pod(nodeSelector={"pool": "shared"}), LEFT),
        (
            free_3g(),
            waiting_pod(
                affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "pool", "operator": "NotIn", "values": ["shared"]}
                                    ]
                                }
                            ]
                        }
                    }
                }
            ),
            "waiting",
        ),
    ],
    ids=[
        "schedulable",
        "cordoned",
        "untolerated-taint",
        "tolerated-taint",
        "node-selector-excludes",
        "node-selector-matches",
        "affinity-excludes",
    ],
)
def test_a_free_instance_counts_only_on_a_node_kube_scheduler_would_use(
    node: dict[str, Any], pod: dict[str, Any], expected: str
) -> None:
    assert eligibility(cluster(node, pod)) == {"research/train": expected}


def test_with_the_free_instances_cordoned_an_idle_gpu_is_reshaped_for_the_pod() -> None:
    """The audit's case: every node with a free 3g.40gb cordoned, an idle GPU elsewhere; the
    controller said "a free instance exists; left to the scheduler" for good."""
    objects = cluster(free_3g(**CORDONED), waiting_pod())
    states = node_states(objects.nodes, objects.pods, {}, dra=objects)
    result = plan(states, pending_pods(objects.pods, NOW))
    assert [(c.node, c.serves) for c in result.changes] == [("idle", ("research/train",))]
    assert result.unserved == ()


def dra_cluster(classes: list[dict[str, Any]]) -> ClusterObjects:
    """An idle DynamicMIG node (every placement free), the idle device-plugin node, a waiting
    pod that asks for nvidia.com/mig-3g.40gb, and ``classes``."""
    dynamic = gen.node_slices("dra-0", "uid-dra-0", [gen.a100(0)])
    idle = make_node("idle", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb")
    return ClusterObjects(
        nodes=(make_dra_node("dra-0"), idle),
        pods=(waiting_pod(),),
        config_maps=(make_mig_config_map(),),
        resource_slices=tuple(dynamic),
        device_classes=tuple(classes),
    )


def test_a_dra_node_counts_only_for_extended_resources_a_device_class_serves() -> None:
    served = migslice_classes()  # migslice's class of 3g.40gb among them
    assert eligibility(dra_cluster(served)) == {"research/train": LEFT}
    unserved = [
        c for c in served if c["spec"].get("extendedResourceName") != "nvidia.com/mig-3g.40gb"
    ]
    assert eligibility(dra_cluster(unserved)) == {"research/train": "waiting"}


def test_the_carve_path_carves_no_node_the_pod_cannot_go_to() -> None:
    """Two idle carve-mode nodes alike: the first by name is cordoned, so the second is
    carved for the pod."""
    one_1g_each = [[place(MODEL, "1g.10gb", start) for start in range(7)]]
    cordoned = carve_node_raw("a-cordoned", one_1g_each)
    cordoned["spec"] = {**cordoned.get("spec", {}), **CORDONED}
    nodes = (cordoned, carve_node_raw("b-open", one_1g_each))
    pods = (waiting_pod(),)
    states = node_states(nodes, pods, {})
    result = plan_carve(states, pending_pods(pods, NOW))
    assert [(c.node, c.serves) for c in result.changes] == [("b-open", ("research/train",))]
