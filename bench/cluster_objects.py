"""A GPU cluster laid out for ``bench.cluster`` (and offline profiling), and its TenantPolicies.

The objects are shaped like a real cluster's: Nodes in ``bench/cluster_nodes.py`` (the
kubelet's, Node Feature Discovery's, GPU Feature Discovery's and MIG Manager's labels, the node
agent's annotation, conditions, ``nodeInfo``, images), Pods in ``bench/cluster_pods.py`` (a
training Job's: owner references, three containers and an init container, a running status).

The cluster is described by :class:`ClusterShape` and laid out deterministically: node ``i``
gets one of four MIG layouts (8 A100-80GB GPUs each) and ``pods_per_node`` bound pods, each on
a free instance, so every count is known here (:meth:`NodePlan.free`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

GPUS_PER_NODE = 8
PRODUCT = "NVIDIA-A100-SXM4-80GB"
SCHEDULER = "migslice-scheduler"
STAMP = "2025-05-01T00:00:00Z"
# (mig.config, share of nodes, instances per GPU by profile)
LAYOUTS: tuple[tuple[str, float, dict[str, int]], ...] = (
    ("all-balanced", 0.4, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    ("all-1g.10gb", 0.3, {"1g.10gb": 7}),
    ("all-3g.40gb", 0.2, {"3g.40gb": 2}),
    ("all-2g.20gb", 0.1, {"2g.20gb": 3}),
)
SIZES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}  # memory slices
STARTS = {  # legal starts, in the order the device plugin (and our placement) fills them
    "1g.10gb": (0, 1, 2, 3, 4, 5, 6),
    "2g.20gb": (0, 2, 4),
    "3g.40gb": (0, 4),
}


def resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile.replace("+", ".")


def node_name(index: int) -> str:
    return f"gpu-{index:05d}.cluster.internal"


def layout_of(index: int) -> tuple[str, dict[str, int]]:
    point = (index * 0.6180339887) % 1.0
    for name, share, per_gpu in LAYOUTS:
        if point < share:
            return name, per_gpu
        point -= share
    return LAYOUTS[0][0], LAYOUTS[0][2]


def gpu_instances(per_gpu: dict[str, int]) -> list[tuple[str, int, int]]:
    """(profile, start, size) of one GPU's instances, largest first at the lowest start."""
    used: set[int] = set()
    placed: list[tuple[str, int, int]] = []
    for profile in sorted(per_gpu, key=lambda p: -SIZES[p]):
        count = per_gpu[profile]
        for start in STARTS[profile]:
            span = set(range(start, start + SIZES[profile]))
            if count and not span & used:
                used |= span
                placed.append((profile, start, SIZES[profile]))
                count -= 1
    return sorted(placed, key=lambda p: p[1])


@dataclass(frozen=True)
class ClusterShape:
    nodes: int = 5000
    pods_per_node: int = 8
    tenants: int = 20
    namespaces_per_tenant: int = 2
    seed: int = 7


@dataclass
class NodePlan:
    """One node: its layout, and per GPU which instances bound pods hold (profile per pod)."""

    index: int
    config: str
    instances: list[list[tuple[str, int, int]]]
    held: list[list[bool]]
    pods: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return node_name(self.index)

    def allocatable(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for gpu in self.instances:
            for profile, _, _ in gpu:
                counts[resource(profile)] = counts.get(resource(profile), 0) + 1
        return counts

    def free(self) -> dict[str, int]:
        free = self.allocatable()
        for profile in self.pods:
            free[resource(profile)] -= 1
        return free


class ClusterPlan:
    """The whole cluster, laid out from a :class:`ClusterShape` (same shape, same cluster)."""

    def __init__(self, shape: ClusterShape) -> None:
        self.shape = shape
        rng = random.Random(shape.seed)
        self.nodes: list[NodePlan] = []
        for index in range(shape.nodes):
            config, per_gpu = layout_of(index)
            instances = [gpu_instances(per_gpu) for _ in range(GPUS_PER_NODE)]
            plan = NodePlan(index, config, instances, [[False] * len(g) for g in instances])
            for _ in range(shape.pods_per_node):
                free = [(g, k) for g, gpu in enumerate(instances) for k in range(len(gpu))]
                free = [(g, k) for g, k in free if not plan.held[g][k]]
                if not free:
                    break
                g, k = rng.choice(free)
                plan.held[g][k] = True
                plan.pods.append(instances[g][k][0])
            self.nodes.append(plan)

    def namespaces(self) -> list[str]:
        return [
            f"team-{t:02d}-{n}"
            for t in range(self.shape.tenants)
            for n in range(self.shape.namespaces_per_tenant)
        ]

    def bound_pods(self) -> Iterator[tuple[str, NodePlan, str, int]]:
        """(namespace, node, profile, number) of every bound pod."""
        namespaces = self.namespaces()
        number = 0
        for node in self.nodes:
            for profile in node.pods:
                yield namespaces[number % len(namespaces)], node, profile, number
                number += 1


# -- Tenancy ---------------------------------------------------------------------------------------


def tenant_policy(tenant: int, namespaces: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "migslice.io/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": f"team-{tenant:02d}"},
        "spec": {
            "namespaces": namespaces,
            "isolation": "hardware",
            "tiers": ["mig"],
            "sizes": {
                "small": {"memory": "10Gi", "computeSlices": 1},
                "medium": {"memory": "20Gi", "computeSlices": 2},
                "large": {"memory": "40Gi", "computeSlices": 3},
            },
            "defaultSize": "small",
            "allowedProducts": [PRODUCT],
            "quota": {"instances": 100_000, "computeSlices": 400_000},
        },
    }
