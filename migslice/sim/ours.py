"""migslice in the simulator: the extender's score for placement, the repartition
controller's decision for new layouts.

* **Placement**: the extender's own filter and best-fit rank
  (:func:`migslice.scheduling.best_fit_rank` over :func:`~migslice.scheduling.prepare_node` of
  each node's :class:`~migslice.inventory.NodeState`: the fragmentation score, then the
  fullest node), the highest-ranked node winning (ties: the lowest index, where
  kube-scheduler's own scores would choose). Inside the node the instance is
  the one the score assumed (:func:`~migslice.inventory.picking.best_free_instance`, as the
  inventory assumes the device plugin picks). The scores live in a
  :class:`~migslice.sim.index.RankIndex`, so a pod costs a lookup, not a scan of every node;
  :func:`extender_choice` is the scan, kept as the oracle the index is tested against.
  kube-scheduler's ``percentageOfNodesToScore`` (:mod:`migslice.sim.sampling`) narrows the
  nodes scored to those its own filters found from a rotating start index; at 100 (the
  default) that is every node that can take the pod, and the choice is the scan's.
* **Re-partitioning** (mode A): when no node fits, the controller's decision
  (:func:`migslice.repartition.decide`, which runs the planner) is asked with the pod pending
  and eligible at once (mode A has no clock). The planner considers every node and the demand
  mix of the whole cluster; asking it about 776 nodes for each of 9,000 pods is what made
  the simulator quadratic. So the simulator hands it, node by node in the planner's own order
  (fewest idle GPUs that suffice, then name), one node at a time, with the cluster-wide demand
  mix (kept incrementally by :class:`DemandMix`, the planner's rule 5 formula) as
  ``expected_mix``: the first node the planner accepts is the node it would have chosen from
  all of them. ``tests/sim/test_sim_policies.py`` checks this against the plain call over every
  node. Mode B drives the controller itself (:mod:`migslice.sim.controller`).
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from migslice.inventory import NodeState, mig_resource
from migslice.inventory.picking import Occupancy, best_free_instance
from migslice.mig import (
    CATALOG,
    GpuModel,
    Layout,
    enumerate_maximal_layouts,
    profile_from_resource,
)
from migslice.names import MIG_TRANSITION_STATES, MODE_CARVE, MODE_MIG_MANAGER
from migslice.repartition import (
    CarveSettings,
    ControllerSettings,
    LayoutCache,
    PendingPod,
    PlanSettings,
    RepartitionPlan,
    RepartitionRecord,
    StepKind,
    decide,
)
from migslice.scheduling import DemandUnit, PodDemand, UnitKind, best_fit_rank
from migslice.sim.carving import CarveChooser
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.held import HeldMix
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import IndexedPlacer, LayoutChange, Placer, hold
from migslice.sim.sampling import (
    Positions,
    SampleTally,
    best_in_window,
    num_feasible_nodes_to_find,
    search,
    span,
)
from migslice.sim.static import stock_mixed_layouts
from migslice.sim.trace import SimPod

PLAN_SETTINGS = PlanSettings(min_pending_s=0.0, cooldown_s=0.0, max_nodes_in_flight=1)
"""Mode A has no clock: a pod is eligible for re-partitioning as soon as it is pending."""
EMPTY_RECORD = RepartitionRecord()
"""Mode A's record: no plan in progress, no cooldown, no quarantine (a value: decide never
changes it, it returns a new one)."""
CARVE_SETTINGS = CarveSettings()
"""The controller's default carve settings (nodes without a mode label are MIG Manager's),
made once rather than per decision."""


def demand_for(pod: SimPod) -> PodDemand:
    """The pod as the extender sees it after admission: ``nvidia.com/mig-<profile>: count``."""
    resource = mig_resource(pod.profile)
    return PodDemand(pod.name, (DemandUnit(resource, pod.count, UnitKind.MIG, pod.profile),))


def planned_reshape(
    states: Sequence[NodeState],
    demand: PodDemand,
    settings: PlanSettings,
    *,
    layouts: LayoutCache | None = None,
) -> RepartitionPlan | None:
    """The repartition controller's own decision for one pending pod, from an empty record
    (mode A has no clock, no plan in progress and an empty mig-parted file): the plan of its
    START step, or None when it would wait."""
    step = decide(
        EMPTY_RECORD,
        states,
        [PendingPod(demand, 0.0)],
        file_configs=frozenset(),
        now=0.0,
        # the simulated MIG Manager's reconfiguration time stands for all of its work,
        # reading the ConfigMap included: the controller labels at once
        settings=ControllerSettings(plan=settings, config_propagation_s=0.0, carve=CARVE_SETTINGS),
        layout_cache=layouts,
    )
    if step.kind is not StepKind.START or step.plan is None:
        return None
    return step.plan


def extender_choice(cluster: SimCluster, demand: PodDemand) -> SimNode | None:
    """The node the extender's best-fit filter ranks highest over a scan of every node (the
    highest score, then the fullest; 0 = cannot take the pod); ties: lowest index."""
    best: tuple[int, SimNode] | None = None
    for node in cluster.nodes:
        score = best_fit_rank(demand, cluster.prepared(node))
        if score > 0 and (best is None or score > best[0]):
            best = (score, node)
    return None if best is None else best[1]


def fragmentation_picks(
    model: GpuModel, node: SimNode, profile: str, *, count: int
) -> list[tuple[SimGpu, int]]:
    """The instances the extender's ranking assumes (:mod:`migslice.inventory.picking`)."""
    if count == 1:  # nothing to mark held between picks: each GPU as the cluster keeps it
        kept = [g.as_occupancy(model.memory_slices) for g in node.gpus]
        pick = best_free_instance(
            [o for o, _ in kept], profile, model.memory_slices, [u for _, u in kept]
        )
        return [] if pick is None else [(node.gpus[pick.gpu], pick.instance)]
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


