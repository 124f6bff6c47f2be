"""Which device kube-scheduler's allocator gives a request on a DRA node: its first fit.

kube-scheduler's structured allocator (k8s.io/dynamic-resource-allocation v0.36, the
incubating implementation kube-scheduler 1.36 uses) has no device scoring: per request it
takes the first device, in pool order, that the class's and the request's selectors match,
that no claim holds, that no taint it does not tolerate keeps off, and whose counters are
still free (``allocator_incubating.go`` ``allocateOne``; slices sorted by name,
``pools_incubating.go``). On NVIDIA's driver that order is :attr:`DraPool.gpus` (slices by
name: GPUs in PCI bus id order) and each GPU's devices as published:

* DynamicMIG: devices sorted by name, so a profile's lowest free start on the first GPU that
  has one (a ``1g.10gb`` takes start 0 of the lowest-PCI GPU, making its ``4g``/``7g``
  placements and its full device unavailable);
* static: the one slice lists the instances in the driver's Go map order, random per driver
  start but fixed once published, and the allocator walks that list: the prediction follows
  the published order, not the names (the real allocator over
  ``a100-80gb-staticmig-4g1g1g1g`` gives ``1g.10gb@6`` first).

:func:`first_fit` is that choice, one pure function; :class:`PoolUse` is what claims hold on
a pool (their devices, memory slices and counters), which the inventory fills from the
claims' allocations and its predictions. The allocator skips the devices
:attr:`DraPool.skipped` names (the slices' taints, DeviceTaintRules', migslice's steer:
:mod:`migslice.scheduling.dra_steer`); ``tainted`` names more. :func:`first_solution` is the
same for a pod's several requests together, with the allocator's backtracking.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migslice.names import DRA_DRIVER, DRA_PCI_BUS_ID
from migslice.objects.dra_pool import DraGpu, DraMode, DraPool
from migslice.objects.dra_selectors import TYPE
from migslice.objects.resource_claims import GpuAsk
from migslice.objects.resource_slices import DeviceKind, SliceDevice

_PROFILE = f"{DRA_DRIVER}/profile"
_PRODUCT = f"{DRA_DRIVER}/productName"
_PARENT = f"{DRA_DRIVER}/parentUUID"
_UUID = f"{DRA_DRIVER}/uuid"
_PCI = DRA_PCI_BUS_ID


@dataclass(frozen=True, slots=True)
class Wanted:
    """What one device of a request must be: its kind, MIG profile, the GPU it must be on
    (``productName``, ``parentUUID``/``uuid``, PCI bus id equalities) and the memory slices a
    static instance must cover (``'memorySlice<i>' in device.capacity[...]``)."""

    kind: DeviceKind
    profile: str | None = None
    product: str | None = None
    gpu_uuid: str | None = None
    pci_bus_id: str | None = None
    slices: int = 0

    @classmethod
    def mig(cls, profile: str) -> Wanted:
        return cls(DeviceKind.MIG, profile)

    @classmethod
    def whole(cls) -> Wanted:
        return cls(DeviceKind.GPU)

    def matches(self, gpu: DraGpu, device: SliceDevice) -> bool:
        if device.kind is not self.kind:
            return False
        if self.profile is not None and device.profile != self.profile:
            return False
        if self.product is not None and gpu.product != self.product:
            return False
        if self.gpu_uuid is not None and gpu.uuid != self.gpu_uuid:
            return False
        if self.pci_bus_id is not None and gpu.pci_bus_id != self.pci_bus_id:
            return False
        if self.slices:
            covered = device.slices if gpu.mode is DraMode.STATIC else None
            return covered is not None and covered & self.slices == self.slices
        return True


def wanted_of(ask: GpuAsk) -> Wanted | None:
    """The :class:`Wanted` of one ask; None when its selectors compare an attribute the
    prediction does not keep (the ask is then not predicted, never guessed)."""
    known = {TYPE, _PROFILE, _PRODUCT, _PCI}
    known.add(_PARENT if ask.kind is DeviceKind.MIG else _UUID)
    selection = ask.selection
    if any(key not in known for key, _ in selection.equal):
        return None
    slices = 0
    for index in selection.slices:
        slices |= 1 << index
    return Wanted(
        ask.kind,
        ask.profile,
        selection.value(_PRODUCT),
        selection.value(_PARENT if ask.kind is DeviceKind.MIG else _UUID),
        selection.value(_PCI),
        slices,
    )


@dataclass(frozen=True, slots=True)
class Choice:
    """The device chosen: positions in :attr:`DraPool.gpus` and that GPU's devices."""

    gpu: int
    device: int
    name: str


