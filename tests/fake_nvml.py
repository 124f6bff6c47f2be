# ruff: noqa: N802  (method names are the C symbols of libnvidia-ml)
"""A fake ``libnvidia-ml.so.1`` for tests: the C functions pynvml calls, in Python.

The GPU driver is a boundary we cannot have here, so the fake sits exactly there: pynvml's own
Python wrappers run unchanged and call these functions with the same ctypes arguments they
pass to the real library (``byref`` pointers, caller-allocated arrays, string buffers), and
get NVML return codes back. GPUs are described with data from the migslice catalog plus the
GPU's instances; nothing of migslice's agent code is replaced.

The write half (GPU and compute instances created at a placement and destroyed, with the
driver's rules and return codes) is in :mod:`tests.fake_nvml_carve`. Every C function call
passes through :attr:`FakeNvmlLibrary.on_call` first (a test's hook: a container starting,
the agent killed between two calls).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pynvml

from migslice.mig import CATALOG, GpuModel, Profile
from tests.fake_nvml_carve import MigWrites

SUCCESS = pynvml.NVML_SUCCESS
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
INSUFFICIENT_SIZE = pynvml.NVML_ERROR_INSUFFICIENT_SIZE

Shape = tuple[int, int, str]
"""A GPU-instance profile's (compute slices, memory slices in the model's own units, name
attribute), matched against the model's catalog profiles."""

# NVML's GPU-instance profile table: the profile index (NVML_GPU_INSTANCE_PROFILE_*, what
# nvmlDeviceGetGpuInstanceProfileInfoV takes) -> the profile the driver answers there, per GPU
# model. The index names a kind of profile, not a fraction of an A100: ``1_SLICE`` is the GPU's
# smallest 1g, whatever memory that is (an A30's 1g.6gb is a quarter of it); ``_REV1`` is its
# "+me" twin ("with at least one of Decoder, Encoder, JPEG, OFA engines"), ``_REV2`` the 1g
# "with twice the amount of memory resources", ``_GFX`` "+gfx", ``_NO_ME`` "-me", ``_ALL_ME``
# "+me.all" (the constants' comments in nvml.h, NVIDIA/go-nvml v0.13.x ``gen/nvml/nvml.h``; the
# same index -> slices and attribute mapping in NVIDIA/go-nvlib ``pkg/nvlib/device/
# mig_profile.go``, ``NewMigProfile``). The answer's ``id`` is the GI profile id (19 for an
# A100's 1g, 14 for an A30's), not the index.

# A100, H100, H200, GH200, B200, GB200, B300, GB300 (7 compute / 8 memory slices): NVIDIA/go-nvml
# ``pkg/nvml/mock/gpus/a100.go``, ``h100.go``, ``h200.go``, ``b200.go`` answer exactly these
# seven indices.
_EIGHT_SLICE: dict[int, Shape] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, 1, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (1, 1, "+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: (1, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: (3, 4, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (4, 4, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: (7, 8, ""),
}

# A30 24GB (4/4 slices): NVIDIA/go-nvml ``pkg/nvml/mock/gpus/a30.go`` answers 1_SLICE,
# 1_SLICE_REV1, 2_SLICE, 2_SLICE_REV1 and 4_SLICE; NVIDIA/mig-parted ``pkg/mig/discovery/
# discovery.go`` (``getHardcodedA30Profiles``) lists the same five, 1g.6gb, 1g.6gb+me, 2g.12gb,
# 2g.12gb+me, 4g.24gb (GI profile ids 14, 21, 5, 6, 0 from the catalog's A30 ``-lgip``).
_A30: dict[int, Shape] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, 1, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (1, 1, "+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1: (2, 2, "+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (4, 4, ""),
}

