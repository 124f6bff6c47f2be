"""A node's pool of ``gpu.nvidia.com`` ResourceSlices: its GPUs and their devices, in the order
kube-scheduler's allocator tries them, checked against the MIG catalog.

NVIDIA's DRA driver publishes one pool per node, named after the node (kubernetes-sigs/
dra-driver-nvidia-gpu at 95932046, ``cmd/gpu-kubelet-plugin/driver.go``). Three shapes:

* **DynamicMIG, split** (Kubernetes 1.35 and later): one slice with every GPU's counter set
  (``gpu-<minor>-counter-set``: one ``memory-slice-<i>`` counter per memory slice, and the
  largest profile's SMs, engines and memory), then one slice per GPU in PCI bus id order with
  every profile at every legal placement, each consuming the memory slices it covers;
* **DynamicMIG, combined** (before 1.35): one slice per GPU with its counter set and devices;
* **static**: one slice with the MIG instances that exist when the driver started (each with
  ``memorySlice<i>`` capacities), or a GPU with MIG off as ``gpu-<minor>`` alone.

The allocator (k8s.io/dynamic-resource-allocation ``structured``, the incubating implementation
that kube-scheduler 1.36 uses) keeps a pool's slices of its highest ``pool.generation``, uses
the pool only when it has ``resourceSliceCount`` of them, sorts them by name and takes, per
request, the first device in slice order whose counters are free. :attr:`DraPool.gpus` keeps
that order: GPUs as their slices come by name, devices as each slice lists them.

:func:`read_pool` says whether the pool is **ready**, **incomplete** (fewer slices of its
generation than it announces, or slices of an older generation still listed: the driver is
mid-publish; the node is not used yet, never guessed) or **unknown**, with one line: a slice
the slice reader did not know (:mod:`migslice.objects.resource_slices`), a GPU product the
catalog lacks, a MIG profile or GI profile id the catalog does not give that model, a
placement that is not legal, memory slices (capacities or counters) that do not cover exactly
the placement, static instances of one GPU that share memory slices, devices of one GPU that
mix static and DynamicMIG, counters a device consumes that its set lacks, a counter set two
GPUs consume (the allocator counts it once for both). Pure: values in, values out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice.mig import CATALOG, Catalog, GpuModel
from migslice.mig.catalog import product_label_of
from migslice.objects.resource_slices import (
    Counters,
    DeviceKind,
    SliceDevice,
    SliceFacts,
    SliceGpu,
)


class PoolState(enum.StrEnum):
    READY = "ready"
    INCOMPLETE = "incomplete"
    UNKNOWN = "unknown"


class DraMode(enum.StrEnum):
    STATIC = "static"
    """The devices are the MIG instances that existed when the driver started (or the GPU)."""
    DYNAMIC = "dynamic"
    """DynamicMIG: every placement is published; the driver creates the instance a claim gets."""


@dataclass(frozen=True, slots=True)
class DraGpu:
    """One GPU of the pool: its model, mode and devices in allocator order.

    ``capacity``: its counter set besides the memory slices (DynamicMIG), else ()."""

    minor: int
    model: GpuModel
    mode: DraMode
    product: str
    uuid: str
    pci_bus_id: str
    devices: tuple[SliceDevice, ...]
    capacity: Counters = ()

    def size_of(self, device: SliceDevice) -> int:
        """The memory slices the device covers (a whole GPU: all of them)."""
        if device.kind is DeviceKind.GPU:
            return self.model.memory_slices
        return self.model.profile(device.profile).memory_slices

    def mask_of(self, device: SliceDevice) -> int:
        if device.kind is DeviceKind.GPU:
            return (1 << self.model.memory_slices) - 1
        return ((1 << self.size_of(device)) - 1) << device.start


@dataclass(frozen=True, slots=True)
class DraPool:
    """The ``gpu.nvidia.com`` pool of one node (see the module docstring)."""

    node: str
    state: PoolState
    reason: str = ""
    generation: int = 0
    gpus: tuple[DraGpu, ...] = ()
    tainted: frozenset[str] = frozenset()
    """Devices the allocator keeps off: the slices' own taints and other DeviceTaintRules'."""
    steered: frozenset[str] = frozenset()
    """Devices migslice's own steer rules taint (``migslice.scheduling.dra_steer``)."""

    @property
    def skipped(self) -> frozenset[str]:
        """Every device a claim that tolerates no taint cannot get."""
        return self.tainted | self.steered if self.steered else self.tainted

    @property
    def mode(self) -> DraMode:
        """DynamicMIG when any GPU is (a GPU with MIG off beside them is published static)."""
        if any(gpu.mode is DraMode.DYNAMIC for gpu in self.gpus):
            return DraMode.DYNAMIC
        return DraMode.STATIC

    @property
    def model(self) -> GpuModel | None:
        return self.gpus[0].model if self.gpus else None


