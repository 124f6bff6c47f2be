"""What every policy shares: the policy and placer protocols, layout changes, and the
placement rules of the baselines (first fit, best fit, whole GPUs) as node ranks.

A :class:`Policy` is a value (its name, how GPUs start, its settings); :meth:`Policy.start`
binds it to one run's cluster and returns a :class:`Placer`, which owns that run's indexes.
A placer places one pod at a time on the instances that exist. A :class:`Reshaper` can also
propose layout changes for pods that found no instance; the runner applies them (at once in
mode A; after the reconfiguration time in mode B), so that a policy proposes and the
simulator disposes. Mode B drives migslice's own controller instead (``migslice.sim.
controller``), since the controller, not a placer, decides when a re-partition happens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from migslice.mig import GpuModel, Layout, Placed, fit
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, PerGpu, PerNode, Rank, RankIndex
from migslice.sim.trace import SimPod


@dataclass(frozen=True, slots=True)
class LayoutChange:
    """GPU ``gpu`` of ``node`` gets layout ``new`` (held instances stay where they are)."""

    node: SimNode
    gpu: int
    new: Layout


class Placer(Protocol):
    """One run of a policy: places pods on the cluster it was started on."""

    def place(self, pod: SimPod) -> Assignment | None:
        """Place ``pod`` (and hold its resources) or return None if it cannot be placed."""
        ...

    def depart(self, pod: str) -> Assignment:
        """The pod ends: give its resources back."""
        ...


@runtime_checkable
class Reshaper(Placer, Protocol):
    """A placer that proposes new layouts for pods that found no instance."""

    def reshape(self, pods: Sequence[SimPod]) -> tuple[LayoutChange, ...]:
        """Layout changes that would serve some of ``pods`` (not applied; empty: none)."""
        ...


@runtime_checkable
class Holding(Placer, Protocol):
    """A placer that may hold pods back at first and let them through once they have waited
    ``max_hold_s`` (the large-job reserve; None: it holds none back). Mode B sets ``waited_s``
    to the pod's wait before each try and tries a waiting pod again once it has waited that
    long; mode A has no clock (every try is a first one)."""

    max_hold_s: float | None
    waited_s: float


class Policy(Protocol):
    @property
    def name(self) -> str: ...

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        """Initial layout per GPU in node-major order (cycled); None = MIG off."""
        ...

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        """Bind the policy to ``cluster`` for one run (``seed`` for any random choice)."""
        ...


def apply_changes(cluster: SimCluster, changes: Sequence[LayoutChange]) -> tuple[LayoutChange, ...]:
    """Apply ``changes`` (one re-partition operation); the ones that changed a layout."""
    done = tuple(c for c in changes if cluster.repartition(c.node, c.gpu, c.new))
    if done:
        cluster.repartitions += 1
    return done


def static_layout(model: GpuModel, profiles: Sequence[str]) -> Layout:
    result = fit(model, profiles)
    if not result.feasible:
        raise ValueError(f"{' + '.join(profiles)} is not a layout of {model.key}: {result.reason}")
    return result.layout


def hold(
    cluster: SimCluster, node: SimNode, picks: Sequence[tuple[SimGpu, int]], *, pod: SimPod
) -> Assignment:
    units = []
    for gpu, k in picks:
        cluster.hold_instance(node, gpu, k, pod=pod.name)
        units.append((gpu.index, gpu.instances[k]))
    assignment = Assignment(pod.name, node.name, tuple(units))
    cluster.record(assignment)
    return assignment


def first_fit_picks(node: SimNode, kind: Kind) -> list[tuple[SimGpu, int]]:
    profile, count = kind
    picks = [(gpu, k) for gpu in node.gpus for k in gpu.free_positions(profile)]
    return picks[:count] if len(picks) >= count else []


def first_fit_rank(node: SimNode, kind: Kind) -> Rank | None:
    """The node's position when :func:`first_fit_picks` finds the instances (counted here,
    not listed: a node is ranked at each of its changes, picked from once)."""
    profile, count = kind
    if node.is_blocked or count < 1:
        return None
    found = 0
    for gpu in node.gpus:
        for placed, holder in zip(gpu.instances, gpu.holders, strict=True):
            if holder is None and placed.profile == profile:
                found += 1
                if found >= count:
                    return (node.position,)
    return None


NodeFree = tuple[int, list[tuple[SimGpu, int, dict[str, list[int]]]]]
"""A node's free compute slices, and per GPU its free slices and free instances by profile."""


GpuFree = tuple[int, dict[str, list[int]]]
"""A GPU's free compute slices and its free instances by profile."""