class PlannerLayouts(dict[tuple[str, frozenset[str]], list[Layout]]):
    """The planner's layout cache (:data:`~migslice.repartition.LayoutCache`), narrowed for
    the pods being planned: one maximal layout per count vector (the first in enumeration
    order), and only those holding an instance of one of ``profiles`` (the pending pods'). The
    planner ranks layouts by their counts alone, keeps the first of equals and skips every
    layout that lacks an instance it plans, so its choice is the same; it just looks at a few
    layouts instead of 78."""

    def __init__(self, model: GpuModel) -> None:
        super().__init__()
        self.model = model
        self.profiles: frozenset[str] = frozenset()
        self._all: dict[tuple[str, frozenset[str]], list[Layout]] = {}
        self._narrow: dict[tuple[tuple[str, frozenset[str]], frozenset[str]], list[Layout]] = {}

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: tuple[str, frozenset[str]]) -> list[Layout]:
        """The layouts for ``key``, narrowed to ``profiles``."""
        narrow = self._narrow.get((key, self.profiles))
        if narrow is None:
            if key not in self._all:
                model = self.model if key[0] == self.model.key else CATALOG.get(key[0])
                seen: dict[tuple[tuple[str, int], ...], Layout] = {}
                for layout in enumerate_maximal_layouts(model, sorted(key[1])):
                    counts = tuple(sorted(Counter(p.profile for p in layout).items()))
                    seen.setdefault(counts, layout)
                self._all[key] = list(seen.values())
            narrow = [x for x in self._all[key] if any(p.profile in self.profiles for p in x)]
            self._narrow[(key, self.profiles)] = narrow
        return narrow


class DemandMix:
    """The planner's demand mix (rule 5 of :mod:`migslice.repartition.migmanager.planner`)
    kept per GPU and summed on demand: compute slices pods hold per resource, and free
    compute slices per resource on GPUs a pod uses. A GPU's part is counted again only when
    the cluster changed the GPU (its ``version``), in plain dicts (a Counter's update is
    slower)."""

    def __init__(self, cluster: SimCluster) -> None:
        self._cluster = cluster
        self._of: dict[str, tuple[str, int]] = {
            p.name: (mig_resource(p.name), p.compute_slices) for p in cluster.model.profiles
        }
        """Per profile of the model, its resource and compute slices."""
        self._slices: dict[str, int] = {
            resource: parsed.compute_slices
            for resource, _ in self._of.values()
            if (parsed := profile_from_resource(resource)) is not None
        }
        """Per resource of the model, the compute slices its name says (a pending pod's
        weight, as :func:`~migslice.repartition.shapes.demand_mix` reads it)."""
        self._parts: list[list[_GpuPart]] = []
        """Per node, per GPU: the GPU's version when counted, its held and its spare slices."""
        self._held: dict[str, int] = {}
        self._spare: dict[str, int] = {}
        for node in cluster.nodes:
            parts = []
            for gpu in node.gpus:
                part = self._part(gpu)
                parts.append(part)
                _add(self._held, part[1], 1)
                _add(self._spare, part[2], 1)
            self._parts.append(parts)
        self._dirty: set[int] = set()
        cluster.listeners.append(lambda node: self._dirty.add(node.position))

    def _part(self, gpu: SimGpu) -> _GpuPart:
        held: dict[str, int] = {}
        spare: dict[str, int] = {}
        if not gpu.is_idle:
            of = self._of
            for placed, holder in zip(gpu.instances, gpu.holders, strict=True):
                resource, slices = of[placed.profile]
                into = held if holder is not None else spare
                into[resource] = into.get(resource, 0) + slices
        return gpu.version, held, spare

    def weights(self, pending: Sequence[PodDemand]) -> dict[str, float]:
        for position in self._dirty:
            parts = self._parts[position]
            for k, gpu in enumerate(self._cluster.nodes[position].gpus):
                old = parts[k]
                if old[0] == gpu.version:
                    continue
                _add(self._held, old[1], -1)
                _add(self._spare, old[2], -1)
                part = parts[k] = self._part(gpu)
                _add(self._held, part[1], 1)
                _add(self._spare, part[2], 1)
        self._dirty.clear()
        weights: dict[str, float] = {r: float(n) for r, n in self._held.items() if n}
        for pod in pending:
            for unit in pod.units:
                per = self._slices.get(unit.resource)
                if per is None:
                    profile = profile_from_resource(unit.resource)
                    if profile is None:
                        continue
                    per = profile.compute_slices
                slices = unit.count * per
                weights[unit.resource] = weights.get(unit.resource, 0.0) + slices
        total = sum(weights.values())
        demand = {k: v / total for k, v in weights.items()} if total else {}
        supply = sum(n for n in self._spare.values() if n > 0)
        if not supply:
            return demand
        spare = self._spare
        return {k: max(0.0, v - spare.get(k, 0) / supply) + 0.1 * v for k, v in demand.items()}


