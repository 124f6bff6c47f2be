"""ResourceSlices exactly as NVIDIA's DRA driver publishes them, for tests and a fake driver.

The formulas follow kubernetes-sigs/dra-driver-nvidia-gpu at
95932046683719c43b6a0dd9613c2e5aad5d6703 (``cmd/gpu-kubelet-plugin``) and the slice controller
of k8s.io/dynamic-resource-allocation v0.36.0, as ``tests/fixtures/dra/generator-main.go.txt``
re-derives them (each function names the driver source it mirrors):

* slice names ``<index, 5 hex digits>-gpu.nvidia.com-<node>-<5 characters>``, pool = node name,
  generation 1, ``resourceSliceCount`` = the slices of the pool;
* DynamicMIG, Kubernetes 1.35 and later (split): slice 0 holds every GPU's counter set
  ``gpu-<minor>-counter-set``, slice k the devices of the k-th GPU in PCI bus id order, sorted
  by name; before 1.35 (combined): one slice per GPU with its counter set and its devices;
* static MIG: one slice with the instances that exist, in the order given (the driver's Go map
  order), ``memorySlice<i>`` capacities and ``uuid`` attributes; MIG off: ``gpu-<minor>`` only;
* device names ``gpu-<minor>-mig-<profile without dots, + as ->-<GI profile id>-<start>`` and
  ``gpu-<minor>``; capacities as BinarySI quantities (``9728Mi``, ``79Gi``, ``14``).

Per-profile NVML values are those of the tables in ``tests/fixtures/dra/README.md``
(driver-dependent; not from the driver's code). :func:`node_slices` builds a node's slices;
:func:`slice_list` wraps them as ``GET /apis/resource.k8s.io/v1/resourceslices`` answers;
:func:`for_create` strips what kube-apiserver fills in, for a fake driver that creates them.
Test and harness code only: migslice reads slices, it never writes them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

DRIVER = "gpu.nvidia.com"  # cmd/gpu-kubelet-plugin/main.go:45
NVIDIA_DRIVER_VERSION = "580.126.20"  # illustrative NVML SystemGetDriverVersion
CUDA_DRIVER_VERSION = "13.0"  # "%v.%v" of SystemGetCudaDriverVersion (nvlib.go:624)
SUFFIXES = ("b7x2k", "q4zmt", "n8d5w", "r2vhc", "s9jpl", "t6fkx", "w3gzb", "x5mqd", "z7cnh")
"""The random name suffixes kube-apiserver would append (fixed, so fixtures compare)."""


@dataclass(frozen=True, slots=True)
class GiProfile:
    """One GPU instance profile as NVML reports it (nvmlGpuInstanceProfileInfo_t)."""

    name: str  # go-nvlib MigProfileInfo.String()
    id: int  # GpuInstanceProfileInfo.Id (nvidia-smi "ID")
    sm: int
    ce: int
    dec: int
    enc: int
    jpeg: int
    ofa: int
    memory_mib: int
    size: int  # memory slices of every placement
    starts: tuple[int, ...]


def _ones(size: int, *starts: int) -> tuple[int, tuple[int, ...]]:
    return size, starts


# A100-SXM4-80GB: nvidia-smi mig -lgip (ID, SM, memory), the MIG user guide (NVDEC, JPEG, OFA),
# nvidia-smi mig -lgipp (placements).
A100_80GB = (
    GiProfile("1g.10gb", 19, 14, 1, 0, 0, 0, 0, 9728, *_ones(1, 0, 1, 2, 3, 4, 5, 6)),
    GiProfile("1g.10gb+me", 20, 14, 1, 1, 0, 1, 1, 9728, *_ones(1, 0, 1, 2, 3, 4, 5, 6)),
    GiProfile("1g.20gb", 15, 14, 1, 1, 0, 0, 0, 19968, *_ones(2, 0, 2, 4, 6)),
    GiProfile("2g.20gb", 14, 28, 2, 1, 0, 0, 0, 19968, *_ones(2, 0, 2, 4)),
    GiProfile("3g.40gb", 9, 42, 3, 2, 0, 0, 0, 40192, *_ones(4, 0, 4)),
    GiProfile("4g.40gb", 5, 56, 4, 2, 0, 0, 0, 40192, *_ones(4, 0)),
    GiProfile("7g.80gb", 0, 98, 7, 5, 0, 1, 1, 80896, *_ones(8, 0)),
)
# H100 80GB HBM3: nvidia-smi mig -lgip / -lgipp.
H100_80GB = (
    GiProfile("1g.10gb", 19, 16, 1, 1, 0, 1, 0, 9984, *_ones(1, 0, 1, 2, 3, 4, 5, 6)),
    GiProfile("1g.10gb+me", 20, 16, 1, 1, 0, 1, 1, 9984, *_ones(1, 0, 1, 2, 3, 4, 5, 6)),
    GiProfile("1g.20gb", 15, 26, 1, 1, 0, 1, 0, 20096, *_ones(2, 0, 2, 4, 6)),
    GiProfile("2g.20gb", 14, 32, 2, 2, 0, 2, 0, 20096, *_ones(2, 0, 2, 4)),
    GiProfile("3g.40gb", 9, 60, 3, 3, 0, 3, 0, 40448, *_ones(4, 0, 4)),
    GiProfile("4g.40gb", 5, 64, 4, 4, 0, 4, 0, 40448, *_ones(4, 0)),
    GiProfile("7g.80gb", 0, 132, 8, 7, 0, 7, 1, 81152, *_ones(8, 0)),
)

DGX_A100_BUS_IDS = (
    "0000:07:00.0",
    "0000:0f:00.0",
    "0000:47:00.0",
    "0000:4e:00.0",
    "0000:87:00.0",
    "0000:90:00.0",
    "0000:b7:00.0",
    "0000:bd:00.0",
)
DGX_H100_BUS_IDS = (
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
)


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as NVML describes it to the driver."""

    minor: int
    uuid: str
    pci_bus_id: str
    product: str
    architecture: str
    compute_capability: str  # "8.0" before semver
    total_memory_mib: int  # NVML GetMemoryInfo().Total / MiB
    mig_enabled: bool
    hopper_or_later: bool
    profiles: tuple[GiProfile, ...]
    pcie_root: str = "pci0000:00"
    numa: int = 0


