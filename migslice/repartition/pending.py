"""Which pods are waiting for a geometry, and since when (from raw Pods; the time is an input)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice.names import SCHEDULER_NAME
from migslice.objects.json import JsonObject
from migslice.objects.pods import bound_node_of, metadata_of, phase_of, scheduler_name_of
from migslice.objects.times import parse_time
from migslice.scheduling.demand import PodDemand, UnitKind, demand_of


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod the scheduler could not place, and for how long it has waited."""

    demand: PodDemand
    pending_s: float


def unschedulable_since(raw_pod: JsonObject) -> datetime.datetime | None:
    """When ``PodScheduled`` turned ``False`` with reason ``Unschedulable``; None otherwise."""
    status = raw_pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if not isinstance(condition, Mapping) or condition.get("type") != "PodScheduled":
            continue
        if condition.get("status") != "False" or condition.get("reason") != "Unschedulable":
            return None
        return parse_time(condition.get("lastTransitionTime"))
    return None


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
