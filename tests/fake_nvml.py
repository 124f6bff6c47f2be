# ruff: noqa: N802  (method names are the C symbols of libnvidia-ml)
"""A fake ``libnvidia-ml.so.1`` for tests: the C functions pynvml calls, in Python.

The GPU driver is a boundary we cannot have here, so the fake sits exactly there: pynvml's own
Python wrappers run unchanged and call these functions with the same ctypes arguments they
pass to the real library (``byref`` pointers, caller-allocated arrays, string buffers), and
get NVML return codes back. GPUs are described with data from the migslice catalog plus the
GPU's instances; nothing of migslice's agent code is replaced.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pynvml

from migslice.mig import CATALOG, GpuModel

SUCCESS = pynvml.NVML_SUCCESS
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE

# NVML profile index constant for each kind of profile (mig-hardware.md §5.2).
_INDEX_BY_SHAPE = {
    # (compute, memory slices on 8-slice GPUs, attribute) -> NVML_GPU_INSTANCE_PROFILE_*
    (1, 1, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
    (1, 1, "+me"): pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
    (1, 2, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
    (2, 2, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
    (2, 2, "+me"): pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1,
    (3, 4, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
    (4, 4, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE,
    (7, 8, ""): pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
}


@dataclass
class FakeInstance:
    profile: str
    start: int
    processes: int = 0
    with_compute_instance: bool = True


@dataclass
class FakeGpu:
    """One GPU: its NVML name, model (for profiles), MIG mode and GPU instances."""

    nvml_name: str
    model_key: str
    mig_enabled: bool = True
    mig_pending_enabled: bool | None = None
    mig_capable: bool = True
    instances: list[FakeInstance] = field(default_factory=list)
    pci_device_id: int | None = None

    @property
    def model(self) -> GpuModel:
        return CATALOG.get(self.model_key)


def _obj(reference: Any) -> Any:
    """The object behind a ``byref(...)`` argument."""
    return reference._obj


class FakeNvmlLibrary:
    """Attributes named like NVML's C symbols; state kept per GPU."""

    def __init__(self, gpus: Sequence[FakeGpu], driver: str = "570.133.20") -> None:
        self.gpus = list(gpus)
        self.driver = driver
        self.initialised = 0
        self.calls: list[str] = []
        self._handles: dict[int, tuple[str, int, int]] = {}  # address -> (kind, gpu, slot)
        self._keep: list[Any] = []

    # -- handles --------------------------------------------------------------------------

    def _handle(self, kind: str, gpu: int, slot: int = -1) -> Any:
        """An opaque handle of pynvml's own struct type, told apart by its address."""
        struct = pynvml.struct_c_nvmlGpuInstance_t if kind == "gi" else pynvml.struct_c_nvmlDevice_t
        backing = ctypes.create_string_buffer(8)
        handle = struct.from_buffer(backing)
        self._keep.append((backing, handle))
        self._handles[ctypes.addressof(handle)] = (kind, gpu, slot)
        return handle

    def _lookup(self, pointer: Any) -> tuple[str, int, int]:
        return self._handles[ctypes.addressof(pointer.contents)]

    def _profile_index(self, gpu: FakeGpu) -> dict[int, Any]:
        """NVML profile index -> catalog Profile, for this GPU's model."""
        table = {}
        for profile in gpu.model.profiles:
            memory = profile.memory_slices * (8 // gpu.model.memory_slices)
            key = (profile.compute_slices, memory, profile.parsed.attribute)
            if key in _INDEX_BY_SHAPE:
                table[_INDEX_BY_SHAPE[key]] = profile
        return table

    # -- library ----------------------------------------------------------------------------

    def nvmlInitWithFlags(self, flags: Any) -> int:
        self.initialised += 1
        return SUCCESS

    def nvmlInit_v2(self) -> int:
        self.initialised += 1
        return SUCCESS

    def nvmlShutdown(self) -> int:
        self.initialised -= 1
        return SUCCESS

    def nvmlSystemGetDriverVersion(self, buffer: Any, size: Any) -> int:
        buffer.value = self.driver.encode()
        return SUCCESS

    def nvmlDeviceGetCount_v2(self, count: Any) -> int:
        _obj(count).value = len(self.gpus)
        return SUCCESS

    def nvmlDeviceGetHandleByIndex_v2(self, index: Any, device: Any) -> int:
        if not 0 <= index.value < len(self.gpus):
            return INVALID_ARGUMENT
        _obj(device).contents = self._handle("gpu", index.value)
        return SUCCESS

    # -- device ---------------------------------------------------------------------------

    def _gpu(self, device: Any) -> tuple[FakeGpu, str, int, int]:
        kind, index, slot = self._lookup(device)
        return self.gpus[index], kind, index, slot

    def nvmlDeviceGetName(self, device: Any, buffer: Any, size: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        buffer.value = gpu.nvml_name.encode()
        return SUCCESS

    def nvmlDeviceGetUUID(self, device: Any, buffer: Any, size: Any) -> int:
        _, kind, index, slot = self._gpu(device)
        if kind == "gpu":
            buffer.value = f"GPU-00000000-0000-0000-0000-{index:012d}".encode()
        else:
            buffer.value = f"MIG-00000000-0000-0000-{index:04d}-{slot:012d}".encode()
        return SUCCESS

    def nvmlDeviceGetPciInfo_v3(self, device: Any, info: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        device_id = gpu.pci_device_id or gpu.model.pci_device_ids[0]
        _obj(info).pciDeviceId = (device_id << 16) | 0x10DE
        return SUCCESS

    def nvmlDeviceGetMemoryInfo(self, device: Any, memory: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        _obj(memory).total = (gpu.model.memory_mib or 81920) * 1024 * 1024
        return SUCCESS

    def nvmlDeviceGetMigMode(self, device: Any, current: Any, pending: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        if not gpu.mig_capable:
            return NOT_SUPPORTED
        _obj(current).value = int(gpu.mig_enabled)
        wanted = gpu.mig_enabled if gpu.mig_pending_enabled is None else gpu.mig_pending_enabled
        _obj(pending).value = int(wanted)
        return SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfoV(self, device: Any, index: int, info: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        if not gpu.mig_capable:
            return NOT_SUPPORTED
        if not 0 <= index < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            return INVALID_ARGUMENT
        profile = self._profile_index(gpu).get(index)
        if profile is None:
            return NOT_SUPPORTED
        target = _obj(info)
        target.id = profile.gi_profile_id
        target.sliceCount = profile.compute_slices
        target.instanceCount = profile.max_count
        target.multiprocessorCount = profile.sm_count or 0
        target.memorySizeMB = profile.memory_mib or profile.nominal_memory_mib
        target.name = f"MIG {profile.name}".encode()
        return SUCCESS

    def _profile_by_id(self, gpu: FakeGpu, profile_id: int) -> Any:
        for profile in gpu.model.profiles:
            if profile.gi_profile_id == profile_id:
                return profile
        return None

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, device: Any, profile_id: int, placements: Any, count: Any
    ) -> int:
        gpu, _, _, _ = self._gpu(device)
        profile = self._profile_by_id(gpu, profile_id)
        if profile is None:
            return INVALID_ARGUMENT
        if placements is None:
            _obj(count).value = len(profile.placements)
            return SUCCESS
        if _obj(count).value < len(profile.placements):
            return INSUFFICIENT_SIZE
        for i, start in enumerate(profile.placements):
            placements[i].start = start
            placements[i].size = profile.memory_slices
        _obj(count).value = len(profile.placements)
        return SUCCESS

    def nvmlDeviceGetGpuInstances(
        self, device: Any, profile_id: int, instances: Any, count: Any
    ) -> int:
        gpu, _, index, _ = self._gpu(device)
        if not gpu.mig_enabled:
            return NOT_SUPPORTED
        profile = self._profile_by_id(gpu, profile_id)
        if profile is None:
            return INVALID_ARGUMENT
        found = [i for i, inst in enumerate(gpu.instances) if inst.profile == profile.name]
        for position, slot in enumerate(found):
            instances[position] = ctypes.pointer(self._handle("gi", index, slot))
        _obj(count).value = len(found)
        return SUCCESS

    def nvmlGpuInstanceGetInfo(self, instance: Any, info: Any) -> int:
        _, index, slot = self._lookup(instance)
        gpu = self.gpus[index]
        placed = gpu.instances[slot]
        profile = gpu.model.profile(placed.profile)
        target = _obj(info)
        target.id = slot + 1
        target.profileId = profile.gi_profile_id
        target.placement.start = placed.start
        target.placement.size = profile.memory_slices
        return SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any, count: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        _obj(count).value = gpu.model.compute_slices if gpu.mig_enabled else 0
        return SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: Any, mig: Any) -> int:
        gpu, _, gpu_index, _ = self._gpu(device)
        with_ci = [i for i, inst in enumerate(gpu.instances) if inst.with_compute_instance]
        if index.value >= len(with_ci):
            return NOT_FOUND
        _obj(mig).contents = self._handle("mig", gpu_index, with_ci[index.value])
        return SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, mig: Any, gi_id: Any) -> int:
        kind, _, slot = self._lookup(mig)
        if kind != "mig":
            return INVALID_ARGUMENT
        _obj(gi_id).value = slot + 1
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v3(self, device: Any, count: Any, infos: Any) -> int:
        gpu, kind, _, slot = self._gpu(device)
        running = gpu.instances[slot].processes if kind == "mig" else 0
        if infos is None:
            _obj(count).value = running
            return SUCCESS if running == 0 else INSUFFICIENT_SIZE
        for i in range(running):
            infos[i].pid = 1000 + i
            infos[i].usedGpuMemory = 1 << 30
        _obj(count).value = running
        return SUCCESS


@contextmanager
def installed(library: FakeNvmlLibrary | None) -> Iterator[FakeNvmlLibrary | None]:
    """Put ``library`` where pynvml keeps the loaded ``libnvidia-ml.so.1``; None = no driver."""
    saved = pynvml.nvmlLib
    pynvml._nvmlGetFunctionPointer_cache.clear()
    pynvml.nvmlLib = library
    try:
        yield library
    finally:
        pynvml._nvmlGetFunctionPointer_cache.clear()
        pynvml.nvmlLib = saved
