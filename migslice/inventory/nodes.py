"""Nodes as the inventory needs them: GFD labels, MIG Manager labels, GPU allocatable, agent report.

:func:`node_facts_from_raw` keeps only what placement decisions read, so a cache of thousands
of Nodes stays small (``managedFields``, images, conditions and the rest are dropped).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.inventory.annotation import (
    LAYOUT_ANNOTATION,
    AgentReport,
    LayoutAnnotationError,
    parse_layout_annotation,
)
from migslice.inventory.pods import GPU_RESOURCE_PREFIX, PRODUCT_LABEL
from migslice.inventory.quantities import QuantityError, parse_count

GPU_COUNT_LABEL = "nvidia.com/gpu.count"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_CONFIG_STATE_LABEL = "nvidia.com/mig.config.state"

RawNode = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The decision-relevant part of a Node.

    ``allocatable`` holds only ``nvidia.com/*`` resources, sorted by name. ``agent`` is the
    parsed ``migslice.io/gpu-layout`` annotation, ``agent_error`` why it could not be parsed.
    ``problems`` lists labels or quantities that were present but unreadable.
    """

    name: str
    resource_version: str = ""
    product: str | None = None
    gpu_count: int | None = None
    mig_capable: bool | None = None
    mig_strategy: str | None = None
    mig_config: str | None = None
    mig_config_state: str | None = None
    allocatable: tuple[tuple[str, int], ...] = ()
    agent: AgentReport | None = None
    agent_error: str = ""
    problems: tuple[str, ...] = ()

    def allocatable_of(self, resource: str) -> int:
        for name, count in self.allocatable:
            if name == resource:
                return count
        return 0


def node_facts_from_raw(raw_node: RawNode) -> NodeFacts:
    """Project a raw Node (as the API or kube-scheduler sends it) to :class:`NodeFacts`."""
    metadata = raw_node.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    status = raw_node.get("status") or {}
    allocatable_raw = status.get("allocatable") or {} if isinstance(status, Mapping) else {}
    problems: list[str] = []
    allocatable: list[tuple[str, int]] = []
    if isinstance(allocatable_raw, Mapping):
        for name, value in allocatable_raw.items():
            if not (isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIX)):
                continue
            try:
                count = parse_count(value, f"status.allocatable[{name}]")
            except QuantityError as error:
                problems.append(str(error))
                continue
            allocatable.append((sys.intern(name), count))
    gpu_count: int | None = None
    count_text = _label(labels, GPU_COUNT_LABEL)
    if count_text is not None:
        try:
            gpu_count = parse_count(count_text, f"label {GPU_COUNT_LABEL}")
        except QuantityError as error:
            problems.append(str(error))
    capable_text = _label(labels, MIG_CAPABLE_LABEL)
    agent: AgentReport | None = None
    agent_error = ""
    annotation = annotations.get(LAYOUT_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(annotation, str):
        try:
            agent = parse_layout_annotation(annotation)
        except LayoutAnnotationError as error:
            agent_error = str(error)
    return NodeFacts(
        name=str(metadata.get("name") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        product=_interned(_label(labels, PRODUCT_LABEL)),
        gpu_count=gpu_count,
        mig_capable=None if capable_text is None else capable_text.lower() == "true",
        mig_strategy=_interned(_label(labels, MIG_STRATEGY_LABEL)),
        mig_config=_interned(_label(labels, MIG_CONFIG_LABEL)),
        mig_config_state=_interned(_label(labels, MIG_CONFIG_STATE_LABEL)),
        allocatable=tuple(sorted(allocatable)),
        agent=agent,
        agent_error=agent_error,
        problems=tuple(problems),
    )


def _label(labels: object, key: str) -> str | None:
    if not isinstance(labels, Mapping):
        return None
    value = labels.get(key)
    return value if isinstance(value, str) else None


def _interned(value: str | None) -> str | None:
    return None if value is None else sys.intern(value)
