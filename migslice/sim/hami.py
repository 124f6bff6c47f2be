"""B8: HAMi v2.10's MIG mode (``Project-HAMi/HAMi`` at tag ``v2.10.0``, commit ``4707fb02``;
read, not copied), its default policies: nodes by ``binpack``, GPUs by ``spread``.

HAMi carves one MIG instance per container on GPUs in use: its scheduler extender picks the
node, the GPU, the profile and the placement, and its device plugin creates the instance when
the container is allocated and destroys it when the pod ends. A pod asks for GPU memory
(``nvidia.com/gpumem``); here a pod of profile ``p`` asks for ``p``'s memory, and
``nvidia.com/gpu`` = its instance count.

* **Profiles** are the admin's ``migProfileAllowlist`` with NVML's sizes and placements
  (``pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go`` 209-254,
  ``discoverMigProfiles``: ``Core`` = the profile's SMs in % of the GPU's, rounded up), as
  the chart lists them (:data:`ALLOWLIST`). A GPU's ``Count`` is the largest instance count
  of those profiles (``register.go`` 196-201: 7 on the A100).
* **Profile and placement** (``pkg/device/nvidia/device.go`` 621-639,
  ``selectMigCandidate``): the profiles sorted by memory, then by slice count; the first whose
  memory is at least the request and that has a free placement wins, so a ``4g.40gb`` pod is
  given a ``3g.40gb`` when one fits (the same 40 GB; HAMi chooses by memory). Its placement
  (``pkg/device/nvidia/mig_topology.go`` 26-39 and 58-76, ``selectMigPlacement``): ``1g`` and
  ``3g`` profiles scan NVML's placements from the highest start, the others from the lowest;
  the first that overlaps no instance on the GPU wins. HAMi checks overlap only; the
  simulator offers it the placements the catalog finds legal, the same on the A100.
* **GPU in the node** (``pkg/scheduler/score.go`` 82-90 ``fitInDevices``;
  ``pkg/scheduler/policy/gpu_policy.go`` 77-127 and 194-222): each GPU scored
  ``(1 + used) / count + used cores / 100 + (request + used memory) / total memory``
  (weights 1, 1, 1), sorted for ``spread`` by score descending (``sort.Sort`` on eight
  GPUs in index order is an insertion sort, stable), and ``Fit`` (``device.go`` 715-876)
  walks that list from the end: the least used GPU first, ties to the highest NUMA node, then
  to the last in the node's registered device list (``gpu_policy.go`` 116-126). That list
  comes from a Go map (``register.go`` 109 ranges over ``rm.Devices``, a map), so its order is
  random and changes at each 30 s registration; the simulator takes the highest index (its
  nodes have no NUMA topology), measured the same as a random order within 0.01 pp (bench/
  packing README, "Conclusions"). A GPU
  is skipped when its count is used up, its memory is short, or its cores are all used
  (counted before the pod, as ``Fit`` does); in MIG mode it is tried again after taking an
  instance (``i++``), so one pod's instances may share a GPU.
* **Nodes HAMi sees**: its kube-scheduler (``charts/hami/templates/scheduler/configmap.yaml``)
  sets no ``percentageOfNodesToScore``, so the default (0, adaptive) applies, and HAMi's
  resources are ``ignoredByScheduler`` (``charts/hami/templates/_helpers.tpl`` 195-202): every
  node passes kube-scheduler's own filters, ``findNodesThatPassFilters`` stops after
  ``numFeasibleNodesToFind`` of them from ``nextStartNodeIndex`` (776 nodes: 341; under 100:
  all) and only those go to HAMi's ``Filter`` (kube-scheduler v1.37.2 ``schedule_one.go``
  695-700 and 779-893; HAMi ``scheduler.go`` 1095: ``getNodesUsage(args.NodeNames)``), which
  scores those alone. Modelled as :mod:`migslice.sim.sampling` does: the window of the next
  ``numFeasibleNodesToFind`` nodes, the start advancing by that many each cycle; a pod no
  node of its window fits is tried again in the next window (kube-scheduler's next cycle),
  until every node was offered (``percentage_of_nodes_to_score=0``, the adaptive default).
  The headline runs B8 with every node offered (100), as migslice's own row is: the two stay
  comparable (sampled, B8 reads 0.45 pp lower on synthetic at 776 nodes and the same on the
  M1 workloads; bench/packing/README.md, "Conclusions").
* **Node** (``pkg/scheduler/policy/node_policy.go`` 48-54 and 106-128,
  ``ComputeDefaultScore``; ``pkg/scheduler/scheduler.go`` 1117-1118): every node that fits is
  scored ``used / count + used cores / total cores + used memory / total memory`` over its
  GPUs before the pod, the list sorted ascending for ``binpack`` and the last taken: the most
  used node of the window. ``ScoreNode`` of the NVIDIA backend returns 0, so nothing
  MIG-aware is added. Ties: ``sort.Sort`` is not stable and the list comes from parallel
  scoring, so a tied node is drawn at random (seeded).

v2.10.0 is HAMi's newest release (its repository read at ``master`` = ``v2.10.0``, 2026-08-21).
PR #2855, merged to ``master`` after it and in no release yet, scores a GPU's free placements
instead of scanning them (1g and 3g no longer from the highest start) and places one pod's
instances with backtracking: a release that ships it needs this baseline modelled again.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.mig import GpuModel, Layout, Placed, free_placements
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, PerGpu, PerNode, Rank, RankIndex
from migslice.sim.placement import CarvingPlacer, Placer
from migslice.sim.sampling import num_feasible_nodes_to_find
from migslice.sim.trace import SimPod

ALLOWLIST = ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")
"""The chart's ``migProfileAllowlist`` for the A100-80GB
(``charts/hami/templates/scheduler/device-configmap.yaml`` 35-53: ``7g.79gb``, which NVML
resolves by its ``7g`` prefix). It has no 4g.40gb: a 4g pod asks 40 GB and gets a 3g.40gb,
or a 7g.80gb when no 3g placement is free."""
TOTAL_CORE = 100
HIGH_FIRST = ("1g.", "3g.")
"""``preferHighMigPlacement``: profiles whose placements are scanned from the highest start."""


@functools.lru_cache(maxsize=256)
def memory_mb(model: GpuModel, profile: str) -> int:
    """``MemoryMB``: NVML's memory size of the profile where the catalog has it (A100-80GB:
    9,728 for 1g.10gb, 40,192 for both 3g.40gb and 4g.40gb); else that of a profile with as
    many memory slices (NVML sizes an instance by its memory slices: A100-80GB's 1g.20gb is
    19,968 MB like 2g.20gb, tests/fixtures/dra/generator-main.go.txt 55-56); else the name's.
    The name's 20,480 would put a 1g.20gb pod above 2g.20gb's 19,968 and give it a 3g.40gb."""
    found = model.profile(profile)
    if found.memory_mib:
        return found.memory_mib
    same = [
        p.memory_mib
        for p in model.profiles
        if p.memory_mib and p.memory_slices == found.memory_slices
    ]
    return min(same) if same else found.nominal_memory_mib


def total_memory_mb(model: GpuModel) -> int:
    return model.memory_mib or max(memory_mb(model, p.name) for p in model.profiles)


@functools.lru_cache(maxsize=256)
def core(model: GpuModel, profile: str) -> int:
    """``Core``: the profile's SMs in % of the largest profile's, rounded up (by compute
    slices where the catalog lacks SM counts)."""
    found = model.profile(profile)
    full = max((p.sm_count or 0) for p in model.profiles)
    if found.sm_count and full:
        return math.ceil(found.sm_count * TOTAL_CORE / full)
    return math.ceil(found.compute_slices * TOTAL_CORE / model.compute_slices)


def hami_placement(model: GpuModel, layout: Sequence[Placed], profile: str) -> Placed | None:
    """``selectMigPlacement``: the first free placement in HAMi's scan order."""
    free = free_placements(model, layout, profile)
    if not free:
        return None
    high = profile.startswith(HIGH_FIRST)
    return max(free, key=lambda p: p.start) if high else min(free, key=lambda p: p.start)


