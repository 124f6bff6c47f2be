"""Per-GPU instance counts from a mig-parted config, as MIG Manager would apply it.

The node label ``nvidia.com/mig.config`` names a config: one from the configured mig-parted
ConfigMap, else one of the names MIG Manager generates from the hardware (``all-disabled``,
``all-enabled``, ``all-balanced``, ``all-<profile>`` with ``+`` written ``.``). Every entry of
the config applies to the GPUs its ``device-filter`` and ``devices`` select; a GPU selected by
two entries, or by none, makes the answer ambiguous.
"""

from __future__ import annotations

from collections.abc import Mapping

from migslice.mig import GpuModel, fit
from migslice.mig.render import MigPartedEntry


def per_gpu_counts(
    name: str,
    model: GpuModel,
    gpu_count: int,
    configs: Mapping[str, tuple[MigPartedEntry, ...]],
) -> list[tuple[bool, dict[str, int]]] | str:
    """(MIG enabled, counts per profile) for each GPU index, or why the config is ambiguous."""
    entries = configs.get(name)
    if entries is None:
        builtin = builtin_counts(name, model)
        if builtin is None:
            return f"mig-parted config {name!r} not found"
        return [builtin] * gpu_count
    chosen: list[tuple[bool, dict[str, int]] | None] = [None] * gpu_count
    filters = {f.upper() for f in model.pci_filters}
    for entry in entries:
        if entry.device_filter and not any(
            f.split(":")[0].upper() in filters for f in entry.device_filter
        ):
            continue
        indices = range(gpu_count) if entry.devices is None else entry.devices
        for index in indices:
            if index >= gpu_count:
                continue
            if chosen[index] is not None:
                return f"mig-parted config {name!r} matches GPU {index} twice"
            chosen[index] = (entry.mig_enabled, entry.counts())
    missing = [i for i, c in enumerate(chosen) if c is None]
    if missing:
        return f"mig-parted config {name!r} leaves GPU {missing[0]} of {model.key} unset"
    return [c for c in chosen if c is not None]


def builtin_counts(name: str, model: GpuModel) -> tuple[bool, dict[str, int]] | None:
    """MIG Manager's generated configs: all-disabled, all-enabled, all-balanced, all-<profile>."""
    if name == "all-disabled":
        return (False, {})
    if name == "all-enabled":
        return (True, {})
    plain = [p for p in model.profiles if not p.parsed.attribute]
    if name == "all-balanced":
        counts: dict[str, int] = {}
        for compute, count in ((1, 2), (2, 1), (3, 1)):
            sized = [p for p in plain if p.compute_slices == compute]
            if sized:
                counts[min(sized, key=lambda p: p.memory_slices).name] = count
        return (True, counts)
    if not name.startswith("all-"):
        return None
    wanted = name.removeprefix("all-")
    for profile in model.profiles:
        if profile.name.replace("+", ".") == wanted:
            count = profile.max_count
            while count and not fit(model, [profile.name] * count).feasible:
                count -= 1
            return (True, {profile.name: count})
    return None