def a100(minor: int, bus: str | None = None, *, numa: int | None = None) -> Gpu:
    """An A100-SXM4-80GB with MIG mode on (bus id and NUMA node of a DGX A100 by default)."""
    return Gpu(
        minor,
        f"GPU-4a1f7c2e-9b3d-1e5f-a0c4-7d2e6f81{minor:04d}",
        bus or DGX_A100_BUS_IDS[minor],
        "NVIDIA A100-SXM4-80GB",
        "Ampere",
        "8.0",
        81920,
        True,
        False,
        A100_80GB,
        numa=minor // 4 if numa is None else numa,
    )


def h100(minor: int, bus: str | None = None, *, numa: int | None = None) -> Gpu:
    """An H100 80GB HBM3 with MIG mode on (bus id and NUMA node of a DGX H100 by default)."""
    return Gpu(
        minor,
        f"GPU-8c3e5b9a-2f71-4d06-b8e3-1a9c4f62{minor:04d}",
        bus or DGX_H100_BUS_IDS[minor],
        "NVIDIA H100 80GB HBM3",
        "Hopper",
        "9.0",
        81559,
        True,
        True,
        H100_80GB,
        numa=minor // 4 if numa is None else numa,
    )


def mig_off(gpu: Gpu) -> Gpu:
    return replace(gpu, mig_enabled=False)


# -- names and quantities -----------------------------------------------------------------------


def mig_device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """mig.go:111-114 ToCanonicalName with mig.go:249-262 toRFC1123Compliant."""
    name = re.sub(r"[^a-z0-9-.]", "-", profile.replace(".", "").lower()).strip("-")
    return f"gpu-{minor}-mig-{name}-{profile_id}-{start}"


def camel_to_dns(name: str) -> str:
    """mig.go:264-275 camelToDNSName (``copyEngines`` -> ``copy-engines``)."""
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", name)
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", name)
    return name.lower().strip("-")


_BINARY_SUFFIXES = (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10))


def quantity(value: int) -> str:
    """``resource.NewQuantity(value, BinarySI)`` as apimachinery serialises it."""
    for suffix, shift in _BINARY_SUFFIXES:
        unit = 1 << shift
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def _value(number: int) -> dict[str, str]:
    return {"value": quantity(number)}


def _sorted(mapping: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(mapping.items()))  # Go's encoding/json writes map keys sorted


# -- devices --------------------------------------------------------------------------------


