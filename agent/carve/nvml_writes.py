"""Change a GPU's MIG layout through NVML at exact placements (nvidia-ml-py). With
:mod:`agent.nvml` (the read path) the only two modules importing pynvml; this one is imported
only when the node agent carves (``--carve`` on a node asked to carve), never on the
read-only path.

* create: ``nvmlDeviceCreateGpuInstanceWithPlacement`` (profile id from NVML's own profile
  table, placement start and size), then the GPU instance's full compute instance
  (``nvmlGpuInstanceGetComputeInstanceProfileInfoV`` for the profile index of its SM slices,
  ``nvmlGpuInstanceCreateComputeInstance``), which makes it a MIG device with a UUID. A GPU
  instance left without its compute instance (an agent killed in between) is completed.
* destroy: every compute instance of the GPU instance (``nvmlGpuInstanceGetComputeInstances``,
  ``nvmlComputeInstanceDestroy``), then the GPU instance (``nvmlGpuInstanceDestroy``). The
  driver refuses both while processes run (``NVML_ERROR_IN_USE``).

Failures raise :class:`MigWriteError` with NVML's error name; a read that fails (a GPU lost,
NVML not usable) raises :class:`MigReadError`. Call inside :func:`mig_session`.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from agent.carve.checks import MigReadError, MigWriteError
from agent.nvml import NvmlUnavailableError, gpu_instance_profiles, nvml_session, read_gpus
from agent.readings import GpuReading
from migslice.objects.carve_handshake import Slot

log = logging.getLogger(__name__)

# SM slices of a GPU instance -> NVML_COMPUTE_INSTANCE_PROFILE_* of its full compute instance.
_FULL_COMPUTE_INSTANCE = {
    1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
    3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
    6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE,
    7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE,
}
_MAX_INSTANCES = 8


def _error_name(error: pynvml.NVMLError) -> str:
    code = getattr(error, "value", None)
    for name in dir(pynvml):
        if name.startswith("NVML_ERROR_") and getattr(pynvml, name) == code:
            return name
    return str(error)


def _compute_profile(instance: Any, compute: int) -> Any:
    """NVML's full compute-instance profile of a GPU instance of ``compute`` SM slices. A
    driver before R510 (R470) lacks ``nvmlGpuInstanceGetComputeInstanceProfileInfoV`` (NVML
    11.6 added it): pynvml.py:6175 (nvidia-ml-py 13.615.71) raises NVMLError_FunctionNotFound
    for ``version=2`` there, and ``version=1`` asks the unversioned symbol (same id)."""
    profile = _FULL_COMPUTE_INSTANCE[compute]
    shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    try:
        return pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(instance, profile, shared)
    except pynvml.NVMLError_FunctionNotFound:
        return pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            instance, profile, shared, version=1
        )


@contextmanager
def _refusals(doing: str) -> Iterator[None]:
    """An NVML error in a lookup on the way becomes a MigWriteError that says what failed."""
    try:
        yield
    except pynvml.NVMLError as error:
        raise MigWriteError(f"{doing}: {_error_name(error)}") from None


@contextmanager
def mig_session() -> Iterator[None]:
    """:func:`agent.nvml.nvml_session` for a carve: NVML not usable is a :class:`MigReadError`
    (the carve ends failed, saying why, rather than failing every pass)."""
    try:
        with nvml_session():
            yield
    except NvmlUnavailableError as error:
        raise MigReadError(str(error)) from None


class NvmlMig:
    """The node's GPUs through NVML: read, create and destroy instances (a ``MigDriver``)."""

    def read(self) -> tuple[GpuReading, ...]:
        try:
            return read_gpus(strict=True)
        except pynvml.NVMLError as error:
            raise MigReadError(f"reading the GPUs: {_error_name(error)}") from None

    def create(self, gpu: int, slot: Slot) -> None:
        """Create ``slot`` with its full compute instance (or complete a half-made one)."""
        with _refusals(f"creating {slot.profile}@{slot.start} on GPU {gpu}"):
            self._create(gpu, slot)

    def _create(self, gpu: int, slot: Slot) -> None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        profile_id, size, compute, starts = self._profile(handle, slot.profile)
        instance = self._gpu_instance(handle, slot)
        if instance is None:
            if slot.start not in starts:
                offered = ", ".join(str(start) for start in starts) or "none"
                raise MigWriteError(
                    f"NVML offers {slot.profile} at starts {offered} on this GPU, not {slot.start}"
                )
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = slot.start, size
            instance = self._call(
                "nvmlDeviceCreateGpuInstanceWithPlacement",
                slot,
                pynvml.nvmlDeviceCreateGpuInstanceWithPlacement,
                handle,
                profile_id,
                ctypes.byref(placement),
            )
        if self._compute_instances(instance, compute):
            return
        info = self._call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
            slot,
            _compute_profile,
            instance,
            compute,
        )
        self._call(
            "nvmlGpuInstanceCreateComputeInstance",
            slot,
            pynvml.nvmlGpuInstanceCreateComputeInstance,
            instance,
            info.id,
        )

    def destroy(self, gpu: int, slot: Slot) -> None:
        """Destroy ``slot``'s compute instances, then the GPU instance (absent: nothing)."""
        with _refusals(f"destroying {slot.profile}@{slot.start} on GPU {gpu}"):
            self._destroy(gpu, slot)

    def _destroy(self, gpu: int, slot: Slot) -> None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        _, _, compute, _ = self._profile(handle, slot.profile)
        instance = self._gpu_instance(handle, slot)
        if instance is None:
            return
        for ci in self._compute_instances(instance, compute):
            self._call("nvmlComputeInstanceDestroy", slot, pynvml.nvmlComputeInstanceDestroy, ci)
        self._call("nvmlGpuInstanceDestroy", slot, pynvml.nvmlGpuInstanceDestroy, instance)

    @staticmethod
    def _call(name: str, slot: Slot, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except pynvml.NVMLError as error:
            raise MigWriteError(
                f"{name} for {slot.profile}@{slot.start} failed: {_error_name(error)}"
            ) from None

    @staticmethod
    def _profile(handle: Any, name: str) -> tuple[int, int, int, tuple[int, ...]]:
        """NVML's GI profile id, memory slices, SM slices and possible starts of the profile
        called ``name``."""
        for info, text in gpu_instance_profiles(handle):
            if text.removeprefix("MIG ") == name:
                placements = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
                count = ctypes.c_uint(16)
                pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(
                    handle, info.id, placements, ctypes.byref(count)
                )
                size = int(placements[0].size) if count.value else 0
                starts = tuple(int(placements[i].start) for i in range(count.value))
                return int(info.id), size, int(info.sliceCount), starts
        current, _ = pynvml.nvmlDeviceGetMigMode(handle)
        if not current:  # NVML answers no profile (NOT_SUPPORTED) while MIG mode is off
            raise MigWriteError(
                f"MIG mode is not enabled on this GPU, so NVML offers no GPU instance profile "
                f"({name}): NVML_ERROR_NOT_SUPPORTED"
            )
        raise MigWriteError(f"NVML offers no GPU instance profile {name} on this GPU")

    def _gpu_instance(self, handle: Any, slot: Slot) -> Any | None:
        profile_id, _, _, _ = self._profile(handle, slot.profile)
        handles = (pynvml.c_nvmlGpuInstance_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(handle, profile_id, handles, ctypes.byref(count))
        for i in range(count.value):
            if int(pynvml.nvmlGpuInstanceGetInfo(handles[i]).placement.start) == slot.start:
                return handles[i]
        return None

    @staticmethod
    def _compute_instances(instance: Any, compute: int) -> list[Any]:
        info = _compute_profile(instance, compute)
        handles = (pynvml.c_nvmlComputeInstance_t * _MAX_INSTANCES)()
        count = ctypes.c_uint(0)
        pynvml.nvmlGpuInstanceGetComputeInstances(instance, info.id, handles, ctypes.byref(count))
        return [handles[i] for i in range(count.value)]
