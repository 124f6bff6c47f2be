"""The cluster as values: nodes -> GPUs -> layouts -> allocations.

Built from the projections of :mod:`migslice.objects` (Node and Pod facts, the node agent's
``migslice.io/gpu-layout`` report); see :mod:`migslice.inventory.layouts` for what precision
each source of layouts gives. Pure: no I/O, no clock.
"""

from migslice.inventory.index import ClusterIndex, MigConfigs
from migslice.inventory.layouts import (
    GpuState,
    LayoutSource,
    NodeState,
    mig_resource,
    model_of,
    resolve_node,
)
from migslice.mig.migparted import builtin_counts, per_gpu_counts

__all__ = [
    "ClusterIndex",
    "GpuState",
    "LayoutSource",
    "MigConfigs",
    "NodeState",
    "builtin_counts",
    "mig_resource",
    "model_of",
    "per_gpu_counts",
    "resolve_node",
]
