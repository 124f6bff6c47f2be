"""What the agent reads from NVML, as plain values (no pynvml here)."""

from __future__ import annotations

from dataclasses import dataclass

from migslice.mig import NvmlProfileInfo


@dataclass(frozen=True, slots=True)
class InstanceReading:
    """A GPU instance as NVML reports it, with its MIG device (if a compute instance exists)."""

    gi_id: int
    gi_profile_id: int
    start: int
    size: int
    uuid: str
    busy: bool


@dataclass(frozen=True, slots=True)
class GpuReading:
    index: int
    name: str
    uuid: str
    pci_device_id: int
    mig_capable: bool
    mig_enabled: bool
    mig_pending: bool
    profiles: tuple[NvmlProfileInfo, ...]  # NVML's profile table (-lgip/-lgipp), as reported
    instances: tuple[InstanceReading, ...]
    error: str = ""
    """Why NVML could not read this GPU (the call and NVML's error), "" when it could: then
    nothing else of it is known (no name, MIG mode, profiles or instances)."""
