"""A GPU cluster laid out for ``bench.plane.cluster`` (and offline profiling), and its
TenantPolicies.

The objects are shaped like a real cluster's (``harness.builders`` with ``real=True``): Nodes
with the kubelet's, Node Feature Discovery's, GPU Feature Discovery's and MIG Manager's labels,
the node agent's annotation, conditions, ``nodeInfo`` and images; Pods of a training Job, with
owner references, three containers and an init container, and a running status.

The cluster is described by :class:`ClusterShape` and laid out deterministically: node ``i``
gets one of four MIG layouts (8 A100-80GB GPUs each) and ``pods_per_node`` bound pods, each on
a free instance, so every count is known here (:meth:`NodePlan.free`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harness.builders import make_node, make_pod, make_policy

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


# -- Objects -------------------------------------------------------------------------------------


def agent_annotation(plan: NodePlan) -> str:
    """The node agent's ``migslice.io/gpu-layout`` for ``plan``: its instances, busy or idle."""
    gpus = []
    for g, instances in enumerate(plan.instances):
        gpus.append(
            {
                "index": g,
                "uuid": f"GPU-{plan.index:08x}-{g:04x}-4000-8000-000000000000",
                "migEnabled": True,
                "instances": [
                    {
                        "profile": profile,
                        "start": start,
                        "size": size,
                        "uuid": f"MIG-{plan.index:08x}-{g:02x}{k:02x}-4000-8000-000000000000",
                        "busy": plan.held[g][k],
                    }
                    for k, (profile, start, size) in enumerate(instances)
                ],
            }
        )
    document = {
        "version": "v1",
        "product": PRODUCT,
        "pciDeviceId": "0x20B2",
        "observedAt": STAMP,
        "gpus": gpus,
    }
    return json.dumps(document, separators=(",", ":"))


def node_body(plan: NodePlan) -> dict[str, Any]:
    """The Node to POST, real-shaped (status included: a Node's status may be set on create)."""
    counts = {k.removeprefix("nvidia.com/mig-"): v for k, v in plan.allocatable().items()}
    return make_node(
        plan.name,
        product=PRODUCT,
        gpu_count=GPUS_PER_NODE,
        mig=counts,
        config=plan.config,
        config_state="success",
        layout_annotation=agent_annotation(plan),
        real=True,
        index=plan.index,
        with_type_meta=True,
    )


def pod_body(
    name: str,
    namespace: str,
    profile: str,
    *,
    node: str | None,
    scheduler: str = SCHEDULER,
    tenant: str = "",
) -> dict[str, Any]:
    """A training pod (a Job's) asking for one ``profile`` instance; bound when ``node``."""
    return make_pod(
        name,
        namespace=namespace,
        profile=profile,
        limits={"cpu": "4", "memory": "32Gi"},
        node_name=node,
        scheduler_name=scheduler,
        tenant=tenant or None,
        affinity_products=[PRODUCT],
        real=True,
        stored=False,
        with_type_meta=True,
    )


# -- Tenancy ---------------------------------------------------------------------------------------


def tenant_policy(tenant: int, namespaces: list[str]) -> dict[str, Any]:
    return make_policy(
        f"team-{tenant:02d}",
        namespaces=namespaces,
        isolation="hardware",
        tiers=["mig"],
        defaultSize="small",
        allowedProducts=[PRODUCT],
        quota={"instances": 100_000, "computeSlices": 400_000},
    )
