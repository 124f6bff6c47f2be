"""B5: nos's MIG partitioner, as nebuly-ai/nos does it (Apache-2.0; read, not copied).

Sources, at nos HEAD 12e0a72: ``internal/partitioning/core/planner.go`` (the plan),
``core/snapshot.go`` and ``core/tracker.go`` (lacking slices, candidate nodes, fork/commit),
``core/util.go`` (pod order), ``pkg/gpu/mig/gpu.go`` and ``node.go`` (``UpdateGeometryFor``),
``pkg/gpu/mig/known_configs.go`` (allowed geometries), ``pkg/gpu/partitioning.go`` and
``internal/partitioning/mig/initializer.go`` (initial geometry),
``internal/controllers/gpupartitioner/partitioner_controller.go`` and ``pkg/util/batcher.go``
(batching, one plan in flight; mode B only, :mod:`migslice.sim.batching`).

What the simulator reproduces:

* **Initial geometry**: every GPU gets the allowed geometry with the fewest distinct
  profiles, the first such in the table: one ``7g.80gb``.
* **Allowed geometries**: nos's A100-80GB table, 12 count-geometries (no 4g + 3g, no
  1g.20gb). Two of its rows name profiles of the 40 GB card (``3g.20gb``, ``2g.10gb``); they
  are read as the 80 GB profiles they stand for.
* **Lacking slices**: per pending pod, what it requests beyond what is free in the whole
  cluster (each pod on its own); their sum is the plan's target.
* **Plan**: candidate nodes (a GPU with a free instance, or a geometry outside the table) in
  name order; on each, ``UpdateGeometryFor(lacking)``: GPU by GPU, the allowed geometry that
  keeps every used instance and provides the most lacking instances (a profile the GPU
  already offers free in the lacking number is skipped); what the GPU then offers free is
  taken off the target. Then the pods, smallest profile first, are added to the node (no
  lacking slice left for the pod in the forked snapshot, the node has the free instances,
  one GPU holds them all); the node's change is kept if a pod was added, else reverted.
  Pods added on one node are tried again on the next ones, as nos's loop does.
* **Re-shaping GPUs in use**: a geometry is applicable when it keeps the used counts; free
  instances are deleted and new ones created around the used ones (nos's agent tries every
  creation order). The simulator keeps a geometry only when a legal layout with those counts
  holds every used instance in place, so B5 never fails an apply (in favour of B5).
* **Tie-break**: nos keeps the first maximum while iterating a Go map, which is random;
  ``tie="random"`` draws uniformly among the tied geometries (seeded), and ``"table"``,
  ``"most"`` and ``"fewest"`` (instances) are the sensitivity variants.

Placement is not nos's: nos leaves it to kube-scheduler, whose default scoring ignores MIG
resources (ties broken at random). ``placement="best-fit"`` (the default, stronger) uses the
baselines' best fit; ``"random"`` a uniformly random node that has the instances, as the
default scheduler would.
"""

from __future__ import annotations

import functools
import heapq
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from migslice.mig import GpuModel, Layout, free_placements, make_layout
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, PerGpu, Rank, RankIndex
from migslice.sim.placement import (
    BestFit,
    LayoutChange,
    Placer,
    first_fit_picks,
    first_fit_rank,
    hold,
)
from migslice.sim.trace import SimPod

Counts = tuple[tuple[str, int], ...]

