"""ResourceSlices of NVIDIA's DRA driver (``gpu.nvidia.com``), read one slice at a time.

:func:`slice_facts_from_raw` keeps of one slice what placement reads: its pool (name,
generation, ``resourceSliceCount``), its node, its counter sets and, per GPU, its devices in
the order the slice lists them (kube-scheduler's allocator takes the first fit in that order).
A device is kept as its GPU's minor number, its kind (``mig`` or ``gpu``), profile, GI profile
id and start (read from its name, ``gpu-<minor>-mig-<profile>-<id>-<start>``, and checked
against its attributes), the memory slices it covers (static MIG: its ``memorySlice<i>``
capacities; DynamicMIG: its ``memory-slice-<i>`` counters) and its other counters. What
describes the GPU (``productName``, ``parentUUID`` or ``uuid``,
``resource.kubernetes.io/pciBusID``) is kept once per GPU. Devices equal but for their GPU
share one value, so a node's 200 DynamicMIG devices cost a few objects.

Slices of other drivers are None (not kept). Whatever the reader does not know (a device name
of another form, a device type other than ``mig``/``gpu``, a missing attribute, a counter it
cannot read) is the slice's :attr:`SliceFacts.problem`, one line: the node becomes unknown
(:mod:`migslice.objects.dra_pool`); the reader never raises and never guesses. The geometry
(profiles and placements against the catalog, counters against placements) is checked per
pool, where the GPU model is known.
"""

from __future__ import annotations

import enum
import functools
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from migslice.names import DRA_DRIVER, DRA_PCI_BUS_ID
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.quantity import QuantityError, parse_quantity

RawSlice = JsonObject
Counters = tuple[tuple[str, int], ...]
"""Counter name -> value, sorted by name (the memory-slice counters are kept apart)."""

_GPU_NAME = re.compile(r"gpu-(0|[1-9][0-9]{0,3})")
_MIG_NAME = re.compile(r"gpu-(0|[1-9][0-9]{0,3})-mig-(.+)-(0|[1-9][0-9]{0,3})-([0-9])")
_MEMORY_SLICE_COUNTER = re.compile(r"memory-slice-([0-9]|[1-5][0-9]|6[0-3])")
_MEMORY_SLICE_CAPACITY = re.compile(r"memorySlice([0-9]|[1-5][0-9]|6[0-3])")


class DeviceKind(enum.StrEnum):
    MIG = "mig"
    GPU = "gpu"


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One published device, less what its GPU says (see the module docstring).

    ``slices``: bit ``i`` set for each memory slice the device covers (None: the device says
    none, which a static whole GPU does). ``counters``: its consumption of its GPU's counter
    set besides the memory slices (DynamicMIG only)."""

    kind: DeviceKind
    profile: str = ""
    profile_id: int = -1
    start: int = 0
    slices: int | None = None
    counters: Counters = ()

    def name(self, minor: int) -> str:
        if self.kind is DeviceKind.GPU:
            return f"gpu-{minor}"
        return mig_device_name(minor, self.profile, self.profile_id, self.start)


@dataclass(frozen=True, slots=True)
class SliceGpu:
    """One GPU's devices in one slice, in slice order, and what its devices say of it."""

    minor: int
    product: str
    uuid: str
    pci_bus_id: str
    devices: tuple[SliceDevice, ...]
    counter_set: str = ""
    """The counter set every device of the GPU consumes (DynamicMIG), else ""."""


@dataclass(frozen=True, slots=True)
class SliceFacts:
    """The decision-relevant part of one ``gpu.nvidia.com`` ResourceSlice."""

    name: str
    pool: str
    generation: int
    slice_count: int
    node_name: str
    counter_sets: tuple[tuple[str, Counters, int], ...] = ()
    """(name, counters besides the memory slices, memory slices as bits) of each set."""
    gpus: tuple[SliceGpu, ...] = ()
    tainted: frozenset[str] = frozenset()
    """Devices with a ``NoSchedule`` or ``NoExecute`` taint in the slice (the driver's health
    monitor): the allocator gives them to no claim that does not tolerate it."""
    problem: str = ""


