"""Which path re-shapes a node's GPUs: MIG Manager (idle GPUs, whole-GPU configs) or carve
mode (the node agent creates and destroys single instances next to running ones), or none.

A node's mode is its label ``migslice.io/repartition-mode`` (``carve`` or ``mig-manager``),
else the controller's default. The two paths never act on one node: the MIG Manager planner
leaves carve-mode nodes alone (and never labels them ``nvidia.com/mig.config``), the carve
planner leaves MIG Manager nodes alone (and never writes ``migslice.io/carve`` on them).

Neither path touches a node whose GPUs NVIDIA's DRA driver publishes (:func:`dra_exclusion`,
whatever its mode label says), even one read through its device plugin as well.
"""

from __future__ import annotations

from migslice.inventory import NodeState
from migslice.names import (
    MIG_MANAGER_DEPLOY_LABEL,
    MODE_MIG_MANAGER,
    REPARTITION_MODE_LABEL,
    REPARTITION_MODES,
)
from migslice.objects.dra_pool import DraMode, PoolState
from migslice.objects.nodes import NodeFacts
from migslice.whynot import WhyNot

DRA_DYNAMIC = (
    "a DRA DynamicMIG node: NVIDIA's DRA driver creates each MIG instance when a claim is "
    "prepared, so there is no layout to change"
)
DRA_STATIC = (
    "a DRA static-MIG node: NVIDIA's DRA driver reads the MIG layout only when it starts, so a "
    "MIG Manager or carve change would leave its ResourceSlices stale until its kubelet plugin "
    "restarts, which migslice does not do"
)
DRA_AND_DEVICE_PLUGIN = (
    "served by both NVIDIA's device plugin (nvidia.com/* allocatable) and its DRA driver "
    "(gpu.nvidia.com ResourceSlices): claims the DRA driver allocates there are not seen, so a "
    "new layout could wipe a MIG device a claim holds; run only one of the two on the node"
)


def mode_of(facts: NodeFacts, default: str = MODE_MIG_MANAGER) -> str | WhyNot:
    """The node's mode, or why it has none (a label with another value: neither path acts)."""
    label = facts.repartition_mode
    if label is None:
        return default
    if label in REPARTITION_MODES:
        return label
    return WhyNot(
        "bad-mode",
        f"label {REPARTITION_MODE_LABEL}={label!r}; expected one of "
        f"{', '.join(REPARTITION_MODES)} (or no label for the controller's default)",
    )


def mig_manager_absence(facts: NodeFacts) -> WhyNot | None:
    """Why no MIG Manager would apply a config the node's label names: its label
    ``nvidia.com/gpu.deploy.mig-manager`` is there and not ``true`` (the GPU Operator's
    DaemonSet, and NVIDIA's example one, select ``true``: ``false`` turns it off on the node,
    ``paused-*`` stops it for now). Labelled anyway, the node would sit at the
    ``state=pending`` the label sets, closed to pods, until the deadline quarantined it. None
    without the label (a MIG Manager deployed otherwise may still run there)."""
    value = facts.label(MIG_MANAGER_DEPLOY_LABEL)
    if value is None or value == "true":
        return None
    return WhyNot(
        "no-mig-manager",
        f"no MIG Manager runs on the node (label {MIG_MANAGER_DEPLOY_LABEL}={value})",
    )


def dra_exclusion(node: NodeState) -> WhyNot | None:
    """Why neither path may re-shape the node's GPUs because NVIDIA's DRA driver owns them
    (its pool read, whatever its state) or publishes them beside the device plugin (claims
    allocated there are not in the device-plugin view the node is read by); None for a
    device-plugin node alone."""
    if node.dra_beside:
        return WhyNot("dra-and-device-plugin", DRA_AND_DEVICE_PLUGIN)
    dra = node.dra
    if dra is None:
        return None
    if dra.pool.state is not PoolState.READY:
        return WhyNot(
            "dra",
            f"a DRA node (ResourceSlices {dra.pool.state}); migslice does not re-partition it",
        )
    if dra.mode is DraMode.DYNAMIC:
        return WhyNot("dra-dynamic", DRA_DYNAMIC)
    return WhyNot("dra-static", DRA_STATIC)
