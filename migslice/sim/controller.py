"""Mode B: migslice's repartition controller as production runs it, and a MIG Manager
stand-in.

Every ``interval_s`` (the extender's default 15 s) a round calls
:func:`migslice.repartition.decide` with the plan record this driver keeps, every node's
state, the waiting pods (pending since they arrived) and the time, and performs each step
until one says wait (at most four per round, as ``extender/controller.py``):

* ``START``: the record now holds the plan; nothing on the cluster changes;
* ``APPLY``: each labelled node gets ``nvidia.com/mig.config=<config>`` with
  ``nvidia.com/mig.config.state=pending``: the scheduler keeps off the whole node
  (``prepare_node`` blocks it) and the planner counts it in flight (one node at a time);
* ``OBSERVE``/``FINISH``: the node's outcome is recorded; its cooldown (600 s) starts.

The settings are the controller's defaults (30 s pending before a pod counts, 600 s cooldown
per node, one node in flight). The MIG Manager stand-in (:meth:`ReconfiguringRun.
reconfigure`) takes ``t_reconf_s``, then gives the node's GPUs the planned layouts and
reports ``success``; the next round observes it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from migslice.objects.carve_handshake import CarveRequest
from migslice.repartition import (
    STEPS_PER_ROUND,
    ControllerSettings,
    NodeChange,
    PendingPod,
    RepartitionRecord,
    Step,
    StepKind,
    decide,
)
from migslice.sim.cluster import SIM_CONFIG, SimCluster, SimNode
from migslice.sim.ours import PlannerLayouts, demand_for
from migslice.sim.placement import LayoutChange
from migslice.sim.trace import SimPod


class ReconfiguringRun(Protocol):
    """What a mode B driver needs from the run."""

    @property
    def cluster(self) -> SimCluster: ...

    def waiting(self) -> Sequence[tuple[SimPod, float]]:
        """Pods waiting to be placed, in arrival order, with the time they began to wait."""
        ...

    def every(self, interval_s: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(now)`` every ``interval_s`` of simulated time."""
        ...

    def at(self, time_s: float, callback: Callable[[float], None]) -> None:
        """Call ``callback(time_s)`` once, at ``time_s``."""
        ...

    def reconfigure(
        self,
        node: SimNode,
        changes: Sequence[LayoutChange],
        config: str,
        *,
        done: Callable[[float], None],
        serves: Sequence[str] = (),
    ) -> None:
        """Label the node ``config`` in state pending now; after the reconfiguration time,
        apply ``changes``, report success and call ``done(now)``. ``serves``: the pods the
        change was planned for."""
        ...

    def carve(self, node: SimNode, request: CarveRequest, *, serves: Sequence[str]) -> None:
        """Annotate the node with ``request`` now; after the carve time the node agent
        carries it out and reports success."""
        ...


class MigsliceController:
    """The controller's rounds over a record it keeps (see the module docstring)."""

    def __init__(self, run: ReconfiguringRun, settings: ControllerSettings, interval_s: float):
        self.run = run
        self.settings = settings
        self.record = RepartitionRecord()
        self.files: set[str] = {SIM_CONFIG}
        self.plans: dict[str, NodeChange] = {}
        self.layouts = PlannerLayouts(run.cluster.model)
        self.quiet: tuple[object, ...] | None = None
        run.every(interval_s, self.round)

    def _unchanged_since_last_wait(self, pending: Sequence[PendingPod], now: float) -> bool:
        """With no plan in progress, a round that saw the same cluster, the same waiting pods
        on the same side of ``min_pending_s`` and the same cooldowns decides the same wait."""
        if self.record.plan is not None or self.record.carve is not None:
            self.quiet = None
            return False
        plan, carve = self.settings.plan, self.settings.carve
        key = (
            self.run.cluster.changes,
            tuple(
                (
                    p.demand.key,
                    p.pending_s >= plan.min_pending_s,
                    p.pending_s >= carve.min_pending_s,
                )
                for p in pending
            ),
            tuple(
                (n, now - at < plan.cooldown_s, now - at < carve.cooldown_s)
                for n, at in self.record.finished
            ),
            tuple(n for n, until in self.record.backoff if until > now),
        )
        if key == self.quiet:
            return True
        self.quiet = key
        return False

    def round(self, now: float) -> None:
        pending = [PendingPod(demand_for(pod), now - since) for pod, since in self.run.waiting()]
        if not pending and self.record.plan is None and self.record.carve is None:
            return
        if self._unchanged_since_last_wait(pending, now):
            return
        cluster = self.run.cluster
        self.layouts.profiles = frozenset(pod.profile for pod, _ in self.run.waiting())
        for _ in range(STEPS_PER_ROUND):
            states = [cluster.node_state(node) for node in cluster.nodes]
            step = decide(
                self.record,
                states,
                pending,
                file_configs=frozenset(self.files),
                now=now,
                settings=self.settings,
                layout_cache=self.layouts,
            )
            if step.kind is StepKind.WAIT:
                return
            self.quiet = None
            self.record = step.record
            if step.kind is StepKind.START and step.plan is not None:
                self.plans.update((c.config_name, c) for c in step.plan.changes)
            self.files.update(step.configs)
            self._carve(step)
            for label in step.labels:
                node = cluster.by_name[label.node]
                if label.replaces is not None:  # a roll back: the label only, no simulated run
                    cluster.set_mig_state(node, label.config_name, node.mig_config_state)
                    continue
                change = self.plans.pop(label.config_name)
                changes = [LayoutChange(node, g.index, g.new) for g in change.gpus]
                self.run.reconfigure(
                    node, changes, label.config_name, done=lambda _: None, serves=change.serves
                )

    def _carve(self, step: Step) -> None:
        """The step's ``migslice.io/carve`` writes: a request goes to the node agent's
        stand-in; a removal clears the annotation (the agent's answer stays)."""
        cluster = self.run.cluster
        for write in step.carve_writes:
            node = cluster.by_name[write.node]
            if write.request is None:
                cluster.set_carve(node, None, node.carve_status)
                continue
            carve = step.record.carve
            serves = [
                s for n in (carve.nodes if carve else ()) if n.node == node.name for s in n.serves
            ]
            self.run.carve(node, write.request, serves=serves)