def select_candidate(
    model: GpuModel, layout: Sequence[Placed], memory: int, allowlist: Sequence[str] = ALLOWLIST
) -> Placed | None:
    """``selectMigCandidate``: the smallest allowed profile (memory, then slices) whose memory
    is at least ``memory`` and that has a free placement on ``layout``, at HAMi's placement."""
    for profile in _by_memory(model, tuple(allowlist)):
        if memory_mb(model, profile) < memory:
            continue
        placed = hami_placement(model, layout, profile)
        if placed is not None:
            return placed
    return None


@functools.lru_cache(maxsize=64)
def _by_memory(model: GpuModel, allowlist: tuple[str, ...]) -> tuple[str, ...]:
    """The allowed profiles by memory, then slice count (``selectMigCandidate``'s order)."""
    return tuple(
        sorted(allowlist, key=lambda p: (memory_mb(model, p), model.profile(p).compute_slices))
    )


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What HAMi's scheduler counts on one GPU: containers, cores and memory in use."""

    used: int
    cores: int
    memory: int

    @classmethod
    def of(cls, model: GpuModel, gpu: SimGpu) -> GpuUse:
        return _use(model, tuple(p.profile for p in gpu.held_layout()))


@functools.lru_cache(maxsize=4096)
def _use(model: GpuModel, held: tuple[str, ...]) -> GpuUse:
    return GpuUse(
        len(held), sum(core(model, p) for p in held), sum(memory_mb(model, p) for p in held)
    )


