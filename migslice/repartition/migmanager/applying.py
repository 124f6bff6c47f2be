"""Applying a written plan and observing its nodes (the *planned* and *applying* states of
:mod:`migslice.repartition.decide`): the re-check right before a node is labelled, MIG
Manager's outcome per node, and the record, labels and Events each outcome asks for."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from migslice.inventory import GpuState, LayoutSource, NodeState
from migslice.mig.migparted import MigPartedEntry, profile_counts
from migslice.names import MIG_TRANSITION_STATES, MODE_CARVE, REPARTITION_MODE_LABEL
from migslice.repartition.actions import REASON_STARTED, NodeEvent, SetLabel
from migslice.repartition.migmanager.closing import Closing, close_node, outcome_of
from migslice.repartition.migmanager.messages import applying_message, referenced_configs
from migslice.repartition.modes import dra_exclusion, mig_manager_absence
from migslice.repartition.pending import PendingPod, can_place
from migslice.repartition.record import (
    ABORTED,
    FAILED,
    SUCCESS,
    TIMEOUT,
    ActivePlan,
    NodeStep,
    RepartitionRecord,
)
from migslice.repartition.settings import ControllerSettings
from migslice.repartition.steps import PlanResult, Step, StepKind
from migslice.scheduling.selection import scheduler_verdict
from migslice.whynot import WhyNot


def recheck(
    step: NodeStep, state: NodeState | None, pending: Sequence[PendingPod] = ()
) -> WhyNot | None:
    """Why ``step`` must not be applied to the node as it is now; None when it may.
    ``pending``: the pods waiting now; those the step serves must still be able to go to the
    node (not cordoned since, no taint they do not tolerate)."""
    problem = _recheck(step, state) or _unreachable(step, state, pending)
    return WhyNot("changed-since-planned", problem) if problem else None


def _unreachable(step: NodeStep, state: NodeState | None, pending: Sequence[PendingPod]) -> str:
    """Why none of the still pending pods ``step`` serves can be placed on the node now (the
    node cordoned, say for a drain, or tainted since it was planned); "" when one can, or when
    none is pending any more."""
    served = [p for p in pending if p.demand.key in step.serves]
    if state is None or not served:
        return ""
    if any(can_place(p.demand, p.selection, state) for p in served):
        return ""
    why = scheduler_verdict(served[0].selection, state.facts) or "its GPU product or DRA"
    return f"no pod it serves can be placed on the node now: {why}"


def _recheck(step: NodeStep, state: NodeState | None) -> str:
    if state is None:
        return "node is gone"
    facts = state.facts
    dra = dra_exclusion(state)
    if dra is not None:  # NVIDIA's DRA driver publishes its GPUs now: never labelled
        return f"node is now {dra.message}"
    if facts.repartition_mode == MODE_CARVE or facts.is_carving:
        return f"node is in carve mode ({REPARTITION_MODE_LABEL}) or carving"
    absent = mig_manager_absence(facts)
    if absent is not None:
        return absent.message
    if facts.mig_config != step.previous_config:
        return (
            f"label nvidia.com/mig.config is {facts.mig_config!r}, "
            f"was {step.previous_config!r} when planned"
        )
    if facts.mig_config_state in MIG_TRANSITION_STATES:
        return f"MIG Manager is applying a config (state {facts.mig_config_state})"
    if state.source == LayoutSource.COUNTS:
        held = [f"{count} x {name}" for name, count in state.allocated if count]
        return f"pods hold {', '.join(held)}" if held else ""
    gpus = {gpu.index: gpu for gpu in state.gpus}
    unidentified = state.unidentified_holds()
    for index in step.gpus:
        gpu = gpus.get(index)
        if gpu is None or not gpu.mig_enabled:
            return f"GPU {index} is no longer a MIG GPU of the node"
        if not gpu.is_idle:
            return f"GPU {index} is in use by a pod since planning"
        held = sorted({i.profile for i in gpu.instances} & unidentified)
        if held:
            return (
                f"GPU {index} has a {held[0]} instance and pods hold {held[0]} instances the "
                "agent does not see in use: one may be theirs"
            )
    return _kept_changed(step, gpus)


def _kept_changed(step: NodeStep, gpus: Mapping[int, GpuState]) -> str:
    """Which GPU the step's config describes as it was when planned (to be left as it is) has
    another layout now; "" when none. mig-parted sets every GPU the config lists: one whose
    layout changed since (MIG Manager applied the node's config again after a reboot, under
    the same label) would be cleared, and the instances pods were given there with it."""
    for entry in step.entries:
        for index in entry.devices if entry.devices is not None else sorted(gpus):
            gpu = gpus.get(index)
            if index in step.gpus or gpu is None:
                continue
            now = profile_counts(gpu.instances) if gpu.mig_enabled else None
            if now != entry.mig_devices:
                has = "MIG off" if now is None else _counts(now)
                return f"GPU {index} has {has}, the plan keeps it as {_counts(entry.mig_devices)}"
    return ""


def _counts(counts: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{n} x {profile}" for profile, n in counts) or "none"


def apply_plan(
    record: RepartitionRecord,
    active: ActivePlan,
    states: Mapping[str, NodeState],
    nodes: Sequence[NodeState],
    now: float,
    propagation_s: float = 0.0,
    pending: Sequence[PendingPod] = (),
) -> Step:
    steps: list[NodeStep] = []
    configs: dict[str, tuple[MigPartedEntry, ...]] = {}
    labels: list[SetLabel] = []
    events: list[NodeEvent] = []
    arriving: list[str] = []
    written: dict[str, tuple[MigPartedEntry, ...]] = {}
    for step in active.nodes:
        if not step.is_open or step.applied_at is not None:
            steps.append(step)
            continue
        if step.written_at is None and propagation_s > 0:
            # planned by a controller that wrote configs with their labels: written now,
            # labelled once MIG Manager can have read them
            steps.append(replace(step, written_at=now))
            written[step.config_name] = step.entries
            arriving.append(f"{step.node} ({propagation_s:.0f}s)")
            continue
        if step.written_at is not None and now - step.written_at < propagation_s:
            # MIG Manager reads the kubelet's copy of the file, and only when its label
            # changes: labelled before its config arrives, it fails for good
            steps.append(step)
            arriving.append(f"{step.node} ({step.written_at + propagation_s - now:.0f}s)")
            continue
        problem = recheck(step, states.get(step.node), pending)
        if problem is not None:
            steps.append(replace(step, outcome=ABORTED, detail=f"not applied: {problem.message}"))
            continue
        steps.append(replace(step, applied_at=now))
        configs[step.config_name] = step.entries
        labels.append(SetLabel(step.node, step.config_name))
        events.append(NodeEvent(step.node, REASON_STARTED, applying_message(step)))
    aborted = tuple(s for s in steps if s.outcome == ABORTED and s not in active.nodes)
    if not labels and arriving:
        waiting = replace(active, nodes=tuple(steps))
        return Step(
            StepKind.OBSERVE if aborted or written else StepKind.WAIT,
            record.with_plan(waiting),
            f"plan {active.plan_id}: labelling once the mig-parted ConfigMap reaches MIG "
            f"Manager: {', '.join(arriving)}",
            configs=written,
            referenced=referenced_configs(nodes, waiting, record) if written else frozenset(),
            outcomes=aborted,
        )
    applied = replace(active, applied_at=active.applied_at or now, nodes=tuple(steps))
    if not labels:
        reason = "; ".join(f"{s.node}: {s.detail}" for s in aborted) or "nothing left to apply"
        if applied.open_nodes:  # nodes that joined an applied plan: the others go on
            return Step(StepKind.OBSERVE, record.with_plan(applied), reason, outcomes=aborted)
        return Step(
            StepKind.ABORT,
            record.with_plan(None),
            reason,
            outcomes=aborted,
            result=PlanResult.ABORTED,
        )
    new_record = record.with_plan(applied)
    configs.update(written)
    return Step(
        StepKind.APPLY,
        new_record,
        f"plan {active.plan_id}: applying "
        + ", ".join(f"{x.node}={x.config_name}" for x in labels),
        configs=configs,
        referenced=referenced_configs(nodes, applied, record),
        labels=tuple(labels),
        events=tuple(events),
        outcomes=aborted,
    )


def observe_plan(
    record: RepartitionRecord,
    active: ActivePlan,
    states: Mapping[str, NodeState],
    nodes: Sequence[NodeState],
    file_configs: Collection[str],
    now: float,
    settings: ControllerSettings,
    pending: Sequence[PendingPod] = (),
) -> Step:
    """Each labelled open node's outcome, and what it asks for. ``pending``: the pods waiting
    now (a node still to be labelled again must still take one its step serves)."""
    assert active.applied_at is not None
    steps: list[NodeStep] = []
    closed: list[NodeStep] = []
    closing = Closing(
        dict(record.finished),
        dict(record.backoff),
        {q.node: q for q in record.quarantine},
        {r.node: r for r in record.restores},
        record.served,
    )
    waiting: list[str] = []
    for step in active.nodes:
        if not step.is_open or step.applied_at is None:  # closed, or its label still to come
            steps.append(step)
            continue
        state = states.get(step.node)
        elapsed = now - step.applied_at
        done = _outcome(
            step, state, elapsed, closing, deadline_s=settings.deadline_s, pending=pending
        )
        steps.append(done)
        if not done.outcome:
            phase = state.facts.mig_config_state if state else "?"
            waiting.append(f"{step.node} ({phase}, {elapsed:.0f}s)")
            continue
        closed.append(done)
        close_node(done, state, closing, file_configs, now=now, backoff_s=settings.backoff_s)
    if not closed and not closing.labels:
        reason = f"plan {active.plan_id}: waiting for " + ", ".join(waiting)
        return Step(StepKind.WAIT, record, reason)
    remaining = replace(active, nodes=tuple(steps))
    still_open = bool(remaining.open_nodes)
    new_record = replace(
        record,
        plan=remaining if still_open else None,
        finished=tuple(sorted(closing.finished.items())),
        backoff=tuple(sorted(closing.backoff.items())),
        quarantine=tuple(closing.quarantine[n] for n in sorted(closing.quarantine)),
        restores=tuple(closing.restores[n] for n in sorted(closing.restores)),
        served=closing.served,
    )
    reason = f"plan {active.plan_id}: " + (
        ", ".join(f"{s.node} {s.outcome}" for s in closed) or "labelling again"
    )
    return Step(
        StepKind.OBSERVE if still_open else StepKind.FINISH,
        new_record,
        reason,
        labels=tuple(closing.labels),
        clears=tuple(closing.clears),
        events=tuple(closing.events),
        outcomes=tuple(closed),
        result=None if still_open else _result(steps),
        marks=tuple(closing.marks),
    )


def _outcome(
    step: NodeStep,
    state: NodeState | None,
    elapsed: float,
    closing: Closing,
    *,
    deadline_s: float,
    pending: Sequence[PendingPod],
) -> NodeStep:
    """``step`` with its outcome when it has one now; unchanged while it waits. A node still at
    the previous config (a restart between the file write and the label) is labelled now,
    after the re-check the first labelling runs (``pending`` included)."""
    outcome, detail = outcome_of(step, state, elapsed, deadline_s)
    if not outcome and state is not None and state.facts.mig_config != step.config_name:
        problem = recheck(step, state, pending)
        if problem is not None:
            outcome, detail = ABORTED, f"not applied: {problem.message}"
        else:
            closing.labels.append(SetLabel(step.node, step.config_name))
    return replace(step, outcome=outcome, detail=detail) if outcome else step


def _result(steps: Sequence[NodeStep]) -> PlanResult:
    outcomes = {step.outcome for step in steps}
    if outcomes & {FAILED, TIMEOUT}:
        return PlanResult.FAILED
    if SUCCESS in outcomes:
        return PlanResult.SUCCEEDED
    return PlanResult.ABORTED