class _UnknownShapeError(Exception):
    """What the reader does not know, as the one line it reports."""


def mig_device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """The driver's name of a MIG device (``ToCanonicalName``, mig.go:111-114): the profile
    without dots, lower case, anything but ``a-z0-9-.`` as ``-``, trimmed of ``-``."""
    return f"gpu-{minor}-mig-{profile_name_part(profile)}-{profile_id}-{start}"


def profile_name_part(profile: str) -> str:
    """``1g.10gb+me`` -> ``1g10gb-me`` (mig.go:249-262 toRFC1123Compliant)."""
    return re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-")


def slice_facts_from_raw(raw_slice: RawSlice) -> SliceFacts | None:
    """Project a raw ResourceSlice; None for another driver's."""
    spec = mapping(raw_slice.get("spec"))
    if spec.get("driver") != DRA_DRIVER:
        return None
    metadata = mapping(raw_slice.get("metadata"))
    name = text(metadata.get("name")) or ""
    pool = mapping(spec.get("pool"))
    pool_name = text(pool.get("name")) or ""
    node = text(spec.get("nodeName")) or ""
    generation = _int(pool.get("generation"))
    count = _int(pool.get("resourceSliceCount"))
    base = SliceFacts(
        name=sys.intern(name),
        pool=sys.intern(pool_name),
        generation=generation if generation is not None else -1,
        slice_count=count if count is not None else -1,
        node_name=sys.intern(node),
    )
    try:
        return _read(base, spec, pool_name, node, generation, count)
    except _UnknownShapeError as unknown:
        return _with_problem(base, f"ResourceSlice {name}: {unknown}")


def _read(
    base: SliceFacts,
    spec: JsonObject,
    pool_name: str,
    node: str,
    generation: int | None,
    count: int | None,
) -> SliceFacts:
    if not node:
        raise _UnknownShapeError(
            "not node-local (no spec.nodeName); NVIDIA's driver publishes per node"
        )
    if pool_name != node:
        raise _UnknownShapeError(f"pool {pool_name!r} is not named after its node {node!r}")
    if generation is None or generation < 0 or count is None or count < 1:
        raise _UnknownShapeError("spec.pool.generation or resourceSliceCount missing")
    if spec.get("perDeviceNodeSelection"):
        raise _UnknownShapeError("spec.perDeviceNodeSelection is set")
    counter_sets = tuple(
        _counter_set(raw, f"sharedCounters[{i}]")
        for i, raw in enumerate(items(spec.get("sharedCounters")))
    )
    gpus: list[SliceGpu] = []
    tainted: set[str] = set()
    current: list[SliceDevice] = []
    current_gpu: tuple[int, str, str, str, str] | None = None
    seen: set[int] = set()
    for i, raw in enumerate(items(spec.get("devices"))):
        device, gpu, device_name = _device(mapping(raw), f"devices[{i}]")
        if _is_tainted(mapping(raw)):
            tainted.add(device_name)
        if current_gpu is not None and gpu[0] != current_gpu[0]:
            gpus.append(_gpu(current_gpu, current))
            current = []
            current_gpu = None
        if current_gpu is None:
            if gpu[0] in seen:
                raise _UnknownShapeError(f"devices of GPU {gpu[0]} are not listed together")
            seen.add(gpu[0])
            current_gpu = gpu
        elif gpu[1:] != current_gpu[1:]:
            raise _UnknownShapeError(
                f"{device_name} differs from GPU {gpu[0]}'s other devices in product, UUID, "
                "PCI bus id or counter set"
            )
        current.append(device)
    if current_gpu is not None:
        gpus.append(_gpu(current_gpu, current))
    return SliceFacts(
        name=base.name,
        pool=base.pool,
        generation=base.generation,
        slice_count=base.slice_count,
        node_name=base.node_name,
        counter_sets=counter_sets,
        gpus=tuple(gpus),
        tainted=frozenset(tainted),
    )