def gpu_free(model: GpuModel, gpu: SimGpu) -> GpuFree | None:
    """What :func:`node_free` reads of one GPU; None when nothing on it is free."""
    if None not in gpu.holders:  # every instance held, or none made: nothing free
        return None
    left = 0
    by_profile: dict[str, list[int]] = {}
    for k, (placed, holder) in enumerate(zip(gpu.instances, gpu.holders, strict=True)):
        if holder is None:
            left += model.profile(placed.profile).compute_slices
            by_profile.setdefault(placed.profile, []).append(k)
    return left, by_profile


def node_free(
    model: GpuModel, node: SimNode, free_of: Callable[[SimGpu], GpuFree | None] | None = None
) -> NodeFree:
    """``free_of``: :func:`gpu_free` of a GPU, where the caller keeps it."""
    total = 0
    gpus: list[tuple[SimGpu, int, dict[str, list[int]]]] = []
    for gpu in node.gpus:
        found = gpu_free(model, gpu) if free_of is None else free_of(gpu)
        if found is None:
            continue
        left, by_profile = found
        total += left
        if by_profile:
            gpus.append((gpu, left, by_profile))
    return total, gpus


def best_fit_choice(
    model: GpuModel, node: SimNode, kind: Kind, *, free: NodeFree | None = None
) -> tuple[Rank, list[tuple[SimGpu, int]]] | None:
    """Best fit inside the node: the free instances whose GPUs keep the fewest free compute
    slices; the rank adds what the node keeps free, then the node's position."""
    profile, count = kind
    size = model.profile(profile).compute_slices
    node_left, gpus = free if free is not None else node_free(model, node)
    options: list[tuple[int, int, SimGpu, int]] = []
    for gpu, left, by_profile in gpus:
        for k in by_profile.get(profile, ()):
            options.append((left - size, gpu.index, gpu, k))
    if len(options) < count:
        return None
    options.sort(key=lambda o: (o[0], o[1]))
    chosen = options[:count]
    rank = (sum(o[0] for o in chosen), node_left - size * count, node.position)
    return rank, [(o[2], o[3]) for o in chosen]


class IndexedPlacer:
    """A placer over a :class:`~migslice.sim.index.RankIndex` (subclasses give the rank and
    the instances picked on the chosen node)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.index = RankIndex(cluster, self.rank)

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        raise NotImplementedError

    def picks(self, node: SimNode, kind: Kind) -> list[tuple[SimGpu, int]]:
        raise NotImplementedError

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        node = self.index.best(kind)
        if node is None:
            return None
        picks = self.picks(node, kind)
        if len(picks) < pod.count:
            raise AssertionError(f"{node.name} was ranked for {kind} but lacks it")
        return hold(self.cluster, node, picks, pod=pod)

    def depart(self, pod: str) -> Assignment:
        return self.cluster.release(pod)


class FirstFit(IndexedPlacer):
    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        return first_fit_rank(node, kind)

    def picks(self, node: SimNode, kind: Kind) -> list[tuple[SimGpu, int]]:
        return first_fit_picks(node, kind)


class BestFit(IndexedPlacer):
    """Best fit over the nodes; each node's :func:`node_free` is kept until the node changes,
    each GPU's :func:`gpu_free` until the GPU does."""

    def __init__(self, cluster: SimCluster) -> None:
        model = cluster.model
        gpu_free_of = PerGpu(lambda node, gpu: gpu_free(model, gpu))
        self._node_free = PerNode(
            lambda node: node_free(model, node, lambda gpu: gpu_free_of(node, gpu))
        )
        super().__init__(cluster)

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        if node.is_blocked:
            return None
        choice = best_fit_choice(self.cluster.model, node, kind, free=self._node_free(node))
        return None if choice is None else choice[0]

    def picks(self, node: SimNode, kind: Kind) -> list[tuple[SimGpu, int]]:
        choice = best_fit_choice(self.cluster.model, node, kind, free=self._node_free(node))
        return [] if choice is None else choice[1]


class CarvingPlacer:
    """What the per-pod carvers share (B6, B8, B9): a pod's instances are created where the
    policy chooses, held, and destroyed when it departs.
    In mode B the pod starts the carve time after it is placed (``carves_per_pod``), as a
    DRA driver or HAMi's device plugin creates the instance before the container starts."""

    carves_per_pod = True

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    def carve(self, node: SimNode, units: Sequence[tuple[int, Placed]], pod: SimPod) -> Assignment:
        for index, placed in units:
            gpu = node.gpus[index]
            position = self.cluster.create_instance(node, gpu, placed)
            self.cluster.hold_instance(node, gpu, position, pod=pod.name)
        assignment = Assignment(pod.name, node.name, tuple(units))
        self.cluster.record(assignment)
        return assignment

    def depart(self, pod: str) -> Assignment:
        assignment = self.cluster.release(pod)
        node = self.cluster.by_name[assignment.node]
        for index, placed in assignment.units:
            gpu = node.gpus[index]
            if placed is not None:
                self.cluster.destroy_instance(node, gpu, gpu.instances.index(placed))
        return assignment
