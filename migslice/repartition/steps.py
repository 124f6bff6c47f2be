"""The repartition controller's steps, as values: what :func:`~migslice.repartition.decide`
answers and the shell performs (persist ``step.record``, then the step's actions, in order)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from migslice.mig.migparted import MigPartedEntry
from migslice.repartition.actions import (
    CarveWrite,
    ClearPending,
    NodeEvent,
    QuarantineMark,
    SetLabel,
)
from migslice.repartition.plans import CarvePlan, RepartitionPlan
from migslice.repartition.record import CarveStep, NodeStep, RepartitionRecord


class PlanResult(enum.StrEnum):
    """How a whole plan ended, once no node of it is open."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ABORTED = "aborted"


class StepKind(enum.StrEnum):
    WAIT = "wait"
    START = "start"
    APPLY = "apply"
    ABORT = "abort"
    OBSERVE = "observe"
    FINISH = "finish"
    QUARANTINE = "quarantine"
    RESTORE = "restore"


@dataclass(frozen=True, slots=True)
class Step:
    """What to do now. ``configs``/``referenced``: for ``APPLY``, the configs to merge into the
    mig-parted file and the names its garbage collection keeps."""

    kind: StepKind
    record: RepartitionRecord
    reason: str = ""
    configs: Mapping[str, tuple[MigPartedEntry, ...]] = field(default_factory=dict)
    referenced: frozenset[str] = frozenset()
    labels: tuple[SetLabel, ...] = ()
    clears: tuple[ClearPending, ...] = ()
    """State labels to remove (after the labels): see :class:`ClearPending`."""
    events: tuple[NodeEvent, ...] = ()
    plan: RepartitionPlan | None = None
    outcomes: tuple[NodeStep, ...] = ()
    result: PlanResult | None = None
    """For ``FINISH`` and ``ABORT``: how the plan ended."""
    marks: tuple[QuarantineMark, ...] = ()
    """Quarantine labels and annotations to set or remove, after the labels."""
    carve_writes: tuple[CarveWrite, ...] = ()
    """Carve steps: the ``migslice.io/carve`` annotations to set or remove, after the record."""
    carve_outcomes: tuple[CarveStep, ...] = ()
    carve_plan: CarvePlan | None = None