def _with_problem(base: SliceFacts, problem: str) -> SliceFacts:
    return SliceFacts(
        base.name, base.pool, base.generation, base.slice_count, base.node_name, problem=problem
    )


def _gpu(gpu: tuple[int, str, str, str, str], devices: list[SliceDevice]) -> SliceGpu:
    minor, product, uuid, pci, counter_set = gpu
    return SliceGpu(minor, product, uuid, pci, _shared_devices(tuple(devices)), counter_set)


def _device(raw: JsonObject, where: str) -> tuple[SliceDevice, tuple[int, str, str, str, str], str]:
    """The device, what it says of its GPU (minor, product, uuid, PCI bus id, counter set)
    and its name."""
    name = text(raw.get("name"))
    if not name:
        raise _UnknownShapeError(f"{where} has no name")
    if raw.get("allowMultipleAllocations") is True:
        raise _UnknownShapeError(f"{name} allows multiple allocations (shared, not isolated)")
    attributes = _attributes(mapping(raw.get("attributes")), name)
    kind = attributes.get("type")
    if kind not in (DeviceKind.MIG, DeviceKind.GPU):
        shown = "none" if kind is None else repr(kind)
        raise _UnknownShapeError(f"{name} has device type {shown}; migslice knows 'mig' and 'gpu'")
    product = _required(attributes, "productName", name)
    pci = attributes.get(DRA_PCI_BUS_ID)
    pci_text = pci if isinstance(pci, str) else ""
    capacity = _quantities(mapping(raw.get("capacity")), f"{name} capacity")
    counter_set, counters, counted_slices = _consumption(raw, name)
    capacity_slices = _capacity_slices(capacity, name)
    if counted_slices is not None and capacity_slices is not None:
        raise _UnknownShapeError(
            f"{name} has both memorySlice capacities and memory-slice counters"
        )
    slices = counted_slices if counted_slices is not None else capacity_slices
    if kind == DeviceKind.GPU:
        match = _GPU_NAME.fullmatch(name)
        if match is None:
            raise _UnknownShapeError(f"GPU device name {name!r} is not gpu-<minor>")
        uuid = _required(attributes, "uuid", name)
        minor = int(match[1])
        device = SliceDevice(DeviceKind.GPU, slices=slices, counters=counters)
    else:
        match = _MIG_NAME.fullmatch(name)
        if match is None:
            raise _UnknownShapeError(
                f"MIG device name {name!r} is not gpu-<minor>-mig-<profile>-<profile id>-<start>"
            )
        profile = _required(attributes, "profile", name)
        uuid = _required(attributes, "parentUUID", name)
        if profile_name_part(profile) != match[2]:
            raise _UnknownShapeError(f"{name} does not name its profile attribute {profile!r}")
        minor = int(match[1])
        device = SliceDevice(
            DeviceKind.MIG,
            profile=sys.intern(profile),
            profile_id=int(match[3]),
            start=int(match[4]),
            slices=slices,
            counters=counters,
        )
    gpu = (minor, sys.intern(product), sys.intern(uuid), sys.intern(pci_text), counter_set)
    return device, gpu, name


def _attributes(raw: JsonObject, name: str) -> dict[str, str | int | bool]:
    """Attribute key -> value (the driver's own attributes by their bare key, whether written
    bare or qualified with its domain); a value of no known type is unknown."""
    found: dict[str, str | int | bool] = {}
    for written, value in raw.items():
        key = written.removeprefix(DRA_DRIVER + "/")
        typed = mapping(value)
        if len(typed) != 1:
            raise _UnknownShapeError(f"{name} attribute {key} is not one typed value")
        ((kind, item),) = typed.items()
        if kind in ("string", "version") and isinstance(item, str):
            found[key] = item
        elif kind == "int" and isinstance(item, int) and not isinstance(item, bool):
            found[key] = item
        elif kind == "bool" and isinstance(item, bool):
            found[key] = item
        elif kind == "ints":  # a list attribute (DRAListTypeAttributes): not read
            continue
        else:
            raise _UnknownShapeError(f"{name} attribute {key} has a value of kind {kind!r}")
    return found


