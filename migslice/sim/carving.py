"""Carve mode in the simulator: the node agent's part, and the carve planner for mode A.

* :func:`carve_node` is the node agent's stand-in: it destroys the instances a
  ``migslice.io/carve`` request names and creates the new ones, on GPUs in use. Destroying
  an instance a pod holds raises :class:`~migslice.sim.cluster.DisruptionError` (the agent
  refuses such a request; a plan that asks for it is a planner bug), so a run that finishes
  destroyed no busy instance.
* :class:`CarveChooser` is mode A's re-partition in carve mode: the carve planner
  (:func:`migslice.repartition.plan_carve`) asked about one pending pod, eligible at once
  (mode A has no clock), with every node in carve mode. Asking it about every node for every
  pod made the run quadratic (90 s at 1,024 GPUs), so the chooser keeps the planner's cost of
  each node (:func:`migslice.repartition.carve_cost`) in a
  :class:`~migslice.sim.index.RankIndex`, recomputed only for nodes that changed, and asks
  the planner about the cheapest node alone: the node and the changes :func:`carve_reshape`
  (the plain call over every node, kept as the oracle the tests compare with) would give.
  The stranding rule the planner reads from every node (:class:`~migslice.sim.held.HeldMix`)
  is kept the same way; a flip ranks every node again.
  Mode B drives the controller itself (:mod:`migslice.sim.controller`): the same planner
  through ``decide``'s carve branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from migslice.mig import Placed
from migslice.names import MODE_CARVE
from migslice.objects.carve_handshake import CarveRequest
from migslice.repartition import (
    CarvedGpu,
    CarveSettings,
    ControllerSettings,
    PendingPod,
    carve_cost,
    carved_gpus,
    plan_carve,
)
from migslice.scheduling import PodDemand
from migslice.sim.cluster import SimCluster, SimNode
from migslice.sim.held import HeldMix
from migslice.sim.index import Kind, PerNode, Rank, RankIndex
from migslice.sim.placement import LayoutChange

MODE_A_CARVE = CarveSettings(
    min_pending_s=0.0, cooldown_s=0.0, max_nodes_in_flight=1, default_mode=MODE_CARVE
)


def carving_settings(settings: ControllerSettings) -> ControllerSettings:
    """The controller's settings with every node in carve mode (its default mode)."""
    return replace(settings, carve=replace(settings.carve, default_mode=MODE_CARVE))


def carve_node(cluster: SimCluster, node: SimNode, request: CarveRequest) -> int:
    """Carry out ``request`` on ``node`` as the node agent does; the GPUs changed."""
    model = cluster.model
    for step in request.gpus:
        gpu = node.gpus[step.index]
        for doomed in step.destroy:
            where = [
                k
                for k, p in enumerate(gpu.instances)
                if (p.start, p.profile) == (doomed.start, doomed.profile)
            ]
            if not where:
                where_ = f"{doomed.profile}@{doomed.start}"
                raise ValueError(f"{node.name} GPU {step.index} has no {where_}")
            cluster.destroy_instance(node, gpu, where[0])
        for slot in step.create:
            size = model.profile(slot.profile).memory_slices
            cluster.create_instance(node, gpu, Placed(slot.start, slot.profile, size))
    return len(request.gpus)


def carve_reshape(
    cluster: SimCluster, demand: PodDemand, settings: CarveSettings = MODE_A_CARVE
) -> tuple[SimNode | None, tuple[LayoutChange, ...]]:
    """The carve planner's changes for one pending pod, and the node it carves."""
    states = [cluster.node_state(node) for node in cluster.nodes]
    plan = plan_carve(states, [PendingPod(demand, 0.0)], settings=settings)
    if plan.is_empty:
        return None, ()
    change = plan.changes[0]
    node = cluster.by_name[change.node]
    return node, tuple(LayoutChange(node, g.index, g.new) for g in change.gpus)


class CarveChooser:
    """:func:`carve_reshape`'s choice node by node (see the module docstring). Pods are
    kinds (profile, count) whose demand ``demand_of`` gives."""

    def __init__(
        self,
        cluster: SimCluster,
        demand_of: Callable[[Kind], PodDemand],
        settings: CarveSettings = MODE_A_CARVE,
        held: HeldMix | None = None,
    ) -> None:
        self.cluster = cluster
        self.demand_of = demand_of
        self.settings = settings
        self.index = RankIndex(cluster, self.rank)
        self._gpus = PerNode(self._carved)
        self.guard = False
        self.complete = False
        self.held = HeldMix(cluster) if held is None else held

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        state = self.cluster.node_state(node)
        cost = carve_cost(
            self.demand_of(kind),
            state,
            settings=self.settings,
            gpus=self._gpus(node),
            guard=self.guard,
            complete=self.complete,
        )
        if cost is None:
            return None
        strands, loss, destroyed = cost
        return (strands, *loss, destroyed, node.position)

    def _update_guard(self) -> None:
        """The stranding rules as :func:`plan_carve` reads them from every node."""
        rules = self.held.rules()
        if rules != (self.guard, self.complete):
            self.guard, self.complete = rules
            self.index.reset()

    def _carved(self, node: SimNode) -> list[CarvedGpu] | None:
        """The node's carved GPUs (every kind asks about the same ones); None where the
        planner must rule the node out itself."""
        state = self.cluster.node_state(node)
        if state.model is None or state.facts.agent is None:
            return None
        return carved_gpus(state)

    def reshape(self, kind: Kind) -> tuple[SimNode | None, tuple[LayoutChange, ...]]:
        self._update_guard()
        node = self.index.best(kind)
        if node is None:
            return None, ()
        state = self.cluster.node_state(node)
        gpus = self._gpus(node)
        plan = plan_carve(
            [state],
            [PendingPod(self.demand_of(kind), 0.0)],
            settings=self.settings,
            carved=None if gpus is None else {node.name: gpus},
            guard=self.guard,
            complete=self.complete,
        )
        if plan.is_empty:
            return None, ()
        change = plan.changes[0]
        return node, tuple(LayoutChange(node, g.index, g.new) for g in change.gpus)
