"""How a node of an applied plan ends, and what its end asks for (``migslice.repartition.decide``).

``success`` on the plan's config starts the node's cooldown and records the pods it served
(``served``, touched by the shell); ``failed`` restores the previous config's label (with
``pending``, :func:`roll_back`) and backs the node off; a label someone else set or removed
(``superseded``) backs the node off too, with a ``MigRepartitionSuperseded`` Event; not
``success`` within the deadline (``timeout``) restores the label too and quarantines the node
(``migslice.repartition.migmanager.quarantine``): the record keeps it, the Node gets its label
and annotation, a Warning Event says so.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from migslice.inventory import NodeState
from migslice.names import (
    MIG_CONFIG_LABEL,
    MIG_CONFIG_STATE_LABEL,
    MIG_STATE_FAILED,
    MIG_STATE_PENDING,
    MIG_STATE_SUCCESS,
)
from migslice.objects.nodes import NodeFacts
from migslice.objects.times import format_time
from migslice.repartition.actions import (
    REASON_FAILED,
    REASON_STARTED,
    REASON_SUPERSEDED,
    ClearPending,
    NodeEvent,
    QuarantineMark,
    SetLabel,
)
from migslice.repartition.migmanager.messages import applied_message
from migslice.repartition.migmanager.quarantine import (
    REASON_QUARANTINED,
    quarantine_message,
    quarantine_note,
)
from migslice.repartition.modes import dra_exclusion, mig_manager_absence
from migslice.repartition.record import (
    ABORTED,
    FAILED,
    OPEN,
    SUCCESS,
    SUPERSEDED,
    TIMEOUT,
    NodeOutcome,
    NodeStep,
    Quarantined,
    Restore,
    Served,
    with_served,
)


@dataclass
class Closing:
    """What closing nodes of a plan adds up to: the record's maps, and the actions."""

    finished: dict[str, float]
    backoff: dict[str, float]
    quarantine: dict[str, Quarantined]
    restores: dict[str, Restore] = field(default_factory=dict)
    served: tuple[Served, ...] = ()
    labels: list[SetLabel] = field(default_factory=list)
    clears: list[ClearPending] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)
    marks: list[QuarantineMark] = field(default_factory=list)


def outcome_of(
    step: NodeStep, state: NodeState | None, elapsed: float, deadline_s: float
) -> tuple[NodeOutcome, str]:
    """How the open ``step`` stands ``elapsed`` seconds after its node was labelled."""
    if state is None:
        return ABORTED, "node is gone"
    label, phase = state.facts.mig_config, state.facts.mig_config_state
    if label == step.config_name:
        if phase == MIG_STATE_SUCCESS:
            return SUCCESS, f"applied in about {elapsed:.0f}s"
        if phase == MIG_STATE_FAILED:
            return FAILED, "MIG Manager reported state failed"
    elif label is None and step.previous_config is not None:
        return SUPERSEDED, "label removed by someone else"
    elif label != step.previous_config:
        return SUPERSEDED, f"label changed to {label!r} by someone else"
    if elapsed > deadline_s:
        return TIMEOUT, f"state {phase or 'unset'} after {elapsed:.0f}s; deadline {deadline_s:.0f}s"
    return OPEN, ""


