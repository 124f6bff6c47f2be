"""The repartition controller's decisions, as values: record + cluster + time -> the next step.

States of the record and the step taken from each (one call of :func:`decide` is one step;
the shell persists ``step.record`` and performs the step's actions, in that order):

* **idle** (no plan): run the planner; an empty plan -> ``WAIT``; else ``START``: write the
  plan record (``appliedAt`` null). Nothing on the cluster changes yet.
* **planned** (plan written, not applied): re-check every node against the state at apply
  time (label still the previous config, no MIG Manager run, every planned GPU still idle,
  the node still one a pod it serves and still waits could be placed on: not cordoned since;
  not a DRA node since);
  nodes that fail it are ``aborted``. ``APPLY``: merge the remaining nodes' configs into the
  mig-parted file (with the record, in one write), then label each node
  ``nvidia.com/mig.config=<config>`` (with ``nvidia.com/mig.config.state=pending``, so that
  no stale ``success`` is read as ours and the scheduler keeps off the node), and record a
  ``MigRepartition`` Event. If every node aborts: ``ABORT``, back to idle.
* **applying** (``appliedAt`` set): per open node, ``success`` on our config -> outcome
  success (cooldown starts; the pods it served are kept in ``served`` for any leader to
  touch); ``failed`` -> outcome failed: a ``MigRepartitionFailed`` Event,
  the previous config label restored when the file still has that config, the node backed off
  for ``backoff_s``; not ``success`` within ``deadline_s`` -> outcome timeout: the label
  restored the same way and the node quarantined (below), with a ``MigRepartitionQuarantined``
  Event and no ``MigRepartitionFailed`` one, and no backoff; a label someone else
  changed -> superseded (left to them: a ``MigRepartitionSuperseded`` Event and a backoff; a
  label removed while the state is still ``pending`` has that state label removed too, and
  the Event is a Warning); a
  label still at the previous config (a restart between the file write and the label) ->
  labelled now, after the same re-check as in *planned* (the pods it serves included).
  ``OBSERVE`` when an outcome changed; when no node is open the plan is dropped
  (``FINISH``). While the open nodes only wait, more nodes may **join** the plan
  (``START``: written, then applied as in *planned*, each with its own deadline) for demand
  the plan does not serve, within the in-flight budget of their pool, so one slow node does
  not stop the others.
* a timeout **quarantines** the node (``migslice.repartition.migmanager.quarantine``):
  out of the budget, left alone until MIG Manager reports ``success`` or an admin removes the
  label; releasing it (or writing its label again) is a step of its own (``QUARANTINE``),
  first.
* a roll back (failed, timeout) is kept in the record (``restores``) until the node's label
  no longer names the failed config (or the node turned DRA: none is made there); dropping
  it is a step of its own (``RESTORE``), after the quarantine's. The shell tries those
  still due again each round.

The step types are in :mod:`migslice.repartition.steps`, applying and observing a written
plan in :mod:`migslice.repartition.migmanager.applying`. Carve-mode nodes are decided first, by the
carve branch (:mod:`migslice.repartition.carve.branch`, its own plan in ``record.carve``);
this path leaves them alone and never labels them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from migslice.inventory import NodeState
from migslice.objects.times import format_time
from migslice.repartition.carve.branch import CarveDecision, decide_carve
from migslice.repartition.carve.planner import CarveMemo, carve_mode_nodes
from migslice.repartition.migmanager.applying import apply_plan, observe_plan
from migslice.repartition.migmanager.messages import referenced_configs
from migslice.repartition.migmanager.planner import plan
from migslice.repartition.migmanager.quarantine import held_reasons, review
from migslice.repartition.modes import dra_exclusion
from migslice.repartition.pending import PendingPod
from migslice.repartition.record import ActivePlan, NodeStep, RepartitionRecord, still_served
from migslice.repartition.settings import ControllerSettings
from migslice.repartition.shapes import LayoutCache
from migslice.repartition.steps import PlanResult, Step, StepKind

DEFAULT_SETTINGS = ControllerSettings()
STEPS_PER_ROUND = 4
"""The most steps the controller takes in one round: after each it decides again (on what it
wrote), until one waits."""
RECORD_STEPS = frozenset(
    {StepKind.QUARANTINE, StepKind.RESTORE, StepKind.OBSERVE, StepKind.FINISH, StepKind.ABORT}
)
"""Steps after which the controller's next decision in a round reads the nodes as they were
(it wrote its record, a quarantine mark, a label back)."""


def decide(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    file_configs: Collection[str] | None,
    now: float,
    settings: ControllerSettings = DEFAULT_SETTINGS,
    layout_cache: LayoutCache | None = None,
    carve_memo: CarveMemo | None = None,
) -> Step:
    """The next step (see the module docstring). ``file_configs``: the config names in the
    mig-parted file, None when the ConfigMap is missing or unreadable (then nothing moves).
    ``layout_cache`` keeps the planner's maximal layouts between calls (a simulation);
    ``carve_memo`` what the carve planner learned about nodes whose state objects a caller
    keeps until they change (the controller over the extender's index)."""
    record = _pruned(record, now, settings)
    carve = decide_carve(
        record,
        nodes,
        pending,
        now=now,
        settings=settings.carve,
        deadline_s=settings.deadline_s,
        backoff_s=settings.backoff_s,
        memo=carve_memo,
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
    # roll backs seen done (or overtaken) leave the record first
    step = _restores_step(record, states) or _next(
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


def preview_round(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    *,
    file_configs: Collection[str] | None,
    now: float,
    settings: ControllerSettings = DEFAULT_SETTINGS,
) -> tuple[Step, ...]:
    """The steps one round of the controller would take from this snapshot (``why``,
    ``migslice plan``), as far as they can be followed without a cluster: after a step of
    :data:`RECORD_STEPS` (a quarantine released, a restore dropped, an outcome observed, a
    plan finished or aborted) it decides again on that step's record, as the controller does;
    after a plan is started or applied, or a carve written, it stops (the controller then
    reads the nodes it changed again). At most :data:`STEPS_PER_ROUND`; never empty."""
    steps: list[Step] = []
    for _ in range(STEPS_PER_ROUND):
        step = decide(record, nodes, pending, file_configs=file_configs, now=now, settings=settings)
        steps.append(step)
        if step.kind not in RECORD_STEPS or step.carve_writes:
            break
        record = step.record
    return tuple(steps)


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
        applied = apply_plan(
            record, active, states, nodes, now, settings.config_propagation_s, pending
        )
        if applied.kind is not StepKind.WAIT or active.applied_at is None:
            return applied
        # nodes that joined wait for MIG Manager's copy of the file; the labelled ones are
        # followed meanwhile (their success, failure or deadline)
    observed = observe_plan(record, active, states, nodes, file_configs, now, settings, pending)
    if observed.kind != StepKind.WAIT:
        return observed
    joined = _start(record, nodes, pending, now, settings, layout_cache)
    if joined.kind == StepKind.START:
        return joined
    # the planner ran and started nothing: its reasons for the pods it left ride along
    # (why, migslice plan), as on a round with no plan in flight
    return replace(observed, plan=joined.plan)


def plan_id(changes: Sequence[str], now: float) -> str:
    digest = hashlib.sha256(f"{format_time(now)};{','.join(changes)}".encode())
    return digest.hexdigest()[:12]


def _pruned(
    record: RepartitionRecord, now: float, settings: ControllerSettings
) -> RepartitionRecord:
    if not (record.finished or record.backoff or record.served):
        return record
    # one list for both paths' cooldowns: kept as long as the longer of the two needs it
    cooldown = max(settings.plan.cooldown_s, settings.carve.cooldown_s)
    finished = tuple((n, at) for n, at in record.finished if now - at < cooldown)
    backoff = tuple((n, until) for n, until in record.backoff if until > now)
    served = still_served(record.served, now)
    if finished == record.finished and backoff == record.backoff and served == record.served:
        return record
    return replace(record, finished=finished, backoff=backoff, served=served)


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
            written_at=now,
        )
        for change in result.changes
    )
    names = ", ".join(f"{s.node}={s.config_name}" for s in steps)
    # The configs go into the file now, with the plan: MIG Manager's copy of it lags (the
    # label waits for it, settings.config_propagation_s).
    configs = {s.config_name: s.entries for s in steps}
    if active is not None:
        joined = replace(active, nodes=active.nodes + steps)
        reason = f"plan {active.plan_id}: joined by {names}"
        return Step(
            StepKind.START,
            record.with_plan(joined),
            reason,
            plan=result,
            configs=configs,
            referenced=referenced_configs(nodes, joined, record),
        )
    active = ActivePlan(plan_id([s.config_name for s in steps], now), now, None, steps)
    return Step(
        StepKind.START,
        record.with_plan(active),
        f"plan {active.plan_id}: {names}",
        plan=result,
        configs=configs,
        referenced=referenced_configs(nodes, active, record),
    )


def _carve_step(carve: CarveDecision) -> Step:
    """The carve branch's decision as a step of the one state machine."""
    return Step(
        StepKind(carve.kind),
        carve.record,
        carve.reason,
        events=carve.notices,
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


def _restores_step(record: RepartitionRecord, states: Mapping[str, NodeState]) -> Step | None:
    """Roll backs the record still holds that the node no longer needs: its label no longer
    the failed plan's config (set back, or someone else's since: theirs wins), the node
    gone, or a DRA node now (NVIDIA's driver owns its layout). None when every roll back is
    still due (the shell tries those again each round)."""
    kept, gone = [], []
    for entry in record.restores:
        state = states.get(entry.node)
        if state is None:
            gone.append(f"{entry.node}: node is gone")
        elif state.facts.mig_config != entry.replaces:
            gone.append(f"{entry.node}: label is {state.facts.mig_config!r}")
        elif (dra := dra_exclusion(state)) is not None:
            gone.append(f"{entry.node}: {dra.message}")
        else:
            kept.append(entry)
    if not gone:
        return None
    reason = "roll back no longer due: " + "; ".join(gone)
    return Step(StepKind.RESTORE, replace(record, restores=tuple(kept)), reason)
