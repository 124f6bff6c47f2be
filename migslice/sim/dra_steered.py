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
* Devices are carved when the claim is prepared and destroyed when it is released, as in B9.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.inventory.picking import gpu_unit_score
from migslice.mig import GpuModel, Layout, Placed, free_placements
from migslice.mig.room import RoomLoss, room_loss
from migslice.mig.stranding import NO_MIX, filler_mix, strand_guard, strands_with
from migslice.scheduling.decide import RANK_SPAN
from migslice.scheduling.dra_placement import STRANDING_SCORE
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import CarvingPlacer, Placer
from migslice.sim.trace import SimPod


def steered_devices(
    model: GpuModel, gpus: Sequence[SimGpu], kind: Kind, *, strand_guard: bool = False
) -> tuple[int, list[tuple[int, Placed]]]:
    """The devices the steered allocator gives a claim for ``kind`` on a DynamicMIG node
    holding ``gpus``' instances, and the node's score (the worst device's); (0, []) when
    they do not all fit."""
    profile, count = kind
    layouts = {g.index: list(g.instances) for g in gpus if g.mig_enabled and g.whole_holder is None}
    node_in_use = any(layout for layout in layouts.values())
    chosen: list[tuple[int, Placed]] = []
    worst = 10
    for _ in range(count):
        best: tuple[tuple[bool, int, RoomLoss, int, int], int, Placed] | None = None
        for index, layout in layouts.items():
            found = _best_on_gpu(model, tuple(sorted(layout)), profile, node_in_use, strand_guard)
            if found is None:
                continue
            (strands, score, loss), placed = found
            key = (strands, score, loss, index, placed.start)
            if best is None or key < best[0]:
                best = (key, index, placed)
        if best is None:
            return 0, []
        key, index, placed = best
        worst = min(worst, STRANDING_SCORE if key[0] else -key[1])
        layouts[index].append(placed)
        chosen.append((index, placed))
        node_in_use = True
    return worst, chosen


@functools.lru_cache(maxsize=1 << 14)
def _best_on_gpu(
    model: GpuModel, kept: Layout, profile: str, node_in_use: bool, strand_guard: bool
) -> tuple[tuple[bool, int, RoomLoss], Placed] | None:
    """The steer's preferred placement of ``profile`` on one GPU holding ``kept``, and its
    key (strands compute, negated score, room loss); ties to the lowest start."""
    held = sum(p.size for p in kept)
    strands = strand_guard and strands_with(model, (*(p.profile for p in kept), profile))
    best: tuple[tuple[bool, int, RoomLoss, int], Placed] | None = None
    for placed in free_placements(model, kept, profile):
        score = gpu_unit_score(
            held + placed.size, model.memory_slices, in_use=held > 0, node_in_use=node_in_use
        )
        key = (strands, -score, room_loss(model, kept, (*kept, placed)), placed.start)
        if best is None or key < best[0]:
            best = (key, placed)
    return None if best is None else (best[0][:3], best[1])


class DraSteeredPlacer(CarvingPlacer):
    def __init__(self, cluster: SimCluster) -> None:
        super().__init__(cluster)
        self.feasible = RankIndex(cluster, self.rank)
        self.mix = NO_MIX
        self.strand_guard = False

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        if node.is_blocked:
            return None
        score, chosen = steered_devices(
            self.cluster.model, node.gpus, kind, strand_guard=self.strand_guard
        )
        if not chosen:
            return None
        held = sum(p.size for gpu in node.gpus for p in gpu.instances)
        return (-(score * RANK_SPAN + min(held, RANK_SPAN - 1)), node.position)

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        entries = self.feasible.entries(kind)
        if not entries:
            return None
        node = self.cluster.nodes[int(entries[0][-1])]
        _, chosen = steered_devices(
            self.cluster.model, node.gpus, kind, strand_guard=self.strand_guard
        )
        assignment = self.carve(node, chosen, pod)
        self._held(chosen, +1)
        return assignment

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
        if on != self.strand_guard:
            self.strand_guard = on
            self.feasible.reset()


@dataclass(frozen=True, slots=True)
class DraSteered:
    """M-dra (see the module docstring)."""

    name: str = "M-dra migslice on DynamicMIG (node score and steer)"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return DraSteeredPlacer(cluster)
