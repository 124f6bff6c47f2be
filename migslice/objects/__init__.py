"""One reader per Kubernetes object: Pods, Nodes (with the node agent's annotation), cluster
files, timestamps. Every other part of migslice reads raw API objects through these, and
takes the names it shares with Kubernetes and NVIDIA from :mod:`migslice.names`."""

from migslice.objects.clusterfile import (
    ClusterFileError,
    ClusterObjects,
    load_cluster_text,
    parse_cluster_objects,
)
from migslice.objects.gpu_layout import (
    LAYOUT_VERSION,
    AgentGpu,
    AgentInstance,
    AgentReport,
    GpuLayoutAnnotation,
    LayoutAnnotationError,
    parse_layout_annotation,
    render_layout_annotation,
)
from migslice.objects.nodes import NodeFacts, node_facts_from_raw
from migslice.objects.pod_gpus import (
    ContainerGpu,
    ContainerKind,
    PodGpu,
    Requests,
    effective_counts,
    gpu_requests,
    is_gpu_resource,
    read_pod_gpu,
)
from migslice.objects.pods import PodFacts, pod_facts_from_raw, pod_key, product_constraint
from migslice.objects.times import format_time, parse_epoch_s, parse_time

__all__ = [
    "LAYOUT_VERSION",
    "AgentGpu",
    "AgentInstance",
    "AgentReport",
    "ClusterFileError",
    "ClusterObjects",
    "ContainerGpu",
    "ContainerKind",
    "GpuLayoutAnnotation",
    "LayoutAnnotationError",
    "NodeFacts",
    "PodFacts",
    "PodGpu",
    "Requests",
    "effective_counts",
    "format_time",
    "gpu_requests",
    "is_gpu_resource",
    "load_cluster_text",
    "node_facts_from_raw",
    "parse_cluster_objects",
    "parse_epoch_s",
    "parse_layout_annotation",
    "parse_time",
    "pod_facts_from_raw",
    "pod_key",
    "product_constraint",
    "read_pod_gpu",
    "render_layout_annotation",
]
