"""Builders for carve-mode nodes: GPUs as the node agent reports them (placements, UUIDs,
busy flags) and the pods bound there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from harness.builders import make_node, make_pod
from migslice.inventory import NodeState, resolve_node
from migslice.mig import CATALOG, Placed, place
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION, REPARTITION_MODE_LABEL
from migslice.objects import (
    AgentGpu,
    AgentInstance,
    AgentReport,
    node_facts_from_raw,
    pod_facts_from_raw,
    render_layout_annotation,
)
from migslice.repartition import PendingPod
from migslice.scheduling.demand import demand_of

MODEL = CATALOG.get("A100-80GB")
PRODUCT = "NVIDIA-A100-SXM4-80GB"


def uuid_of(node: str, gpu: int, placed: Placed) -> str:
    return f"MIG-{node}-{gpu}-{placed.profile}-{placed.start}"


def gpu(*instances: str) -> list[Placed]:
    """``gpu("3g.40gb@4", "1g.10gb@0")``: a layout from ``profile@start`` words."""
    found = []
    for word in instances:
        profile, _, start = word.partition("@")
        found.append(place(MODEL, profile, int(start)))
    return sorted(found)


def carve_node_raw(
    name: str,
    layouts: Sequence[Sequence[Placed]],
    *,
    busy: Sequence[str] = (),
    mode: str | None = "carve",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A node whose agent reports ``layouts``; ``busy`` lists ``gpu:profile@start`` words."""
    report = AgentReport(
        product=PRODUCT,
        gpus=tuple(
            AgentGpu(
                i,
                True,
                tuple(
                    AgentInstance(
                        p.profile,
                        p.start,
                        p.size,
                        f"{i}:{p.profile}@{p.start}" in busy,
                        uuid_of(name, i, p),
                    )
                    for p in layout
                ),
            )
            for i, layout in enumerate(layouts)
        ),
        pci_device_id=0x20B2,
    )
    counts = Counter(p.profile for layout in layouts for p in layout)
    raw = make_node(
        name,
        gpu_count=len(layouts),
        mig=dict(counts),
        layout_annotation=render_layout_annotation(report),
        extra_labels={REPARTITION_MODE_LABEL: mode} if mode else None,
    )
    raw["metadata"]["annotations"].update(annotations or {})
    return raw


def carve_node(
    name: str,
    layouts: Sequence[Sequence[Placed]],
    *,
    busy: Sequence[str] = (),
    held: Sequence[str] = (),
    mode: str | None = "carve",
    request: str | None = None,
    status: str | None = None,
) -> NodeState:
    """``held``: profiles that bound pods hold beyond the busy instances (pods whose
    processes have not started); every busy instance has its pod too."""
    annotations = {}
    if request is not None:
        annotations[CARVE_ANNOTATION] = request
    if status is not None:
        annotations[CARVE_STATE_ANNOTATION] = status
    raw = carve_node_raw(name, layouts, busy=busy, mode=mode, annotations=annotations)
    profiles = [word.split(":")[1].split("@")[0] for word in busy] + list(held)
    pods = [
        pod_facts_from_raw(make_pod(f"{name}-held-{i}", profile=profile, node_name=name))
        for i, profile in enumerate(profiles)
    ]
    return resolve_node(node_facts_from_raw(raw), [p for p in pods if p is not None])


def waiting(name: str, profile: str, waited_s: float = 120.0, count: int = 1) -> PendingPod:
    namespace, _, pod = name.partition("/")
    return PendingPod(
        demand_of(make_pod(pod, namespace=namespace, profile=profile, count=count)), waited_s
    )