def gpu_count(model: GpuModel, allowlist: Sequence[str] = ALLOWLIST) -> int:
    """``Count`` of a MIG GPU: the largest instance count among the allowed profiles."""
    return max(model.profile(p).max_count for p in allowlist)


def gpu_uses(model: GpuModel, gpus: Sequence[SimGpu]) -> dict[int, GpuUse]:
    """What HAMi counts on each MIG GPU of a node, by GPU index."""
    return {g.index: GpuUse.of(model, g) for g in gpus if g.mig_enabled}


def fit(
    model: GpuModel,
    gpus: Sequence[SimGpu],
    kind: Kind,
    uses: dict[int, GpuUse] | None = None,
) -> list[tuple[int, Placed]]:
    """HAMi's ``Fit`` for a pod of ``kind`` (profile, count) on a node: the GPU and instance of
    each of its ``count`` devices, or empty when they do not all fit. ``uses``: the node's
    :func:`gpu_uses` where the caller keeps them."""
    profile, count = kind
    memory = memory_mb(model, profile)
    total_memory = total_memory_mb(model)
    if uses is None:
        uses = gpu_uses(model, gpus)
    count_per_gpu = gpu_count(model)

    def score(index: int) -> float:
        use = uses[index]
        return (
            (1 + use.used) / count_per_gpu
            + use.cores / TOTAL_CORE
            + (memory + use.memory) / total_memory
        )

    order = sorted(uses, key=lambda i: (score(i), -i))
    by_index = {g.index: g for g in gpus}
    layouts: dict[int, list[Placed]] = {}
    chosen: list[tuple[int, Placed]] = []
    k = 0
    while k < len(order) and len(chosen) < count:
        index = order[k]
        use = uses[index]
        # the counts are the GPU's before the pod (Fit does not add what it took so far);
        # the placement sees the pod's own instances (CustomFilterRule)
        placed = None
        if (
            use.used < count_per_gpu
            and total_memory - use.memory >= memory
            and use.cores < TOTAL_CORE
        ):
            layout = layouts.get(index)
            if layout is None:
                layout = layouts[index] = list(by_index[index].instances)
            placed = select_candidate(model, layout, memory)
        if placed is None:
            k += 1
            continue
        chosen.append((index, placed))
        layouts[index].append(placed)
    return chosen if len(chosen) == count else []


