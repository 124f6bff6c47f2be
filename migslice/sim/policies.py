"""Placement policies: migslice itself and the baselines B0-B5 (benchmarks.md §5.5).

Each policy says how GPUs start (MIG off, a fixed layout, or MIG on with no instances) and
places one pod at a time, re-partitioning idle GPUs if it may. None ever changes a GPU that
a pod holds a part of (:meth:`SimCluster.repartition` refuses).

* ``B0`` whole-GPU: MIG off; a pod takes ``count`` whole GPUs on one node, best fit (the
  node with the fewest free GPUs that has enough, then the lowest index).
* ``B1`` static ``all-1g.10gb`` + first fit: nodes and GPUs in index order, instances by
  start. Pods needing more than 1g never fit.
* ``B2`` static ``all-balanced`` (2 x 1g.10gb + 2g.20gb + 3g.40gb) + first fit. 4g and 7g
  pods never fit.
* ``B3`` oracle-static + best fit: the geometry mix of the configuration LP's optimum for the
  expected mix (:mod:`migslice.sim.limits`), fixed in advance; 7g GPUs grouped on nodes.
* ``B4`` best fit over ``all-balanced``, no re-partitioning: the free instance whose GPU keeps
  the fewest free compute slices, then the node with the fewest, then the lowest index.
* ``B5`` nos-like greedy re-partitioning: best fit; when nothing fits, the first node (index
  order) whose idle GPUs can supply the lacking instances gets, GPU by GPU in index order, the
  allowed geometry (a maximal legal layout) providing the most lacking profiles, ties to the
  geometry with the most instances.
* ``migslice``: the extender's own filter and fragmentation score
  (:func:`migslice.scheduling.score_node` over :func:`~migslice.scheduling.prepare_node` of
  each node's :class:`~migslice.inventory.NodeState`), the highest-scoring node winning (ties:
  the lowest index; kube-scheduler breaks ties at random). Inside the node the instance is
  the one the score assumed (:func:`~migslice.inventory.picking.best_free_instance`
  ranking, as the inventory assumes the device plugin picks). When no node fits, the
  repartition controller's decision (:func:`migslice.repartition.decide`, which runs the
  planner) is asked with the pod pending and eligible at once (mode A has no clock), the
  planned changes applied, and the pod scheduled again.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from migslice.inventory import NodeState, mig_resource
from migslice.inventory.picking import Occupancy, best_free_instance
from migslice.mig import GpuModel, Layout, enumerate_maximal_layouts, fit
from migslice.repartition import (
    ControllerSettings,
    LayoutCache,
    PendingPod,
    PlanSettings,
    RepartitionPlan,
    RepartitionRecord,
    StepKind,
    decide,
)
from migslice.scheduling import DemandUnit, PodDemand, UnitKind, score_node
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.limits import oracle_layouts
from migslice.sim.trace import SimPod

PLAN_SETTINGS = PlanSettings(min_pending_s=0.0, cooldown_s=0.0, max_nodes_in_flight=1)
"""Mode A has no clock: a pod is eligible for re-partitioning as soon as it is pending."""


class Policy(Protocol):
    """A placement policy: initial GPU layouts and one-pod-at-a-time placement."""

    @property
    def name(self) -> str: ...

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        """Initial layout per GPU in node-major order (cycled); None = MIG off."""
        ...

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        """Place ``pod`` (and hold its resources) or return None if it cannot be placed."""
        ...


Reshaped = tuple[tuple[SimNode, int], ...]
"""GPUs (node, index) whose layout a re-partition changed."""


@runtime_checkable
class Repartitioning(Policy, Protocol):
    """A policy that re-partitions, split in two steps for mode B (which puts the
    reconfiguration time between them); ``place`` is ``place_now``, else ``reshape_for``
    and ``place_now`` again."""

    def place_now(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        """Place ``pod`` on the current layouts, or return None."""
        ...

    def reshape_for(self, cluster: SimCluster, pod: SimPod) -> Reshaped | None:
        """Re-partition idle GPUs for ``pod``: the GPUs changed, or None if it cannot."""
        ...


def place_or_reshape(policy: Repartitioning, cluster: SimCluster, pod: SimPod) -> Assignment | None:
    """Mode A for a re-partitioning policy: place now, else re-partition at once and place."""
    placed = policy.place_now(cluster, pod)
    if placed is not None:
        return placed
    if policy.reshape_for(cluster, pod) is None:
        return None
    return policy.place_now(cluster, pod)


def static_layout(model: GpuModel, profiles: Sequence[str]) -> Layout:
    result = fit(model, profiles)
    if not result.feasible:
        raise ValueError(f"{' + '.join(profiles)} is not a layout of {model.key}: {result.reason}")
    return result.layout


ALL_1G = ("1g.10gb",) * 7
ALL_BALANCED = ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")


# -- shared placement helpers -----------------------------------------------------------------


def _free(gpu: SimGpu, profile: str) -> list[int]:
    return [
        k
        for k, (p, h) in enumerate(zip(gpu.instances, gpu.holders, strict=True))
        if h is None and p.profile == profile
    ]


def _free_compute(model: GpuModel, gpu: SimGpu) -> int:
    return sum(
        model.profile(p.profile).compute_slices
        for p, h in zip(gpu.instances, gpu.holders, strict=True)
        if h is None
    )


def _hold(
    cluster: SimCluster, node: SimNode, picks: Sequence[tuple[SimGpu, int]], pod: SimPod
) -> Assignment:
    units = []
    for gpu, k in picks:
        cluster.hold_instance(node, gpu, k, pod.name)
        units.append((gpu.index, gpu.instances[k]))
    assignment = Assignment(pod.name, node.name, tuple(units))
    cluster.record(assignment)
    return assignment


def first_fit(cluster: SimCluster, pod: SimPod) -> Assignment | None:
    for node in cluster.nodes:
        picks = [(gpu, k) for gpu in node.gpus for k in _free(gpu, pod.profile)]
        if len(picks) >= pod.count:
            return _hold(cluster, node, picks[: pod.count], pod)
    return None


def best_fit(cluster: SimCluster, pod: SimPod) -> Assignment | None:
    """Minimise the free compute slices left on the chosen GPUs, then on the node."""
    model = cluster.model
    size = model.profile(pod.profile).compute_slices
    best: tuple[tuple[int, int, int], SimNode, list[tuple[SimGpu, int]]] | None = None
    for n, node in enumerate(cluster.nodes):
        options = []
        for gpu in node.gpus:
            free = _free(gpu, pod.profile)
            if free:
                left = _free_compute(model, gpu)
                for k in free:
                    left -= size
                    options.append((left, gpu.index, gpu, k))
        if len(options) < pod.count:
            continue
        options.sort(key=lambda o: (o[0], o[1]))
        chosen = options[: pod.count]
        node_left = sum(_free_compute(model, gpu) for gpu in node.gpus) - size * pod.count
        rank = (sum(o[0] for o in chosen), node_left, n)
        if best is None or rank < best[0]:
            best = (rank, node, [(o[2], o[3]) for o in chosen])
    if best is None:
        return None
    return _hold(cluster, best[1], best[2], pod)


# -- the policies -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WholeGpu:
    """B0: MIG off, whole GPUs."""

    name: str = "B0 whole-GPU"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return (None,)

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        best: tuple[tuple[int, int], SimNode, list[SimGpu]] | None = None
        for n, node in enumerate(cluster.nodes):
            free = [g for g in node.gpus if not g.mig_enabled and g.whole_holder is None]
            if len(free) >= pod.count and (best is None or (len(free), n) < best[0]):
                best = ((len(free), n), node, free[: pod.count])
        if best is None:
            return None
        node = best[1]
        for gpu in best[2]:
            cluster.hold_whole(node, gpu, pod.name)
        assignment = Assignment(pod.name, node.name, tuple((g.index, None) for g in best[2]))
        cluster.record(assignment)
        return assignment


@dataclass(frozen=True, slots=True)
class StaticFirstFit:
    """B1/B2: one fixed layout on every GPU, first fit."""

    name: str
    profiles: tuple[str, ...]

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return (static_layout(model, self.profiles),)

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return first_fit(cluster, pod)


@dataclass(frozen=True, slots=True)
class StaticBestFit:
    """B3/B4: fixed layouts (cycled over the GPUs), best fit, never re-partitioned."""

    name: str
    layouts: tuple[Layout, ...]

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return self.layouts

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return best_fit(cluster, pod)


def allowed_geometries(model: GpuModel) -> tuple[Layout, ...]:
    """Maximal legal layouts of the model's plain profiles, most instances first."""
    names = [p.name for p in model.profiles if not p.parsed.attribute]
    layouts = enumerate_maximal_layouts(model, names)
    return tuple(sorted(layouts, key=lambda layout: (-len(layout), layout)))


