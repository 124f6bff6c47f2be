"""The inventory's values: a node as placement sees it (:class:`NodeState`), its GPUs
(:class:`GpuState`), where its layouts came from (:class:`LayoutSource`) and, on a DRA node,
its pool and the devices claims hold (:class:`DraView`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from migslice.inventory.first_fit import PoolUse
from migslice.inventory.picking import Occupancy
from migslice.mig import GpuModel, Placed
from migslice.names import mig_resource_name
from migslice.objects.dra_pool import DraMode, DraPool, PoolState
from migslice.objects.nodes import NodeFacts


class LayoutSource(enum.StrEnum):
    AGENT = "agent"
    MIG_PARTED = "mig-parted"
    COUNTS = "counts"
    DRA_STATIC = "dra-static"
    """NVIDIA's DRA driver publishes the node's MIG instances (static MIG)."""
    DRA_DYNAMIC = "dra-dynamic"
    """NVIDIA's DRA driver publishes every placement and carves on demand (DynamicMIG)."""


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU: MIG on or off, its instances, and which of them pods hold.

    ``held`` runs parallel to ``instances``. A GPU with MIG off has no instances; ``whole_held``
    says whether a pod holds it as ``nvidia.com/gpu``. On a DynamicMIG node the instances are
    the partitions claims hold (all held); free geometry is around them
    (:mod:`migslice.inventory.dra`).
    """

    index: int
    mig_enabled: bool
    instances: tuple[Placed, ...] = ()
    held: tuple[bool, ...] = ()
    whole_held: bool = False
    _kept: tuple[Occupancy, int] | None = field(default=None, init=False, repr=False, compare=False)
    """The GPU as the ranking reads it and its held slices, built when first asked for (the
    fields cannot change, so neither can they; a node's state rebuilt after one of its GPUs
    changed shares the others' states, and with them these)."""

    def ranked(self) -> tuple[Occupancy, int]:
        """The GPU as :func:`~migslice.inventory.picking.best_free_instance` reads it, and
        :attr:`held_slices`."""
        kept = self._kept
        if kept is None:
            held = sum(p.size for p, h in zip(self.instances, self.held, strict=True) if h)
            kept = (Occupancy(self.index, self.instances, self.held, self.whole_held), held)
            object.__setattr__(self, "_kept", kept)
        return kept

    @property
    def held_slices(self) -> int:
        """The memory slices of the instances pods hold (not a whole-GPU holder's)."""
        kept = self._kept
        return (self.ranked() if kept is None else kept)[1]

    @property
    def is_idle(self) -> bool:
        """No pod holds any part of it: the GPU could be re-partitioned."""
        return not self.whole_held and not any(self.held)


@dataclass(frozen=True, slots=True)
class DraView:
    """The DRA part of a node's state: its pool, the devices held (allocated, or assumed for
    claims and extended resources no allocation shows yet), those of them assumed, what the
    node offers per resource, and the pool's use (read only: copy it to try a placement).
    ``extended``: the extended resources a DeviceClass serves from DRA
    (:func:`migslice.objects.device_classes.extended_resources`); kube-scheduler places a pod
    that asks for any other ``nvidia.com/*`` resource on no DRA node."""

    pool: DraPool
    held: frozenset[str] = frozenset()
    assumed: frozenset[str] = frozenset()
    allocatable: tuple[tuple[str, int], ...] = ()
    use: PoolUse | None = field(default=None, compare=False, repr=False)
    extended: frozenset[str] = frozenset()

    @property
    def is_ready(self) -> bool:
        return self.pool.state is PoolState.READY

    @property
    def mode(self) -> DraMode:
        return self.pool.mode


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as placement sees it: facts, model, per-GPU layouts and free counts.

    ``dra``: set on a node whose GPUs NVIDIA's DRA driver publishes (its pool read, whatever
    its state); :attr:`allocatable` is then what the pool offers, as the device plugin's
    allocatable is on other nodes. ``dra_beside``: a node read through its device plugin
    (``dra`` None) for which NVIDIA's DRA driver publishes ResourceSlices too: claims may be
    allocated from those, and this view does not see them."""

    facts: NodeFacts
    model: GpuModel | None
    source: LayoutSource
    gpus: tuple[GpuState, ...]
    allocated: tuple[tuple[str, int], ...]
    free: tuple[tuple[str, int], ...]
    notes: tuple[str, ...] = ()
    dra: DraView | None = None
    dra_beside: bool = False

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def allocatable(self) -> tuple[tuple[str, int], ...]:
        """What the node offers per ``nvidia.com/*`` resource, sorted by name."""
        return self.dra.allocatable if self.dra is not None else self.facts.allocatable

    def allocatable_of(self, resource: str) -> int:
        for name, count in self.allocatable:
            if name == resource:
                return count
        return 0

    def free_of(self, resource: str) -> int:
        for name, count in self.free:
            if name == resource:
                return count
        return 0

    def allocated_of(self, resource: str) -> int:
        for name, count in self.allocated:
            if name == resource:
                return count
        return 0

    def other_model_gpus(self) -> frozenset[int]:
        """The GPUs the node agent says are of another model than the node's: their own PCI
        device id is none of the model's (an A100-40GB among A100-80GBs, a DGX Station's
        display GPU). A layout of the node's model is not theirs to get."""
        report = self.facts.agent
        if report is None or self.model is None:
            return frozenset()
        ids = self.model.pci_device_ids
        return frozenset(i for i, pci in report.gpu_pci_ids().items() if pci not in ids)

    def unidentified_holds(self) -> frozenset[str]:
        """The MIG profiles whose held instances are not all known: the device plugin, not
        the scheduler, picks a pod's device, so which instance a pod holds shows only as the
        agent sees its processes (busy). Where the node's pods hold more instances of a
        profile than the agent sees busy, or no agent reports, any instance of that profile
        may be held, and a re-partition must leave every one of them alone."""
        report = self.facts.agent
        if self.model is None or (report is None and self.source is LayoutSource.AGENT):
            return frozenset()  # the latter: exact holds, the simulator's nodes
        busy: dict[str, int] = {}
        for gpu in report.gpus if report is not None else ():
            for instance in gpu.instances:
                busy[instance.profile] = busy.get(instance.profile, 0) + instance.busy
        return frozenset(
            p.name
            for p in self.model.profiles
            if self.allocated_of(mig_resource(p.name)) > (busy.get(p.name, 0) if report else 0)
        )


def mig_resource(profile_name: str) -> str:
    """Mixed-strategy resource of a profile (``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``)."""
    return mig_resource_name(profile_name)
