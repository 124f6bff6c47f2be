"""Which pods are waiting for a geometry, and since when (from raw Pods; the time is an input);
which of them a re-partition should serve, in the order both planners serve them."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migslice.inventory import NodeState
from migslice.names import MIG_TRANSITION_STATES, SCHEDULER_NAME
from migslice.objects.json import JsonObject
from migslice.objects.pods import (
    bound_node_of,
    metadata_of,
    phase_of,
    scheduler_name_of,
    unschedulable_since,
)
from migslice.scheduling.decisions import DemandKey, demand_key
from migslice.scheduling.demand import PodDemand, UnitKind, demand_of


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod the scheduler could not place, and for how long it has waited."""

    demand: PodDemand
    pending_s: float


def pending_pods(
    raw_pods: Iterable[JsonObject],
    now: datetime.datetime,
    scheduler_name: str = SCHEDULER_NAME,
) -> list[PendingPod]:
    """Pods of ``scheduler_name`` with a MIG request, no node, and ``PodScheduled=False``
    (``Unschedulable``); ``pending_s`` counts from that condition's last transition."""
    found: list[PendingPod] = []
    for raw in raw_pods:
        if bound_node_of(raw) is not None or scheduler_name_of(raw) != scheduler_name:
            continue
        if phase_of(raw) not in (None, "Pending") or metadata_of(raw).get("deletionTimestamp"):
            continue
        since = unschedulable_since(raw)
        if since is None:
            continue
        demand = demand_of(raw)
        if not any(unit.kind == UnitKind.MIG for unit in demand.units):
            continue
        found.append(PendingPod(demand, max(0.0, (now - since).total_seconds())))
    return found


def eligible_demand(
    pending: Sequence[PendingPod], nodes: Sequence[NodeState], min_pending_s: float
) -> tuple[list[PodDemand], list[tuple[str, str]]]:
    """The pods a re-partition should serve, and why the others wait (both modes): pods
    pending ``min_pending_s``, only MIG units, only pods no free instance could serve now."""
    unserved: list[tuple[str, str]] = []
    waiting: list[PodDemand] = []
    servable: dict[DemandKey, bool] = {}  # per kind of pod: many pods share one
    for item in pending:
        pod = item.demand
        if pod.error or not pod.units:
            continue
        if item.pending_s < min_pending_s:
            unserved.append((pod.key, f"pending {item.pending_s:.0f}s < {min_pending_s:.0f}s"))
        elif any(u.kind == UnitKind.WHOLE_GPU for u in pod.units):
            unserved.append((pod.key, "whole-GPU requests need MIG disabled; not re-partitioned"))
        elif _servable(servable, pod, nodes):
            unserved.append((pod.key, "a free instance exists; left to the scheduler"))
        else:
            waiting.append(pod)
    return waiting, unserved


def serving_order(pod: PodDemand) -> tuple[int, str]:
    """Largest profile first (its compute slices), then the pod's key: both planners serve
    pods in this order."""
    size = max((int(u.profile.split("g.")[0]) if u.profile else 0) for u in pod.units)
    return (-size, pod.key)


def _servable(known: dict[DemandKey, bool], pod: PodDemand, nodes: Sequence[NodeState]) -> bool:
    kind = demand_key(pod)
    if kind not in known:
        known[kind] = _can_serve_now(pod, nodes)
    return known[kind]


def _can_serve_now(pod: PodDemand, nodes: Sequence[NodeState]) -> bool:
    units = [(u.resource, u.count) for u in pod.units]
    for node in nodes:
        if not all(node.free_of(resource) >= count for resource, count in units):
            continue
        if node.facts.mig_config_state in MIG_TRANSITION_STATES or node.facts.is_carving:
            continue
        if pod.products is None or (node.facts.product or "") in pod.products:
            return True
    return False