def _required(attributes: Mapping[str, str | int | bool], key: str, name: str) -> str:
    value = attributes.get(key)
    if not isinstance(value, str) or not value:
        raise _UnknownShapeError(f"{name} has no {key} attribute")
    return value


def _quantities(raw: JsonObject, where: str) -> dict[str, int]:
    """Name -> whole value of a capacity or counter map (``{"value": "9728Mi"}`` each)."""
    found: dict[str, int] = {}
    for key, entry in raw.items():
        value = mapping(entry).get("value")
        try:
            number = parse_quantity(value)
        except QuantityError:
            raise _UnknownShapeError(f"{where} {key}={value!r} is not a quantity") from None
        if number.denominator != 1 or number < 0:
            raise _UnknownShapeError(f"{where} {key}={value!r} is not a whole count")
        found[key] = int(number)
    return found


def _capacity_slices(capacity: Mapping[str, int], name: str) -> int | None:
    """The ``memorySlice<i>`` capacities (static MIG) as bits; None when there are none."""
    bits = 0
    for key, value in capacity.items():
        match = _MEMORY_SLICE_CAPACITY.fullmatch(key)
        if match is None:
            continue
        if value != 1:
            raise _UnknownShapeError(f"{name} capacity {key} is {value}, not 1")
        bits |= 1 << int(match[1])
    return bits or None


def _consumption(raw: JsonObject, name: str) -> tuple[str, Counters, int | None]:
    """(counter set, counters besides the memory slices, memory slices as bits) of a device's
    ``consumesCounters``; ("", (), None) when it consumes none."""
    listed = items(raw.get("consumesCounters"))
    if not listed:
        return "", (), None
    if len(listed) != 1:
        raise _UnknownShapeError(
            f"{name} consumes {len(listed)} counter sets; the driver writes one"
        )
    entry = mapping(listed[0])
    counter_set = text(entry.get("counterSet"))
    if not counter_set:
        raise _UnknownShapeError(f"{name} consumesCounters has no counterSet")
    counters, bits = _split_counters(_quantities(mapping(entry.get("counters")), name), name)
    return sys.intern(counter_set), counters, bits


def _counter_set(raw: object, where: str) -> tuple[str, Counters, int]:
    entry = mapping(raw)
    name = text(entry.get("name"))
    if not name:
        raise _UnknownShapeError(f"{where} has no name")
    counters, bits = _split_counters(
        _quantities(mapping(entry.get("counters")), f"counter set {name}"), f"counter set {name}"
    )
    return sys.intern(name), counters, bits


def _split_counters(values: Mapping[str, int], where: str) -> tuple[Counters, int]:
    bits = 0
    others: list[tuple[str, int]] = []
    for key, value in values.items():
        match = _MEMORY_SLICE_COUNTER.fullmatch(key)
        if match is None:
            others.append((sys.intern(key), value))
            continue
        if value != 1:
            raise _UnknownShapeError(f"{where} counter {key} is {value}, not 1")
        bits |= 1 << int(match[1])
    return _shared_counters(tuple(sorted(others))), bits


def _is_tainted(raw: JsonObject) -> bool:
    return any(
        mapping(taint).get("effect") in ("NoSchedule", "NoExecute")
        for taint in items(raw.get("taints"))
    )


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# One value per distinct device and counter tuple, shared by every GPU and node that publishes
# it: a bounded memo, as the catalog's fits are (equal inputs, equal immutable values).


@functools.lru_cache(maxsize=4096)
def _shared_devices(devices: tuple[SliceDevice, ...]) -> tuple[SliceDevice, ...]:
    return tuple(_shared_device(device) for device in devices)


@functools.lru_cache(maxsize=4096)
def _shared_device(device: SliceDevice) -> SliceDevice:
    return device


@functools.lru_cache(maxsize=1024)
def _shared_counters(counters: Counters) -> Counters:
    return counters