@dataclass(slots=True)
class _GpuUse:
    mask: int
    counters: dict[str, int]
    held: set[int]


class PoolUse:
    """What claims hold on one pool: per GPU its held devices, and for DynamicMIG GPUs the
    memory slices and counters they consume. Mutable; :meth:`copy` before trying."""

    def __init__(self, pool: DraPool) -> None:
        self.pool = pool
        self._gpus = [_GpuUse(0, {}, set()) for _ in pool.gpus]
        self._capacity = [dict(gpu.capacity) for gpu in pool.gpus]
        self._by_name: dict[str, tuple[int, int]] | None = None

    def copy(self) -> PoolUse:
        other = PoolUse.__new__(PoolUse)
        other.pool = self.pool
        other._gpus = [_GpuUse(u.mask, dict(u.counters), set(u.held)) for u in self._gpus]
        other._capacity = self._capacity
        other._by_name = self._by_name
        return other

    def alone(self, gpu: int) -> PoolUse:
        """A copy in which only GPU ``gpu``'s use is copied (the others are shared: do not
        change them)."""
        other = PoolUse.__new__(PoolUse)
        other.pool = self.pool
        other._gpus = list(self._gpus)
        use = self._gpus[gpu]
        other._gpus[gpu] = _GpuUse(use.mask, dict(use.counters), set(use.held))
        other._capacity = self._capacity
        other._by_name = self._by_name
        return other

    def locate(self, name: str) -> tuple[int, int] | None:
        """(GPU position, device position) of a published device."""
        if self._by_name is None:
            self._by_name = {
                found: (g, k)
                for g, gpu in enumerate(self.pool.gpus)
                for found, k in _names_of(gpu.minor, gpu.devices).items()
            }
        return self._by_name.get(name)

    def hold(self, name: str) -> bool:
        """Mark the device ``name`` held; False if the pool does not publish it (or it is
        held already)."""
        found = self.locate(name)
        if found is None or found[1] in self._gpus[found[0]].held:
            return False
        self.take(*found)
        return True

    def is_held(self, gpu: int, device: int) -> bool:
        return device in self._gpus[gpu].held

    def held(self, gpu: int) -> frozenset[int]:
        return frozenset(self._gpus[gpu].held)

    def held_slices(self, gpu: int) -> int:
        """The memory slices held devices cover on GPU ``gpu`` (a whole GPU covers all)."""
        found = self.pool.gpus[gpu]
        return sum(found.size_of(found.devices[k]) for k in self._gpus[gpu].held)

    def fits(self, gpu: int, device: int) -> bool:
        """Whether the allocator could give the device now: not held, and on a DynamicMIG GPU
        its memory slices and counters free."""
        use = self._gpus[gpu]
        if device in use.held:
            return False
        found = self.pool.gpus[gpu]
        if found.mode is DraMode.STATIC:
            return True
        item = found.devices[device]
        if use.mask & found.mask_of(item):
            return False
        capacity = self._capacity[gpu]
        counters = use.counters
        return all(counters.get(key, 0) + value <= capacity[key] for key, value in item.counters)

    def take(self, gpu: int, device: int) -> None:
        use = self._gpus[gpu]
        use.held.add(device)
        found = self.pool.gpus[gpu]
        if found.mode is DraMode.DYNAMIC:
            item = found.devices[device]
            use.mask |= found.mask_of(item)
            for key, value in item.counters:
                use.counters[key] = use.counters.get(key, 0) + value

    def release(self, gpu: int, device: int) -> None:
        """Undo :meth:`take` of that device."""
        use = self._gpus[gpu]
        use.held.discard(device)
        found = self.pool.gpus[gpu]
        if found.mode is DraMode.DYNAMIC:
            item = found.devices[device]
            use.mask &= ~found.mask_of(item)
            for key, value in item.counters:
                use.counters[key] -= value


