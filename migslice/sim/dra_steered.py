"""M-dra: migslice on DynamicMIG nodes of NVIDIA's DRA driver: kube-scheduler allocates, the
extender chooses the node and the steer chooses the device inside it.

* **Inside a node**, the steer's preferred device (:mod:`migslice.scheduling.dra_steer`): among
  the profile's free placements, the GPU of the highest
  :func:`~migslice.inventory.picking.gpu_unit_score` after the placement (the fullest GPU in
  use first, so idle GPUs stay whole), then the placement that takes the least room from larger
  profiles (:func:`migslice.mig.room.room_loss`, largest shape first), then the allocator's own
  order (GPU, then start). The steer taints the devices the allocator would reach first, so
  first fit lands there; an ideal steer, never stale. A claim for ``k`` devices takes them one
  after the other, each the preferred one after the last.
* **The node**: the extender's best-fit rank on a DRA node
  (:func:`migslice.scheduling.best_fit_rank`): the score of the device the allocator lands on
  (:func:`migslice.scheduling.dra_placement.dra_mig_score`, the worst of a claim's devices),
  then the memory slices the node holds (the fullest first); ties: the lowest index, where
  kube-scheduler's own scores would choose.
* **Stranded compute**: while the cluster's held mix says so (the extender's rule,
  :func:`migslice.mig.stranding.strand_guard`, read after every placement and departure), a
  placement that fills a GPU's memory with compute slices left (``3g`` next to ``3g``) ranks
  after every other placement inside a node and scores the node 1
  (:data:`migslice.scheduling.dra_placement.STRANDING_SCORE`).
* **The large-job reserve** (``large_reserve``, the extender's ``--dra-large-reserve``,
  :mod:`migslice.scheduling.reserve`): a pod smaller than a whole GPU whose devices would break
  an idle GPU while the idle GPUs left fall below the large pods' share of the arrivals times
  the free capacity goes to the best node where it breaks none, else waits, ``max_hold_s`` at
  most (mode B; in mode A every try is a first one). The share counts each pod once, at its
  first try, with no decay (the simulator has no clock in mode A).
* Devices are carved when the claim is prepared and destroyed when it is released, as in B9.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.inventory.picking import gpu_unit_score
from migslice.mig import GpuModel, Layout, Placed, free_placements
from migslice.mig.room import RoomLoss, room_loss
from migslice.mig.stranding import (
    NO_MIX,
    complete_rule,
    completes,
    filler_mix,
    strand_guard,
    strands_with,
)
from migslice.scheduling.decide import RANK_SPAN
from migslice.scheduling.dra_placement import STRANDING_SCORE
from migslice.scheduling.reserve import (
    DEFAULT_MAX_HOLD_S,
    NO_ARRIVALS,
    LargeReserve,
    is_large,
)
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import CarvingPlacer, Placer
from migslice.sim.trace import SimPod


def steered_devices(
    model: GpuModel,
    gpus: Sequence[SimGpu],
    kind: Kind,
    *,
    strand_guard: bool = False,
    complete: bool = False,
    kept: bool = False,
) -> tuple[int, list[tuple[int, Placed]]]:
    """The devices the steered allocator gives a claim for ``kind`` on a DynamicMIG node
    holding ``gpus``' instances, and the node's score (the worst device's); (0, []) when
    they do not all fit. ``kept``: the GPUs are a cluster's, which keeps each one's sorted
    instances until it changes them (:meth:`SimGpu.sorted_layout`)."""
    profile, count = kind
    layouts = {
        g.index: g.sorted_layout() if kept else tuple(sorted(g.instances))
        for g in gpus
        if g.mig_enabled and g.whole_holder is None
    }
    node_in_use = any(layouts.values())
    chosen: list[tuple[int, Placed]] = []
    worst = 10
    for _ in range(count):
        best = _best_device(model, layouts, profile, node_in_use, strand_guard, complete)
        if best is None:
            return 0, []
        key, index, placed = best
        worst = min(worst, STRANDING_SCORE if key[0] else -key[1])
        layouts[index] = tuple(sorted((*layouts[index], placed)))
        chosen.append((index, placed))
        node_in_use = True
    return worst, chosen


def _best_device(
    model: GpuModel,
    layouts: dict[int, Layout],
    profile: str,
    node_in_use: bool,
    strand_guard: bool,
    complete: bool,
) -> tuple[tuple[bool, int, bool, RoomLoss, int, int], int, Placed] | None:
    """The steer's preferred device for one ``profile`` instance over the GPUs' ``layouts``
    (by index, ascending), with its key and GPU. Of the idle GPUs only the first is asked:
    the others give the same placement and key but for their index, and the lowest wins."""
    best: tuple[tuple[bool, int, bool, RoomLoss, int, int], int, Placed] | None = None
    asked_idle = False
    for index, kept in layouts.items():
        if not kept:
            if asked_idle:
                continue
            asked_idle = True
        found = _best_on_gpu(model, kept, profile, node_in_use, strand_guard, complete)
        if found is None:
            continue
        (strands, score, ends, loss), placed = found
        key = (strands, score, ends, loss, index, placed.start)
        if best is None or key < best[0]:
            best = (key, index, placed)
    return best


@functools.lru_cache(maxsize=1 << 14)
def _best_on_gpu(
    model: GpuModel,
    kept: Layout,
    profile: str,
    node_in_use: bool,
    strand_guard: bool,
    complete: bool,
) -> tuple[tuple[bool, int, bool, RoomLoss], Placed] | None:
    """The steer's preferred placement of ``profile`` on one GPU holding ``kept``, and its
    key (strands compute, negated score, leaves the GPU short of full compute while
    ``complete``, room loss); ties to the lowest start."""
    held = sum(p.size for p in kept)
    strands = strand_guard and strands_with(model, (*(p.profile for p in kept), profile))
    best: tuple[tuple[bool, int, bool, RoomLoss, int], Placed] | None = None
    for placed in free_placements(model, kept, profile):
        score = gpu_unit_score(
            held + placed.size, model.memory_slices, in_use=held > 0, node_in_use=node_in_use
        )
        ends = complete and not completes(model, (*kept, placed))
        key = (strands, -score, ends, room_loss(model, kept, (*kept, placed)), placed.start)
        if best is None or key < best[0]:
            best = (key, placed)
    if best is None:
        return None
    strands, score, ends, loss, _ = best[0]
    return (strands, score, ends, loss), best[1]


class DraSteeredPlacer(CarvingPlacer):
    def __init__(
        self,
        cluster: SimCluster,
        *,
        large_reserve: bool = False,
        max_hold_s: float = DEFAULT_MAX_HOLD_S,
    ) -> None:
        super().__init__(cluster)
        self.max_hold_s = max_hold_s if large_reserve else None
        self.waited_s = 0.0
        self.feasible = RankIndex(cluster, self.rank)
        self.mix = NO_MIX
        self.strand_guard = False
        self.complete = False
        self.large_reserve = large_reserve
        self.arrivals = NO_ARRIVALS
        self.seen: set[str] = set()
        self.capacity = [_capacity(cluster.model, node) for node in cluster.nodes]
        self.idle = sum(idle for idle, _ in self.capacity)
        self.free = sum(free for _, free in self.capacity)
        self.sparing = RankIndex(cluster, self.sparing_rank)
        self._steered: dict[
            tuple[int, Kind], tuple[tuple[int, bool, bool], tuple[int, list[tuple[int, Placed]]]]
        ] = {}
        if large_reserve:
            cluster.listeners.append(self._moved)

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        return self._rank(node, kind, sparing=False)

    def sparing_rank(self, node: SimNode, kind: Kind) -> Rank | None:
        """:meth:`rank` among the nodes where the claim breaks no idle GPU."""
        return self._rank(node, kind, sparing=True)

    def _rank(self, node: SimNode, kind: Kind, *, sparing: bool) -> Rank | None:
        if node.is_blocked:
            return None
        score, chosen = self._steer(node, kind)
        if not chosen or (sparing and _breaks(node, chosen)):
            return None
        held = sum(p.size for gpu in node.gpus for p in gpu.instances)
        return (-(score * RANK_SPAN + min(held, RANK_SPAN - 1)), node.position)

    def _steer(self, node: SimNode, kind: Kind) -> tuple[int, list[tuple[int, Placed]]]:
        """:func:`steered_devices` on ``node``, kept per node version and rule state: the
        ranks, the reserve's sparing ranks and the placement ask it alike."""
        asked = (node.version, self.strand_guard, self.complete)
        kept = self._steered.get((node.position, kind))
        if kept is not None and kept[0] == asked:
            return kept[1]
        found = steered_devices(
            self.cluster.model,
            node.gpus,
            kind,
            strand_guard=self.strand_guard,
            complete=self.complete,
            kept=True,
        )
        self._steered[(node.position, kind)] = (asked, found)
        return found

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        model = self.cluster.model
        large = self.large_reserve and is_large(
            [(model.profile(pod.profile).compute_slices, model.compute_slices)] * pod.count
        )
        if self.large_reserve and pod.name not in self.seen:
            self.seen.add(pod.name)
            self.arrivals = self.arrivals.add(pod.compute_slices, large, 0.0)
        entries = self.feasible.entries(kind)
        if not entries:
            return None
        node = self.cluster.nodes[int(entries[0][-1])]
        _, chosen = self._steer(node, kind)
        if self.large_reserve and not large:
            hold = self.max_hold_s
            assert hold is not None
            reserve = LargeReserve(self.idle, self.free, self.arrivals.share, hold)
            if reserve.holds_back(_breaks(node, chosen), self.waited_s):
                sparing = self.sparing.entries(kind)
                if not sparing:
                    return None
                node = self.cluster.nodes[int(sparing[0][-1])]
                _, chosen = self._steer(node, kind)
        assignment = self.carve(node, chosen, pod)
        self._held(chosen, +1)
        return assignment

    def _moved(self, node: SimNode) -> None:
        old, new = self.capacity[node.position], _capacity(self.cluster.model, node)
        self.capacity[node.position] = new
        self.idle += new[0] - old[0]
        self.free += new[1] - old[1]

    def depart(self, pod: str) -> Assignment:
        assignment = super().depart(pod)
        self._held([(i, p) for i, p in assignment.units if p is not None], -1)
        return assignment

    def _held(self, units: Sequence[tuple[int, Placed]], sign: int) -> None:
        """Count ``units`` in (or out of) the held mix and set the stranding rule from it,
        as the extender's steer loop does; a flip ranks every node again."""
        mix = filler_mix(self.cluster.model, (placed.profile for _, placed in units))
        self.mix = self.mix + mix if sign > 0 else self.mix - mix
        on = strand_guard(self.mix, was_on=self.strand_guard)
        complete = complete_rule(self.mix, was_on=self.complete)
        if (on, complete) != (self.strand_guard, self.complete):
            self.strand_guard, self.complete = on, complete
            self.feasible.reset()
            self.sparing.reset()


def _breaks(node: SimNode, chosen: Sequence[tuple[int, Placed]]) -> int:
    """The idle GPUs ``chosen`` puts a device on."""
    idle = {g.index for g in node.gpus if g.mig_enabled and g.is_idle}
    return len({index for index, _ in chosen} & idle)


def _capacity(model: GpuModel, node: SimNode) -> tuple[int, float]:
    """The node's idle GPUs and free capacity in whole GPUs (as the extender counts them,
    :func:`migslice.scheduling.dra_placement.dra_capacity`)."""
    idle, free = 0, 0.0
    compute, whole = _compute_slices(model), model.compute_slices
    for gpu in node.gpus:
        if not gpu.mig_enabled or gpu.whole_holder is not None:
            continue
        if gpu.is_idle:
            idle += 1
            free += 1.0
            continue
        used = 0
        for placed in gpu.instances:
            used += compute[placed.profile]
        free += max(0, whole - used) / whole
    return idle, free


@functools.lru_cache(maxsize=16)
def _compute_slices(model: GpuModel) -> dict[str, int]:
    """The compute slices of each of ``model``'s profiles, by name."""
    return {p.name: p.compute_slices for p in model.profiles}


@dataclass(frozen=True, slots=True)
class DraSteered:
    """M-dra (see the module docstring)."""

    name: str = "M-dra migslice on DynamicMIG (node score and steer)"
    large_reserve: bool = False
    max_hold_s: float = DEFAULT_MAX_HOLD_S
    """The reserve's longest hold (``--dra-large-reserve-max-hold``), mode B only."""

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return DraSteeredPlacer(
            cluster, large_reserve=self.large_reserve, max_hold_s=self.max_hold_s
        )
