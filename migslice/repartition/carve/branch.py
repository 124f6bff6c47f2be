"""The carve branch of the repartition controller's state machine: record + cluster + time ->
the next carve step, or None when carve mode has nothing to do now (the MIG Manager path
then decides).

* **idle** (no carve plan): :func:`migslice.repartition.carve.planner.plan_carve` over carve-mode
  nodes; nothing -> None; else ``START``: the plan is written to the record (``appliedAt``
  null). Nothing on the cluster changes yet.
* **planned**: each node is re-checked against its state now (still carve mode, the agent's
  layout, every instance to destroy still there with its UUID and still idle, no carve or
  MIG Manager run under way); failing nodes are ``aborted``. ``APPLY``: the record with
  ``appliedAt`` (one write), then per node the annotation ``migslice.io/carve`` that asks
  the node agent to carve, and a ``MigCarve`` Event. All nodes aborted: ``ABORT``.
* **applied**: per open node, the agent's ``migslice.io/carve-state`` for this plan says
  ``success`` (cooldown starts; the pods it served go to the record's ``served``, for any
  leader to touch) or ``failed`` (the agent rolled back; backoff); no answer within
  ``deadline_s`` is a ``timeout`` (backoff; the request is withdrawn, so an agent that is
  still at it rolls back); a node that left carve mode or turned DRA before its agent took
  the request up is ``aborted`` at once. A closed node's request is removed, and failures
  are reported as ``MigCarveFailed`` Warnings. A request missing (a restart between the
  record write and the annotation) is written now, after the same re-check; with the journal
  missing too and the agent's fresh layout showing the plan begun (the Node deleted and made
  again after the agent acted), it is written marked ``resume`` (the agent finishes or rolls
  back from NVML), with a ``MigCarveJournal`` Warning, and with no layout yet it is awaited:
  a lost journal is never read as "nothing was done". The plan is
  dropped once no node is open (``FINISH``). A request the record holds no open, asked step
  of (its removal refused) is removed again each round (:func:`stray_requests`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from migslice.inventory import LayoutSource, NodeState
from migslice.names import MIG_TRANSITION_STATES, MODE_CARVE
from migslice.objects import AgentReport, NodeFacts
from migslice.objects.carve_handshake import CarvePhase
from migslice.objects.times import format_time
from migslice.repartition.actions import CarveWrite, NodeEvent
from migslice.repartition.carve.gpu import carved_gpus
from migslice.repartition.carve.planner import CarveMemo, plan_carve
from migslice.repartition.modes import dra_exclusion, mode_of
from migslice.repartition.pending import PendingPod
from migslice.repartition.plans import CarvePlan
from migslice.repartition.record import (
    ABORTED,
    CARVE_MARK,
    FAILED,
    OPEN,
    SUCCESS,
    TIMEOUT,
    ActiveCarve,
    CarveStep,
    NodeOutcome,
    RepartitionRecord,
    with_served,
)
from migslice.repartition.settings import CarveSettings
from migslice.whynot import WhyNot

REASON_CARVE = "MigCarve"
REASON_CARVE_FAILED = "MigCarveFailed"
REASON_CARVE_JOURNAL = "MigCarveJournal"


@dataclass(frozen=True, slots=True)
class CarveDecision:
    """``kind``: start, apply, abort, observe or finish (the names of ``StepKind``)."""

    kind: str
    record: RepartitionRecord
    reason: str
    writes: tuple[CarveWrite, ...] = ()
    notices: tuple[NodeEvent, ...] = ()
    outcomes: tuple[CarveStep, ...] = ()
    result: str | None = None
    plan: CarvePlan | None = None


def decide_carve(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    now: float,
    settings: CarveSettings,
    deadline_s: float,
    backoff_s: float,
    memo: CarveMemo | None = None,
) -> CarveDecision | None:
    """The next carve step (see the module docstring), None when there is none to take;
    ``memo``: :class:`CarveMemo` kept between calls."""
    active = record.carve
    if active is None:
        return _start(record, nodes, pending, now=now, settings=settings, memo=memo)
    states = {node.name: node for node in nodes}
    if active.applied_at is None:
        return _apply(record, active, states, now=now, settings=settings)
    return _observe(
        record, active, states, now=now, settings=settings, limits=(deadline_s, backoff_s)
    )


def recheck_carve(step: CarveStep, state: NodeState | None, default_mode: str) -> WhyNot | None:
    """Why ``step`` must not be sent to the node as it is now; None when it may."""
    problem = _recheck(step, state, default_mode)
    return WhyNot("changed-since-planned", problem) if problem else None


def _recheck(step: CarveStep, state: NodeState | None, default_mode: str) -> str:
    if state is None:
        return "node is gone"
    mode = mode_of(state.facts, default_mode)
    if mode != MODE_CARVE:
        return f"node is no longer in carve mode ({mode})"
    if state.facts.mig_config_state in MIG_TRANSITION_STATES:
        return "MIG Manager is applying a config"
    if state.facts.is_carving:
        return "a carve is under way"
    dra = dra_exclusion(state)
    if dra is not None:
        return dra.message
    if state.source != LayoutSource.AGENT:
        return "the node agent's layout no longer agrees with allocatable"
    gpus = {gpu.index: gpu for gpu in carved_gpus(state)}
    for planned in step.gpus:
        gpu = gpus.get(planned.index)
        if gpu is None:
            return f"GPU {planned.index} is no longer a MIG GPU of the node"
        now = {(p.start, p.profile): k for k, p in enumerate(gpu.old)}
        for doomed in planned.destroy:
            k = now.get((doomed.start, doomed.profile))
            if k is None or gpu.uuids[k] != doomed.uuid:
                return f"GPU {planned.index}: {doomed.profile}@{doomed.start} changed since planned"
            if gpu.pinned[k]:
                return f"GPU {planned.index}: {doomed.profile}@{doomed.start} may be in use now"
        kept = [p for k, p in enumerate(gpu.old) if gpu.pinned[k]]
        for slot in planned.create:
            size = gpu.model.profile(slot.profile).memory_slices
            mask = ((1 << size) - 1) << slot.start
            if any(p.mask & mask for p in kept):
                return f"GPU {planned.index}: {slot.profile}@{slot.start} overlaps one in use"
    return ""


def stray_requests(record: RepartitionRecord, nodes: Iterable[NodeFacts]) -> tuple[str, ...]:
    """Nodes carrying a ``migslice.io/carve`` request the record holds no asked, open step of:
    its step closed (a timeout, an answer) or its plan gone while the request's removal was
    refused or never made (a restart between the record write and the removal). Withdrawn
    each round until gone: left, it would keep the node closed to pods and count against the
    carve budget, and an agent that comes back would carve a plan given up on."""
    active = record.carve
    asked: set[tuple[str, str]] = set()
    if active is not None and active.applied_at is not None:
        asked = {(step.node, active.plan_id) for step in active.open_nodes}
    return tuple(
        facts.name
        for facts in nodes
        if facts.carve_request is not None
        and (facts.name, facts.carve_request.plan_id) not in asked
    )


def _left_carve_mode(state: NodeState, default_mode: str) -> str:
    mode = mode_of(state.facts, default_mode)
    if mode != MODE_CARVE:
        return f"node is no longer in carve mode ({mode})"
    dra = dra_exclusion(state)
    return dra.message if dra is not None else ""


def carve_plan_id(nodes: Sequence[str], now: float) -> str:
    digest = hashlib.sha256(f"carve;{format_time(now)};{','.join(nodes)}".encode())
    return digest.hexdigest()[:12]


def _start(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    now: float,
    settings: CarveSettings,
    memo: CarveMemo | None,
) -> CarveDecision | None:
    if not any(mode_of(node.facts, settings.default_mode) == MODE_CARVE for node in nodes):
        return None  # no node may be carved: the planner would weigh the pods for nothing
    held = {node: f"backed off until {format_time(until)}" for node, until in record.backoff}
    served: set[str] = set()
    if record.plan is not None:
        for open_step in record.plan.open_nodes:
            held[open_step.node] = "a MIG Manager plan is changing it"
            served.update(open_step.serves)
    result = plan_carve(
        nodes,
        [p for p in pending if p.demand.key not in served],
        cooldowns={node: now - at for node, at in record.finished},
        settings=settings,
        held=held,
        memo=memo,
    )
    if result.is_empty:
        return None
    steps = tuple(
        CarveStep(change.node, tuple(g.step for g in change.gpus), change.serves)
        for change in result.changes
    )
    active = ActiveCarve(carve_plan_id([s.node for s in steps], now), now, None, steps)
    names = ", ".join(f"{s.node} GPUs {list(s.gpu_indices)}" for s in steps)
    return CarveDecision(
        "start", replace(record, carve=active), f"carve {active.plan_id}: {names}", plan=result
    )


def _apply(
    record: RepartitionRecord,
    active: ActiveCarve,
    states: Mapping[str, NodeState],
    *,
    now: float,
    settings: CarveSettings,
) -> CarveDecision:
    steps: list[CarveStep] = []
    writes: list[CarveWrite] = []
    notices: list[NodeEvent] = []
    aborted: list[CarveStep] = []
    for step in active.nodes:
        problem = recheck_carve(step, states.get(step.node), settings.default_mode)
        if step.is_open and problem is not None:
            step = replace(step, outcome=ABORTED, detail=f"not applied: {problem.message}")
            aborted.append(step)
        elif step.is_open:
            writes.append(CarveWrite(step.node, step.request(active.plan_id)))
            notices.append(NodeEvent(step.node, REASON_CARVE, carving_message(step)))
        steps.append(step)
    if not writes:
        reason = "; ".join(f"{s.node}: {s.detail}" for s in aborted) or "nothing left to carve"
        return CarveDecision(
            "abort", replace(record, carve=None), reason, outcomes=tuple(aborted), result="aborted"
        )
    applied = replace(active, applied_at=now, nodes=tuple(steps))
    return CarveDecision(
        "apply",
        replace(record, carve=applied),
        f"carve {active.plan_id}: asking " + ", ".join(w.node for w in writes),
        writes=tuple(writes),
        notices=tuple(notices),
        outcomes=tuple(aborted),
    )


def _observe(
    record: RepartitionRecord,
    active: ActiveCarve,
    states: Mapping[str, NodeState],
    *,
    now: float,
    settings: CarveSettings,
    limits: tuple[float, float],
) -> CarveDecision | None:
    deadline_s, backoff_s = limits
    assert active.applied_at is not None
    elapsed = now - active.applied_at
    steps: list[CarveStep] = []
    closed: list[CarveStep] = []
    writes: list[CarveWrite] = []
    notices: list[NodeEvent] = []
    for step in active.nodes:
        state = states.get(step.node)
        outcome, detail = (step.outcome, step.detail)
        if step.is_open:
            outcome, detail = _outcome_of(
                step,
                active.plan_id,
                state,
                elapsed=elapsed,
                limits=(deadline_s, settings.default_mode),
            )
        if (
            step.is_open
            and outcome == OPEN
            and not _asked(state, active.plan_id)
            and not _taken_up(state, active.plan_id)
        ):
            assert state is not None  # a node gone is closed by _outcome_of
            report = state.facts.agent
            shown = _plan_shown(step, report) if report is not None else ""
            if report is None:
                pass  # the Node made again: its agent's fresh report is awaited (the deadline)
            elif shown:
                writes.append(CarveWrite(step.node, step.request(active.plan_id, resume=True)))
                notices.append(
                    NodeEvent(step.node, REASON_CARVE_JOURNAL, _lost_message(step, shown), True)
                )
            else:
                problem = recheck_carve(step, state, settings.default_mode)
                if problem is None:
                    writes.append(CarveWrite(step.node, step.request(active.plan_id)))
                else:
                    outcome, detail = ABORTED, f"not applied: {problem.message}"
        if not step.is_open or outcome == OPEN:
            steps.append(step)
            continue
        done = replace(step, outcome=outcome, detail=detail)
        steps.append(done)
        closed.append(done)
        if _asked(state, active.plan_id):
            writes.append(CarveWrite(step.node, None))
    if not closed and not writes:
        return None
    remaining = replace(active, nodes=tuple(steps))
    return _closing(
        record, remaining, closed, writes=writes, notices=notices, now=now, backoff_s=backoff_s
    )


def _closing(
    record: RepartitionRecord,
    remaining: ActiveCarve,
    closed: Sequence[CarveStep],
    *,
    writes: Sequence[CarveWrite],
    notices: list[NodeEvent],
    now: float,
    backoff_s: float,
) -> CarveDecision:
    """The record after some nodes closed: cooldowns, backoffs, Events (after ``notices``),
    and the plan dropped when no node is open."""
    finished, backoff = dict(record.finished), dict(record.backoff)
    served = record.served
    for done in closed:
        if done.outcome == SUCCESS:
            finished[done.node] = now
            # touched by whichever replica leads once its cache shows the carve done
            mark = CARVE_MARK + remaining.plan_id
            served = with_served(served, done.node, mark, now, done.serves)
            notices.append(NodeEvent(done.node, REASON_CARVE, carved_message(done)))
        elif done.outcome in (FAILED, TIMEOUT):
            backoff[done.node] = now + backoff_s
            until = format_time(backoff[done.node])
            message = f"carve {remaining.plan_id}: {done.detail}; node left alone until {until}"
            notices.append(NodeEvent(done.node, REASON_CARVE_FAILED, message, warning=True))
    still_open = bool(remaining.open_nodes)
    new_record = replace(
        record,
        carve=remaining if still_open else None,
        finished=tuple(sorted(finished.items())),
        backoff=tuple(sorted(backoff.items())),
        served=served,
    )
    reason = f"carve {remaining.plan_id}: " + (
        ", ".join(f"{s.node} {s.outcome}" for s in closed) or "asking again"
    )
    return CarveDecision(
        "observe" if still_open else "finish",
        new_record,
        reason,
        writes=tuple(writes),
        notices=tuple(notices),
        outcomes=tuple(closed),
        result=None if still_open else _result(remaining.nodes),
    )


def _plan_shown(step: CarveStep, report: AgentReport) -> str:
    """What of ``step`` the node agent's report (NVML now) shows done, in words ("" when
    nothing): an instance it destroys gone or changed, or one it creates there. The request
    and journal both missing then means they were lost (the Node deleted and made again)
    after the agent began, not that nothing was done."""
    found = {(g.index, i.start, i.profile): i.uuid for g in report.gpus for i in g.instances}
    for gpu in step.gpus:
        if not any(g.index == gpu.index for g in report.gpus):
            continue
        for doomed in gpu.destroy:
            uuid = found.get((gpu.index, doomed.start, doomed.profile))
            if uuid is None or (doomed.uuid and uuid != doomed.uuid):
                return f"GPU {gpu.index}: {doomed.profile}@{doomed.start} is destroyed or remade"
        doomed_slots = {(d.start, d.profile) for d in gpu.destroy}
        for slot in gpu.create:
            made = (gpu.index, slot.start, slot.profile) in found
            if made and (slot.start, slot.profile) not in doomed_slots:
                return f"GPU {gpu.index}: {slot.profile}@{slot.start} is made"
    return ""


def _lost_message(step: CarveStep, shown: str) -> str:
    return (
        f"the carve request and the node agent's journal are gone from the Node (deleted and "
        f"made again?) while NVML shows the carve begun ({shown}): asked again to resume, so "
        f"the agent finishes or rolls back {describe(step)}"
    )


def _asked(state: NodeState | None, plan_id: str) -> bool:
    request = state.facts.carve_request if state is not None else None
    return request is not None and request.plan_id == plan_id


def _taken_up(state: NodeState | None, plan_id: str) -> bool:
    """The agent's journal names the plan and is open: it finishes or rolls it back (the
    request gone: back) and answers; asking again or aborting would not be the truth."""
    status = state.facts.carve_status if state is not None else None
    return status is not None and status.plan_id == plan_id and status.phase.is_open


def _outcome_of(
    step: CarveStep,
    plan_id: str,
    state: NodeState | None,
    *,
    elapsed: float,
    limits: tuple[float, str],
) -> tuple[NodeOutcome, str]:
    """``limits``: the deadline and the mode of nodes without the mode label."""
    deadline_s, default_mode = limits
    if state is None:
        return ABORTED, "node is gone"
    status = state.facts.carve_status
    if status is not None and status.plan_id == plan_id:
        if status.phase == CarvePhase.SUCCESS:
            return SUCCESS, f"carved in about {elapsed:.0f}s" + _suffix(status.detail)
        if status.phase == CarvePhase.FAILED:
            return FAILED, f"the node agent reports failure: {status.detail}"
    else:
        # Not taken up yet: a node that left carve mode (its agent ignores a request in
        # mig-manager mode) or turned DRA meanwhile is let go now, not held to the deadline.
        left = _left_carve_mode(state, default_mode)
        if left:
            return ABORTED, f"withdrawn before the node agent took it up: {left}"
    if elapsed > deadline_s:
        ours = status if status is not None and status.plan_id == plan_id else None
        phase = ours.phase if ours is not None else "no answer"
        said = f"{phase} after {elapsed:.0f}s; deadline {deadline_s:.0f}s"
        if ours is not None and ours.phase.is_open:
            said += (
                "; the node agent's journal (migslice.io/carve-state) is still open, so no GPU "
                "pod is placed on the node until the agent closes it (rolls back): check the "
                "migslice agent pod on the node"
            )
        return TIMEOUT, said
    return OPEN, ""


def _suffix(detail: str) -> str:
    return f" ({detail})" if detail else ""


def _result(steps: Sequence[CarveStep]) -> str:
    outcomes = {step.outcome for step in steps}
    if outcomes & {FAILED, TIMEOUT}:
        return "failed"
    return "succeeded" if SUCCESS in outcomes else "aborted"


def describe(step: CarveStep) -> str:
    """``GPU 0: destroy 1g.10gb@0, 1g.10gb@1; create 3g.40gb@0``, per GPU."""
    parts = []
    for gpu in step.gpus:
        destroy = ", ".join(f"{d.profile}@{d.start}" for d in gpu.destroy) or "nothing"
        create = ", ".join(f"{s.profile}@{s.start}" for s in gpu.create) or "nothing"
        parts.append(f"GPU {gpu.index}: destroy {destroy}; create {create}")
    return "; ".join(parts)


def carving_message(step: CarveStep) -> str:
    pods = ", ".join(step.serves) or "none"
    return f"carving around running instances ({describe(step)}) for pending pods {pods}"


def carved_message(step: CarveStep) -> str:
    return f"carved ({describe(step)}); pods {', '.join(step.serves) or 'none'} can now be placed"
