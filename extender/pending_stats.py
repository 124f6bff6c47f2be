"""What the repartition leader exports each round besides its counters: GPU pods waiting per
MIG profile and the longest wait, and how long the oldest applied step of each mode has gone
unanswered (the alerts on pods pending too long and on a re-partition stuck past its
deadline read them; docs/operate.md)."""

from __future__ import annotations

from collections.abc import Sequence

from migslice.names import MODE_CARVE, MODE_MIG_MANAGER
from migslice.repartition import PendingPod, RepartitionRecord
from migslice.scheduling import UnitKind


def pending_by_profile(pending: Sequence[PendingPod]) -> dict[str, tuple[int, float]]:
    """Per MIG profile: how many pods wait for it (``PodScheduled=False``, ``Unschedulable``,
    of migslice-scheduler) and the longest of their waits, in seconds. A pod asking for two
    profiles counts under each, once per profile whether it asks as an extended resource or
    through a ResourceClaim (the caller reads its demand with its claims' asks)."""
    found: dict[str, tuple[int, float]] = {}
    for pod in pending:
        profiles = {u.profile for u in pod.demand.units if u.kind is UnitKind.MIG and u.profile}
        for profile in profiles:
            count, oldest = found.get(profile, (0, 0.0))
            found[profile] = (count + 1, max(oldest, pod.pending_s))
    return found


def open_ages(record: RepartitionRecord, now: float) -> dict[str, float]:
    """Per mode (``mig-manager``, ``carve``): seconds since the oldest node still open was
    labelled or asked (0 when none is open)."""
    ages = {MODE_MIG_MANAGER: 0.0, MODE_CARVE: 0.0}
    if record.plan is not None:
        for step in record.plan.open_nodes:
            if step.applied_at is not None:
                ages[MODE_MIG_MANAGER] = max(ages[MODE_MIG_MANAGER], now - step.applied_at)
    carve = record.carve
    if carve is not None and carve.applied_at is not None and carve.open_nodes:
        ages[MODE_CARVE] = max(0.0, now - carve.applied_at)
    return ages