def close_node(
    step: NodeStep,
    state: NodeState | None,
    closing: Closing,
    file_configs: Collection[str],
    *,
    now: float,
    backoff_s: float,
) -> None:
    """Record what ``step``'s end (its ``outcome``) asks for into ``closing``; ``state``: the
    node as it is now."""
    if step.outcome == SUCCESS:
        closing.finished[step.node] = now
        # the pods it served are touched by whichever replica leads once its cache shows it
        closing.served = with_served(closing.served, step.node, step.config_name, now, step.serves)
        closing.events.append(NodeEvent(step.node, REASON_STARTED, applied_message(step)))
    elif step.outcome == FAILED:
        until = closing.backoff[step.node] = now + backoff_s
        then = _restore(step, state, file_configs, closing)
        message = (
            f"mig-parted config {step.config_name}: {step.detail}; {then}; node left alone "
            f"until {format_time(until)} ({backoff_s:.0f}s)"
        )
        closing.events.append(NodeEvent(step.node, REASON_FAILED, message, warning=True))
    elif step.outcome == TIMEOUT:
        entry = Quarantined(step.node, now, step.config_name, step.detail)
        closing.quarantine[step.node] = entry
        then = _restore(step, state, file_configs, closing)
        closing.marks.append(QuarantineMark(step.node, quarantine_note(entry)))
        message = quarantine_message(entry, then)
        closing.events.append(NodeEvent(step.node, REASON_QUARANTINED, message, warning=True))
    elif step.outcome in (SUPERSEDED, ABORTED) and _orphaned(state):
        # Our label patch set state=pending; with the config label removed no MIG Manager run
        # follows (it acts on a config the label names), so nothing would ever end that
        # pending: the extender's filter would keep pods off the node and the planner count
        # it in its pool's in-flight budget for ever.
        # The admin's word is kept: the node is backed off, not planned again at once.
        closing.clears.append(ClearPending(step.node))
        until = closing.backoff[step.node] = now + backoff_s
        message = (
            f"mig-parted config {step.config_name}: {step.detail}; label "
            f"{MIG_CONFIG_LABEL} is gone, so no MIG Manager run will end state "
            f"{MIG_STATE_PENDING}: {MIG_CONFIG_STATE_LABEL} removed, the node is open to pods "
            f"in its current layout and left alone until {format_time(until)} "
            f"({backoff_s:.0f}s); set {MIG_CONFIG_LABEL} to re-partition it by hand"
        )
        closing.events.append(NodeEvent(step.node, REASON_SUPERSEDED, message, warning=True))
    elif step.outcome == SUPERSEDED:
        # Someone else set the label (another config, or removed it with MIG Manager already
        # at work): MIG Manager applies theirs and owns the state label. Their word is kept:
        # the node is backed off, not planned again the round their config succeeds.
        until = closing.backoff[step.node] = now + backoff_s
        message = (
            f"mig-parted config {step.config_name}: {step.detail}; their config is MIG "
            f"Manager's to apply, and the node is left alone until {format_time(until)} "
            f"({backoff_s:.0f}s), then re-partitioned again as pods need"
        )
        closing.events.append(NodeEvent(step.node, REASON_SUPERSEDED, message))


def _orphaned(state: NodeState | None) -> bool:
    """Whether the node has no config label but still the ``pending`` state ours set."""
    if state is None:
        return False
    facts = state.facts
    return facts.mig_config is None and facts.mig_config_state == MIG_STATE_PENDING


def _restore(
    step: NodeStep, state: NodeState | None, file_configs: Collection[str], closing: Closing
) -> str:
    """The previous config's label back, when the file still has it and the node is no DRA
    node now (NVIDIA's driver read its layout when it started; MIG Manager re-shaping the
    GPUs under it is not migslice's to ask); what was done."""
    previous = step.previous_config
    dra = None if state is None else dra_exclusion(state)
    if previous is not None and dra is not None:
        return f"label left at {step.config_name}: {dra.message}"
    if previous is not None and previous in file_configs:
        facts = None if state is None else state.facts
        closing.labels.append(roll_back(step.node, previous, step.config_name, facts))
        # in the record written before the patch: a refused patch, or a leader gone before
        # it, is tried again by whichever replica leads (the shell, each round)
        closing.restores[step.node] = Restore(step.node, previous, step.config_name)
        return f"label restored to {previous}"
    if previous is None:
        return "there was no previous config; label left"
    return f"previous config {previous} is not in the file; label left"


def roll_back(node: str, config: str, replaces: str, facts: NodeFacts | None) -> SetLabel:
    """The label that sets ``config`` back on ``node`` in place of the plan's ``replaces``,
    with ``pending`` in the same patch as a plan's label: MIG Manager answers a roll back as
    any label change, and the ``failed`` (or ``pending``) its run on the plan's config left
    must not open the node to pods while it sets the previous config back. Not where no MIG
    Manager runs (:func:`~migslice.repartition.modes.mig_manager_absence`): no run would end
    that ``pending``, and no open plan would notice it."""
    absent = facts is not None and mig_manager_absence(facts) is not None
    return SetLabel(node, config, mark_pending=not absent, replaces=replaces)
