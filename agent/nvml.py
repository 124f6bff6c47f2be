"""Read a node's real MIG state through NVML (nvidia-ml-py). With :mod:`agent.carve.nvml_writes`
(the carve path's writes) the only two modules importing pynvml.

Reads, never changes: per GPU its name, PCI device id, UUID, MIG mode, NVML's own GPU-instance
profile table with legal placements, the existing GPU instances with their placements, and the
MIG devices on them (UUID, whether any compute process runs there).
"""

from __future__ import annotations

import ctypes
import logging
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from agent.readings import GpuReading, InstanceReading
from migslice.console import CommandError
from migslice.mig import CATALOG, NvmlProfileInfo

log = logging.getLogger(__name__)

MAX_PLACEMENTS = 16
MAX_PROFILE_INDEX = 0x40
"""Where the profile-index probe of :func:`gpu_instance_profiles` ends at the latest (NVML
13.3's nvml.h has 0x12 indices)."""


class NvmlUnavailableError(CommandError):
    """NVML cannot be used on this machine (no driver, no library, no permission)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def unavailable_message(error: Exception) -> str:
    """Why NVML cannot be used on this machine, and what that means, from nvmlInit's error."""
    if isinstance(error, pynvml.NVMLError_LibraryNotFound):
        return (
            f"NVML could not be loaded on this machine ({error}): libnvidia-ml.so.1, which the "
            "NVIDIA driver installs, is not here, so this machine has no NVIDIA driver (in a "
            "pod, the NVIDIA container runtime mounts it)"
        )
    if isinstance(error, pynvml.NVMLError_DriverNotLoaded):
        return (
            f"NVML could not be initialised on this machine ({error}): the NVIDIA kernel "
            "driver is not loaded (no NVIDIA GPU here, or its kernel module is not loaded)"
        )
    if isinstance(error, pynvml.NVMLError_NoPermission):
        return (
            f"NVML could not be initialised on this machine ({error}): this user may not "
            "open the NVIDIA devices (/dev/nvidiactl, /dev/nvidia*)"
        )
    if isinstance(error, pynvml.NVMLError_LibRmVersionMismatch):
        return (
            f"NVML could not be initialised on this machine ({error}): libnvidia-ml.so.1 and "
            "the loaded NVIDIA kernel driver are of different versions (reboot, or reload the "
            "driver, after a driver update)"
        )
    return f"NVML could not be initialised on this machine ({error})"


@contextmanager
def nvml_session() -> Iterator[None]:
    """nvmlInit and nvmlShutdown around a block; NvmlUnavailableError says why NVML fails."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailableError(unavailable_message(error)) from None
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as error:
            log.warning("nvmlShutdown failed: %s", error)


def read_gpus(*, strict: bool = False) -> tuple[GpuReading, ...]:
    """Every GPU of the machine; call inside :func:`nvml_session`. A GPU NVML cannot read (lost
    off the bus, a device the container may not open, a query the driver refuses) is read as
    its error alone, the others as usual; NvmlUnavailableError when not even the GPUs can be
    counted. ``strict`` (the carve path, which must see every GPU): NVML's error raised as
    it is."""
    if strict:
        return tuple(_read_gpu(i) for i in range(pynvml.nvmlDeviceGetCount()))
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as error:
        raise NvmlUnavailableError(
            f"NVML could not count this machine's GPUs (nvmlDeviceGetCount: {error})"
        ) from None
    return tuple(_read_or_mark(i) for i in range(count))


def _read_or_mark(index: int) -> GpuReading:
    try:
        return _read_gpu(index)
    except pynvml.NVMLError as error:
        said = f"{_failed_call(error)}: {error}"
        log.warning("NVML could not read GPU %d: %s", index, said)
        return GpuReading(index, "", "", 0, False, False, False, (), (), error=said)


def _failed_call(error: Exception) -> str:
    """The pynvml function that raised ``error`` (the innermost public one: the C call's)."""
    names = [
        frame.name
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename == pynvml.__file__ and not frame.name.startswith("_")
    ]
    return names[-1] if names else "NVML"


def _read_gpu(index: int) -> GpuReading:
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    name = _text(pynvml.nvmlDeviceGetName(handle))
    uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    # No nvmlDeviceGetMemoryInfo: nothing here needs the GPU's total memory, and in MIG mode
    # NVML answers that aggregate query only to a privileged caller (nvml.h, NVML 13.3.29:
    # "only if the caller has appropriate privileges"), NVML_ERROR_NO_PERMISSION to this
    # unprivileged agent, which would lose the whole GPU to it.
    try:
        current, pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError_NotSupported:
        return GpuReading(
            index, name, uuid, int(pci.pciDeviceId) >> 16, False, False, False, (), ()
        )
    profiles = _read_profiles(handle)
    instances = _read_instances(handle, profiles) if current else ()
    return GpuReading(
        index=index,
        name=name,
        uuid=uuid,
        pci_device_id=int(pci.pciDeviceId) >> 16,
        mig_capable=True,
        mig_enabled=bool(current),
        mig_pending=current != pending,
        profiles=profiles,
        instances=instances,
    )


def gpu_instance_profiles(handle: Any) -> Iterator[tuple[Any, str]]:
    """NVML's GPU-instance profiles of a GPU with their names (``MIG 1g.10gb``), by profile
    index until NVML says no more. Not until pynvml's NVML_GPU_INSTANCE_PROFILE_COUNT: that is
    the count of the nvml.h the bindings were made from (0xA in nvidia-ml-py 12.535, NVML
    12.2; 0x12 in 13.615.71, pynvml.py:2816), and a newer driver answers past it (1_SLICE_GFX
    is 0xA). nvml.h: NOT_SUPPORTED for a profile this GPU lacks (or MIG off), INVALID_ARGUMENT
    for an index the driver does not know: past pynvml's count, the end."""
    names: dict[int, str] | None = None
    for index in range(MAX_PROFILE_INDEX):
        try:
            info, unnamed = _profile_info(handle, index)
        except pynvml.NVMLError_NotSupported:
            continue
        except pynvml.NVMLError_InvalidArgument:
            if index >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
                return
            continue
        if unnamed is None:
            yield info, _text(info.name).strip()
            continue
        if names is None:
            names = _catalog_profile_names(handle)
        if int(info.id) not in names:
            raise unnamed
        yield info, names[int(info.id)]


def _profile_info(handle: Any, index: int) -> tuple[Any, Exception | None]:
    """NVML's profile at ``index``, and None; on a driver before R510 (R470), which lacks
    ``...ProfileInfoV`` (NVML 11.6 added it), the unversioned query's answer (pynvml.py:6097
    in nvidia-ml-py 13.615.71: ``version=1``, nvmlGpuInstanceProfileInfo_t, the same fields
    but no name) and the NVMLError_FunctionNotFound the versioned one raised."""
    try:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index), None
    except pynvml.NVMLError_FunctionNotFound as missing:
        return pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version=1), missing