@dataclass(frozen=True, slots=True)
class NosLike:
    """B5: best fit; re-partition idle GPUs greedily for the lacking profiles."""

    geometries: tuple[Layout, ...]
    name: str = "B5 nos-like"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return place_or_reshape(self, cluster, pod)

    def place_now(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return best_fit(cluster, pod)

    def reshape_for(self, cluster: SimCluster, pod: SimPod) -> Reshaped | None:
        for node in cluster.nodes:
            lacking = pod.count - sum(len(_free(g, pod.profile)) for g in node.gpus)
            changes: list[tuple[int, Layout]] = []
            for gpu in node.gpus:
                if lacking <= 0:
                    break
                if not gpu.mig_enabled or not gpu.is_idle:
                    continue
                geometry = self._geometry_for(pod.profile, lacking)
                if geometry is None:
                    break
                changes.append((gpu.index, geometry))
                lacking -= sum(1 for p in geometry if p.profile == pod.profile)
            if lacking <= 0:
                changed = tuple(
                    (node, index)
                    for index, geometry in changes
                    if cluster.repartition(node, index, geometry)
                )
                cluster.repartitions += 1
                return changed
        return None

    def _geometry_for(self, profile: str, lacking: int) -> Layout | None:
        best: tuple[int, Layout] | None = None
        for geometry in self.geometries:
            provided = min(lacking, sum(1 for p in geometry if p.profile == profile))
            if provided and (best is None or provided > best[0]):
                best = (provided, geometry)
        return None if best is None else best[1]


def planned_reshape(
    states: Sequence[NodeState],
    demand: PodDemand,
    settings: PlanSettings,
    layouts: LayoutCache | None = None,
) -> RepartitionPlan | None:
    """The repartition controller's own decision for one pending pod, from an empty record
    (mode A has no clock, no plan in progress and an empty mig-parted file): the plan of its
    START step, or None when it would wait."""
    step = decide(
        RepartitionRecord(),
        states,
        [PendingPod(demand, 0.0)],
        file_configs=frozenset(),
        now=0.0,
        settings=ControllerSettings(plan=settings),
        layout_cache=layouts,
    )
    if step.kind is not StepKind.START or step.plan is None:
        return None
    return step.plan


def demand_for(pod: SimPod) -> PodDemand:
    """The pod as the extender sees it after admission: ``nvidia.com/mig-<profile>: count``."""
    resource = mig_resource(pod.profile)
    return PodDemand(pod.name, (DemandUnit(resource, pod.count, UnitKind.MIG, pod.profile),))


def extender_choice(cluster: SimCluster, demand: PodDemand) -> SimNode | None:
    """The node the extender scores highest (0 = cannot take the pod); ties: lowest index."""
    best: tuple[int, SimNode] | None = None
    for node in cluster.nodes:
        score = score_node(demand, cluster.prepared(node))
        if score > 0 and (best is None or score > best[0]):
            best = (score, node)
    return None if best is None else best[1]


def fragmentation_picks(
    model: GpuModel, node: SimNode, profile: str, count: int
) -> list[tuple[SimGpu, int]]:
    """The instances the extender's ranking assumes (:mod:`migslice.inventory.picking`)."""
    held = [[h is not None for h in g.holders] for g in node.gpus]
    occupancy = [
        Occupancy(g.index, g.instances, held[n], g.whole_holder is not None)
        for n, g in enumerate(node.gpus)
    ]
    picks: list[tuple[SimGpu, int]] = []
    for _ in range(count):
        pick = best_free_instance(occupancy, profile, model.memory_slices)
        if pick is None:
            return []
        held[pick.gpu][pick.instance] = True
        picks.append((node.gpus[pick.gpu], pick.instance))
    return picks


@dataclass(frozen=True, slots=True)
class Migslice:
    """The extender's filter and fragmentation score; the planner for idle GPUs."""

    name: str = "migslice"
    settings: PlanSettings = PLAN_SETTINGS
    layouts: LayoutCache = field(default_factory=dict, compare=False, repr=False)
    """Maximal layouts kept between the planner's calls (it asks once per pod)."""
    packed_nodes: bool = False
    """Offer the planner only the node with the fewest idle GPUs that has enough (a
    controller-side proposal; the released controller offers every node)."""

    layout_weights: tuple[tuple[str, float], ...] = ()
    """If set, replace each layout the planner chose by the maximal layout holding the same
    instances for the pod whose other instances have the most expected demand (sum of
    compute slices x the profile's share of demand): the workload's known mix, an oracle (the
    released planner estimates the lacking demand from what pods hold and wait for)."""

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def place(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return place_or_reshape(self, cluster, pod)

    def place_now(self, cluster: SimCluster, pod: SimPod) -> Assignment | None:
        return self._schedule(cluster, pod, demand_for(pod))

    def reshape_for(self, cluster: SimCluster, pod: SimPod) -> Reshaped | None:
        demand = demand_for(pod)
        offered = cluster.nodes
        if self.packed_nodes:
            offered = _packed_candidates(cluster, pod.count) or cluster.nodes
        states = [cluster.node_state(node) for node in offered]
        result = planned_reshape(states, demand, self.settings, self.layouts)
        if result is None:
            return None
        changed: list[tuple[SimNode, int]] = []
        for change in result.changes:
            node = cluster.by_name[change.node]
            remaining = pod.count
            for gpu_change in change.gpus:
                layout = gpu_change.new
                if self.layout_weights:
                    wanted = min(remaining, sum(1 for p in layout if p.profile == pod.profile))
                    remaining -= wanted
                    layout = self._weighted_layout(cluster.model, pod.profile, wanted, layout)
                if cluster.repartition(node, gpu_change.index, layout):
                    changed.append((node, gpu_change.index))
            cluster.repartitions += 1
        return tuple(changed)

    def _weighted_layout(
        self, model: GpuModel, profile: str, wanted: int, planned: Layout
    ) -> Layout:
        weights = dict(self.layout_weights)
        best: tuple[float, Layout] | None = None
        for layout in _maximal_layouts(model):
            have = sum(1 for p in layout if p.profile == profile)
            if have < wanted:
                continue
            value = sum(
                model.profile(p.profile).compute_slices * weights.get(p.profile, 0.0)
                for p in layout
            ) - wanted * model.profile(profile).compute_slices * weights.get(profile, 0.0)
            if best is None or value > best[0]:
                best = (value, layout)
        return planned if best is None else best[1]

    def _schedule(self, cluster: SimCluster, pod: SimPod, demand: PodDemand) -> Assignment | None:
        node = extender_choice(cluster, demand)
        if node is None:
            return None
        picks = fragmentation_picks(cluster.model, node, pod.profile, pod.count)
        if len(picks) < pod.count:
            raise AssertionError(f"the extender chose {node.name} but it lacks {pod.profile}")
        return _hold(cluster, node, picks, pod)


@functools.cache
def _maximal_layouts(model: GpuModel) -> tuple[Layout, ...]:
    return allowed_geometries(model)


def _packed_candidates(cluster: SimCluster, gpus_needed: int) -> list[SimNode]:
    best: tuple[int, SimNode] | None = None
    for node in cluster.nodes:
        idle = sum(1 for g in node.gpus if g.mig_enabled and g.is_idle)
        if idle >= gpus_needed and (best is None or idle < best[0]):
            best = (idle, node)
    return [] if best is None else [best[1]]


POLICY_IDS = (
    "B0",
    "B1",
    "B2",
    "B3",
    "B4",
    "B5",
    "migslice",
    "migslice-packed",
    "migslice-proposed",
)


def make_policy(policy_id: str, model: GpuModel, expected: Sequence[SimPod], gpus: int) -> Policy:
    """The policy called ``policy_id`` (:data:`POLICY_IDS`); B3 is fitted to ``expected``
    (the workload's pods) on ``gpus`` GPUs."""
    if policy_id == "B0":
        return WholeGpu()
    if policy_id == "B1":
        return StaticFirstFit("B1 static all-1g first-fit", ALL_1G)
    if policy_id == "B2":
        return StaticFirstFit("B2 static all-balanced first-fit", ALL_BALANCED)
    if policy_id == "B3":
        return StaticBestFit("B3 oracle-static best-fit", oracle_layouts(expected, model, gpus))
    if policy_id == "B4":
        return StaticBestFit("B4 best-fit all-balanced", (static_layout(model, ALL_BALANCED),))
    if policy_id == "B5":
        return NosLike(allowed_geometries(model))
    if policy_id == "migslice":
        return Migslice()
    if policy_id == "migslice-packed":
        return Migslice("migslice + packed-node planning (proposal)", packed_nodes=True)
    if policy_id == "migslice-proposed":
        slices = sum(p.compute_slices for p in expected)
        shares: dict[str, float] = {}
        for pod in expected:
            shares[pod.profile] = shares.get(pod.profile, 0.0) + pod.compute_slices / slices
        return Migslice(
            "migslice + packed nodes + mix-aware layouts (proposal)",
            packed_nodes=True,
            layout_weights=tuple(sorted(shares.items())),
        )
    raise ValueError(f"unknown policy {policy_id!r}; known: {', '.join(POLICY_IDS)}")
