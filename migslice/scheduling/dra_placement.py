"""The fragmentation score on a DRA node: that of the placement kube-scheduler's allocator will
take, since migslice does not pick the device there.

On a device-plugin node the score assumes the best free instance (the one the device plugin's
packing and the agent's reports converge on). On a DRA node kube-scheduler's DynamicResources
plugin allocates (in its Filter, per node, kept for Reserve), first fit in the pool's order
(:func:`migslice.inventory.first_fit.first_fit`), and the extender only chooses the node. So a
node scores the GPU its first fit lands on, with the same formula
(:func:`migslice.inventory.picking.gpu_unit_score`): ``M`` is the memory slices the GPU can
serve (a DynamicMIG GPU: all of them, since any placement can be made; a static one: its
published instances), ``h'`` those held there after the placement. A pod of several units is
placed as the allocator's first full solution places them
(:func:`migslice.inventory.first_fit.first_solution`) and scores its worst unit; whole GPUs
use the node-level score, as on other nodes. The steer's ``DeviceTaintRule`` taints are in
the pool (:attr:`DraPool.skipped`), so the score is that of the placement the steer leaves
to the allocator (:mod:`migslice.scheduling.dra_steer`). While the cluster's held mix says so
(``strand_guard``, :func:`migslice.mig.stranding.strand_guard`), a landing device that strands
compute on a DynamicMIG GPU (fills its memory with compute slices left) scores 1, below any
other placement of that profile, so such a claim goes to another node where one has room.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from migslice.inventory import NodeState
from migslice.inventory.first_fit import Choice, PoolUse, Wanted, first_fit, first_solution
from migslice.inventory.picking import MAX_SCORE, MIN_SCORE, gpu_unit_score, node_level_score
from migslice.mig import WHOLE_GPU_RESOURCE
from migslice.mig.stranding import NO_MIX, FillerMix, filler_mix, strands_with
from migslice.objects.dra_pool import DraMode
from migslice.objects.resource_slices import DeviceKind
from migslice.scheduling.demand import DemandUnit


def dra_unit_scores(
    state: NodeState, resources: Iterable[str], *, strand_guard: bool = False
) -> dict[str, int]:
    """The score of one unit of each MIG resource of ``resources`` on the DRA node (0: none
    fits)."""
    return {
        resource: dra_mig_score(state, ((resource, 1, None),), strand_guard=strand_guard)
        for resource in resources
    }


def dra_mig_score(
    state: NodeState,
    units: Iterable[tuple[str, int, Wanted | None]],
    *,
    strand_guard: bool = False,
) -> int:
    """Score taking MIG ``units`` (resource, count, the device pinned or None) as the
    allocator's first full solution places them, the worst of them; 0 if they do not all
    fit."""
    view = state.dra
    if view is None or view.use is None:
        return MIN_SCORE
    requests: list[tuple[Wanted, int]] = []
    for resource, count, select in units:
        wanted = select or _wanted(state, resource)
        if wanted is None:
            return MIN_SCORE
        requests.append((wanted, count))
    if len(requests) == 1 and requests[0][1] == 1:
        choice = first_fit(view.pool, requests[0][0], view.use)
        return MIN_SCORE if choice is None else _score(view.use, choice, strand_guard)
    solution = first_solution(view.pool, requests, view.use)
    if solution is None:
        return MIN_SCORE
    use = view.use.copy()
    worst = MAX_SCORE
    for choice in solution:
        worst = min(worst, _score(use, choice, strand_guard))
        use.take(choice.gpu, choice.device)
    return worst


def dra_demand_score(
    state: NodeState, units: Sequence[DemandUnit], *, strand_guard: bool = False
) -> int:
    """The score of a pod's units on the DRA node: its MIG units placed by first fit, each
    where its pin (if any) allows, the worst of them; whole GPUs by the node-level score."""
    mig = [(u.resource, u.count, u.select) for u in units if u.resource != WHOLE_GPU_RESOURCE]
    whole = sum(u.count for u in units if u.resource == WHOLE_GPU_RESOURCE)
    scores = []
    if mig:
        scores.append(dra_mig_score(state, mig, strand_guard=strand_guard))
    if whole:
        total = state.allocatable_of(WHOLE_GPU_RESOURCE)
        scores.append(node_level_score(state.allocated_of(WHOLE_GPU_RESOURCE) + whole, total))
    return min(scores) if scores else MIN_SCORE


def dra_units_fit(
    state: NodeState, units: Sequence[DemandUnit], *, taints: bool = True, steer: bool = True
) -> bool:
    """Whether the allocator finds devices for all of ``units`` on the node now (``taints``
    False: were no device tainted but by migslice's steer; ``steer`` False: were none tainted
    by the steer)."""
    view = state.dra
    requests = dra_requests(state, units)
    if view is None or view.use is None or requests is None:
        return False
    pool = view.pool
    if not taints:
        pool = dataclasses.replace(pool, tainted=frozenset())
    if not steer:
        pool = dataclasses.replace(pool, steered=frozenset())
    return first_solution(pool, requests, view.use) is not None


def dra_requests(state: NodeState, units: Sequence[DemandUnit]) -> list[tuple[Wanted, int]] | None:
    """The allocator's requests of ``units`` on the node, (wanted, count) each; None when one
    is not known there."""
    requests: list[tuple[Wanted, int]] = []
    for unit in units:
        wanted = unit.select or _wanted(state, unit.resource)
        if wanted is None:
            return None
        requests.append((wanted, unit.count))
    return requests


def dra_filler_mix(state: NodeState) -> FillerMix:
    """What the claims on the node's DynamicMIG GPUs hold towards the stranding rule."""
    view = state.dra
    if view is None or view.use is None:
        return NO_MIX
    mix = NO_MIX
    for g, gpu in enumerate(view.pool.gpus):
        if gpu.mode is not DraMode.DYNAMIC:
            continue
        held = (gpu.devices[k] for k in view.use.held(g))
        mix += filler_mix(gpu.model, (d.profile for d in held if d.kind is DeviceKind.MIG))
    return mix


