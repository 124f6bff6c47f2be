"""The cluster as values: nodes -> GPUs -> layouts -> allocations.

Built from raw Node and Pod objects (and the node agent's ``migslice.io/gpu-layout``
annotation when present); see :mod:`migslice.inventory.layouts` for what precision each
source of layouts gives. Pure: no I/O, no clock.
"""

from migslice.inventory.annotation import (
    LAYOUT_ANNOTATION,
    LAYOUT_VERSION,
    AgentGpu,
    AgentInstance,
    AgentReport,
    GpuLayoutAnnotation,
    LayoutAnnotationError,
    parse_layout_annotation,
    render_layout_annotation,
)
from migslice.inventory.index import ClusterIndex, MigConfigs
from migslice.inventory.layouts import (
    GpuState,
    LayoutSource,
    NodeState,
    mig_resource,
    model_of,
    resolve_node,
)
from migslice.inventory.nodes import (
    GPU_COUNT_LABEL,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_STRATEGY_LABEL,
    NodeFacts,
    node_facts_from_raw,
)
from migslice.inventory.pods import (
    GPU_RESOURCE_PREFIX,
    PRODUCT_LABEL,
    PodFacts,
    Requests,
    gpu_requests,
    pod_facts_from_raw,
    pod_key,
    product_constraint,
)
from migslice.inventory.quantities import QuantityError, parse_count
from migslice.mig.migparted import builtin_counts, per_gpu_counts

__all__ = [
    "GPU_COUNT_LABEL",
    "GPU_RESOURCE_PREFIX",
    "LAYOUT_ANNOTATION",
    "LAYOUT_VERSION",
    "MIG_CAPABLE_LABEL",
    "MIG_CONFIG_LABEL",
    "MIG_CONFIG_STATE_LABEL",
    "MIG_STRATEGY_LABEL",
    "PRODUCT_LABEL",
    "AgentGpu",
    "AgentInstance",
    "AgentReport",
    "ClusterIndex",
    "GpuLayoutAnnotation",
    "GpuState",
    "LayoutAnnotationError",
    "LayoutSource",
    "MigConfigs",
    "NodeFacts",
    "NodeState",
    "PodFacts",
    "QuantityError",
    "Requests",
    "builtin_counts",
    "gpu_requests",
    "mig_resource",
    "model_of",
    "node_facts_from_raw",
    "parse_count",
    "parse_layout_annotation",
    "per_gpu_counts",
    "pod_facts_from_raw",
    "pod_key",
    "product_constraint",
    "render_layout_annotation",
    "resolve_node",
]