# RTX PRO 6000 Blackwell (4/4 slices): the MIG User Guide's profiles (1g.24gb with +me, +gfx,
# +me.all, -me; 2g.48gb with +gfx, +me.all, -me; 4g.96gb with +gfx), each at the index whose
# attribute it carries (nvml.h; go-nvlib ``NewMigProfile``). No 2g+me: 2_SLICE_REV1 is absent.
_RTX_PRO_6000: dict[int, Shape] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, 1, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (1, 1, "+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: (1, 1, "+gfx"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: (1, 1, "-me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: (1, 1, "+me.all"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: (2, 2, "+gfx"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME: (2, 2, "-me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: (2, 2, "+me.all"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: (4, 4, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX: (4, 4, "+gfx"),
}

# RTX PRO 5000 Blackwell (2/2 slices): the MIG User Guide's RTX PRO 5000 table (1g.24gb with
# +me, +gfx, +me.all, -me; 2g.48gb with +gfx), at the indices of their attributes.
_RTX_PRO_5000: dict[int, Shape] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, 1, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: (1, 1, "+me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: (1, 1, "+gfx"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: (1, 1, "-me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: (1, 1, "+me.all"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: (2, 2, "+gfx"),
}

# RTX PRO 4500 Blackwell (2/2 slices): the MIG User Guide's RTX PRO 4500 table (1g.16gb with
# +gfx, +me.all, -me; 2g.32gb with +gfx). It lists no 1g+me: 1_SLICE_REV1 is absent.
_RTX_PRO_4500: dict[int, Shape] = {
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: (1, 1, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX: (1, 1, "+gfx"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME: (1, 1, "-me"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: (1, 1, "+me.all"),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: (2, 2, ""),
    pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX: (2, 2, "+gfx"),
}

PROFILE_INDEX_TABLES: dict[str, dict[int, Shape]] = {
    **dict.fromkeys(
        (
            "A100-40GB",
            "A100-80GB",
            "H100-80GB",
            "H100-PCIe",
            "H100-94GB",
            "H100-96GB",
            "GH200-144GB",
            "H200-141GB",
            "B200",
            "GB200",
            "B300",
            "GB300",
        ),
        _EIGHT_SLICE,
    ),
    "A30-24GB": _A30,
    "RTX-PRO-6000": _RTX_PRO_6000,
    "RTX-PRO-5000": _RTX_PRO_5000,
    "RTX-PRO-4500": _RTX_PRO_4500,
}
"""Catalog model key -> its NVML profile-index table (a model missing here is an error)."""

DRIVER_PROFILE_COUNT = 0x12
"""The driver's own ``NVML_GPU_INSTANCE_PROFILE_COUNT`` (nvml.h of NVML 13.3.29, NVIDIA/go-nvml
``gen/nvml/nvml.h``), past which it answers INVALID_ARGUMENT: the library's, not pynvml's
(nvidia-ml-py 12.535 has NVML 12.2's 0xA, and knows no 1_SLICE_GFX and later)."""

BEFORE_R510 = frozenset(
    {
        "nvmlDeviceGetGpuInstanceProfileInfoV",
        "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
        "nvmlDeviceGetComputeRunningProcesses_v3",
    }
)
"""The C symbols NVML 11.6 (R510) added that the agent's pynvml calls reach: an R470
``libnvidia-ml`` lacks all three (go-nvml ``gen/nvml/nvml.h`` at NVML 11.4.120 declares none,
11.6.55 all), for :attr:`FakeNvmlLibrary.missing`."""

STAND_IN_ID_BASE = 1000
"""NVIDIA publishes no GI profile ids for the RTX PRO 5000 and 4500 (the catalog has None; see
docs/catalog.md): the fake answers ``STAND_IN_ID_BASE + profile index`` for them, an id no
real profile has, so nothing can pass by matching a guessed id."""


@dataclass
class FakeInstance:
    """A GPU instance; ``with_compute_instance``: its full compute instance exists (then it
    is a MIG device with a UUID). ``gi_id``/``serial`` are given by the library; ``holder``
    is the pod the device plugin gave it to (ground truth for tests, unseen by NVML)."""

    profile: str
    start: int
    processes: int = 0
    with_compute_instance: bool = True
    gi_id: int = 0
    serial: int = 0
    holder: str = ""


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


@cache
def nvml_profile_table(model: GpuModel) -> dict[int, tuple[int, Profile]]:
    """NVML profile index -> (GI profile id NVML answers, catalog Profile) for ``model``."""
    try:
        shapes = PROFILE_INDEX_TABLES[model.key]
    except KeyError:
        raise KeyError(f"the fake NVML has no profile-index table for {model.key}") from None
    table: dict[int, tuple[int, Profile]] = {}
    for index, shape in shapes.items():
        found = [
            p
            for p in model.profiles
            if (p.compute_slices, p.memory_slices, p.parsed.attribute) == shape
        ]
        if len(found) != 1:
            raise ValueError(f"{model.key}: profile index {index} matches {found} in the catalog")
        (profile,) = found
        gi_id = profile.gi_profile_id
        table[index] = (STAND_IN_ID_BASE + index if gi_id is None else gi_id, profile)
    missing = set(model.profile_names) - {p.name for _, p in table.values()}
    if missing:
        raise ValueError(f"{model.key}: no NVML profile index for {sorted(missing)}")
    return table


def _obj(reference: Any) -> Any:
    """The object behind a ``byref(...)`` argument."""
    return reference._obj


class FakeNvmlLibrary(MigWrites):
    """Attributes named like NVML's C symbols; state kept per GPU."""

    def __init__(self, gpus: Sequence[FakeGpu], driver: str = "570.133.20") -> None:
        self.gpus = list(gpus)
        self.driver = driver
        self.initialised = 0
        self.on_call: Callable[[str], None] | None = None
        self.missing: set[str] = set()
        """C symbols this libnvidia-ml lacks (an older driver's: R470 has no
        ``nvmlDeviceGetComputeRunningProcesses_v3``); pynvml then raises
        ``NVMLError_FunctionNotFound`` (``_nvmlGetFunctionPointer``)."""
        self.errors: dict[tuple[str, int], int] = {}
        """(C symbol, GPU index) -> the NVML return code the driver answers there instead
        (``NVML_ERROR_GPU_IS_LOST`` for a GPU fallen off the bus, ``NVML_ERROR_NO_PERMISSION``
        for a device the container may not open, ``NVML_ERROR_NOT_SUPPORTED`` for a process
        query on a MIG device in vGPU host mode): every call on that GPU's handles, or on
        its MIG devices and GPU instances, answers it without touching the GPU's state."""
        self.destroyed: list[FakeInstance] = []
        self._serials = 0
        self._handles: dict[int, tuple[str, int, int]] = {}  # address -> (kind, gpu, GI id)
        self._keep: list[Any] = []
        for gpu in self.gpus:
            for instance in gpu.instances:
                self.adopt(gpu, instance)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        attribute = object.__getattribute__(self, name)
        if not (name.startswith("nvml") and callable(attribute)):
            return attribute

        def called(*args: Any) -> Any:  # pynvml caches this; the hook is looked up per call
            hook = object.__getattribute__(self, "on_call")
            if hook is not None:
                hook(name)
            errors = object.__getattribute__(self, "errors")
            if errors:
                gpu = object.__getattribute__(self, "_gpu_of")(name, args)
                if (name, gpu) in errors:
                    return errors[(name, gpu)]
            return attribute(*args)

        return called

    def _gpu_of(self, name: str, args: tuple[Any, ...]) -> int:
        """The GPU index a C call is about (-1: none), for :attr:`errors`."""
        if name == "nvmlDeviceGetHandleByIndex_v2":
            return int(args[0].value)
        try:  # a device, GPU-instance or MIG-device handle: a pointer the fake handed out
            address = ctypes.addressof(args[0].contents)
        except (IndexError, AttributeError, ValueError, TypeError):
            return -1
        known = self._handles.get(address)
        return -1 if known is None else known[1]

    def adopt(self, gpu: FakeGpu, instance: FakeInstance) -> FakeInstance:
        """Give an instance its GPU-instance id and MIG device serial (as the driver does)."""
        if not instance.gi_id:
            used = {i.gi_id for i in gpu.instances}
            instance.gi_id = next(n for n in range(1, 64) if n not in used)
        if not instance.serial:
            self._serials += 1
            instance.serial = self._serials
        return instance

    def instance(self, gpu: int, gi_id: int) -> FakeInstance | None:
        return next((i for i in self.gpus[gpu].instances if i.gi_id == gi_id), None)

    # -- handles --------------------------------------------------------------------------

    def _handle(self, kind: str, gpu: int, gi_id: int = -1) -> Any:
        """An opaque handle of pynvml's own struct type, told apart by its address."""
        struct = {
            "gi": pynvml.struct_c_nvmlGpuInstance_t,
            "ci": pynvml.struct_c_nvmlComputeInstance_t,
        }.get(kind, pynvml.struct_c_nvmlDevice_t)
        backing = ctypes.create_string_buffer(8)
        handle = struct.from_buffer(backing)
        self._keep.append((backing, handle))
        self._handles[ctypes.addressof(handle)] = (kind, gpu, gi_id)
        return handle

    def _lookup(self, pointer: Any) -> tuple[str, int, int]:
        return self._handles[ctypes.addressof(pointer.contents)]

    def nvml_profiles(self, gpu: FakeGpu) -> dict[int, tuple[int, Profile]]:
        """NVML profile index -> (GI profile id, catalog Profile) for this GPU's model: its
        :data:`PROFILE_INDEX_TABLES` entry, each index matched to the one catalog profile of
        that shape (a table and a catalog that disagree fail loudly)."""
        return nvml_profile_table(gpu.model)

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
        _, kind, index, gi_id = self._gpu(device)
        if kind == "gpu":
            buffer.value = f"GPU-00000000-0000-0000-0000-{index:012d}".encode()
            return SUCCESS
        instance = self.instance(index, gi_id)
        if instance is None or not instance.with_compute_instance:
            return INVALID_ARGUMENT
        buffer.value = self.mig_uuid(index, instance).encode()
        return SUCCESS

    @staticmethod
    def mig_uuid(gpu: int, instance: FakeInstance) -> str:
        """The MIG device UUID of an instance (new for every compute instance made)."""
        return f"MIG-00000000-0000-{gpu:04d}-{instance.gi_id:04d}-{instance.serial:012d}"

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
        if _obj(info).version != pynvml.nvmlGpuInstanceProfileInfo_v2:
            return INVALID_ARGUMENT  # nvml.h: "If ... info->version are invalid"
        return self._profile_info(device, index, _obj(info), named=True)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, device: Any, index: int, info: Any) -> int:
        """The unversioned query, all an R470 library has (:data:`BEFORE_R510`): the same
        answer in ``nvmlGpuInstanceProfileInfo_t``, which has no version and no name."""
        return self._profile_info(device, index, _obj(info), named=False)

    def _profile_info(self, device: Any, index: int, target: Any, *, named: bool) -> int:
        # nvml.h: NVML_ERROR_NOT_SUPPORTED "If device doesn't have MIG mode enabled or profile
        # isn't supported"; INVALID_ARGUMENT past the last profile index (how callers find the
        # end of the table).
        gpu, _, _, _ = self._gpu(device)
        if not gpu.mig_capable or not gpu.mig_enabled:
            return NOT_SUPPORTED
        if not 0 <= index < DRIVER_PROFILE_COUNT:
            return INVALID_ARGUMENT
        entry = self.nvml_profiles(gpu).get(index)
        if entry is None:
            return NOT_SUPPORTED
        gi_id, profile = entry
        target.id = gi_id
        target.sliceCount = profile.compute_slices
        target.instanceCount = profile.max_count
        target.multiprocessorCount = profile.sm_count or 0
        target.memorySizeMB = profile.memory_mib or profile.nominal_memory_mib
        if named:
            target.name = f"MIG {profile.name}".encode()
        return SUCCESS

    def _profile_by_id(self, gpu: FakeGpu, profile_id: int) -> Profile | None:
        for gi_id, profile in self.nvml_profiles(gpu).values():
            if gi_id == profile_id:
                return profile
        return None

    def nvml_profile_id(self, gpu: FakeGpu, name: str) -> int:
        """The GI profile id NVML answers for the profile called ``name`` on ``gpu``."""
        return next(i for i, p in self.nvml_profiles(gpu).values() if p.name == name)

    def nvmlDeviceGetGpuInstancePossiblePlacements_v2(
        self, device: Any, profile_id: int, placements: Any, count: Any
    ) -> int:
        # nvml.h: "returns all the possible placements for the given profile regardless of
        # whether MIG is enabled or not"; NOT_SUPPORTED "If device doesn't support MIG".
        gpu, _, _, _ = self._gpu(device)
        if not gpu.mig_capable:
            return NOT_SUPPORTED
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
        if not (gpu.mig_capable and gpu.mig_enabled):
            return NOT_SUPPORTED
        profile = self._profile_by_id(gpu, profile_id)
        if profile is None:
            return INVALID_ARGUMENT
        found = [inst.gi_id for inst in gpu.instances if inst.profile == profile.name]
        for position, gi_id in enumerate(found):
            instances[position] = ctypes.pointer(self._handle("gi", index, gi_id))
        _obj(count).value = len(found)
        return SUCCESS

    def nvmlGpuInstanceGetInfo(self, instance: Any, info: Any) -> int:
        _, index, gi_id = self._lookup(instance)
        gpu = self.gpus[index]
        placed = self.instance(index, gi_id)
        if placed is None:
            return INVALID_ARGUMENT
        profile = gpu.model.profile(placed.profile)
        target = _obj(info)
        target.id = gi_id
        target.profileId = self.nvml_profile_id(gpu, profile.name)
        target.placement.start = placed.start
        target.placement.size = profile.memory_slices
        return SUCCESS

    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any, count: Any) -> int:
        gpu, _, _, _ = self._gpu(device)
        # nvml.h: "Returns zero if MIG is not supported or enabled."
        enabled = gpu.mig_capable and gpu.mig_enabled
        _obj(count).value = gpu.model.compute_slices if enabled else 0
        return SUCCESS

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: Any, mig: Any) -> int:
        # nvml.h (NVML 13.3.29): NOT_SUPPORTED "if this query is not supported by the device"
        # (a GPU without MIG on, or a MIG device handle), NOT_FOUND "if no valid MIG device
        # was found at index".
        gpu, kind, gpu_index, _ = self._gpu(device)
        if kind != "gpu" or not (gpu.mig_capable and gpu.mig_enabled):
            return NOT_SUPPORTED
        with_ci = sorted(i.gi_id for i in gpu.instances if i.with_compute_instance)
        if index.value >= len(with_ci):
            return NOT_FOUND
        _obj(mig).contents = self._handle("mig", gpu_index, with_ci[index.value])
        return SUCCESS

    def nvmlDeviceGetGpuInstanceId(self, mig: Any, gi_id: Any) -> int:
        kind, _, instance_id = self._lookup(mig)
        if kind != "mig":  # nvml.h: "if this query is not supported by the device"
            return NOT_SUPPORTED
        _obj(gi_id).value = instance_id
        return SUCCESS

    def nvmlDeviceGetComputeRunningProcesses_v2(self, device: Any, count: Any, infos: Any) -> int:
        """R470's process query: pynvml passes the same struct (c_nvmlProcessInfo_v3_t is
        c_nvmlProcessInfo_v2_t), and the driver answers the same."""
        return FakeNvmlLibrary.nvmlDeviceGetComputeRunningProcesses_v3(self, device, count, infos)

    def nvmlDeviceGetComputeRunningProcesses_v3(self, device: Any, count: Any, infos: Any) -> int:
        _, kind, index, gi_id = self._gpu(device)
        instance = self.instance(index, gi_id) if kind == "mig" else None
        if kind == "mig" and (instance is None or not instance.with_compute_instance):
            return INVALID_ARGUMENT
        running = instance.processes if instance is not None else 0
        # nvml.h: INSUFFICIENT_SIZE "if infoCount indicates that the infos array is too
        # small", infoCount then "the minimal amount of space necessary"; pynvml asks with
        # infoCount 0 and infos NULL first, then again with room for twice as many plus 5.
        if infos is None or _obj(count).value < running:
            _obj(count).value = running
            return SUCCESS if running == 0 else INSUFFICIENT_SIZE
        for i in range(running):
            infos[i].pid = 1000 + i
            infos[i].usedGpuMemory = 1 << 30
            infos[i].gpuInstanceId = gi_id  # "If MIG is enabled, stores a valid GPU instance ID"
            infos[i].computeInstanceId = 0
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
