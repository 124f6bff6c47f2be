"""The repartition controller's decisions, as values: record + cluster + time -> the next step.

States of the record and the step taken from each (one call of :func:`decide` is one step;
the shell persists ``step.record`` and performs the step's actions, in that order):

* **idle** (no plan): run the planner; an empty plan -> ``WAIT``; else ``START``: write the
  plan record (``appliedAt`` null). Nothing on the cluster changes yet.
* **planned** (plan written, not applied): re-check every node against the state at apply
  time (label still the previous config, no MIG Manager run, every planned GPU still idle);
  nodes that fail it are ``aborted``. ``APPLY``: merge the remaining nodes' configs into the
  mig-parted file (with the record, in one write), then label each node
  ``nvidia.com/mig.config=<config>`` (with ``nvidia.com/mig.config.state=pending``, so that
  no stale ``success`` is read as ours and the scheduler keeps off the node), and record a
  ``MigRepartition`` Event. If every node aborts: ``ABORT``, back to idle.
* **applying** (``appliedAt`` set): per open node, ``success`` on our config -> outcome
  success (cooldown starts); ``failed``, or not ``success`` within ``deadline_s`` -> failed
  or timeout: a ``MigRepartitionFailed`` Event, the previous config label restored when the
  file still has that config, the node backed off for ``backoff_s``; a label someone else
  changed -> superseded (left alone); a label still at the previous config (a restart between
  the file write and the label) -> labelled now, after the same re-check. ``OBSERVE`` when
  an outcome changed; when no node is open the plan is dropped (``FINISH``). While the open
  nodes only wait, more nodes may **join** the plan (``START``: written, then applied as in
  *planned*, each with its own deadline) for demand the plan does not serve, within the
  in-flight budget of their pool, so one slow node does not stop the others.
* a timeout also **quarantines** the node (``migslice.repartition.quarantine``): out of the
  budget, left alone until MIG Manager reports ``success`` or an admin removes the label;
  releasing it (or writing its label again) is a step of its own (``QUARANTINE``), first.

Carve-mode nodes are decided first, by the carve branch (:mod:`migslice.repartition.carve_decide`,
its own plan in ``record.carve``); this path leaves them alone and never labels them.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from migslice.inventory import LayoutSource, NodeState
from migslice.mig.migparted import MigPartedEntry
from migslice.names import MIG_TRANSITION_STATES, MODE_CARVE, REPARTITION_MODE_LABEL
from migslice.objects.times import format_time
from migslice.repartition.actions import (
    REASON_STARTED,
    NodeEvent,
    QuarantineMark,
    SetLabel,
)
from migslice.repartition.carve import CarvePlan, CarveSettings, carve_mode_nodes
from migslice.repartition.carve_decide import CarveDecision, CarveWrite, decide_carve
from migslice.repartition.carve_record import CarveStep
from migslice.repartition.closing import Closing, close_node, outcome_of
from migslice.repartition.messages import applying_message, referenced_configs
from migslice.repartition.pending import PendingPod
from migslice.repartition.planner import PlanSettings, RepartitionPlan, plan
from migslice.repartition.quarantine import held_reasons, review
from migslice.repartition.record import (
    ABORTED,
    FAILED,
    SUCCESS,
    TIMEOUT,
    ActivePlan,
    NodeStep,
    RepartitionRecord,
)
from migslice.repartition.shapes import LayoutCache
from migslice.whynot import WhyNot


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


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """``deadline_s``: how long a node may take to reach ``success``; ``backoff_s``: how long
    a node that failed is left alone. Rate limits and hysteresis are the planner's."""

    plan: PlanSettings = field(default_factory=PlanSettings)
    deadline_s: float = 600.0
    backoff_s: float = 1800.0
    carve: CarveSettings = field(default_factory=CarveSettings)


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


def decide(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    file_configs: Collection[str] | None,
    now: float,
    settings: ControllerSettings = ControllerSettings(),
    layout_cache: LayoutCache | None = None,
) -> Step:
    """The next step (see the module docstring). ``file_configs``: the config names in the
    mig-parted file, None when the ConfigMap is missing or unreadable (then nothing moves).
    ``layout_cache`` keeps the planner's maximal layouts between calls (a simulation)."""
    record = _pruned(record, now, settings)
    carve = decide_carve(
        record,
        nodes,
        pending,
        now=now,
        settings=settings.carve,
        deadline_s=settings.deadline_s,
        backoff_s=settings.backoff_s,
    )
    if carve is not None:  # carve mode needs the record only, not the mig-parted file
        return _carve_step(carve)
    if file_configs is None:
        return Step(StepKind.WAIT, record, "mig-parted ConfigMap missing or unreadable")
    if record.carve is not None:  # pods a carve in flight serves are not MIG Manager's demand
        pending = [p for p in pending if p.demand.key not in record.carve.serves]
    states = {node.name: node for node in nodes}
    quarantine = _quarantine_step(record, states)
    if quarantine is not None and quarantine.record != record:
        return quarantine  # a release: the record changes first
    step = _next(
        record,
        states,
        nodes,
        pending=pending,
        file_configs=file_configs,
        now=now,
        settings=settings,
        layout_cache=layout_cache,
    )
    if quarantine is not None:  # marks to write again ride along, never holding a plan up
        step = replace(step, marks=step.marks + quarantine.marks)
    return step


