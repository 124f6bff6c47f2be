"""Which pods are waiting for a geometry, and since when (from raw Pods; the time is an input)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migslice.names import SCHEDULER_NAME
from migslice.objects.times import parse_time
from migslice.scheduling.demand import PodDemand, UnitKind, demand_of


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod the scheduler could not place, and for how long it has waited."""

    demand: PodDemand
    pending_s: float


def unschedulable_since(raw_pod: Mapping[str, Any]) -> datetime.datetime | None:
    """When ``PodScheduled`` turned ``False`` with reason ``Unschedulable``; None otherwise."""
    status = raw_pod.get("status") or {}
    for condition in status.get("conditions") or ():
        if not isinstance(condition, Mapping) or condition.get("type") != "PodScheduled":
            continue
        if condition.get("status") != "False" or condition.get("reason") != "Unschedulable":
            return None
        return parse_time(condition.get("lastTransitionTime"))
    return None


def pending_pods(
    raw_pods: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
    scheduler_name: str = SCHEDULER_NAME,
) -> list[PendingPod]:
    """Pods of ``scheduler_name`` with a MIG request, no node, and ``PodScheduled=False``
    (``Unschedulable``); ``pending_s`` counts from that condition's last transition."""
    found: list[PendingPod] = []
    for raw in raw_pods:
        spec = raw.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != scheduler_name:
            continue
        if (raw.get("status") or {}).get("phase") not in (None, "Pending"):
            continue
        if (raw.get("metadata") or {}).get("deletionTimestamp"):
            continue
        since = unschedulable_since(raw)
        if since is None:
            continue
        demand = demand_of(raw)
        if not any(unit.kind == UnitKind.MIG for unit in demand.units):
            continue
        found.append(PendingPod(demand, max(0.0, (now - since).total_seconds())))
    return found
