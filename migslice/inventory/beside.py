"""On a node both NVIDIA's device plugin and its DRA driver serve (:attr:`NodeState.dra_beside`,
read through the device plugin): which instances of the node's map the ResourceClaims of the
DRA driver hold. The device plugin's counts, by which the node's state marks instances held,
do not see those claims; ``migslice status`` and the extender's pool metrics both count the
instances they hold as held, from this one reader.

A claim's device is placed on the map by its GPU: the node agent's GPU of the same UUID;
without an agent report, the DRA driver's GPUs in PCI bus id order (NVML's order, which the
map's indices follow) when it publishes every GPU of the map with its bus id. A device the map
cannot place (its GPU not known to the map, or no such instance there) is left unplaced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from migslice import names
from migslice.inventory.state import GpuState, NodeState, mig_resource
from migslice.objects.dra_pool import DraPool, PoolState
from migslice.objects.resource_claims import ClaimFacts
from migslice.objects.resource_slices import DeviceKind, SliceDevice

WHOLE_GPU = "whole GPU"
"""The profile of a place that is a whole GPU (MIG off, or held whole)."""

Place = tuple[int, str, int]
"""(the map's GPU index, profile or :data:`WHOLE_GPU`, start)."""


@dataclass(frozen=True, slots=True)
class BesideClaims:
    """``held``: per place of the map a claim holds, that claim's key (the first by key);
    ``unplaced``: per claim, its devices on the node the map cannot place."""

    held: dict[Place, str]
    unplaced: dict[str, tuple[str, ...]]


def beside_claims(
    state: NodeState, pool: DraPool | None, claims: Iterable[ClaimFacts]
) -> BesideClaims:
    """Where on the map of ``state`` the ``claims`` allocated on the node hold devices of
    ``pool`` (the DRA driver's ``gpu.nvidia.com`` pool of the node; None: not read)."""
    by_name: dict[str, tuple[int, SliceDevice]] = {}
    if pool is not None and pool.state is PoolState.READY:
        for dra_gpu in pool.gpus:
            for device in dra_gpu.devices:
                by_name[device.name(dra_gpu.minor)] = (dra_gpu.minor, device)
    indices = _map_indices(state, pool)
    gpus = {gpu.index: gpu for gpu in state.gpus}
    held: dict[Place, str] = {}
    unplaced: dict[str, tuple[str, ...]] = {}
    for claim in sorted(claims, key=lambda c: c.key):
        left = []
        for name in claim.devices_in(state.name):
            found = by_name.get(name)
            gpu = None if found is None else gpus.get(indices.get(found[0], -1))
            where = None if found is None or gpu is None else _place_of(gpu, found[1])
            if where is None:
                left.append(name)
            else:
                held.setdefault(where, claim.key)
        if left:
            unplaced[claim.key] = tuple(left)
    return BesideClaims(held, unplaced)


def _map_indices(state: NodeState, pool: DraPool | None) -> dict[int, int]:
    """The map's GPU index of each GPU the DRA driver publishes (by its minor number); see the
    module docstring."""
    if pool is None:
        return {}
    report = state.facts.agent
    if report is not None:
        by_uuid = {gpu.uuid: gpu.index for gpu in report.gpus if gpu.uuid}
        return {g.minor: by_uuid[g.uuid] for g in pool.gpus if g.uuid in by_uuid}
    ordered = sorted(pool.gpus, key=lambda g: g.pci_bus_id.lower())
    if len(ordered) != len(state.gpus) or not all(g.pci_bus_id for g in ordered):
        return {}
    return {g.minor: gpu.index for g, gpu in zip(ordered, state.gpus, strict=True)}


def _place_of(gpu: GpuState, device: SliceDevice) -> Place | None:
    """Where ``device`` is on the map's ``gpu``; None when the map has no such instance."""
    if device.kind is DeviceKind.GPU:
        return None if gpu.mig_enabled else (gpu.index, WHOLE_GPU, 0)
    if any(p.profile == device.profile and p.start == device.start for p in gpu.instances):
        return (gpu.index, device.profile, device.start)
    return None


def with_claims(state: NodeState, claimed: Collection[Place]) -> tuple[GpuState, ...]:
    """The node's GPUs with the instances (or MIG-off GPUs) that ``claimed`` names held. The
    device plugin's pods keep as many instances of their profile as they hold: first those
    the inventory assumed for them (or saw busy) that no claim holds, then free ones in map
    order, an assumption as the inventory's own is."""
    gpus = state.gpus
    if not claimed:
        return gpus
    held = [list(gpu.held) for gpu in gpus]
    whole = [gpu.whole_held for gpu in gpus]
    kept: dict[str, int] = {}  # per profile (or WHOLE_GPU): held, not by a claim
    for g, gpu in enumerate(gpus):
        for k, placed in enumerate(gpu.instances):
            if (gpu.index, placed.profile, placed.start) in claimed:
                held[g][k] = True
            elif held[g][k]:
                kept[placed.profile] = kept.get(placed.profile, 0) + 1
        if (gpu.index, WHOLE_GPU, 0) in claimed:
            whole[g] = True
        elif whole[g]:
            kept[WHOLE_GPU] = kept.get(WHOLE_GPU, 0) + 1
    for g, gpu in enumerate(gpus):
        for k, placed in enumerate(gpu.instances):
            resource = mig_resource(placed.profile)
            if not held[g][k] and kept.get(placed.profile, 0) < state.allocated_of(resource):
                held[g][k] = True
                kept[placed.profile] = kept.get(placed.profile, 0) + 1
        if not gpu.mig_enabled and not whole[g]:
            if kept.get(WHOLE_GPU, 0) < state.allocated_of(names.WHOLE_GPU_RESOURCE):
                whole[g] = True
                kept[WHOLE_GPU] = kept.get(WHOLE_GPU, 0) + 1
    return tuple(
        dataclasses.replace(gpu, held=tuple(held[g]), whole_held=whole[g])
        for g, gpu in enumerate(gpus)
    )
