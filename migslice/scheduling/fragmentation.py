"""The fragmentation score: how well a placement keeps the cluster's free MIG slices useful.

MIG instances exist before pods arrive (the device plugin advertises only existing instances),
so a pod never creates geometry; it consumes one existing instance of exactly its profile. What
placement decides is *which* GPU's instance is consumed, and that decides how useful the free
capacity stays:

* a GPU no pod holds any part of (an **idle** GPU) is the most flexible free capacity there is:
  the repartition controller can give it any layout, and a whole-GPU or large-profile pod can
  use it. Taking an instance of an idle GPU pins its layout until that pod ends.
* an instance on a GPU already in use costs nothing beyond itself: that GPU's layout is pinned
  anyway. Among such GPUs the fullest is best (best-fit), so load concentrates and emptier GPUs
  drain towards idle.

The score of placing one unit on GPU ``g`` of a node (:func:`gpu_unit_score`, in
:mod:`migslice.inventory.picking` because the inventory and the simulator assume the same
pick), with ``M`` the memory slices of ``g``'s instances (its partitioned capacity: slices
outside any instance serve no pod until the GPU is re-partitioned) and ``h'`` the memory
slices pods hold on ``g`` after the placement:

* ``g`` already in use (exact fit on an already-partitioned, occupied GPU):
  ``6 + floor(4 h' / M)``, i.e. 6..10, 10 when the pod fills the GPU's last free slot;
* ``g`` idle (the placement breaks a whole idle GPU): ``1 + floor(3 h' / M)``, plus 1 when
  another GPU of the node is already in use (keep whole idle *nodes* for multi-GPU jobs),
  i.e. 1..5;
* 0 when the node cannot take the pod.

A node's score is that of its best GPU for the pod (ties: higher ``h'``, then lower GPU
index); a pod asking for several units takes them one by one, largest first, each at the best
GPU left, and scores the worst of its units. Whole-GPU requests (``nvidia.com/gpu``) and nodes
known only by counts (no per-GPU layout, see ``migslice.inventory.layouts``) use the node-level
best fit ``1 + floor(9 u' / U)``, where ``u'`` is what pods hold after the placement (GPUs, or
MIG memory slices) and ``U`` the node's total. Equal inputs always give equal scores.

On a DRA node the allocator, not migslice, picks the device: a node scores the GPU its first fit
lands on (:mod:`migslice.scheduling.dra_placement`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from migslice.inventory import GpuState, NodeState, mig_resource
from migslice.inventory.beside import Place, with_claims
from migslice.inventory.picking import (
    MAX_SCORE,
    MIN_SCORE,
    Occupancy,
    best_free_instance,
    node_level_score,
)
from migslice.mig import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, GpuModel, Profile, free_placements
from migslice.objects.dra_pool import DraMode
from migslice.scheduling.dra_placement import dra_mig_score, dra_unit_scores

__all__ = ["MAX_SCORE", "MIN_SCORE", "node_level_score", "score_units", "unit_scores"]


def score_units(state: NodeState, units: Sequence[tuple[str, int]]) -> int:
    """Score taking ``units`` (resource, count) on the node; 0 if they cannot all be placed."""
    model = state.model
    mig_units = [(r, c) for r, c in units if r != WHOLE_GPU_RESOURCE]
    whole = sum(c for r, c in units if r == WHOLE_GPU_RESOURCE)
    scores: list[int] = []
    if whole:
        total = state.allocatable_of(WHOLE_GPU_RESOURCE)
        scores.append(node_level_score(state.allocated_of(WHOLE_GPU_RESOURCE) + whole, total))
    if mig_units:
        if state.dra is not None:
            scores.append(dra_mig_score(state, [(r, c, None) for r, c in mig_units]))
        elif model is None or not state.gpus:
            scores.append(_counts_score(state, model, mig_units))
        else:
            scores.append(_gpu_score(state, model, mig_units))
    return min(scores) if scores else MIN_SCORE


def unit_scores(
    state: NodeState, resources: Iterable[str], *, strand_guard: bool = False
) -> dict[str, int]:
    """``score_units(state, ((resource, 1),))`` for each of ``resources``, the node's GPUs
    read once for all of them instead of once each (a node's derive scores every resource it
    has free); ``strand_guard``: a DRA node's landing device that strands compute scores 1
    (:mod:`migslice.scheduling.dra_placement`)."""
    model = state.model
    if state.dra is not None:
        wanted = list(resources)
        found = dra_unit_scores(
            state, (r for r in wanted if r != WHOLE_GPU_RESOURCE), strand_guard=strand_guard
        )
        if WHOLE_GPU_RESOURCE in wanted:
            found[WHOLE_GPU_RESOURCE] = score_units(state, ((WHOLE_GPU_RESOURCE, 1),))
        return found
    if model is None or not state.gpus:
        return {resource: score_units(state, ((resource, 1),)) for resource in resources}
    ranked = [gpu.ranked() for gpu in state.gpus]
    gpus = [occupancy for occupancy, _ in ranked]
    whole = model.memory_slices
    used = [held + (whole if o.whole_held else 0) for o, held in ranked]
    scores: dict[str, int] = {}
    for resource in resources:
        if resource == WHOLE_GPU_RESOURCE:
            scores[resource] = score_units(state, ((resource, 1),))
            continue
        profile = model.profile_by_resource(resource)
        pick = (
            None
            if profile is None
            else best_free_instance(gpus, profile.name, model.memory_slices, used)
        )
        scores[resource] = MIN_SCORE if pick is None else pick.score
    return scores


def _gpu_score(state: NodeState, model: GpuModel, units: Sequence[tuple[str, int]]) -> int:
    wanted: list[Profile] = []
    for resource, count in units:
        found = model.profile_by_resource(resource)
        if found is None:
            return MIN_SCORE
        wanted.extend([found] * count)
    if len(wanted) > 1:
        wanted.sort(key=lambda profile: (-profile.memory_slices, profile.name))
    held = [list(gpu.held) for gpu in state.gpus]
    gpus = [
        Occupancy(gpu.index, gpu.instances, held[g], gpu.whole_held)
        for g, gpu in enumerate(state.gpus)
    ]
    worst = MAX_SCORE
    for profile in wanted:
        pick = best_free_instance(gpus, profile.name, model.memory_slices)
        if pick is None:
            return MIN_SCORE
        held[pick.gpu][pick.instance] = True
        worst = min(worst, pick.score)
    return worst


def _counts_score(
    state: NodeState, model: GpuModel | None, units: Sequence[tuple[str, int]]
) -> int:
    sizes: dict[str, int] = {}
    slices = 1
    if model is not None:
        sizes = {mig_resource(p.name): p.memory_slices for p in model.profiles}
        slices = model.memory_slices
    for resource, count in units:
        if state.free_of(resource) < count:
            return MIN_SCORE
    held = sum(sizes.get(r, 1) * c for r, c in state.allocated if r.startswith(MIG_RESOURCE_PREFIX))
    adding = sum(sizes.get(r, 1) * c for r, c in units)
    if state.facts.gpu_count and model is not None:
        total = state.facts.gpu_count * slices
    else:
        total = sum(
            sizes.get(r, 1) * c for r, c in state.allocatable if r.startswith(MIG_RESOURCE_PREFIX)
        )
    return node_level_score(held + adding, total)


# -- the fragmentation index of a pool (``migslice status``, the extender's metric) ---------------


@dataclass(frozen=True, slots=True)
class FreeSpace:
    """The free memory slices of some GPUs, and how much of it lies in one piece per GPU.

    Per GPU, in this module's notions: an **idle** GPU (no pod holds any part of it) is one
    free region of all its memory slices, since the repartition controller can give it any
    layout; a GPU **in use** keeps its layout, so its free space is its free instances (a pod
    takes an existing instance of exactly its profile) and the slices outside any instance
    (free, but serving no pod until the GPU is re-partitioned), and its largest free region is
    its largest free instance. A **DynamicMIG** GPU (NVIDIA's DRA driver carves an instance
    when a claim is prepared, so it has no instance but those claims hold) in use: its
    largest free region is the largest placement of its model's profiles that can be added
    beside the held ones (:func:`migslice.mig.free_placements`: memory slices unheld, and
    the catalog's other rules). A GPU with MIG off is one region when no pod holds it.

    ``index`` = 1 - largest / free: 0 when every GPU's free space is one piece (idle GPUs, or
    one free instance each), towards 1 as it is cut into pieces no large pod can use; 0 when
    nothing is free. ``unknown_gpus``: GPUs of nodes known only by counts (no per-GPU layout),
    left out.
    """

    free_slices: int = 0
    largest_slices: int = 0
    total_slices: int = 0
    gpus: int = 0
    idle_gpus: int = 0
    unknown_gpus: int = 0

    @property
    def index(self) -> float:
        if self.free_slices <= 0:
            return 0.0
        return 1.0 - self.largest_slices / self.free_slices

    def __add__(self, other: FreeSpace) -> FreeSpace:
        return FreeSpace(
            self.free_slices + other.free_slices,
            self.largest_slices + other.largest_slices,
            self.total_slices + other.total_slices,
            self.gpus + other.gpus,
            self.idle_gpus + other.idle_gpus,
            self.unknown_gpus + other.unknown_gpus,
        )


NO_FREE_SPACE = FreeSpace()


def gpu_free_space(gpu: GpuState, model: GpuModel, *, dynamic: bool = False) -> FreeSpace:
    """One GPU's :class:`FreeSpace` (``model``: its GPU model; ``dynamic``: a DynamicMIG GPU,
    :func:`dynamic_gpus`). A GPU held whole has nothing free, MIG on or off (on Hopper NVIDIA's
    DRA driver publishes a DynamicMIG GPU whole too, ``gpu-<minor>``)."""
    memory_slices = model.memory_slices
    if gpu.whole_held:
        return FreeSpace(0, 0, memory_slices, 1, 0)
    if not gpu.mig_enabled:
        return FreeSpace(memory_slices, memory_slices, memory_slices, 1, 1)
    if gpu.is_idle:
        return FreeSpace(memory_slices, memory_slices, memory_slices, 1, 1)
    held = gpu.held_slices
    if dynamic:
        taken = tuple(p for p, h in zip(gpu.instances, gpu.held, strict=True) if h)
        largest = max(
            (p.memory_slices for p in model.profiles if free_placements(model, taken, p.name)),
            default=0,
        )
    else:
        largest = max(
            (p.size for p, h in zip(gpu.instances, gpu.held, strict=True) if not h), default=0
        )
    return FreeSpace(memory_slices - held, largest, memory_slices, 1, 0)


def dynamic_gpus(state: NodeState) -> frozenset[int]:
    """The indices of the node's DynamicMIG GPUs (:class:`DraMode`, as NVIDIA's DRA driver
    publishes them): their free space is carved on demand, not their free instances."""
    dra = state.dra
    if dra is None:
        return frozenset()
    return frozenset(gpu.minor for gpu in dra.pool.gpus if gpu.mode is DraMode.DYNAMIC)


def node_free_space(state: NodeState, claimed: Collection[Place] = ()) -> FreeSpace:
    """The :class:`FreeSpace` of a node's GPUs; a node known only by counts adds its GPUs
    (``nvidia.com/gpu.count``) to ``unknown_gpus``. ``claimed``: on a node both device APIs
    serve, the places of its map that ResourceClaims of the DRA driver hold
    (:func:`migslice.inventory.beside.beside_claims`), counted held as ``migslice status``
    counts them."""
    model = state.model
    if model is None or not state.gpus:
        return FreeSpace(unknown_gpus=state.facts.gpu_count or 0) if model else NO_FREE_SPACE
    dynamic = dynamic_gpus(state)
    total = NO_FREE_SPACE
    for gpu in with_claims(state, claimed):
        total = total + gpu_free_space(gpu, model, dynamic=gpu.index in dynamic)
    return total
