"""The steer: which devices of a DynamicMIG node to taint so that kube-scheduler's first fit
lands on the placement migslice would choose.

kube-scheduler's allocator takes, per request, the first device in pool order that fits and
that no taint keeps off (:func:`migslice.inventory.first_fit.first_fit`); it scores nothing. On
an idle A100 a ``1g.10gb`` claim takes start 0, which ends the GPU's only ``4g.40gb``
placement and its ``7g.80gb``. A ``DeviceTaintRule`` with effect ``NoSchedule`` keeps the
allocator off a device for claims that do not tolerate it, and changes nothing for claims
already allocated. So, per MIG profile a node's DynamicMIG GPUs publish:

* the **candidates** are the profile's devices that fit now (not held, memory slices and
  counters free) and that no other taint keeps off, in the allocator's order;
* the **preferred** one is migslice's choice among them: while the cluster's held mix says
  so (``strand_guard``, :func:`migslice.mig.stranding.strand_guard`), a placement that
  strands compute (fills the GPU's memory with compute slices left: ``3g`` next to ``3g``)
  only when nothing else fits; then the GPU of the highest
  fragmentation score (:func:`migslice.inventory.picking.gpu_unit_score`: the fullest GPU in
  use first, so idle GPUs stay whole), then, while the held mix says so (``complete``,
  :func:`migslice.mig.stranding.complete_rule`: the room beside the ``3g`` instances held is
  at least twice the memory the ``4g`` take), a placement after which instances of 2 or
  more compute slices can still use every compute slice of the GPU
  (:func:`migslice.mig.stranding.completes`: ``2g`` at 0, not at 4, where a later ``3g``
  would leave room for a ``1g`` alone), then the placement that takes the least
  room from larger profiles on it (:func:`migslice.mig.room.room_loss`, largest shape first),
  then the allocator's own order;
* the **steer** taints exactly the candidates the allocator would reach before the preferred
  one. Devices after it stay untainted, so the profile is never closed: a one-device request
  that fits the node fits it steered, landing on the preferred device.

A request for several devices of one profile takes the preferred one and the next untainted
ones after it, and may find fewer than it needs where the untainted tail is short; a request
pinned to one GPU finds none where the preferred device is on a later GPU; a pod whose
demand fits a node unsteered but not steered is passed as ``lift`` for its profiles, whose
taints on that node are then dropped (:func:`lifted`). Static-MIG GPUs are not steered: their
instances exist already and do not overlap, so which one a claim takes strands nothing.

Pure: values in, values out. The extender's steer loop (``extender/steer.py``) writes the rules.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migslice.inventory.first_fit import PoolUse, Wanted, first_solution
from migslice.inventory.picking import gpu_unit_score
from migslice.mig import GpuModel, Placed
from migslice.mig.room import RoomLoss, room_loss
from migslice.mig.stranding import completes, strands_with
from migslice.objects.dra_pool import DraMode, DraPool, PoolState
from migslice.objects.resource_slices import DeviceKind


@dataclass(frozen=True, slots=True)
class Steer:
    """A node's steer: the device names to taint, and per profile the device preferred."""

    taints: frozenset[str] = frozenset()
    preferred: tuple[tuple[str, str], ...] = ()
    """(profile, device name) for each profile with more than one candidate."""


NO_STEER = Steer()


