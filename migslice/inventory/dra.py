"""DRA nodes in the inventory: a node whose GPUs NVIDIA's DRA driver publishes becomes a
:class:`NodeState` like any other (GPUs, layouts, which instances are held, free counts).

* **static** (source ``dra-static``): a GPU's instances are the MIG devices its slice lists;
  one is held when a claim's allocation names it (any claim, for that pool). A GPU with MIG off
  is its ``gpu-<minor>`` device, held likewise.
* **DynamicMIG** (``dra-dynamic``): a GPU's layout is its allocated partitions, all held; free
  geometry is every published placement whose memory slices and counters the held ones leave
  free, created on demand around them, as in migslice's carve mode (the driver creates the
  instance when the claim is prepared). Its ``gpu-<minor>`` device (H100) consumes every
  counter, so it is free only while no partition is held.

Held also counts what is **assumed**: a claim not yet allocated (in migslice's cache) of a pod
bound or nominated to the node (once, however many of them share it), and the extended
resources of such a pod whose extended-resource claim is not seen, placed where the allocator
would put them (:func:`migslice.inventory.first_fit.first_solution`), pod after pod in name
order.

What a node offers (:attr:`DraView.allocatable`, read as the device plugin's allocatable is
on other nodes): per profile, the static instances published, or the most a DynamicMIG GPU
can hold of it; whole GPUs, their devices. Its free counts are those the claims leave.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from migslice.inventory.first_fit import PoolUse, Wanted, first_solution, free_count, wanted_of
from migslice.inventory.state import DraView, GpuState
from migslice.mig import WHOLE_GPU_RESOURCE, GpuModel, Placed
from migslice.names import mig_resource_name
from migslice.objects.device_classes import DeviceClassFacts, extended_resources
from migslice.objects.dra_pool import DraGpu, DraMode, DraPool, PoolState
from migslice.objects.pods import PodFacts
from migslice.objects.resource_claims import ClaimFacts, gpu_asks
from migslice.objects.resource_slices import Counters, DeviceKind, SliceDevice


@dataclass(frozen=True, slots=True)
class DraInputs:
    """What a DRA node's state is built from besides its Node and pods: its pool, the claims
    allocated in it, the claims its pods name (by key) and the DeviceClasses; ``extended``,
    the classes' :func:`extended_resources` when the caller keeps them (one value shared by
    every node), else None (read from ``classes``)."""

    pool: DraPool
    allocated: tuple[ClaimFacts, ...] = ()
    claims: Mapping[str, ClaimFacts] = field(default_factory=dict)
    classes: Mapping[str, DeviceClassFacts] = field(default_factory=dict)
    extended: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class DraResolution:
    """A DRA node's view, GPUs, resources held and free, and notes."""

    view: DraView
    gpus: tuple[GpuState, ...]
    allocated: tuple[tuple[str, int], ...]
    free: tuple[tuple[str, int], ...]
    notes: tuple[str, ...]


def resolve_dra(pods: Iterable[PodFacts], dra: DraInputs) -> DraResolution:
    """The DRA node's GPUs, held devices, counts and notes (see the module docstring)."""
    pool = dra.pool
    extended = dra.extended
    if extended is None:
        extended = extended_resources(dra.classes.values())
    if pool.state is not PoolState.READY:
        note = f"DRA pool gpu.nvidia.com {pool.state}: {pool.reason}"
        return DraResolution(DraView(pool, extended=extended), (), (), (), (note,))
    notes: list[str] = []
    use = PoolUse(pool)
    held: set[str] = set()
    for claim in sorted(dra.allocated, key=lambda c: c.key):
        for name in claim.devices_in(pool.node):
            if name in held:
                continue
            if use.hold(name):
                held.add(name)
            else:
                notes.append(f"ResourceClaim {claim.key} holds {name}, which the slices lack")
    assumed = _assume(pool, use, pods, dra, notes)
    held |= assumed
    gpus, allocated = _gpus(pool, use)
    offered, free = _counts(pool, use)
    view = DraView(pool, frozenset(held), frozenset(assumed), offered, use, extended)
    return DraResolution(view, gpus, allocated, free, tuple(notes))