STRANDING_SCORE = MIN_SCORE + 1
"""The score of a landing device that strands compute while the guard is on: the lowest that
still fits."""


def _strands(use: PoolUse, choice: Choice) -> bool:
    gpu = use.pool.gpus[choice.gpu]
    device = gpu.devices[choice.device]
    if device.kind is not DeviceKind.MIG:
        return False
    held = [gpu.devices[k] for k in use.held(choice.gpu)]
    if any(d.kind is not DeviceKind.MIG for d in held):
        return False  # a whole GPU held: nothing else fits there
    return strands_with(gpu.model, (*(d.profile for d in held), device.profile))


def _wanted(state: NodeState, resource: str) -> Wanted | None:
    if resource == WHOLE_GPU_RESOURCE:
        return Wanted.whole()
    profile = None if state.model is None else state.model.profile_by_resource(resource)
    return None if profile is None else Wanted.mig(profile.name)


def _score(use: PoolUse, choice: Choice, strand_guard: bool = False) -> int:
    pool = use.pool
    gpu = pool.gpus[choice.gpu]
    held = use.held_slices(choice.gpu)
    if gpu.mode is DraMode.DYNAMIC:
        if strand_guard and _strands(use, choice):
            return STRANDING_SCORE
        capacity = gpu.model.memory_slices
    else:
        capacity = sum(gpu.size_of(device) for device in gpu.devices)
    after = held + gpu.size_of(gpu.devices[choice.device])
    node_in_use = any(use.held_slices(g) for g in range(len(pool.gpus)))
    return gpu_unit_score(after, capacity, in_use=held > 0, node_in_use=node_in_use)


def dra_idle_breaks(state: NodeState, units: Sequence[DemandUnit]) -> int:
    """How many idle DynamicMIG GPUs (no claim holds a device there) the allocator's first
    full solution for ``units`` puts a device on: what the large-job reserve counts
    (:mod:`migslice.scheduling.reserve`); 0 where they do not fit."""
    view = state.dra
    requests = dra_requests(state, units)
    if view is None or view.use is None or requests is None:
        return 0
    solution = first_solution(view.pool, requests, view.use)
    if solution is None:
        return 0
    gpus, use = view.pool.gpus, view.use
    return len(
        {c.gpu for c in solution if gpus[c.gpu].mode is DraMode.DYNAMIC and not use.held(c.gpu)}
    )


def dra_capacity(state: NodeState) -> tuple[int, float]:
    """The node's DynamicMIG GPUs no claim holds a device of, and the free capacity of all its
    DynamicMIG GPUs in whole GPUs (each GPU's free compute slices over its compute slices; a
    GPU held whole has none)."""
    view = state.dra
    if view is None or view.use is None:
        return 0, 0.0
    idle, free = 0, 0.0
    for g, gpu in enumerate(view.pool.gpus):
        if gpu.mode is not DraMode.DYNAMIC:
            continue
        held = [gpu.devices[k] for k in view.use.held(g)]
        if not held:
            idle += 1
            free += 1.0
        elif all(d.kind is DeviceKind.MIG for d in held):
            model = gpu.model
            used = sum(model.profile(d.profile).compute_slices for d in held if d.profile)
            free += max(0, model.compute_slices - used) / model.compute_slices
    return idle, free
