"""The node agent's annotation ``migslice.io/gpu-layout``: a versioned JSON schema.

The agent publishes what NVML reports; the inventory reads it as the most precise source of
a node's GPU layouts. Version ``v1``::

    {
      "version": "v1",
      "product": "NVIDIA-A100-SXM4-80GB",      # NVML name as GFD spells it
      "pciDeviceId": "0x20B2",                 # optional: GPU 0's (the first read)
      "observedAt": "2025-05-01T12:00:00Z",    # optional, RFC 3339, when NVML was read
      "gpus": [
        {
          "index": 0, "uuid": "GPU-…",          # uuid optional
          "pciDeviceId": "0x20B2",              # optional: this GPU's PCI device id
          "error": "nvmlDeviceGetGpuInstances: GPU is lost",  # optional, see below
          "migEnabled": true,
          "instances": [                        # GPU instances, empty when MIG is off
            {"profile": "3g.40gb", "start": 0, "size": 4, "uuid": "MIG-…", "busy": true}
          ]
        }
      ],
      "profiles": [ … ]                         # optional: NVML's profile table, for models
    }                                           # the catalog lacks (see below)

A GPU's own ``pciDeviceId`` is what mig-parted's ``device-filter`` matches it by: on a node
whose GPUs differ (an A100-40GB beside A100-80GBs, an H800 beside an H100, a display GPU),
the node-level one is GPU 0's only. A GPU with an ``error`` is one the agent could not read:
nothing of it is known, and no layout of the node is served from the annotation while it has
one. ``start`` and ``size`` are in memory slices (NVML placement). ``busy`` is true when
NVML sees processes on the instance. ``profiles`` entries are ``{"name": "MIG 1g.10gb",
"giProfileId": 19, "sliceCount": 1, "instanceCount": 7, "memoryMiB": 9856, "smCount": 16,
"placements": [[0, 1], [1, 1], …]}``. Unknown keys are ignored, so later minor additions
stay readable; a different ``version`` is refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from migslice.errors import InvalidInputError
from migslice.mig import NvmlProfileInfo
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects.json import decode

LAYOUT_VERSION = "v1"


class InstanceEntry(TypedDict):
    profile: str
    start: int
    size: int
    busy: bool
    uuid: NotRequired[str]


class GpuEntry(TypedDict):
    index: int
    migEnabled: bool
    instances: list[InstanceEntry]
    uuid: NotRequired[str]
    pciDeviceId: NotRequired[str]
    error: NotRequired[str]


class ProfileEntry(TypedDict):
    name: str
    giProfileId: int
    sliceCount: int
    instanceCount: int
    memoryMiB: int
    smCount: int
    placements: list[list[int]]


class GpuLayoutAnnotation(TypedDict):
    version: str
    product: str
    gpus: list[GpuEntry]
    pciDeviceId: NotRequired[str]
    observedAt: NotRequired[str]
    profiles: NotRequired[list[ProfileEntry]]


class LayoutAnnotationError(InvalidInputError):
    """An annotation that does not follow the schema; the message names the field."""


@dataclass(frozen=True, slots=True)
class AgentInstance:
    profile: str
    start: int
    size: int
    busy: bool
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class AgentGpu:
    index: int
    mig_enabled: bool
    instances: tuple[AgentInstance, ...]
    uuid: str = ""
    error: str = ""  # why the agent could not read this GPU ("" when it could)
    pci_device_id: int | None = None  # the device id (0x20B2), None where not published


@dataclass(frozen=True, slots=True)
class AgentReport:
    """A parsed ``migslice.io/gpu-layout`` annotation."""

    product: str
    gpus: tuple[AgentGpu, ...]
    pci_device_id: int | None = None
    observed_at: str = ""
    profiles: tuple[NvmlProfileInfo, ...] = ()

    def gpu_pci_ids(self) -> dict[int, int]:
        """Each GPU's own PCI device id, by index, where the agent published one."""
        return {g.index: g.pci_device_id for g in self.gpus if g.pci_device_id is not None}