def steer_of(
    pool: DraPool,
    use: PoolUse,
    *,
    lift: Iterable[str] = (),
    strand_guard: bool = False,
    complete: bool = False,
) -> Steer:
    """The steer of a ready pool given what claims hold (``use``); profiles in ``lift`` are
    not steered; ``strand_guard``: placements that strand compute rank last; ``complete``:
    among the fullest GPUs, placements that keep every compute slice usable come first.
    ``pool.tainted`` (the slices' and other rules' taints) is honoured; the steer's own rules
    (``pool.steered``) are not read, so the result does not depend on them."""
    if pool.state is not PoolState.READY:
        return NO_STEER
    lifted_profiles = frozenset(lift)
    candidates: dict[str, list[tuple[int, int]]] = {}
    for g, gpu in enumerate(pool.gpus):
        if gpu.mode is not DraMode.DYNAMIC:
            continue
        for k, device in enumerate(gpu.devices):
            if device.kind is not DeviceKind.MIG or device.profile in lifted_profiles:
                continue
            if not use.fits(g, k) or device.name(gpu.minor) in pool.tainted:
                continue
            candidates.setdefault(device.profile, []).append((g, k))
    if not candidates:
        return NO_STEER
    node_in_use = any(use.held_slices(g) for g in range(len(pool.gpus)))
    kept = {g: _kept(pool, use, g) for g in {g for found in candidates.values() for g, _ in found}}
    taints: set[str] = set()
    preferred: list[tuple[str, str]] = []
    for profile, found in sorted(candidates.items()):
        if len(found) < 2:
            continue

        def rank(
            position: int, found: list[tuple[int, int]] = found
        ) -> tuple[bool, int, bool, RoomLoss, int]:
            g, k = found[position]
            gpu = pool.gpus[g]
            device = gpu.devices[k]
            held = use.held_slices(g)
            after = held + gpu.size_of(device)
            score = gpu_unit_score(
                after, gpu.model.memory_slices, in_use=held > 0, node_in_use=node_in_use
            )
            strands = strand_guard and strands_with(
                gpu.model, (*(p.profile for p in kept[g]), device.profile)
            )
            ends = complete and not completes(
                gpu.model, (*kept[g], Placed(device.start, device.profile, gpu.size_of(device)))
            )
            loss = _loss(gpu.model, kept[g], device.profile, device.start)
            return (strands, -score, ends, loss, position)

        best = min(range(len(found)), key=rank)
        for g, k in found[:best]:
            gpu = pool.gpus[g]
            taints.add(gpu.devices[k].name(gpu.minor))
        g, k = found[best]
        preferred.append((profile, pool.gpus[g].devices[k].name(pool.gpus[g].minor)))
    return Steer(frozenset(taints), tuple(preferred))


def lifted(
    pool: DraPool, use: PoolUse, steer: Steer, demands: Iterable[Sequence[tuple[Wanted, int]]]
) -> frozenset[str]:
    """The profiles whose steer keeps one of ``demands`` (a pending pod's requests, each
    (wanted, count)) off the node although it fits there unsteered: those to :func:`steer_of`
    again with ``lift``. Demands of one device that pins no GPU never need it (the preferred
    one stays); one pinned to a GPU (``parentUUID``/``uuid``, PCI bus id) may find every
    device of that GPU tainted, the preferred one being on another."""
    bare = dataclasses.replace(pool, steered=frozenset()) if pool.steered else pool
    found: set[str] = set()
    for requests in demands:
        if sum(count for _, count in requests) < 2 and not any(_pinned(w) for w, _ in requests):
            continue
        if first_solution(bare, requests, use) is None:
            continue
        if first_solution(bare, requests, use, tainted=steer.taints) is None:
            found.update(w.profile for w, _ in requests if w.profile is not None)
    return frozenset(found)


def steered_profiles(pool: DraPool, steer: Steer) -> frozenset[str]:
    """The MIG profiles some of whose devices ``steer`` taints on the pool."""
    return frozenset(
        device.profile
        for gpu in pool.gpus
        for device in gpu.devices
        if device.profile and device.name(gpu.minor) in steer.taints
    )


def _pinned(wanted: Wanted) -> bool:
    """Whether ``wanted`` narrows the devices to one GPU or placement (not only a profile)."""
    return bool(wanted.gpu_uuid or wanted.pci_bus_id or wanted.slices)


def _kept(pool: DraPool, use: PoolUse, g: int) -> tuple[Placed, ...]:
    gpu = pool.gpus[g]
    return tuple(
        sorted(
            Placed(d.start, d.profile, gpu.size_of(d))
            for k in use.held(g)
            if (d := gpu.devices[k]).kind is DeviceKind.MIG
        )
    )


@functools.lru_cache(maxsize=8192)
def _loss(model: GpuModel, kept: tuple[Placed, ...], profile: str, start: int) -> RoomLoss:
    """The room a new instance takes on a GPU holding ``kept`` (the same for every GPU of
    the model with those instances: a bounded memo of a pure function)."""
    new = Placed(start, profile, model.profile(profile).memory_slices)
    return room_loss(model, kept, [*kept, new])