def _next(
    record: RepartitionRecord,
    states: Mapping[str, NodeState],
    nodes: Sequence[NodeState],
    *,
    pending: Sequence[PendingPod],
    file_configs: Collection[str],
    now: float,
    settings: ControllerSettings,
    layout_cache: LayoutCache | None,
) -> Step:
    active = record.plan
    if active is None:
        return _start(record, nodes, pending, now, settings, layout_cache)
    if any(step.is_open and step.applied_at is None for step in active.nodes):
        return _apply(record, active, states, nodes, now)
    observed = _observe(record, active, states, nodes, file_configs, now, settings)
    if observed.kind != StepKind.WAIT:
        return observed
    joined = _start(record, nodes, pending, now, settings, layout_cache)
    return joined if joined.kind == StepKind.START else observed


def recheck(step: NodeStep, state: NodeState | None) -> WhyNot | None:
    """Why ``step`` must not be applied to the node as it is now; None when it may."""
    problem = _recheck(step, state)
    return WhyNot("changed-since-planned", problem) if problem else None


def _recheck(step: NodeStep, state: NodeState | None) -> str:
    if state is None:
        return "node is gone"
    facts = state.facts
    if facts.repartition_mode == MODE_CARVE or facts.is_carving:
        return f"node is in carve mode ({REPARTITION_MODE_LABEL}) or carving"
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
    for index in step.gpus:
        gpu = gpus.get(index)
        if gpu is None or not gpu.mig_enabled:
            return f"GPU {index} is no longer a MIG GPU of the node"
        if not gpu.is_idle:
            return f"GPU {index} is in use by a pod since planning"
    return ""


def plan_id(changes: Sequence[str], now: float) -> str:
    digest = hashlib.sha256(f"{format_time(now)};{','.join(changes)}".encode())
    return digest.hexdigest()[:12]


def _pruned(
    record: RepartitionRecord, now: float, settings: ControllerSettings
) -> RepartitionRecord:
    cooldown = settings.plan.cooldown_s
    finished = tuple((n, at) for n, at in record.finished if now - at < cooldown)
    backoff = tuple((n, until) for n, until in record.backoff if until > now)
    if finished == record.finished and backoff == record.backoff:
        return record
    return replace(record, finished=finished, backoff=backoff)


def _start(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    now: float,
    settings: ControllerSettings,
    layout_cache: LayoutCache | None,
) -> Step:
    """A new plan, or (while one is applied and waits) more nodes joining it."""
    active = record.plan
    cooldowns = {node: now - at for node, at in record.finished}
    held = {
        node: f"backed off after a failed re-partition until {format_time(until)}"
        for node, until in record.backoff
    }
    held.update(carve_mode_nodes(nodes, settings.carve.default_mode))
    if record.carve is not None:
        held.update({s.node: "a carve is changing it" for s in record.carve.open_nodes})
    if active is not None:  # its open nodes are in flight; the pods they serve are served
        held.update({s.node: "in the plan in progress" for s in active.open_nodes})
        served = {pod for s in active.open_nodes for pod in s.serves}
        pending = [p for p in pending if p.demand.key not in served]
    result = plan(
        nodes,
        pending,
        cooldowns=cooldowns,
        settings=settings.plan,
        held=held,
        quarantined=held_reasons(record.quarantine),
        layout_cache=layout_cache,
    )
    if result.is_empty:
        waiting = len(result.unserved)
        return Step(
            StepKind.WAIT, record, f"nothing to re-partition ({waiting} pods pending)", plan=result
        )
    steps = tuple(
        NodeStep(
            node=change.node,
            config_name=change.config_name,
            previous_config=change.previous_config,
            gpus=tuple(gpu.index for gpu in change.gpus),
            serves=change.serves,
            entries=change.entries,
        )
        for change in result.changes
    )
    names = ", ".join(f"{s.node}={s.config_name}" for s in steps)
    if active is not None:
        joined = replace(active, nodes=active.nodes + steps)
        reason = f"plan {active.plan_id}: joined by {names}"
        return Step(StepKind.START, record.with_plan(joined), reason, plan=result)
    active = ActivePlan(plan_id([s.config_name for s in steps], now), now, None, steps)
    return Step(
        StepKind.START, record.with_plan(active), f"plan {active.plan_id}: {names}", plan=result
    )