def _capacities(profile: GiProfile) -> dict[str, int]:
    """mig.go:118-135 CommonCapacitiesMig."""
    return {
        "multiprocessors": profile.sm,
        "copyEngines": profile.ce,
        "decoders": profile.dec,
        "encoders": profile.enc,
        "jpegEngines": profile.jpeg,
        "ofaEngines": profile.ofa,
        "memory": profile.memory_mib * 1024 * 1024,
    }


def _semver(text: str) -> str:
    parts = text.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def _mig_attributes(gpu: Gpu, profile: str) -> dict[str, Any]:
    """mig.go:139-187 CommonAttributesMig (addressingMode absent: x86 without coherent memory;
    FabricManager attributes off by default)."""
    return {
        "type": {"string": "mig"},
        "parentUUID": {"string": gpu.uuid},
        "profile": {"string": profile},
        "productName": {"string": gpu.product},
        "brand": {"string": "Nvidia"},
        "architecture": {"string": gpu.architecture},
        "cudaComputeCapability": {"version": _semver(gpu.compute_capability)},
        "driverVersion": {"version": _semver(NVIDIA_DRIVER_VERSION)},
        "cudaDriverVersion": {"version": _semver(CUDA_DRIVER_VERSION)},
        "resource.kubernetes.io/pciBusID": {"string": gpu.pci_bus_id},
        "resource.kubernetes.io/pcieRoot": {"string": gpu.pcie_root},
        "resource.kubernetes.io/numaNode": {"int": gpu.numa},
    }


def _gpu_attributes(gpu: Gpu) -> dict[str, Any]:
    """deviceinfo.go:170-218 GpuInfo.Attributes."""
    attributes = _mig_attributes(gpu, "")
    del attributes["parentUUID"], attributes["profile"]
    attributes["type"] = {"string": "gpu"}
    attributes["uuid"] = {"string": gpu.uuid}
    return attributes


def _counters(capacities: dict[str, int], start: int, size: int) -> dict[str, Any]:
    """partitions.go:179-186 capacitiesToCounters and :239-253 the memory slices."""
    counters = {camel_to_dns(name): _value(value) for name, value in capacities.items()}
    for index in range(start, start + size):
        counters[f"memory-slice-{index}"] = _value(1)
    return _sorted(counters)


def _max_capacities(gpu: Gpu) -> tuple[dict[str, int], int]:
    """nvlib.go:1247-1322: the per-dimension maximum over every profile, the largest size."""
    maxima: dict[str, int] = {}
    slices = 0
    for profile in gpu.profiles:
        slices = max(slices, profile.size)
        for name, value in _capacities(profile).items():
            maxima[name] = max(maxima.get(name, value), value)
    return maxima, slices


def counter_set_name(gpu: Gpu) -> str:
    return f"gpu-{gpu.minor}-counter-set"


