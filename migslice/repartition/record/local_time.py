"""An open plan's times as this leader has measured them, not as another one wrote them.

A plan's ``appliedAt`` (and a step's ``appliedAt`` and ``writtenAt``) is the wall clock of
the leader that applied it. Judged on the wall clock of whichever replica leads now, a skew
or an NTP step of a deadline's size times a plan out at once or never: 30 s into MIG
Manager's run, a new leader 11 minutes ahead quarantined the node and labelled its old config
back mid-reconfiguration; one 2 hours behind let a stuck node hold the plan 2 hours past its
10-minute deadline. So each stamp is timed as long as this process has known it, on its
monotonic clock (as client-go's leader election times a lease: from when it saw the record,
never by the holder's stamps), and shown to the pure decision as ``now`` minus that age.

The leader that applied a plan knows its stamps from that round on, so nothing changes for
it. A new leader starts each stamp it inherits at zero: a deadline then runs up to one
deadline longer for each change of leader, never shorter. What is written back keeps the
writer's stamps (:meth:`LocalTimes.restore`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from migslice.repartition.record.document import RepartitionRecord
from migslice.repartition.record.plan import ActivePlan, NodeStep

_Key = tuple[str, str, str, str, float]  # (kind, plan id, node or "", field, stamp)


@dataclass
class LocalTimes:
    """Keeps, per stamp of an open plan, when this process first saw it (monotonic)."""

    _first: dict[_Key, float] = field(default_factory=dict)
    _shown: dict[_Key, float] = field(default_factory=dict)

    def localize(self, record: RepartitionRecord, now_s: float, mono_s: float) -> RepartitionRecord:
        """``record`` with each open plan's stamps replaced by ``now_s`` less the time this
        process has known them (``mono_s``: its monotonic clock now)."""
        seen: set[_Key] = set()

        def local(
            kind: str, plan_id: str, node: str, name: str, stamp: float | None
        ) -> float | None:
            if stamp is None:
                return None
            key = (kind, plan_id, node, name, stamp)
            seen.add(key)
            first = self._first.setdefault(key, mono_s)
            shown = now_s - (mono_s - first)
            self._shown[key] = shown
            return shown

        plan, carve = record.plan, record.carve
        if plan is not None:
            steps = tuple(
                replace(
                    step,
                    applied_at=local("mig", plan.plan_id, step.node, "applied", step.applied_at),
                    written_at=local("mig", plan.plan_id, step.node, "written", step.written_at),
                )
                for step in plan.nodes
            )
            applied = local("mig", plan.plan_id, "", "applied", plan.applied_at)
            plan = replace(plan, applied_at=applied, nodes=steps)
        if carve is not None:
            applied = local("carve", carve.plan_id, "", "applied", carve.applied_at)
            carve = replace(carve, applied_at=applied)
        for key in [k for k in self._first if k not in seen]:
            del self._first[key]
            self._shown.pop(key, None)
        return replace(record, plan=plan, carve=carve)

    def restore(self, local: RepartitionRecord, stored: RepartitionRecord) -> RepartitionRecord:
        """``local`` (a decision's record, made from :meth:`localize`'s) with the stamps it
        kept unchanged written as ``stored`` (the record it was localized from) has them: what
        is written back is the writers' clocks, not this leader's view of them. Stamps the
        decision set itself (a node labelled now) are this leader's own, and stay."""
        plan = local.plan
        if plan is not None and stored.plan is not None and plan.plan_id == stored.plan.plan_id:
            plan = self._restore_plan(plan, stored.plan)
        carve = local.carve
        if carve is not None and stored.carve is not None and carve.plan_id == stored.carve.plan_id:
            carve = replace(
                carve,
                applied_at=self._back(
                    ("carve", carve.plan_id, "", "applied"),
                    carve.applied_at,
                    stored.carve.applied_at,
                ),
            )
        return replace(local, plan=plan, carve=carve)

    def _restore_plan(self, plan: ActivePlan, stored: ActivePlan) -> ActivePlan:
        # A decision keeps the steps it read, in their order, and appends those that join:
        # a step is matched by its position, not by its node (a node superseded in this plan
        # may join it again as a new step, whose stamps are the decision's own).
        before = stored.nodes

        def step_back(position: int, step: NodeStep) -> NodeStep:
            old = before[position] if position < len(before) else None
            if old is None or old.node != step.node:
                return step
            where = ("mig", plan.plan_id, step.node)
            return replace(
                step,
                applied_at=self._back((*where, "applied"), step.applied_at, old.applied_at),
                written_at=self._back((*where, "written"), step.written_at, old.written_at),
            )

        where = ("mig", plan.plan_id, "", "applied")
        applied = self._back(where, plan.applied_at, stored.applied_at)
        steps = tuple(step_back(i, s) for i, s in enumerate(plan.nodes))
        return replace(plan, applied_at=applied, nodes=steps)

    def _back(
        self, where: tuple[str, str, str, str], value: float | None, stored: float | None
    ) -> float | None:
        if value is None or stored is None:
            return value
        shown = self._shown.get((*where, stored))
        return stored if shown is not None and value == shown else value