def first_fit(
    pool: DraPool, wanted: Wanted, use: PoolUse, *, tainted: Iterable[str] = ()
) -> Choice | None:
    """The device the allocator gives a request for one ``wanted`` device now, or None when
    none is free (see the module docstring). ``tainted``: more device names to skip."""
    skip = pool.skipped | frozenset(tainted) if tainted else pool.skipped
    for g, gpu in enumerate(pool.gpus):
        for k, device in enumerate(gpu.devices):
            if not wanted.matches(gpu, device) or not use.fits(g, k):
                continue
            name = device.name(gpu.minor)
            if name in skip:
                continue
            return Choice(g, k, name)
    return None


SEARCH_LIMIT = 100_000
"""Devices a :func:`first_solution` tries at most (the allocator itself gives up after 10 s)."""


def first_solution(
    pool: DraPool,
    requests: Sequence[tuple[Wanted, int]],
    use: PoolUse,
    *,
    tainted: Iterable[str] = (),
) -> tuple[Choice, ...] | None:
    """The devices the allocator gives a pod's requests ((wanted, count) each, in the order it
    takes them: claims in order, requests in order), or None when they do not all fit.

    As the allocator does, each request takes its devices in pool order, the next after the
    one before (combinations, not permutations); when a later request finds none, the search
    backtracks and the first full solution wins (``allocator_incubating.go``, ``allocateOne``).
    ``use`` is not changed. More than :data:`SEARCH_LIMIT` tries count as no solution."""
    skip = pool.skipped | frozenset(tainted) if tainted else pool.skipped
    flat = [(g, k) for g, gpu in enumerate(pool.gpus) for k in range(len(gpu.devices))]
    trial = use.copy()
    chosen: list[Choice] = []
    budget = [SEARCH_LIMIT]

    def place(request: int, taken: int, start: int) -> bool:
        if request == len(requests):
            return True
        wanted, count = requests[request]
        if taken == count:
            return place(request + 1, 0, 0)
        for position in range(start, len(flat)):
            budget[0] -= 1
            if budget[0] < 0:
                return False
            g, k = flat[position]
            gpu = pool.gpus[g]
            device = gpu.devices[k]
            if not wanted.matches(gpu, device) or not trial.fits(g, k):
                continue
            name = device.name(gpu.minor)
            if name in skip:
                continue
            trial.take(g, k)
            chosen.append(Choice(g, k, name))
            if place(request, taken + 1, position + 1):
                return True
            chosen.pop()
            trial.release(g, k)
        return False

    return tuple(chosen) if place(0, 0, 0) else None


def free_count(pool: DraPool, gpu: int, wanted: Wanted, use: PoolUse) -> int:
    """How many more ``wanted`` devices GPU ``gpu`` could give one after the other (first fit
    each time: on a DynamicMIG GPU the lowest free starts, which for one profile is the most
    there are room for). What the claims leave, taints aside, as an idle GPU's offer is: the
    filter tells a node whose free devices are tainted apart
    (:data:`migslice.scheduling.reasons.DEVICES_TAINTED`)."""
    trial = use.alone(gpu)
    found = pool.gpus[gpu]
    count = 0
    for k, device in enumerate(found.devices):
        if wanted.matches(found, device) and trial.fits(gpu, k):
            trial.take(gpu, k)
            count += 1
    return count


@functools.lru_cache(maxsize=4096)
def _names_of(minor: int, devices: tuple[SliceDevice, ...]) -> Mapping[str, int]:
    """Device name -> position, per GPU (the same for every node with that GPU's devices)."""
    return {device.name(minor): k for k, device in enumerate(devices)}