NOS_A100_80GB: tuple[Counts, ...] = tuple(
    tuple(sorted(row.items()))
    for row in (
        {"7g.80gb": 1},
        {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
        {"4g.40gb": 1, "1g.10gb": 3},
        {"3g.40gb": 2},
        {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
        {"3g.40gb": 1, "1g.10gb": 3},
        {"2g.20gb": 2, "3g.40gb": 1},
        {"2g.20gb": 1, "1g.10gb": 2, "3g.40gb": 1},
        {"2g.20gb": 3, "1g.10gb": 1},
        {"2g.20gb": 2, "1g.10gb": 3},
        {"2g.20gb": 1, "1g.10gb": 5},
        {"1g.10gb": 7},
    )
)
TIE_BREAKS = ("random", "table", "most", "fewest")
PLACEMENTS = ("best-fit", "random")


@functools.cache
def realize(model: GpuModel, held: Layout, counts: Counts) -> Layout | None:
    """A legal layout with exactly ``counts`` that contains the ``held`` instances in place
    (starts tried lowest first, largest profiles first), or None."""
    remaining = Counter(dict(counts))
    remaining.subtract(Counter(p.profile for p in held))
    if any(n < 0 for n in remaining.values()):
        return None
    order = sorted(remaining.elements(), key=lambda p: -model.profile(p).memory_slices)

    def extend(layout: Layout, left: list[str]) -> Layout | None:
        if not left:
            return layout
        for placed in free_placements(model, layout, left[0]):
            found = extend(make_layout([*layout, placed]), left[1:])
            if found is not None:
                return found
        return None

    return extend(make_layout(held), order)


@dataclass(slots=True)
class NosGpu:
    """One GPU as nos's planner sees it: used and free instance counts per profile."""

    index: int
    held: Layout
    layout: Layout
    used: Counter[str]
    free: Counter[str]
    owned: bool = field(default=True, compare=False)
    """Whether ``used`` and ``free`` are this GPU's own: a :meth:`copy` shares them until
    :meth:`own` (a plan forks every GPU of a node it visits and changes few)."""

    @staticmethod
    def of(gpu: SimGpu) -> NosGpu:
        used: Counter[str] = Counter()
        free: Counter[str] = Counter()
        for placed, holder in zip(gpu.instances, gpu.holders, strict=True):
            (used if holder is not None else free)[placed.profile] += 1
        return NosGpu(gpu.index, gpu.held_layout(), tuple(gpu.instances), used, free)

    def copy(self) -> NosGpu:
        return NosGpu(self.index, self.held, self.layout, self.used, self.free, owned=False)

    def own(self) -> None:
        """Make ``used`` and ``free`` this GPU's own before they change in place."""
        if not self.owned:
            self.used, self.free, self.owned = Counter(self.used), Counter(self.free), True

    def geometry(self) -> Counts:
        return tuple(sorted((self.used + self.free).items()))


@dataclass(frozen=True, slots=True)
class NosRules:
    model: GpuModel
    geometries: tuple[Counts, ...]
    tie: str
    offers: dict[tuple[Layout, Counts, str], tuple[tuple[int, int], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Per GPU (held layout, used counts) and profile: :meth:`offers_for`, kept for the run."""
    reach: dict[tuple[Layout, str], bool] = field(default_factory=dict, compare=False, repr=False)
    """Per held layout and profile: :meth:`can_provide`."""

    def applicable(self, gpu: NosGpu, candidate: Counts) -> bool:
        """nos's ``CanApplyGeometry`` (keeps the used counts), and a layout exists."""
        counts = dict(candidate)
        if any(counts.get(p, 0) < n for p, n in gpu.used.items() if n):
            return False
        return realize(self.model, gpu.held, candidate) is not None

    def offers_for(self, gpu: NosGpu, profile: str) -> tuple[tuple[int, int], ...]:
        """The geometries the GPU may take that add instances of ``profile``: (position in
        ``geometries``, instances added). They depend on the GPU's held layout and used
        counts only, so they are worked out once per such GPU."""
        key = (gpu.held, tuple(sorted((p, n) for p, n in gpu.used.items() if n)), profile)
        found = self.offers.get(key)
        if found is None:
            found = tuple(
                (i, n)
                for i, candidate in enumerate(self.geometries)
                if (n := dict(candidate).get(profile, 0) - gpu.used[profile]) > 0
                and self.applicable(gpu, candidate)
            )
            self.offers[key] = found
        return found

    def update_for(self, gpu: NosGpu, required: dict[str, int], rng: random.Random) -> bool:
        """``GPU.UpdateGeometryFor``: True when the GPU gets a geometry."""
        provided: dict[int, int] = {}
        for profile, wanted in required.items():
            if gpu.free[profile] >= wanted:
                continue
            for i, offered in self.offers_for(gpu, profile):
                provided[i] = provided.get(i, 0) + min(offered, wanted)
        if not provided:
            return False
        most = max(provided.values())
        tied = [i for i in sorted(provided) if provided[i] == most]
        chosen = self.geometries[self._break(tied, rng)]
        if chosen != gpu.geometry():
            layout = realize(self.model, gpu.held, chosen)
            assert layout is not None
            gpu.layout = layout
            gpu.free = Counter(dict(chosen)) - gpu.used
        return True

    def _break(self, tied: list[int], rng: random.Random) -> int:
        if self.tie == "random":
            return tied[rng.randrange(len(tied))] if len(tied) > 1 else tied[0]
        size = {i: sum(n for _, n in self.geometries[i]) for i in tied}
        if self.tie == "most":
            return max(tied, key=lambda i: (size[i], -i))
        if self.tie == "fewest":
            return min(tied, key=lambda i: (size[i], i))
        return tied[0]

    def can_provide(self, held: Layout, profile: str) -> bool:
        """Whether some geometry adds instances of ``profile`` to a GPU holding ``held``."""
        key = (held, profile)
        found = self.reach.get(key)
        if found is None:
            used = Counter(p.profile for p in held)
            found = bool(self.offers_for(NosGpu(-1, held, held, used, Counter()), profile))
            self.reach[key] = found
        return found


def memory_gb(profile: str) -> tuple[int, int]:
    """nos's pod order key: memory, then compute slices (``ProfileName.SmallerThan``)."""
    compute, memory = profile.split("+")[0].split(".")
    return int(memory.removesuffix("gb")), int(compute.removesuffix("g"))


class NosPlacer:
    """One run of B5: placement, and nos's planner over a batch of pending pods."""

    def __init__(self, cluster: SimCluster, policy: NosLike, seed: int) -> None:
        self.cluster = cluster
        self.rules = NosRules(cluster.model, policy.geometries, policy.tie)
        self.rng = random.Random(seed)
        self.random_placement = policy.placement == "random"
        self.best_fit = BestFit(cluster)
        self.nos_gpu = PerGpu(lambda node, gpu: NosGpu.of(gpu))
        """Each GPU as nos reads it, kept until the GPU changes: :meth:`reshape` reads it
        (never changes it: it plans on copies) on every node it visits."""
        self._reach: dict[tuple[int, str], tuple[int, bool]] = {}
        self.reachable = RankIndex(cluster, self.reachable_rank)
        self.feasible = RankIndex(cluster, self.feasible_rank)
        self.free_total: Counter[str] = Counter()
        """Free instances per profile, cluster-wide: the sum of :attr:`parts`."""
        self.parts: list[dict[str, int]] = []
        for node in cluster.nodes:
            self.parts.append(self.count(node))
            for profile, n in self.parts[-1].items():
                self.free_total[profile] += n
        self.dirty: set[int] = set()
        cluster.listeners.append(lambda node: self.dirty.add(node.position))
        self.served: dict[int, list[str]] = {}
        """Per node position, the pods the last plan added there."""

    # -- placement -----------------------------------------------------------------------

    def feasible_rank(self, node: SimNode, kind: Kind) -> Rank | None:
        return first_fit_rank(node, kind)

    def place(self, pod: SimPod) -> Assignment | None:
        if not self.random_placement:
            return self.best_fit.place(pod)
        kind = (pod.profile, pod.count)
        entries = self.feasible.entries(kind)
        if not entries:
            return None
        node = self.cluster.nodes[int(entries[self.rng.randrange(len(entries))][-1])]
        return hold(self.cluster, node, first_fit_picks(node, kind), pod=pod)

    def depart(self, pod: str) -> Assignment:
        return self.cluster.release(pod)

    # -- planning ------------------------------------------------------------------------

    def reachable_rank(self, node: SimNode, kind: Kind) -> Rank | None:
        """Nodes on which nos could do something for a pod of profile ``kind[0]``."""
        profile = kind[0]
        for gpu in node.gpus:
            if self._reaches(gpu, profile):
                return (node.position,)
        return None

    def _reaches(self, gpu: SimGpu, profile: str) -> bool:
        """Whether the GPU has a free ``profile`` instance or a geometry that adds one, kept
        per GPU and profile until the GPU changes (its ``version``): a node's change ranks it
        again, most of its GPUs unchanged."""
        key = (id(gpu), profile)  # a GPU lives as long as its cluster, this cache one run
        kept = self._reach.get(key)
        if kept is None or kept[0] != gpu.version:
            found = any(
                h is None and p.profile == profile
                for p, h in zip(gpu.instances, gpu.holders, strict=True)
            ) or self.rules.can_provide(gpu.held_layout(), profile)
            kept = (gpu.version, found)
            self._reach[key] = kept
        return kept[1]

    def count(self, node: SimNode) -> dict[str, int]:
        """The node's free instances per profile."""
        free: dict[str, int] = {}
        for gpu in node.gpus:
            for placed, holder in zip(gpu.instances, gpu.holders, strict=True):
                if holder is None:
                    free[placed.profile] = free.get(placed.profile, 0) + 1
        return free

    def available(self) -> Counter[str]:
        """Free instances per profile in the whole cluster (a copy, for the plan to change):
        the nodes changed since the last call counted again."""
        total = self.free_total
        for position in self.dirty:
            for profile, n in self.parts[position].items():
                total[profile] -= n
            part = self.count(self.cluster.nodes[position])
            self.parts[position] = part
            for profile, n in part.items():
                total[profile] += n
        self.dirty.clear()
        return Counter(total)

    def reshape(self, pods: Sequence[SimPod]) -> tuple[LayoutChange, ...]:
        """nos's ``Plan`` for the pending ``pods`` (see the module docstring)."""
        available = self.available()
        lack = [max(0, pod.count - available[pod.profile]) for pod in pods]
        lacking: Counter[str] = Counter()
        for pod, n in zip(pods, lack, strict=True):
            lacking[pod.profile] += n
        if not +lacking:
            return ()
        order = sorted(range(len(pods)), key=lambda i: memory_gb(pods[i].profile))
        streams = [self.reachable.ordered((p, 1)) for p in sorted({pod.profile for pod in pods})]
        committed: dict[int, list[NosGpu]] = {}
        self.served = {}
        last = -1
        for node in heapq.merge(*streams, key=lambda n: n.position):
            if not +lacking:
                break
            if node.position == last:
                continue
            position = last = node.position
            base = [self.nos_gpu(node, g) for g in node.gpus]
            fork = [g.copy() for g in base]
            self.update_node(fork, lacking)
            added: list[str] = []
            for i in order:
                if self.try_add(pods[i], fork, base, available=available):
                    added.append(pods[i].name)
                    lacking[pods[i].profile] -= lack[i]
                    lack[i] = 0
            if added:
                committed[position] = fork
                self.served[position] = added
                for gpus, sign in ((base, -1), (fork, 1)):
                    for gpu in gpus:
                        for profile, n in (gpu.free).items():
                            available[profile] += sign * n
        return tuple(
            LayoutChange(self.cluster.nodes[position], gpu.index, gpu.layout)
            for position, gpus in sorted(committed.items())
            for gpu in gpus
            if gpu.layout != tuple(self.cluster.nodes[position].gpus[gpu.index].instances)
        )

    def update_node(self, gpus: list[NosGpu], lacking: Counter[str]) -> None:
        """``Node.UpdateGeometryFor``: GPU by GPU, what each then offers free is taken off."""
        required = {p: n for p, n in lacking.items() if n > 0}
        for gpu in gpus:
            if not required:
                return
            self.rules.update_for(gpu, required, self.rng)
            for profile, n in gpu.free.items():
                if profile in required:
                    required[profile] -= n
                    if required[profile] <= 0:
                        del required[profile]

    def try_add(
        self, pod: SimPod, fork: list[NosGpu], base: list[NosGpu], *, available: Counter[str]
    ) -> bool:
        """``tryAddPod`` on the forked node: no lacking slice cluster-wide, the node has the
        instances, one GPU holds them all."""
        free_here = sum(g.free[pod.profile] for g in fork)
        free_there = available[pod.profile] - sum(g.free[pod.profile] for g in base)
        if free_here + free_there < pod.count or free_here < pod.count:
            return False
        for gpu in fork:
            if gpu.free[pod.profile] >= pod.count:
                gpu.own()
                gpu.free[pod.profile] -= pod.count
                gpu.used[pod.profile] += pod.count
                return True
        return False


@dataclass(frozen=True, slots=True)
class NosLike:
    """B5 (see the module docstring)."""

    name: str = "B5 nos"
    geometries: tuple[Counts, ...] = NOS_A100_80GB
    tie: str = "random"
    placement: str = "best-fit"

    def __post_init__(self) -> None:
        if self.tie not in TIE_BREAKS:
            raise ValueError(f"tie-break {self.tie!r}: choose one of {', '.join(TIE_BREAKS)}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r}: choose one of {', '.join(PLACEMENTS)}")

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        first = min(self.geometries, key=len)
        layout = realize(model, (), first)
        if layout is None:
            raise ValueError(f"nos geometry {first} is not a layout of {model.key}")
        return (layout,)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return NosPlacer(cluster, self, seed)