def node_score(model: GpuModel, node: SimNode, by_gpu: dict[int, GpuUse] | None = None) -> float:
    """``ComputeDefaultScore`` of the node before the pod (weight left out: it scales all);
    ``by_gpu``: the node's :func:`gpu_uses` where the caller keeps them."""
    uses = list((gpu_uses(model, node.gpus) if by_gpu is None else by_gpu).values())
    if not uses:
        return 0.0
    return (
        sum(u.used for u in uses) / (gpu_count(model) * len(uses))
        + sum(u.cores for u in uses) / (TOTAL_CORE * len(uses))
        + sum(u.memory for u in uses) / (total_memory_mb(model) * len(uses))
    )


class HamiPlacer(CarvingPlacer):
    def __init__(
        self, cluster: SimCluster, seed: int, percentage_of_nodes_to_score: int = 100
    ) -> None:
        super().__init__(cluster)
        self.rng = random.Random(seed)
        self.to_find = num_feasible_nodes_to_find(percentage_of_nodes_to_score, len(cluster.nodes))
        self.start_index = 0
        self.index = RankIndex(cluster, self.rank)
        model = cluster.model
        self._gpu_use = PerGpu(lambda node, gpu: GpuUse.of(model, gpu))
        self._uses = PerNode(self._node_uses)
        self._score = PerNode(lambda node: node_score(model, node, self._uses(node)))
        self._fits: dict[tuple[int, Kind], tuple[int, list[tuple[int, Placed]]]] = {}

    def _node_uses(self, node: SimNode) -> dict[int, GpuUse]:
        """:func:`gpu_uses` of the node, each GPU's use worked out again only once it changed."""
        return {g.index: self._gpu_use(node, g) for g in node.gpus if g.mig_enabled}

    def _fit(self, node: SimNode, kind: Kind) -> list[tuple[int, Placed]]:
        """:func:`fit` on ``node``, kept per node and kind until the node changes (its
        ``version``): the rank finds it, the placement on the chosen node takes it."""
        kept = self._fits.get((node.position, kind))
        if kept is None or kept[0] != node.version:
            kept = (node.version, fit(self.cluster.model, node.gpus, kind, self._uses(node)))
            self._fits[(node.position, kind)] = kept
        return kept[1]

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        if node.is_blocked or not self._fit(node, kind):
            return None
        return (-self._score(node), node.position)

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        entries = self.index.entries(kind)
        n = len(self.cluster.nodes)
        covered = 0
        while covered < n:
            # one scheduling cycle: every node passes kube-scheduler's own filters, so the
            # window is the next ``to_find`` positions and the start advances by as many
            start = self.start_index
            self.start_index = (start + self.to_find) % n
            covered += self.to_find
            if not entries:
                return None
            position = self._best_in_window(entries, start)
            if position is not None:
                node = self.cluster.nodes[position]
                return self.carve(node, self._fit(node, kind), pod)
        return None

    def _best_in_window(self, entries: Sequence[Rank], start: int) -> int | None:
        """The node HAMi binds to among the ``to_find`` positions from ``start``: the most used
        (``entries`` are ranked ``(-score, position)``), a tied one drawn at random."""
        n = len(self.cluster.nodes)
        tied: list[int] = []
        best = None
        for entry in entries:
            if best is not None and entry[0] != best:
                break
            position = int(entry[-1])
            if (position - start) % n < self.to_find:
                best = entry[0]
                tied.append(position)
        if not tied:
            return None
        return tied[self.rng.randrange(len(tied))]


@dataclass(frozen=True, slots=True)
class HamiMig:
    """B8 (see the module docstring)."""

    name: str = "B8 HAMi v2.10 MIG"
    percentage_of_nodes_to_score: int = 100
    """kube-scheduler's setting in front of HAMi: 100 (the headline: every node, as migslice's
    row sees them); 0 is what HAMi's chart leaves (adaptive: 341 of 776 nodes)."""

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return HamiPlacer(cluster, seed, self.percentage_of_nodes_to_score)
