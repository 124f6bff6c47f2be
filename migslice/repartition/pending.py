"""Which pods are waiting for a geometry, and since when (from raw Pods; the time is an input);
which of them a re-partition should serve, in the order both planners serve them."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from migslice.inventory import NodeState
from migslice.names import MIG_TRANSITION_STATES, SCHEDULER_NAME
from migslice.objects.json import JsonObject
from migslice.objects.pod_selection import ANY_NODE, PodSelection, pod_selection_of
from migslice.objects.pods import (
    bound_node_of,
    metadata_of,
    phase_of,
    scheduler_name_of,
    unschedulable_since,
)
from migslice.scheduling.decisions import DemandKey, demand_key
from migslice.scheduling.demand import PodDemand, UnitKind, demand_of
from migslice.scheduling.dra_placement import dra_units_fit
from migslice.scheduling.selection import dra_unserved, scheduler_verdict


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod the scheduler could not place, for how long it has waited, and which nodes
    kube-scheduler's own filters let it onto (its node selector, affinity, tolerations)."""

    demand: PodDemand
    pending_s: float
    selection: PodSelection = ANY_NODE


def pending_pods(
    raw_pods: Iterable[JsonObject],
    now: datetime.datetime,
    scheduler_name: str = SCHEDULER_NAME,
    *,
    read: Callable[[JsonObject], PodDemand] = demand_of,
) -> list[PendingPod]:
    """Pods of ``scheduler_name`` with a MIG request, no node, and ``PodScheduled=False``
    (``Unschedulable``); ``pending_s`` counts from that condition's last transition.
    ``read``: how a pod's demand is read (default its extended resources, what the planners
    serve; :func:`migslice.scheduling.demand.with_claims` adds its ResourceClaims' asks)."""
    found: list[PendingPod] = []
    for raw in raw_pods:
        if bound_node_of(raw) is not None or scheduler_name_of(raw) != scheduler_name:
            continue
        if phase_of(raw) not in (None, "Pending") or metadata_of(raw).get("deletionTimestamp"):
            continue
        since = unschedulable_since(raw)
        if since is None:
            continue
        demand = read(raw)
        if not any(unit.kind == UnitKind.MIG for unit in demand.units):
            continue
        waited = max(0.0, (now - since).total_seconds())
        found.append(PendingPod(demand, waited, pod_selection_of(raw)))
    return found


def eligible_demand(
    pending: Sequence[PendingPod], nodes: Sequence[NodeState], min_pending_s: float
) -> tuple[list[PodDemand], list[tuple[str, str]]]:
    """The pods a re-partition should serve, and why the others wait (both modes): pods
    pending ``min_pending_s``, only MIG units, only pods no free instance could serve now on
    a node kube-scheduler would place them on."""
    unserved: list[tuple[str, str]] = []
    waiting: list[PodDemand] = []
    # many pods share one kind; a pod alone needs no memo
    servable: dict[tuple[DemandKey, PodSelection], bool] | None = {} if len(pending) > 1 else None
    for item in pending:
        pod = item.demand
        if pod.error or not pod.units:
            continue
        if item.pending_s < min_pending_s:
            unserved.append((pod.key, f"pending {item.pending_s:.0f}s < {min_pending_s:.0f}s"))
        elif any(u.kind == UnitKind.WHOLE_GPU for u in pod.units):
            unserved.append((pod.key, "whole-GPU requests need MIG disabled; not re-partitioned"))
        elif _servable(servable, item, nodes):
            unserved.append((pod.key, "a free instance exists; left to the scheduler"))
        else:
            waiting.append(pod)
    return waiting, unserved


def serving_order(pod: PodDemand) -> tuple[int, str]:
    """Largest profile first (its compute slices), then the pod's key: both planners serve
    pods in this order."""
    size = max((int(u.profile.split("g.")[0]) if u.profile else 0) for u in pod.units)
    return (-size, pod.key)


def _servable(
    known: dict[tuple[DemandKey, PodSelection], bool] | None,
    item: PendingPod,
    nodes: Sequence[NodeState],
) -> bool:
    if known is None:
        return _can_serve_now(item.demand, item.selection, nodes)
    kind = (demand_key(item.demand), item.selection)
    if kind not in known:
        known[kind] = _can_serve_now(item.demand, item.selection, nodes)
    return known[kind]


def _can_serve_now(pod: PodDemand, selection: PodSelection, nodes: Sequence[NodeState]) -> bool:
    """Whether a node has the pod's free instances now, is not re-partitioning or carving,
    and kube-scheduler would send the pod there (:func:`can_place`). A DRA node's counts know
    no taints: where some of its devices are tainted, the allocator must find the pod's
    devices among the others (as the extender's filter asks:
    :data:`migslice.scheduling.reasons.DEVICES_TAINTED`)."""
    units = [(u.resource, u.count) for u in pod.units]
    for node in nodes:
        if not all(node.free_of(resource) >= count for resource, count in units):
            continue
        dra = node.dra
        if dra is not None and dra.pool.tainted and not dra_units_fit(node, pod.units):
            continue
        if node.facts.mig_config_state in MIG_TRANSITION_STATES or node.facts.is_carving:
            continue
        if can_place(pod, selection, node):
            return True
    return False


def can_place(pod: PodDemand, selection: PodSelection, node: NodeState) -> bool:
    """Whether kube-scheduler would put the pod on ``node``, its GPUs aside: a GPU product the
    pod allows, passed by kube-scheduler's own filters (:func:`scheduler_verdict`: cordon,
    node selector and affinity, taints), and on a DRA node every extended resource of the
    pod served by a DeviceClass (:func:`dra_unserved`). A free instance elsewhere serves the
    pod no more than a re-shaped GPU there would: both planners re-shape only such nodes."""
    if pod.products is not None and (node.facts.product or "") not in pod.products:
        return False
    if scheduler_verdict(selection, node.facts) is not None:
        return False
    return dra_unserved(pod.units, node) is None