def _apply(
    record: RepartitionRecord,
    active: ActivePlan,
    states: Mapping[str, NodeState],
    nodes: Sequence[NodeState],
    now: float,
) -> Step:
    steps: list[NodeStep] = []
    configs: dict[str, tuple[MigPartedEntry, ...]] = {}
    labels: list[SetLabel] = []
    events: list[NodeEvent] = []
    for step in active.nodes:
        if not step.is_open or step.applied_at is not None:
            steps.append(step)
            continue
        problem = recheck(step, states.get(step.node))
        if problem is not None:
            steps.append(replace(step, outcome=ABORTED, detail=f"not applied: {problem.message}"))
            continue
        steps.append(replace(step, applied_at=now))
        configs[step.config_name] = step.entries
        labels.append(SetLabel(step.node, step.config_name))
        events.append(NodeEvent(step.node, REASON_STARTED, applying_message(step)))
    aborted = tuple(s for s in steps if s.outcome == ABORTED and s not in active.nodes)
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
    return Step(
        StepKind.APPLY,
        new_record,
        f"plan {active.plan_id}: applying "
        + ", ".join(f"{x.node}={x.config_name}" for x in labels),
        configs=configs,
        referenced=referenced_configs(nodes, applied),
        labels=tuple(labels),
        events=tuple(events),
        outcomes=aborted,
    )


def _observe(
    record: RepartitionRecord,
    active: ActivePlan,
    states: Mapping[str, NodeState],
    nodes: Sequence[NodeState],
    file_configs: Collection[str],
    now: float,
    settings: ControllerSettings,
) -> Step:
    assert active.applied_at is not None
    steps: list[NodeStep] = []
    closed: list[NodeStep] = []
    closing = Closing(
        dict(record.finished), dict(record.backoff), {q.node: q for q in record.quarantine}
    )
    waiting: list[str] = []
    for step in active.nodes:
        if not step.is_open:
            steps.append(step)
            continue
        state = states.get(step.node)
        elapsed = now - (step.applied_at if step.applied_at is not None else active.applied_at)
        outcome, detail = outcome_of(step, state, elapsed, settings.deadline_s)
        if not outcome and state is not None and state.facts.mig_config != step.config_name:
            problem = recheck(step, state)  # still at the previous config: label it now
            if problem is not None:
                outcome, detail = ABORTED, f"not applied: {problem.message}"
            else:
                closing.labels.append(SetLabel(step.node, step.config_name))
        if not outcome:
            steps.append(step)
            phase = state.facts.mig_config_state if state else "?"
            waiting.append(f"{step.node} ({phase}, {elapsed:.0f}s)")
            continue
        done = replace(step, outcome=outcome, detail=detail)
        steps.append(done)
        closed.append(done)
        close_node(done, closing, file_configs, now=now, backoff_s=settings.backoff_s)
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
    )
    reason = f"plan {active.plan_id}: " + (
        ", ".join(f"{s.node} {s.outcome}" for s in closed) or "labelling again"
    )
    return Step(
        StepKind.OBSERVE if still_open else StepKind.FINISH,
        new_record,
        reason,
        labels=tuple(closing.labels),
        events=tuple(closing.events),
        outcomes=tuple(closed),
        result=None if still_open else _result(steps),
        marks=tuple(closing.marks),
    )


def _carve_step(carve: CarveDecision) -> Step:
    """The carve branch's decision as a step of the one state machine."""
    return Step(
        StepKind(carve.kind),
        carve.record,
        carve.reason,
        events=tuple(NodeEvent(n.node, n.reason, n.message, n.warning) for n in carve.notices),
        result=None if carve.result is None else PlanResult(carve.result),
        carve_writes=carve.writes,
        carve_outcomes=carve.outcomes,
        carve_plan=carve.plan,
    )


def _quarantine_step(record: RepartitionRecord, states: Mapping[str, NodeState]) -> Step | None:
    change = review(record, states)
    if change is None:
        return None
    return Step(
        StepKind.QUARANTINE, change.record, change.reason, events=change.events, marks=change.marks
    )


def _result(steps: Sequence[NodeStep]) -> PlanResult:
    outcomes = {step.outcome for step in steps}
    if outcomes & {FAILED, TIMEOUT}:
        return PlanResult.FAILED
    if SUCCESS in outcomes:
        return PlanResult.SUCCEEDED
    return PlanResult.ABORTED