_GpuPart = tuple[int, dict[str, int], dict[str, int]]


def _add(into: dict[str, int], part: dict[str, int], sign: int) -> None:
    """``into`` plus (or minus) ``part``, key by key (new keys last, as Counter.update)."""
    for key, n in part.items():
        into[key] = into.get(key, 0) + sign * n


class MigslicePlacer(IndexedPlacer):
    def __init__(
        self,
        cluster: SimCluster,
        settings: PlanSettings,
        *,
        carve: bool = False,
        percentage_of_nodes_to_score: int = 100,
    ) -> None:
        super().__init__(cluster)
        self.settings = settings
        self.carve = carve
        self.to_find = num_feasible_nodes_to_find(percentage_of_nodes_to_score, len(cluster.nodes))
        self.sampling = SampleTally(percentage_of_nodes_to_score)
        self.start_index = 0
        self.fits = RankIndex(cluster, self.fit_rank)
        self.demands: dict[Kind, PodDemand] = {}
        self.mix = DemandMix(cluster)
        self.idle = RankIndex(cluster, self.idle_rank)
        self.layouts = PlannerLayouts(cluster.model)
        self.reshaped: SimNode | None = None
        self.held = HeldMix(cluster)
        self.carver = CarveChooser(cluster, self.demand, held=self.held)

    def demand(self, kind: Kind) -> PodDemand:
        if kind not in self.demands:
            self.demands[kind] = demand_for(SimPod("pod", kind[0], kind[1]))
        return self.demands[kind]

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        rank = best_fit_rank(self.demand(kind), self.cluster.prepared(node))
        return None if rank <= 0 else (-rank, node.position)

    def picks(self, node: SimNode, kind: Kind) -> list[tuple[SimGpu, int]]:
        return fragmentation_picks(self.cluster.model, node, kind[0], count=kind[1])

    def fit_rank(self, node: SimNode, kind: Kind) -> Rank | None:
        """kube-scheduler's own filters: NodeResourcesFit on the pod's MIG resource
        (``nvidia.com/mig-<profile>`` allocatable less requested: the device plugin
        advertises one per instance, and a held instance is requested)."""
        free = self.cluster.node_state(node).free_of(mig_resource(kind[0]))
        return (node.position,) if free >= kind[1] else None

    def choose(self, kind: Kind) -> SimNode | None:
        """The node kube-scheduler binds the pod to: its filters find ``to_find`` nodes from
        the start index (:mod:`migslice.sim.sampling`), the extender filters and scores those
        and the highest score wins (ties: the lowest position). When the sample holds no node
        the extender accepts but another node would take the pod, the pod is counted in
        ``left_pending`` and tried again from the advanced start index, as kube-scheduler's
        next cycle for it would (other pods are not interleaved)."""
        n = len(self.cluster.nodes)
        feasible = Positions(self.fits.entries(kind))
        tally = self.sampling
        if not feasible:  # one cycle over every node, nothing sent to the extender
            tally.cycles += 1
            tally.processed += n
            return None
        entries = self.index.entries(kind)
        covered = 0
        retried = False
        while True:
            start = self.start_index
            length = span(feasible, start, n, self.to_find)
            self.start_index = (start + length) % n
            tally.cycles += 1
            tally.processed += length
            tally.names += min(len(feasible), self.to_find)
            tally.calls += 1 if feasible else 0
            covered += length
            position = best_in_window(entries, start, length, n)
            if position is not None and self._fits(position, kind):
                return self.cluster.nodes[position]
            if position is not None:
                position = self._scan(kind, search(feasible, start, n, self.to_find).sample)
                if position is not None:
                    return self.cluster.nodes[position]
            if not entries or covered >= n:
                return None
            if not retried:
                tally.left_pending += 1
                retried = True

    def _fits(self, position: int, kind: Kind) -> bool:
        return self.fit_rank(self.cluster.nodes[position], kind) is not None

    def _scan(self, kind: Kind, sample: Sequence[int]) -> int | None:
        """The extender's choice among ``sample`` (a node the extender accepts but
        kube-scheduler's filters did not pass is not in it)."""
        ranks = [r for p in sample if (r := self.rank(self.cluster.nodes[p], kind)) is not None]
        return int(min(ranks)[-1]) if ranks else None

    def idle_rank(self, node: SimNode, kind: Kind) -> Rank | None:
        """The planner's node order for a pod needing ``kind[1]`` idle GPUs at least."""
        if node.mig_config_state in MIG_TRANSITION_STATES:
            return None
        idle = sum(1 for g in node.gpus if g.mig_enabled and g.is_idle)
        return (idle, node.position) if idle >= kind[1] else None

    def reshape(self, pods: Sequence[SimPod]) -> tuple[LayoutChange, ...]:
        """Mode A: the planner's changes for the first pod (see the module docstring)."""
        pod = pods[0]
        if self.carve:
            self.reshaped, changes = self.carver.reshape((pod.profile, pod.count))
            return changes
        profile = self.cluster.model.profile(pod.profile)
        needed = pod.count if profile.compute_slices == 7 else -(-pod.count // profile.max_count)
        candidates = self.idle.ordered(("<idle>", needed))
        first = next(candidates, None)
        if first is None:
            return ()
        demand = demand_for(pod)
        mix = self.mix.weights([demand])
        settings = replace(
            self.settings, expected_mix=tuple(mix.items()), strand_guard=self.held.guard()
        )
        self.layouts.profiles = frozenset((pod.profile,))
        for node in itertools.chain((first,), candidates):
            state = self.cluster.node_state(node)
            plan = planned_reshape([state], demand, settings, layouts=self.layouts)
            if plan is not None:
                self.reshaped = node
                return tuple(
                    LayoutChange(self.cluster.by_name[c.node], g.index, g.new)
                    for c in plan.changes
                    for g in c.gpus
                )
        return ()

    def place(self, pod: SimPod) -> Assignment | None:
        """After a mode A re-partition the re-partitioned node is the only one with a free
        instance of the pod's profile (the pod found none before), so the extender's choice
        is that node: placed there without re-ranking the node in between."""
        node, self.reshaped = self.reshaped, None
        if node is None:
            kind = (pod.profile, pod.count)
            node = self.choose(kind)
            if node is None:
                return None
        picks = self.picks(node, (pod.profile, pod.count))
        if len(picks) < pod.count:
            raise AssertionError(f"{node.name} was re-partitioned for {pod.name} but lacks it")
        return hold(self.cluster, node, picks, pod=pod)


@dataclass(frozen=True, slots=True)
class Migslice:
    """The extender's filter and fragmentation score; the planner for idle GPUs (``mode``
    ``mig-manager``) or the carve planner on GPUs in use too (``carve``: every node in carve
    mode, node states with the node agent's report)."""

    name: str = "migslice"
    settings: PlanSettings = field(default=PLAN_SETTINGS)
    mode: str = MODE_MIG_MANAGER
    percentage_of_nodes_to_score: int = 100
    """kube-scheduler's setting (:mod:`migslice.sim.sampling`); 100: every feasible node."""
    partitioned_ahead: bool = False
    """Start every GPU partitioned as B4 does (node n: mig-parted stock config ``n mod 7``)
    instead of unpartitioned: free instances of most profiles on most nodes from the start,
    so kube-scheduler's sample is full on nearly every pod."""

    @property
    def carves(self) -> bool:
        return self.mode == MODE_CARVE

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return stock_mixed_layouts(model) if self.partitioned_ahead else ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        cluster.agent_reports = self.carves
        return MigslicePlacer(
            cluster,
            self.settings,
            carve=self.carves,
            percentage_of_nodes_to_score=self.percentage_of_nodes_to_score,
        )