def _device(
    name: str,
    attributes: dict[str, Any],
    capacity: dict[str, int],
    consumes: tuple[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    device: dict[str, Any] = {
        "name": name,
        "attributes": _sorted(attributes),
        "capacity": _sorted({key: _value(value) for key, value in capacity.items()}),
    }
    if consumes is not None:
        device["consumesCounters"] = [{"counterSet": consumes[0], "counters": consumes[1]}]
    return device


def dynamic_devices(gpu: Gpu) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """DynamicMIG (nvlib.go:240-297, partitions.go): every profile at every placement, the full
    GPU too unless MIG is on on a GPU that cannot toggle it (an A100), sorted by name; and the
    GPU's counter set."""
    maxima, slices = _max_capacities(gpu)
    devices: dict[str, dict[str, Any]] = {}
    if not gpu.mig_enabled or gpu.hopper_or_later:  # nvlib.go:280
        name = f"gpu-{gpu.minor}"
        consumes = (counter_set_name(gpu), _counters(maxima, 0, slices))
        devices[name] = _device(name, _gpu_attributes(gpu), maxima, consumes)  # partitions.go:53
    for profile in gpu.profiles:
        capacity = _capacities(profile)
        for start in profile.starts:
            name = mig_device_name(gpu.minor, profile.name, profile.id, start)
            consumes = (counter_set_name(gpu), _counters(capacity, start, profile.size))
            devices[name] = _device(name, _mig_attributes(gpu, profile.name), capacity, consumes)
    counter_set = {"name": counter_set_name(gpu), "counters": _counters(maxima, 0, slices)}
    return [devices[name] for name in sorted(devices)], counter_set  # driver.go:212


def static_devices(gpu: Gpu, layout: Sequence[tuple[str, int]], first_uuid: int = 0) -> list:
    """Static MIG (deviceinfo.go:258-281 MigDeviceInfo.GetDevice): the instances of ``layout``
    ((profile, start), in the order given) with ``memorySlice<i>`` capacities and MIG UUIDs;
    MIG off: the full GPU with its board memory (nvlib.go:311-322). ``first_uuid`` numbers the
    UUIDs of a node's later GPUs on."""
    if not gpu.mig_enabled:
        memory = {"memory": gpu.total_memory_mib * 1024 * 1024}
        return [_device(f"gpu-{gpu.minor}", _gpu_attributes(gpu), memory)]
    by_name = {profile.name: profile for profile in gpu.profiles}
    devices = []
    for offset, (name, start) in enumerate(layout):
        profile = by_name[name]
        i = first_uuid + offset
        attributes = _mig_attributes(gpu, name)
        uuid = (
            f"MIG-{0x5B696AC1 + i * 0x1111:08x}-{0xC323 + i:04x}-5{0x89 + i:03x}"
            f"-8{0x82 + i:03x}-{0x6E980BF4 + i:012x}"
        )
        attributes["uuid"] = {"string": uuid}
        capacity = _capacities(profile)
        for index in range(start, start + profile.size):
            capacity[f"memorySlice{index}"] = 1
        devices.append(
            _device(mig_device_name(gpu.minor, name, profile.id, start), attributes, capacity)
        )
    return devices


# -- slices ---------------------------------------------------------------------------------


def _slice(
    node: str,
    node_uid: str,
    index: int,
    count: int,
    devices: list[dict[str, Any]] | None,
    counter_sets: list[dict[str, Any]] | None,
) -> dict[str, Any]:
    """resourceslicecontroller.go:864-885 (dynamic-resource-allocation v0.36.0)."""
    generate = f"{index:05x}-{DRIVER}-{node}-"
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": count},
        "nodeName": node,
    }
    if devices is not None:
        spec["devices"] = devices
    if counter_sets is not None:
        spec["sharedCounters"] = counter_sets
    return {
        "kind": "ResourceSlice",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {
            "name": generate + SUFFIXES[index],
            "generateName": generate,
            "uid": f"3f0c8d2e-1b7a-4c55-9e21-{index + 1:012d}",
            "resourceVersion": str(48210 + index),
            "generation": 1,
            "creationTimestamp": "2026-08-10T09:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": node,
                    "uid": node_uid,
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def node_slices(
    node: str,
    node_uid: str,
    gpus: Sequence[Gpu],
    *,
    dynamic: bool = True,
    split: bool = True,
    layouts: Sequence[Sequence[tuple[str, int]]] = (),
) -> list[dict[str, Any]]:
    """A node's ResourceSlices: DynamicMIG split (Kubernetes >= 1.35, driver.go:197-252) or
    combined (earlier, driver.go:254-307), or static (``dynamic=False``: one slice, the GPUs'
    ``layouts`` one after the other, driver.go:462-501)."""
    ordered = sorted(gpus, key=lambda gpu: gpu.pci_bus_id)
    if not dynamic:
        devices: list[dict[str, Any]] = []
        for position, gpu in enumerate(gpus):
            layout = layouts[position] if position < len(layouts) else ()
            devices += static_devices(gpu, layout, first_uuid=len(devices))
        return [_slice(node, node_uid, 0, 1, devices, None)]
    parts = [dynamic_devices(gpu) for gpu in ordered]
    if not split:
        count = len(parts)
        return [
            _slice(node, node_uid, i, count, devices, [counters])
            for i, (devices, counters) in enumerate(parts)
        ]
    count = len(parts) + 1
    head = _slice(node, node_uid, 0, count, None, [counters for _, counters in parts])
    return [head] + [
        _slice(node, node_uid, i + 1, count, devices, None) for i, (devices, _) in enumerate(parts)
    ]


def slice_list(items: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The items as ``GET /apis/resource.k8s.io/v1/resourceslices`` answers them."""
    return {
        "kind": "ResourceSliceList",
        "apiVersion": "resource.k8s.io/v1",
        "metadata": {"resourceVersion": "48300"},
        "items": list(items),
    }


def for_create(raw_slice: dict[str, Any]) -> dict[str, Any]:
    """The slice as a driver would POST it: no name (``generateName`` only), no uid,
    resourceVersion, generation or creationTimestamp."""
    metadata = {
        key: value
        for key, value in raw_slice["metadata"].items()
        if key in ("generateName", "ownerReferences", "labels", "annotations")
    }
    return {**raw_slice, "metadata": metadata}
