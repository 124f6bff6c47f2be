"""Carve mode in the simulator: the node agent's part, and the carve planner for mode A.

* :func:`carve_node` is the node agent's stand-in: it destroys the instances a
  ``migslice.io/carve`` request names and creates the new ones, on GPUs in use. Destroying
  an instance a pod holds raises :class:`~migslice.sim.cluster.DisruptionError` (the agent
  refuses such a request; a plan that asks for it is a planner bug), so a run that finishes
  destroyed no busy instance.
* :class:`CarveChooser` is mode A's re-partition in carve mode: the carve planner
  (:func:`migslice.repartition.plan_carve`) asked about one pending pod, eligible at once
  (mode A has no clock), with every node in carve mode. Asking it about every node for every
  pod made the run quadratic (90 s at 1,024 GPUs), so the chooser keeps the planner's trial
  of each node (:func:`migslice.repartition.carve_trial`) and its cost in a
  :class:`~migslice.sim.index.RankIndex`, recomputed only for nodes that changed, and carves
  the cheapest node's trial: the node and the changes :func:`carve_reshape` (the plain call
  over every node, kept as the oracle the tests compare with) would give. Each GPU's carved
  state is kept until the GPU changes.
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
    CarveTrial,
    ControllerSettings,
    PendingPod,
    carve_trial,
    carved_gpu,
    eligible_demand,
    plan_carve,
)
from migslice.scheduling import PodDemand
from migslice.sim.cluster import SimCluster, SimGpu, SimNode
from migslice.sim.held import HeldMix
from migslice.sim.index import Kind, PerGpu, PerNode, Rank, RankIndex
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
        self._gpus = PerNode(self.carved)
        self._carved_gpu = PerGpu(self._carve_gpu)
        self._trials: dict[tuple[int, Kind], tuple[int, tuple[bool, bool], CarveTrial]] = {}
        """The trial behind each rank, by node position and kind: the node's version and the
        rules it was found under, for :meth:`reshape` to carve without trying it again."""
        self.guard = False
        self.complete = False
        self.held = HeldMix(cluster) if held is None else held

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        trial = self._trial(node, kind)
        if trial is None:
            return None
        strands, loss, destroyed = trial.cost
        return (strands, *loss, destroyed, node.position)

    def _trial(self, node: SimNode, kind: Kind) -> CarveTrial | None:
        """:func:`carve_trial` of ``kind`` on ``node``, kept until the node or the rules
        change."""
        rules = (self.guard, self.complete)
        kept = self._trials.get((node.position, kind))
        if kept is not None and kept[0] == node.version and kept[1] == rules:
            return kept[2]
        trial = carve_trial(
            self.demand_of(kind),
            self.cluster.node_state(node),
            settings=self.settings,
            gpus=self._gpus(node),
            guard=self.guard,
            complete=self.complete,
        )
        if trial is None:
            self._trials.pop((node.position, kind), None)
        else:
            self._trials[(node.position, kind)] = (node.version, rules, trial)
        return trial

    def _update_guard(self) -> None:
        """The stranding rules as :func:`plan_carve` reads them from every node."""
        rules = self.held.rules()
        if rules != (self.guard, self.complete):
            self.guard, self.complete = rules
            self.index.reset()

    def carved(self, node: SimNode) -> list[CarvedGpu] | None:
        """The node's carved GPUs (every kind asks about the same ones); None where the
        planner must rule the node out itself. This is :func:`carved_gpus` of the node's
        state, made GPU by GPU: a GPU the cluster has not changed since (its version the
        same) keeps its :class:`CarvedGpu`, with the options it has found. No
        instance is pinned for want of a busy flag, since the simulated agent reports every
        held instance busy (``tests/sim/test_sim_carve.py`` holds the two equal)."""
        state = self.cluster.node_state(node)
        if state.model is None or state.facts.agent is None:
            return None
        return [self._carved_gpu(node, gpu) for gpu in node.gpus if gpu.mig_enabled]

    def _carve_gpu(self, node: SimNode, gpu: SimGpu) -> CarvedGpu:
        reported = {
            (gpu.index, i.start, i.profile): (i.busy, i.uuid)
            for i in gpu.as_report(node.name).instances
        }
        return carved_gpu(self.cluster.model, gpu.as_state(), reported)

    def reshape(self, kind: Kind) -> tuple[SimNode | None, tuple[LayoutChange, ...]]:
        """:func:`plan_carve` for one pending pod of ``kind`` given the cheapest node alone:
        the pod's eligibility, the carve budget, and the node's trial (kept from the rank);
        :func:`carve_reshape` is the plain call the tests compare with."""
        self._update_guard()
        node = self.index.best(kind)
        if node is None:
            return None, ()
        state = self.cluster.node_state(node)
        pending = [PendingPod(self.demand_of(kind), 0.0)]
        waiting, _ = eligible_demand(pending, [state], self.settings.min_pending_s)
        if not waiting or self.settings.max_nodes_in_flight - state.facts.is_carving <= 0:
            return None, ()  # nothing to carve, or no carve budget left
        trial = self._trial(node, kind)
        if trial is None:
            return None, ()
        return node, tuple(LayoutChange(node, g.index, g.new_layout()) for g in trial.changed())