class _UnknownShapeError(Exception):
    """The one line that makes the pool unknown."""


def read_pool(node: str, slices: Iterable[SliceFacts], catalog: Catalog = CATALOG) -> DraPool:
    """The pool of ``node`` from its ``gpu.nvidia.com`` slices (see the module docstring)."""
    listed = sorted(slices, key=lambda s: s.name)
    for facts in listed:
        if facts.problem:
            return DraPool(node, PoolState.UNKNOWN, facts.problem)
    if not listed:
        return DraPool(node, PoolState.INCOMPLETE, "no ResourceSlice published yet")
    generation = max(facts.generation for facts in listed)
    current = [facts for facts in listed if facts.generation == generation]
    announced = {facts.slice_count for facts in current}
    if len(current) < len(listed):
        why = f"generation {generation} published while an older one is still listed"
        return DraPool(node, PoolState.INCOMPLETE, why, generation)
    if len(announced) != 1 or len(current) != announced.pop():
        counts = ", ".join(str(n) for n in sorted({f.slice_count for f in current}))
        why = f"{len(current)} of {counts} slices of generation {generation} listed"
        return DraPool(node, PoolState.INCOMPLETE, why, generation)
    try:
        gpus = _gpus(current, catalog)
    except _UnknownShapeError as unknown:
        return DraPool(node, PoolState.UNKNOWN, str(unknown), generation)
    tainted = frozenset(name for facts in current for name in facts.tainted)
    return DraPool(node, PoolState.READY, "", generation, gpus, tainted)


def _gpus(slices: list[SliceFacts], catalog: Catalog) -> tuple[DraGpu, ...]:
    counter_sets: dict[str, tuple[Counters, int]] = {}
    for facts in slices:
        for name, counters, bits in facts.counter_sets:
            if name in counter_sets:
                raise _UnknownShapeError(f"counter set {name} published twice")
            counter_sets[name] = (counters, bits)
    gpus: list[DraGpu] = []
    minors: set[int] = set()
    models: set[str] = set()
    consumers: dict[str, int] = {}
    for facts in slices:
        for gpu in facts.gpus:
            if gpu.minor in minors:
                raise _UnknownShapeError(f"GPU {gpu.minor} is published in two slices")
            minors.add(gpu.minor)
            if gpu.counter_set:
                other = consumers.setdefault(gpu.counter_set, gpu.minor)
                if other != gpu.minor:
                    first, second = sorted((other, gpu.minor))
                    raise _UnknownShapeError(
                        f"GPUs {first} and {second} consume one counter set, {gpu.counter_set}"
                    )
            checked = _gpu(gpu, counter_sets, catalog)
            models.add(checked.model.key)
            gpus.append(checked)
    if len(models) > 1:
        raise _UnknownShapeError(
            f"GPUs of several models on one node ({', '.join(sorted(models))})"
        )
    return tuple(gpus)