def _assume(
    pool: DraPool, use: PoolUse, pods: Iterable[PodFacts], dra: DraInputs, notes: list[str]
) -> set[str]:
    """Place what pods on the node hold but no allocation shows yet (first fit each). A claim
    several of them share is placed once, with the first pod that names it: the allocator
    gives a claim its devices once, whatever the number of its consumers."""
    model = pool.model
    assumed: set[str] = set()
    placed: set[str] = set()
    for pod in sorted(pods, key=lambda p: p.key):
        wanted: list[tuple[Wanted, int]] = []
        extended_seen = False
        mine: list[str] = []
        for key in pod.claims:
            claim = dra.claims.get(key)
            if claim is None:
                notes.append(f"pod {pod.key}: ResourceClaim {key} not seen yet")
                continue
            extended_seen |= claim.extended_resource
            if claim.allocated or key in placed:
                continue
            mine.append(key)
            asks = gpu_asks(claim, dra.classes)
            notes.extend(f"pod {pod.key}: {line}" for line in asks.unread)
            for ask in asks.asks:
                if ask.tolerates:
                    notes.append(f"pod {pod.key}: {claim.key} tolerates device taints")
                    continue
                found = wanted_of(ask)
                if found is None:
                    notes.append(f"pod {pod.key}: {claim.key} selects by attributes not kept")
                    continue
                wanted.append((found, ask.count))
        if not extended_seen and model is not None:
            for resource, count in pod.requests:
                if resource == WHOLE_GPU_RESOURCE:
                    wanted.append((Wanted.whole(), count))
                    continue
                profile = model.profile_by_resource(resource)
                if profile is not None:
                    wanted.append((Wanted.mig(profile.name), count))
        if not wanted:
            continue
        solution = first_solution(pool, wanted, use)
        if solution is None:
            notes.append(f"pod {pod.key}: no free devices for what it holds")
            continue
        placed.update(mine)
        for choice in solution:
            use.take(choice.gpu, choice.device)
            assumed.add(choice.name)
    return assumed


def _gpus(pool: DraPool, use: PoolUse) -> tuple[tuple[GpuState, ...], tuple[tuple[str, int], ...]]:
    states: list[GpuState] = []
    allocated: Counter[str] = Counter()
    for g, gpu in enumerate(pool.gpus):
        held = use.held(g)
        whole_held = any(gpu.devices[k].kind is DeviceKind.GPU for k in held)
        allocated[WHOLE_GPU_RESOURCE] += whole_held
        mig = [
            (Placed(d.start, d.profile, gpu.size_of(d)), k in held)
            for k, d in enumerate(gpu.devices)
            if d.kind is DeviceKind.MIG and (gpu.mode is DraMode.STATIC or k in held)
        ]
        mig.sort()
        for placed, is_held in mig:
            allocated[mig_resource_name(placed.profile)] += is_held
        enabled = gpu.mode is DraMode.DYNAMIC or bool(mig)
        states.append(
            GpuState(
                gpu.minor,
                enabled,
                tuple(p for p, _ in mig),
                tuple(h for _, h in mig),
                whole_held,
            )
        )
    return tuple(states), tuple(sorted((r, n) for r, n in allocated.items() if n))


def _counts(
    pool: DraPool, use: PoolUse
) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[str, int], ...]]:
    """(offered, free) per resource: MIG profiles and whole GPUs. A GPU's offer depends on its
    devices alone (kept per distinct GPU); one with nothing held has it all free."""
    offered: Counter[str] = Counter()
    free: Counter[str] = Counter()
    for g, gpu in enumerate(pool.gpus):
        offer = _offer(gpu.model, gpu.mode, gpu.devices, gpu.capacity)
        offered.update(dict(offer))
        if not use.held(g):
            free.update(dict(offer))
            continue
        for resource, _ in offer:
            free[resource] += free_count(pool, g, _wanted(resource, gpu.model), use)
    kept = sorted(r for r, n in offered.items() if n)
    return tuple((r, offered[r]) for r in kept), tuple((r, free[r]) for r in kept)


@functools.lru_cache(maxsize=256)
def _offer(
    model: GpuModel, mode: DraMode, devices: tuple[SliceDevice, ...], capacity: Counters
) -> tuple[tuple[str, int], ...]:
    """What an idle GPU of these devices offers per resource (the same for every GPU and node
    that publishes them: a bounded memo of a pure function)."""
    gpu = DraGpu(0, model, mode, "", "", "", devices, capacity)
    alone = DraPool("", PoolState.READY, gpus=(gpu,))
    empty = PoolUse(alone)
    published = {(d.kind, d.profile) for d in devices}
    found: list[tuple[str, int]] = []
    for resource in [*(mig_resource_name(p.name) for p in model.profiles), WHOLE_GPU_RESOURCE]:
        wanted = _wanted(resource, model)
        if (wanted.kind, wanted.profile or "") not in published:
            continue
        count = free_count(alone, 0, wanted, empty)
        if count:
            found.append((resource, count))
    return tuple(found)


def _wanted(resource: str, model: GpuModel) -> Wanted:
    if resource == WHOLE_GPU_RESOURCE:
        return Wanted.whole()
    profile = model.profile_by_resource(resource)
    assert profile is not None
    return Wanted.mig(profile.name)
