"""The reasons the filter gives, one wording per cause.

kube-scheduler aggregates identical reasons in the pod's FailedScheduling event ("0/40 nodes
are available: 12 all 1g.10gb MIG instances in use, 28 MIG disabled on node."), so a reason
names the cause and the value that decides it, never node-specific numbers.
"""

from __future__ import annotations

UNKNOWN_NODE = "node unknown to migslice extender (cache not synced yet)"
NO_GPU = "node has no NVIDIA GPU"
MIG_DISABLED = "MIG disabled on node"


def repartitioning(state: str) -> str:
    return f"node being re-partitioned (nvidia.com/mig.config.state={state})"


CARVING = "node being re-partitioned (migslice.io/carve in progress)"


def unknown_product(product: str) -> str:
    return f"GPU product {product} not in migslice catalog"


def mig_unsupported(product: str) -> str:
    return f"GPU product {product} does not support MIG"


def wrong_strategy(strategy: str) -> str:
    return f"MIG strategy {strategy} (nvidia.com/mig.strategy); migslice needs mixed"


def product_excluded(product: str) -> str:
    return f"GPU product {product} not allowed for pod"


def profile_not_offered(model: str, profile: str) -> str:
    return f"{model} has no MIG profile {profile}"


def unknown_resource(resource: str) -> str:
    return f"{resource} is not a MIG profile resource"


def not_in_layout(profile: str) -> str:
    return f"no {profile} instance in node's MIG layout"


def too_few_in_layout(profile: str, count: int) -> str:
    return f"node's MIG layout has fewer than {count} x {profile}"


def all_in_use(profile: str) -> str:
    return f"all {profile} MIG instances in use"


NOT_ADVERTISED = "MIG devices not advertised yet"
"""GPU Feature Discovery labels the node's MIG devices (``nvidia.com/mig-<profile>.count``),
the device plugin has not advertised them (allocatable): a node that has just been
re-partitioned, so failed (kube-scheduler tries it again), not unresolvable."""

NO_WHOLE_GPU = "no whole GPU on node (MIG enabled on every GPU)"
ALL_WHOLE_GPUS_IN_USE = "all whole GPUs in use"


SLICED_GPUS = "node's nvidia.com/gpu are MIG slices, not whole GPUs"
SHARED_GPUS = "node's nvidia.com/gpu are shared replicas, not whole GPUs"


def shared_mig(resource: str) -> str:
    """Why a node whose GPU Feature Discovery labels say ``resource`` is time-sliced or MPS
    (``<resource>.sharing-strategy``, ``.replicas``) serves no MIG pod with it."""
    return f"node's {resource} are shared replicas, not MIG instances of their own"


def not_whole(product: str) -> str:
    """Why a node whose product label is ``-MIG-...`` or ``-SHARED`` serves no whole GPU."""
    return SHARED_GPUS if product.endswith("-SHARED") else SLICED_GPUS


def too_few_whole_gpus(count: int) -> str:
    return f"node has fewer than {count} whole GPUs"


def bad_pod(detail: str) -> str:
    return f"pod's GPU request is invalid: {detail}"


DRA_UNKNOWN = "node's DRA devices (gpu.nvidia.com) not understood by migslice"
"""Unresolvable: its ResourceSlices are of a shape migslice does not know (the Node's Warning
Event and the extender's notes say which)."""
DRA_INCOMPLETE = "node's DRA ResourceSlices (gpu.nvidia.com) not all published yet"
"""Failed: the driver is publishing a new generation of the node's slices."""
NO_DRA = "node publishes no DRA GPU devices (gpu.nvidia.com)"
DEVICE_PLUGIN_NODE = "node serves NVIDIA GPUs through the device plugin, not DRA"
DEVICES_TAINTED = (
    "the free devices that fit are tainted (DeviceTaintRule or the driver's taints, "
    "NoSchedule/NoExecute): tolerate the taint in the claim's request or remove the rule"
)
"""Failed: the node has room for the pod, but only on devices that a taint other than the
steer's keeps the allocator off."""
DEVICES_STEERED = (
    "the free devices that fit are held back by migslice's steer (DeviceTaintRules "
    "migslice-steer-*); its next round lifts it on the node for a pending pod that fits "
    "there unsteered (docs/dra.md, The steer)"
)
"""Failed: the node has room for the pod, but only on devices migslice's steer taints (a
pod of several devices, or pinned to a GPU); the steer loop lifts those profiles there."""
CLAIM_NOT_SEEN = "pod's ResourceClaim not seen by migslice extender yet"
"""The filter's Error (no node judged): the claim the pod names is not in the extender's
cache yet; kube-scheduler retries after its backoff."""


def kept_for_large(idle: int, kept: float, share: float, max_hold_s: float) -> str:
    return (
        f"kept whole for 7g and multi-GPU pods: {idle} idle DynamicMIG GPU(s) left, the "
        f"large-job reserve keeps {kept:.1f} (large pods brought {100 * share:.0f} % of the GPU "
        f"demand lately); the pod waits for room beside others, or {max_hold_s:g}s unschedulable "
        "at most, then may take an idle GPU (dra.largeJobReserve.maxHoldSeconds; turn the "
        "reserve off: dra.largeJobReserve.enabled=false)"
    )