def _gpu(
    gpu: SliceGpu, counter_sets: Mapping[str, tuple[Counters, int]], catalog: Catalog
) -> DraGpu:
    label = product_label_of(gpu.product)
    model = catalog.by_product(label)
    if model is None:
        raise _UnknownShapeError(
            f"GPU {gpu.minor}: product {gpu.product!r} ({label}) not in migslice catalog"
        )
    capacity: Counters = ()
    if gpu.counter_set:
        found = counter_sets.get(gpu.counter_set)
        if found is None:
            raise _UnknownShapeError(
                f"GPU {gpu.minor} consumes counter set {gpu.counter_set}, not published"
            )
        capacity, bits = found
        if bits != (1 << model.memory_slices) - 1:
            raise _UnknownShapeError(
                f"counter set {gpu.counter_set} counts memory slices {_slices(bits)}; "
                f"{model.key} has {model.memory_slices}"
            )
        mode = DraMode.DYNAMIC
    else:
        mode = DraMode.STATIC
    result = DraGpu(
        gpu.minor, model, mode, gpu.product, gpu.uuid, gpu.pci_bus_id, gpu.devices, capacity
    )
    names: set[str] = set()
    kinds = {device.kind for device in gpu.devices}
    if mode is DraMode.STATIC and len(kinds) > 1:
        raise _UnknownShapeError(
            f"GPU {gpu.minor} is published whole and as MIG devices, without counters"
        )
    instances: list[tuple[int, str]] = []
    for device in gpu.devices:
        name = device.name(gpu.minor)
        if name in names:
            raise _UnknownShapeError(f"device {name} published twice")
        names.add(name)
        _check_device(result, device, name, {key for key, _ in capacity})
        if mode is DraMode.STATIC and device.kind is DeviceKind.MIG:
            mask = result.mask_of(device)
            for other_mask, other in instances:
                if mask & other_mask:
                    raise _UnknownShapeError(
                        f"{name} overlaps {other} (memory slice {_slices(mask & other_mask)}): "
                        "instances of one GPU cannot share memory slices"
                    )
            instances.append((mask, name))
    return result


def _check_device(gpu: DraGpu, device: SliceDevice, name: str, counted: set[str]) -> None:
    model = gpu.model
    if device.kind is DeviceKind.MIG:
        if not model.has_profile(device.profile):
            raise _UnknownShapeError(f"{name}: {model.key} has no MIG profile {device.profile}")
        profile = model.profile(device.profile)
        if device.profile_id != profile.gi_profile_id:
            raise _UnknownShapeError(
                f"{name}: GI profile id {device.profile_id}; the catalog gives {profile.name} "
                f"on {model.key} id {profile.gi_profile_id}"
            )
        if device.start not in profile.placements:
            starts = ",".join(map(str, profile.placements))
            raise _UnknownShapeError(
                f"{name}: {profile.name} cannot start at memory slice {device.start} on "
                f"{model.key} (legal starts {starts})"
            )
    expected = gpu.mask_of(device)
    if gpu.mode is DraMode.DYNAMIC:
        if device.slices != expected:
            raise _UnknownShapeError(
                f"{name} consumes memory slices {_slices(device.slices)}; its placement "
                f"covers {_slices(expected)}"
            )
        unknown = [key for key, _ in device.counters if key not in counted]
        if unknown:
            raise _UnknownShapeError(f"{name} consumes counter {unknown[0]} its counter set lacks")
    elif device.kind is DeviceKind.MIG:
        if not device.slices:
            raise _UnknownShapeError(
                f"{name} has neither memorySlice capacities nor counters (kube-apiserver "
                "drops a DynamicMIG device's counters while the feature gate "
                "DRAPartitionableDevices is off: alpha before 1.36, beta and on from 1.36)"
            )
        if device.slices != expected:
            raise _UnknownShapeError(
                f"{name} has memorySlice capacities {_slices(device.slices)}; its placement "
                f"covers {_slices(expected)}"
            )
    elif device.slices is not None:
        raise _UnknownShapeError(f"{name} is a whole GPU with memorySlice capacities")


def _slices(bits: int | None) -> str:
    if not bits:
        return "none"
    return ",".join(str(i) for i in range(bits.bit_length()) if bits >> i & 1)