def parse_layout_annotation(text: str) -> AgentReport:
    """Parse the annotation's JSON text; LayoutAnnotationError names what is wrong."""
    try:
        document = decode(text)
    except ValueError as error:
        raise LayoutAnnotationError(f"{LAYOUT_ANNOTATION} is not JSON: {error}") from None
    if not isinstance(document, Mapping):
        raise LayoutAnnotationError(f"{LAYOUT_ANNOTATION} must be a JSON object")
    version = document.get("version")
    if version != LAYOUT_VERSION:
        raise LayoutAnnotationError(
            f"{LAYOUT_ANNOTATION} version is {version!r}; this migslice reads {LAYOUT_VERSION!r}"
        )
    product = _field(document, "product", str, "")
    pci = _pci_id(document.get("pciDeviceId"), "pciDeviceId")
    raw_gpus = _field(document, "gpus", list, "")
    gpus = tuple(_parse_gpu(raw, f"gpus[{i}]") for i, raw in enumerate(raw_gpus))
    indices = [gpu.index for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise LayoutAnnotationError(f"gpus: index repeated in {indices}")
    profiles = tuple(
        _parse_profile(raw, f"profiles[{i}]")
        for i, raw in enumerate(_list(document, "profiles", ""))
    )
    observed = document.get("observedAt")
    return AgentReport(
        product=product,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        pci_device_id=pci,
        observed_at=observed if isinstance(observed, str) else "",
        profiles=profiles,
    )


def _pci_id(text: object, where: str) -> int | None:
    """A ``pciDeviceId`` (hexadecimal, ``0x20B2``); None when absent or not a string."""
    if not isinstance(text, str):
        return None
    try:
        pci = int(text, 16)
    except ValueError:
        raise LayoutAnnotationError(f"{where}={text!r} is not hexadecimal") from None
    if not 0 <= pci < 1 << 32:  # NVML's pciDeviceId: device id << 16 | vendor id
        raise LayoutAnnotationError(f"{where}={text!r} is not a 32-bit PCI id")
    return pci


MAX_GPU_INDEX = 255
"""The highest NVML device index read (a node holds a few GPUs; a bound, not a need)."""


def _field(raw: Mapping[str, Any], name: str, kind: type, path: str) -> Any:
    value = raw.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        where = f"{path}.{name}" if path else name
        raise LayoutAnnotationError(
            f"{where}={value!r}; expected {kind.__name__} ({LAYOUT_ANNOTATION} {LAYOUT_VERSION})"
        )
    return value


def _list(raw: Mapping[str, Any], name: str, path: str) -> list[Any]:
    """An optional list field (absent or null: empty)."""
    return [] if raw.get(name) is None else list(_field(raw, name, list, path))


def _parse_gpu(raw: object, path: str) -> AgentGpu:
    if not isinstance(raw, Mapping):
        raise LayoutAnnotationError(f"{path} must be an object")
    index = _field(raw, "index", int, path)
    if not 0 <= index <= MAX_GPU_INDEX:
        raise LayoutAnnotationError(f"{path}.index={index}; expected 0 to {MAX_GPU_INDEX}")
    enabled = _field(raw, "migEnabled", bool, path)
    instances = []
    for i, item in enumerate(_list(raw, "instances", path)):
        where = f"{path}.instances[{i}]"
        if not isinstance(item, Mapping):
            raise LayoutAnnotationError(f"{where} must be an object")
        busy = item.get("busy", False)
        instances.append(
            AgentInstance(
                profile=_field(item, "profile", str, where),
                start=_field(item, "start", int, where),
                size=_field(item, "size", int, where),
                busy=bool(busy),
                uuid=str(item.get("uuid") or ""),
            )
        )
    if instances and not enabled:
        raise LayoutAnnotationError(f"{path} has instances but migEnabled is false")
    error = raw.get("error")
    if error is not None and not isinstance(error, str):
        raise LayoutAnnotationError(f"{path}.error={error!r}; expected str")
    if error and (instances or enabled):
        raise LayoutAnnotationError(f"{path} has an error and a layout")
    pci = _pci_id(raw.get("pciDeviceId"), f"{path}.pciDeviceId")
    uuid = str(raw.get("uuid") or "")
    return AgentGpu(index, enabled, tuple(instances), uuid, error or "", pci)


def _parse_profile(raw: object, path: str) -> NvmlProfileInfo:
    if not isinstance(raw, Mapping):
        raise LayoutAnnotationError(f"{path} must be an object")
    placements = _field(raw, "placements", list, path)
    pairs: list[tuple[int, int]] = []
    for pair in placements:
        is_pair = isinstance(pair, list) and len(pair) == 2
        if not (is_pair and all(isinstance(v, int) for v in pair)):
            raise LayoutAnnotationError(f"{path}.placements: {pair!r} is not [start, size]")
        pairs.append((pair[0], pair[1]))
    return NvmlProfileInfo(
        name=_field(raw, "name", str, path),
        gi_profile_id=_field(raw, "giProfileId", int, path),
        slice_count=_field(raw, "sliceCount", int, path),
        instance_count=_field(raw, "instanceCount", int, path),
        memory_mib=_field(raw, "memoryMiB", int, path),
        sm_count=_field(raw, "smCount", int, path),
        placements=tuple(pairs),
    )


def render_layout_annotation(report: AgentReport) -> str:
    """The annotation text for ``report`` (compact JSON; what the agent writes)."""
    document: GpuLayoutAnnotation = {
        "version": LAYOUT_VERSION,
        "product": report.product,
        "gpus": [_render_gpu(gpu) for gpu in report.gpus],
    }
    if report.pci_device_id is not None:
        document["pciDeviceId"] = f"0x{report.pci_device_id:04X}"
    if report.observed_at:
        document["observedAt"] = report.observed_at
    if report.profiles:
        document["profiles"] = [
            {
                "name": p.name,
                "giProfileId": p.gi_profile_id,
                "sliceCount": p.slice_count,
                "instanceCount": p.instance_count,
                "memoryMiB": p.memory_mib,
                "smCount": p.sm_count,
                "placements": [[start, size] for start, size in p.placements],
            }
            for p in report.profiles
        ]
    return json.dumps(document, separators=(",", ":"))


def _render_gpu(gpu: AgentGpu) -> GpuEntry:
    entry: GpuEntry = {
        "index": gpu.index,
        "migEnabled": gpu.mig_enabled,
        "instances": [_render_instance(i) for i in gpu.instances],
    }
    if gpu.uuid:
        entry["uuid"] = gpu.uuid
    if gpu.error:
        entry["error"] = gpu.error
    if gpu.pci_device_id is not None:
        entry["pciDeviceId"] = f"0x{gpu.pci_device_id:04X}"
    return entry


def _render_instance(instance: AgentInstance) -> InstanceEntry:
    entry: InstanceEntry = {
        "profile": instance.profile,
        "start": instance.start,
        "size": instance.size,
        "busy": instance.busy,
    }
    if instance.uuid:
        entry["uuid"] = instance.uuid
    return entry
