"""Render layouts for the tools that apply them: mig-parted configs and nvidia-smi commands.

mig-parted format (``version: v1``; ``mig-configs`` maps a name to a list of entries, each with
an optional ``device-filter`` of ``0xDDDDVVVV`` PCI ids, ``devices`` as ``all`` or GPU indices,
``mig-enabled`` and ``mig-devices`` counts per profile name). mig-parted picks placements
itself, so a config carries counts, not starts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from migslice.errors import InvalidInputError
from migslice.mig.catalog import GpuModel
from migslice.mig.layout import Placed
from migslice.mig.profiles import ProfileNameError, parse_profile_name


class MigPartedError(InvalidInputError):
    """A mig-parted config that does not follow the v1 format."""


@dataclass(frozen=True, slots=True)
class MigPartedEntry:
    """One entry of a mig-parted config: which GPUs, and what instances on each."""

    devices: tuple[int, ...] | None  # None means "all"
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]
    device_filter: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        return dict(self.mig_devices)


def profile_counts(layout: Sequence[Placed]) -> tuple[tuple[str, int], ...]:
    """Counts per profile name, sorted by name (mig-parted's ``mig-devices``)."""
    return tuple(sorted(Counter(p.profile for p in layout).items()))


def mig_parted_entries(
    model: GpuModel,
    layouts: Mapping[int, Sequence[Placed]],
    device_filter: Sequence[str] | None = None,
) -> tuple[MigPartedEntry, ...]:
    """Entries for GPUs by index; GPUs with the same counts share one entry."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for index in sorted(layouts):
        groups.setdefault(profile_counts(layouts[index]), []).append(index)
    filters = tuple(device_filter) if device_filter is not None else model.pci_filters
    return tuple(
        MigPartedEntry(tuple(indices), True, counts, filters)
        for counts, indices in sorted(groups.items(), key=lambda item: item[1][0])
    )


def render_mig_parted(configs: Mapping[str, Sequence[MigPartedEntry]]) -> str:
    """A mig-parted v1 YAML document with one named config per mapping key."""
    document: dict[str, Any] = {"version": "v1", "mig-configs": {}}
    for name, entries in configs.items():
        rendered = []
        for entry in entries:
            item: dict[str, Any] = {}
            if entry.device_filter:
                item["device-filter"] = list(entry.device_filter)
            item["devices"] = "all" if entry.devices is None else list(entry.devices)
            item["mig-enabled"] = entry.mig_enabled
            if entry.mig_enabled:
                item["mig-devices"] = dict(entry.mig_devices)
            rendered.append(item)
        document["mig-configs"][name] = rendered
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def parse_mig_parted(text: str) -> dict[str, tuple[MigPartedEntry, ...]]:
    """Parse and check a mig-parted v1 config; MigPartedError says what is wrong and where."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise MigPartedError(f"mig-parted config is not YAML: {error}") from None
    if not isinstance(document, dict):
        raise MigPartedError("mig-parted config must be a mapping with version and mig-configs")
    unknown = set(document) - {"version", "mig-configs"}
    if unknown:
        raise MigPartedError(f"mig-parted config has unknown keys: {', '.join(sorted(unknown))}")
    if document.get("version") != "v1":
        raise MigPartedError(f"version: {document.get('version')!r}; mig-parted accepts only v1")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise MigPartedError("mig-configs must be a non-empty mapping of name to entries")
    parsed: dict[str, tuple[MigPartedEntry, ...]] = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise MigPartedError(f"mig-configs.{name} must be a non-empty list")
        parsed[str(name)] = tuple(
            _parse_entry(f"mig-configs.{name}[{i}]", raw) for i, raw in enumerate(entries)
        )
    return parsed


def _parse_entry(path: str, raw: object) -> MigPartedEntry:
    if not isinstance(raw, dict):
        raise MigPartedError(f"{path} must be a mapping")
    filters = raw.get("device-filter", ())
    if isinstance(filters, str):
        filters = (filters,)
    if not isinstance(filters, list | tuple) or not all(isinstance(f, str) for f in filters):
        raise MigPartedError(f"{path}.device-filter must be a string or a list of strings")
    devices = raw.get("devices")
    if devices == "all":
        indices: tuple[int, ...] | None = None
    elif isinstance(devices, list) and all(isinstance(d, int) and d >= 0 for d in devices):
        indices = tuple(devices)
    else:
        raise MigPartedError(f"{path}.devices must be 'all' or a list of GPU indices")
    enabled = raw.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise MigPartedError(f"{path}.mig-enabled must be true or false")
    mig_devices = raw.get("mig-devices") or {}
    if not isinstance(mig_devices, dict):
        raise MigPartedError(f"{path}.mig-devices must map profile names to counts")
    if mig_devices and not enabled:
        raise MigPartedError(f"{path}.mig-devices must be empty when mig-enabled is false")
    counts: list[tuple[str, int]] = []
    for profile, count in mig_devices.items():
        try:
            parse_profile_name(str(profile))
        except ProfileNameError as error:
            raise MigPartedError(f"{path}.mig-devices: {error}") from None
        if not isinstance(count, int) or count < 0:
            raise MigPartedError(f"{path}.mig-devices.{profile} must be a count >= 0")
        counts.append((str(profile), count))
    return MigPartedEntry(indices, enabled, tuple(sorted(counts)), tuple(filters))


def creation_order(layout: Sequence[Placed], model: GpuModel) -> list[Placed]:
    """Order in which creating instances without explicit placement succeeds.

    The driver puts a new instance without a placement at its highest free legal start, so
    smaller instances created first can block larger ones (``-cgi 19,19,14,9`` fails on an
    A100 where ``9,19,14,19`` works). Creating the largest first avoids it.
    """

    def key(placed: Placed) -> tuple[int, int, int]:
        profile = model.profile(placed.profile)
        return (-profile.memory_slices, -profile.compute_slices, placed.start)

    return sorted(layout, key=key)


def nvidia_smi_create(gpu_index: int, model: GpuModel, new: Sequence[Placed]) -> list[str]:
    """``nvidia-smi mig`` commands that create ``new`` instances (and their compute instances)."""
    if not new:
        return []
    ids = ",".join(str(model.profile(p.profile).gi_profile_id) for p in creation_order(new, model))
    return [f"nvidia-smi mig -i {gpu_index} -cgi {ids} -C"]


def nvidia_smi_teardown(gpu_index: int) -> list[str]:
    """Commands that destroy every compute instance, then every GPU instance, of a GPU."""
    return [f"nvidia-smi mig -i {gpu_index} -dci", f"nvidia-smi mig -i {gpu_index} -dgi"]


def render_bar(model: GpuModel, layout: Sequence[Placed], cell: int = 8) -> str:
    """The GPU's memory slices as a bar: ``|3g.40gb                    |2g.20gb  |1g.10gb|..|``.

    Each memory slice is ``cell`` characters wide; free slices show as ``.``.
    """
    by_start = {p.start: p for p in layout}
    parts: list[str] = []
    index = 0
    while index < model.memory_slices:
        placed = by_start.get(index)
        if placed is None:
            parts.append("." * cell)
            index += 1
            continue
        width = placed.size * cell + placed.size - 1
        parts.append(placed.profile[:width].ljust(width))
        index += placed.size
    return "|" + "|".join(parts) + "|"