def _catalog_profile_names(handle: Any) -> dict[int, str]:
    """GI profile id -> NVML's profile name (``MIG 1g.10gb``) from the catalog's model of this
    GPU (by PCI device id), for a driver whose NVML names no profile; {} for a model the
    catalog lacks (then the GPU cannot be read on that driver)."""
    pci_device_id = int(pynvml.nvmlDeviceGetPciInfo(handle).pciDeviceId) >> 16
    model = CATALOG.find(f"0x{pci_device_id:04X}")
    if model is None:
        return {}
    return {p.gi_profile_id: f"MIG {p.name}" for p in model.profiles if p.gi_profile_id is not None}


def _read_profiles(handle: Any) -> tuple[NvmlProfileInfo, ...]:
    """NVML's profile table (:func:`gpu_instance_profiles`) with each profile's placements."""
    found: list[NvmlProfileInfo] = []
    for info, name in gpu_instance_profiles(handle):
        placements = (pynvml.c_nvmlGpuInstancePlacement_t * MAX_PLACEMENTS)()
        count = ctypes.c_uint(MAX_PLACEMENTS)
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, info.id, placements, ctypes.byref(count)
        )
        found.append(
            NvmlProfileInfo(
                name=name,
                gi_profile_id=int(info.id),
                slice_count=int(info.sliceCount),
                instance_count=int(info.instanceCount),
                memory_mib=int(info.memorySizeMB),
                sm_count=int(info.multiprocessorCount),
                placements=tuple(
                    (int(placements[i].start), int(placements[i].size)) for i in range(count.value)
                ),
            )
        )
    return tuple(found)


def mig_devices(handle: Any) -> dict[int, tuple[str, bool, int]]:
    """GPU instance id -> (MIG device UUID, busy, processes) for every MIG device of the GPU."""
    devices: dict[int, tuple[str, bool, int]] = {}
    for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        gi_id = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        uuid = _text(pynvml.nvmlDeviceGetUUID(mig))
        running = _running_processes(mig)
        previous_uuid, _, previous = devices.get(gi_id, ("", False, 0))
        devices[gi_id] = (previous_uuid or uuid, previous + running > 0, previous + running)
    return devices


def _running_processes(mig: Any) -> int:
    """How many compute processes run on a MIG device. Not pynvml's unversioned
    nvmlDeviceGetComputeRunningProcesses: where the library lacks ``..._v3`` (drivers before
    R510) it raises NVMLLibraryMismatchError, no NVMLError; ``..._v2`` answers there."""
    try:
        return len(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(mig))
    except pynvml.NVMLError_FunctionNotFound:
        return len(pynvml.nvmlDeviceGetComputeRunningProcesses_v2(mig))


def _read_instances(
    handle: Any, profiles: tuple[NvmlProfileInfo, ...]
) -> tuple[InstanceReading, ...]:
    devices = mig_devices(handle)
    instances: list[InstanceReading] = []
    for profile in profiles:
        capacity = max(profile.instance_count, 1)
        handles = (pynvml.c_nvmlGpuInstance_t * capacity)()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(
            handle, profile.gi_profile_id, handles, ctypes.byref(count)
        )
        for i in range(count.value):
            info = pynvml.nvmlGpuInstanceGetInfo(handles[i])
            uuid, busy, _ = devices.get(int(info.id), ("", False, 0))
            instances.append(
                InstanceReading(
                    gi_id=int(info.id),
                    gi_profile_id=int(info.profileId),
                    start=int(info.placement.start),
                    size=int(info.placement.size),
                    uuid=uuid,
                    busy=busy,
                )
            )
    instances.sort(key=lambda instance: instance.start)
    return tuple(instances)
