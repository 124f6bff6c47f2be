# ruff: noqa: N802  (method names are the C symbols of libnvidia-ml)
"""The write half of the fake ``libnvidia-ml``: GPU instances created at a placement and
destroyed, and their compute instances, with the driver's rules and return codes.

From NVML's API reference (``nvml.h``, as vendored in NVIDIA/go-nvml ``gen/nvml/nvml.h``):

* ``nvmlDeviceCreateGpuInstanceWithPlacement``: ``NVML_ERROR_NOT_SUPPORTED`` when the GPU
  does not have MIG mode enabled, ``NVML_ERROR_INVALID_ARGUMENT`` for an invalid profile id or
  placement, ``NVML_ERROR_INSUFFICIENT_RESOURCES`` when the instance cannot be created (a
  placement overlapping occupied memory slices, SM slices or a profile's count exhausted);
* ``nvmlGpuInstanceDestroy``: ``NVML_ERROR_IN_USE`` "if processes (e.g. CUDA application) or
  compute instances are active on the GPU instance";
* ``nvmlGpuInstanceCreateComputeInstance``: ``NVML_ERROR_NOT_SUPPORTED`` for a profile id the
  GPU instance does not offer, ``NVML_ERROR_INSUFFICIENT_RESOURCES`` when it cannot be made;
* ``nvmlComputeInstanceDestroy``: ``NVML_ERROR_IN_USE`` when processes run on it.

Legality of a new GPU instance is judged by ``tests.mig_oracle`` (the MIG rules written out
independently of migslice's geometry engine), as the driver judges it by its own tables. The
fake offers only the full compute instance of a GPU instance (all its SM slices), which is
the one migslice, mig-parted and the device plugin's mixed strategy use.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any

import pynvml

from tests import mig_oracle

if TYPE_CHECKING:
    from tests.fake_nvml import FakeGpu, FakeInstance

SUCCESS = pynvml.NVML_SUCCESS
INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
IN_USE = pynvml.NVML_ERROR_IN_USE
INSUFFICIENT_RESOURCES = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES

# NVML_COMPUTE_INSTANCE_PROFILE_* index -> SM slices (mig-hardware.md §5.2).
CI_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


def _obj(reference: Any) -> Any:
    return reference._obj


class MigWrites:
    """Mixed into ``FakeNvmlLibrary``: the functions that change a GPU's MIG layout."""

    gpus: list[FakeGpu]
    destroyed: list[FakeInstance]

    if TYPE_CHECKING:

        def _handle(self, kind: str, gpu: int, gi_id: int = -1) -> Any: ...

        def _lookup(self, pointer: Any) -> tuple[str, int, int]: ...

        def _profile_by_id(self, gpu: FakeGpu, profile_id: int) -> Any: ...

        def adopt(self, gpu: FakeGpu, instance: FakeInstance) -> FakeInstance: ...

        def instance(self, gpu: int, gi_id: int) -> FakeInstance | None: ...

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profile_id: int, placement: Any, instance: Any
    ) -> int:
        from tests.fake_nvml import FakeInstance

        _, index, _ = self._lookup(device)
        gpu = self.gpus[index]
        if not gpu.mig_enabled:
            return NOT_SUPPORTED
        profile = self._profile_by_id(gpu, profile_id)
        wanted = _obj(placement)
        if profile is None or wanted.start not in profile.placements:
            return INVALID_ARGUMENT
        if wanted.size != profile.memory_slices:
            return INVALID_ARGUMENT
        existing = [(i.profile, i.start) for i in gpu.instances]
        if not mig_oracle.is_legal(gpu.model, [*existing, (profile.name, wanted.start)]):
            return INSUFFICIENT_RESOURCES
        created = FakeInstance(profile.name, wanted.start, with_compute_instance=False)
        gpu.instances.append(self.adopt(gpu, created))
        _obj(instance).contents = self._handle("gi", index, created.gi_id)
        return SUCCESS

    def nvmlGpuInstanceDestroy(self, handle: Any) -> int:
        _, index, gi_id = self._lookup(handle)
        found = self.instance(index, gi_id)
        if found is None:
            return INVALID_ARGUMENT
        if found.with_compute_instance or found.processes:
            return IN_USE
        self.gpus[index].instances.remove(found)
        self.destroyed.append(found)
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, handle: Any, profile: int, engine: int, info: Any
    ) -> int:
        if _obj(info).version != pynvml.nvmlComputeInstanceProfileInfo_v2:
            return INVALID_ARGUMENT  # nvml.h: "If ... info->version are invalid"
        return self._compute_profile_info(handle, profile, _obj(info))

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, handle: Any, profile: int, engine: int, info: Any
    ) -> int:
        """The unversioned query of an R470 library (``nvmlComputeInstanceProfileInfo_t``)."""
        return self._compute_profile_info(handle, profile, _obj(info))

    def _compute_profile_info(self, handle: Any, profile: int, target: Any) -> int:
        _, index, gi_id = self._lookup(handle)
        found = self.instance(index, gi_id)
        if found is None:
            return INVALID_ARGUMENT
        slices = CI_SLICES.get(profile)
        compute = self.gpus[index].model.profile(found.profile).compute_slices
        if slices is None or slices > compute:
            return NOT_SUPPORTED
        target.id = profile
        target.sliceCount = slices
        target.instanceCount = compute // slices
        return SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int, ci: Any) -> int:
        _, index, gi_id = self._lookup(handle)
        found = self.instance(index, gi_id)
        if found is None:
            return INVALID_ARGUMENT
        compute = self.gpus[index].model.profile(found.profile).compute_slices
        if CI_SLICES.get(profile_id) != compute:
            return NOT_SUPPORTED  # this fake offers only the full compute instance
        if found.with_compute_instance:
            return INSUFFICIENT_RESOURCES
        found.with_compute_instance = True
        _obj(ci).contents = self._handle("ci", index, gi_id)
        return SUCCESS

    def nvmlGpuInstanceGetComputeInstances(
        self, handle: Any, profile_id: int, cis: Any, count: Any
    ) -> int:
        _, index, gi_id = self._lookup(handle)
        found = self.instance(index, gi_id)
        if found is None:
            return INVALID_ARGUMENT
        compute = self.gpus[index].model.profile(found.profile).compute_slices
        present = found.with_compute_instance and CI_SLICES.get(profile_id) == compute
        if present:
            cis[0] = ctypes.pointer(self._handle("ci", index, gi_id))
        _obj(count).value = 1 if present else 0
        return SUCCESS

    def nvmlComputeInstanceDestroy(self, handle: Any) -> int:
        _, index, gi_id = self._lookup(handle)
        found = self.instance(index, gi_id)
        if found is None or not found.with_compute_instance:
            return INVALID_ARGUMENT
        if found.processes:
            return IN_USE
        found.with_compute_instance = False
        return SUCCESS
