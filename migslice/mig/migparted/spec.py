"""mig-parted files: device filters, entries, documents (read, written, merged) with the
verdicts of mig-parted's ``api/spec/v1``."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from migslice.mig import goyaml
from migslice.mig.catalog import GpuModel
from migslice.mig.layout import Placed
from migslice.mig.migparted.common import NVIDIA_VENDOR_ID, OWN_PREFIX, VERSION, MigPartedError
from migslice.mig.migparted.names import parse_mig_device_name

# -- device filters -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A PCI id as mig-parted's ``DeviceID``: device and vendor, and optionally the subsystem
    (device, vendor) pair. As a GPU, ``subsystem`` None means it is not known."""

    device: int
    vendor: int = NVIDIA_VENDOR_ID
    subsystem: tuple[int, int] | None = None

    def __str__(self) -> str:
        primary = f"0x{self.device:04X}{self.vendor:04X}"
        if self.subsystem is None:
            return primary
        return f"{primary}:0x{self.subsystem[0]:04X}{self.subsystem[1]:04X}"

    def matches(self, gpu: DeviceId) -> bool | None:
        """``DeviceID.Matches`` with this id as the filter: device and vendor, and the subsystem
        too when the filter names one. None when that decides and the GPU's is not known."""
        if (self.device, self.vendor) != (gpu.device, gpu.vendor):
            return False
        if self.subsystem is None:
            return True
        return None if gpu.subsystem is None else self.subsystem == gpu.subsystem


def parse_device_id(text: str) -> DeviceId | None:
    """``NewDeviceIDFromString``; None for a string it refuses (mig-parted ignores the error, and
    the zero id it falls back to matches no GPU)."""
    parts = text.split(":")
    if len(parts) > 2:
        return None
    numbers = [goyaml.parse_uint(part, 32) for part in parts]
    if any(number is None for number in numbers):
        return None
    pairs = [(n >> 16, n & 0xFFFF) for n in numbers if n is not None]
    return DeviceId(*pairs[0], subsystem=pairs[1] if len(pairs) == 2 else None)


# -- entries ------------------------------------------------------------------------------------

_ENTRY_KEYS = ("device-filter", "devices", "mig-enabled", "mig-devices")

EntryJson = TypedDict(
    "EntryJson",
    {
        "device-filter": NotRequired[list[str]],
        "devices": str | list[int],
        "mig-enabled": bool,
        "mig-devices": NotRequired[dict[str, int]],
    },
)


@dataclass(frozen=True, slots=True)
class MigPartedEntry:
    """One entry of a mig-parted config: which GPUs, and what instances on each.

    ``devices`` None means ``all``. ``device_filter`` holds the filter strings as written (an
    empty tuple matches every GPU). ``mig_devices`` keeps the names as written, sorted.
    """

    devices: tuple[int, ...] | None
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...]
    device_filter: tuple[str, ...] = ()

    def counts(self) -> dict[str, int]:
        return dict(self.mig_devices)

    def selects_index(self, index: int) -> bool:
        """``MatchesDevices``: ``all`` or listed."""
        return self.devices is None or index in self.devices

    def selects_device(self, gpu: DeviceId) -> bool | None:
        """``MatchesDeviceFilter``: no filter selects every GPU, else any filter that matches;
        None when only the GPU's subsystem id, which is not known, would decide."""
        if not self.device_filter:
            return True
        unknown = False
        for text in self.device_filter:
            filter_id = parse_device_id(text)
            found = False if filter_id is None else filter_id.matches(gpu)
            if found:
                return True
            unknown = unknown or found is None
        return None if unknown else False


def entry_json(entry: MigPartedEntry) -> EntryJson:
    """The entry as mig-parted writes it (``mig-devices`` only when MIG is on)."""
    devices: str | list[int] = "all" if entry.devices is None else list(entry.devices)
    item: EntryJson
    if entry.device_filter:
        filters = list(entry.device_filter)
        item = {"device-filter": filters, "devices": devices, "mig-enabled": entry.mig_enabled}
    else:
        item = {"devices": devices, "mig-enabled": entry.mig_enabled}
    if entry.mig_enabled:
        item["mig-devices"] = dict(entry.mig_devices)
    return item


def parse_entries(raw: object, where: str) -> tuple[MigPartedEntry, ...]:
    """A config's list of entries (decoded JSON or YAML); MigPartedError names the entry."""
    if not isinstance(raw, list) or not raw:
        raise MigPartedError(f"{where} must be a non-empty list of entries")
    return tuple(_parse_entry(f"{where}[{i}]", item) for i, item in enumerate(raw))


def _parse_entry(path: str, raw: object) -> MigPartedEntry:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise MigPartedError(f"{path} must be a mapping with devices and mig-enabled")
    if "devices" not in raw:
        raise MigPartedError(
            f"{path}.devices must be 'all' or a list of GPU indices; it is missing"
        )
    if "mig-enabled" not in raw:
        raise MigPartedError(f"{path}.mig-enabled must be true or false; it is missing")
    unknown = sorted(set(raw) - set(_ENTRY_KEYS))
    if unknown:
        raise MigPartedError(
            f"{path} has unknown keys: {', '.join(unknown)}; an entry has {', '.join(_ENTRY_KEYS)}"
        )
    filters = _parse_filter(path, raw.get("device-filter"))
    devices = raw["devices"]
    indices = [goyaml.json_int(d) for d in devices] if isinstance(devices, list) else []
    if devices != "all" and (not isinstance(devices, list) or None in indices):
        raise MigPartedError(f"{path}.devices must be 'all' or a list of GPU indices")
    enabled = raw["mig-enabled"]
    if not isinstance(enabled, bool | None):
        raise MigPartedError(f"{path}.mig-enabled must be true or false")
    counts = _parse_mig_devices(path, raw.get("mig-devices"))
    if enabled and counts is None:
        raise MigPartedError(
            f"{path}.mig-devices is required when mig-enabled is true (mig-devices: {{}} for none)"
        )
    if not enabled and counts:
        raise MigPartedError(f"{path}.mig-devices must be empty when mig-enabled is false")
    return MigPartedEntry(
        None if devices == "all" else tuple(i for i in indices if i is not None),
        bool(enabled),
        tuple(sorted((counts or {}).items())),
        filters,
    )


def _parse_filter(path: str, raw: object) -> tuple[str, ...]:
    if raw is None or raw == "":  # "" and null mean no filter; [""] is a filter matching nothing
        return ()
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list) and all(f is None or isinstance(f, str) for f in raw):
        return tuple(f or "" for f in raw)
    raise MigPartedError(f"{path}.device-filter must be a string or a list of strings")


def _parse_mig_devices(path: str, raw: object) -> dict[str, int] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise MigPartedError(f"{path}.mig-devices must map MIG profile names to counts")
    counts: dict[str, int] = {}
    for name, value in raw.items():
        count = goyaml.json_int(value)
        if count is None:
            raise MigPartedError(f"{path}.mig-devices.{name} must be a count >= 0, not {value!r}")
        try:
            parse_mig_device_name(name)
        except MigPartedError as error:
            raise MigPartedError(f"{path}.mig-devices: {error}") from None
        if count < 0:
            raise MigPartedError(f"{path}.mig-devices.{name} must be a count >= 0, not {count}")
        counts[name] = count
    if counts and not any(counts.values()):
        raise MigPartedError(
            f"{path}.mig-devices: every count is 0, which mig-parted refuses "
            "(write mig-devices: {} for MIG on with no devices)"
        )
    return counts


# -- documents ----------------------------------------------------------------------------------


def parse_mig_parted(text: str) -> dict[str, tuple[MigPartedEntry, ...]]:
    """Parse a mig-parted file; MigPartedError where mig-parted refuses it, naming the place.

    An empty file, or one with only ``version: v1``, holds no configs (mig-parted accepts it).
    """
    return _configs_of(_load(text))


def _configs_of(document: object) -> dict[str, tuple[MigPartedEntry, ...]]:
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise MigPartedError("mig-parted config must be a mapping with version and mig-configs")
    version = document.get("version")
    if version != VERSION:
        said = "missing" if version is None else repr(version)
        raise MigPartedError(f"version is {said}; mig-parted accepts only {VERSION}")
    unknown = sorted(set(document) - {"version", "mig-configs"})
    if unknown:
        raise MigPartedError(
            f"mig-parted config has unknown keys: {', '.join(unknown)}; "
            "it may hold only version and mig-configs"
        )
    if "mig-configs" not in document:
        return {}
    configs = document["mig-configs"]
    if not isinstance(configs, dict) or not configs:
        raise MigPartedError("mig-configs must be a non-empty mapping of name to entries")
    return {name: parse_entries(raw, f"mig-configs.{name}") for name, raw in configs.items()}


def render_mig_parted(configs: Mapping[str, Sequence[MigPartedEntry]]) -> str:
    """A mig-parted v1 YAML document with one named config per mapping key."""
    document = {
        "version": VERSION,
        "mig-configs": {
            name: [entry_json(e) for e in entries] for name, entries in configs.items()
        },
    }
    return goyaml.dump(document)


def _load(text: str) -> object:
    try:
        return goyaml.load(text, "mig-parted config")
    except goyaml.GoYamlError as error:
        raise MigPartedError(str(error)) from None


def profile_counts(layout: Sequence[Placed]) -> tuple[tuple[str, int], ...]:
    """Counts per profile name, sorted by name (mig-parted's ``mig-devices``)."""
    if not layout:
        return ()
    if len(layout) == 1:
        return ((layout[0].profile, 1),)
    counts: dict[str, int] = {}
    for placed in layout:  # a GPU holds 7 instances at most: a dict beats a Counter here
        counts[placed.profile] = counts.get(placed.profile, 0) + 1
    return tuple(sorted(counts.items()))


def mig_parted_entries(
    model: GpuModel,
    layouts: Mapping[int, Sequence[Placed]],
    device_filter: Sequence[str] | None = None,
    *,
    pci_ids: Mapping[int, int] | None = None,
) -> tuple[MigPartedEntry, ...]:
    """Entries for GPUs by index; GPUs with the same counts share one entry. mig-parted picks
    placements itself, so an entry carries counts, not starts.

    An entry's ``device-filter`` lists the PCI device id of each of its GPUs that ``pci_ids``
    knows (a list of ids is one filter to mig-parted, any of them matching: NVIDIA/mig-parted
    @bd7160f ``api/spec/v1/spec.go`` ``MigConfigSpec.UnmarshalJSON`` and
    ``api/spec/v1/helpers.go`` ``MatchesDeviceFilter``), and ``device_filter`` (default: every
    id of ``model``) where one is not known: a GPU of another id in the entry's ``devices``
    would be left as it is. No id of another model is ever added, so no GPU of another model
    is selected."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for index in sorted(layouts):
        groups.setdefault(profile_counts(layouts[index]), []).append(index)
    fallback = tuple(device_filter) if device_filter is not None else model.pci_filters
    known = pci_ids or {}

    def filters_of(indices: Sequence[int]) -> tuple[str, ...]:
        if not known:
            return fallback
        ids = sorted({f"0x{known[i]:04X}{NVIDIA_VENDOR_ID:04X}" for i in indices if i in known})
        if all(i in known for i in indices):
            return tuple(ids)
        return (*ids, *(f for f in fallback if f not in ids))

    return tuple(  # groups come in the order of their first GPU
        MigPartedEntry(tuple(indices), True, counts, filters_of(indices))
        for counts, indices in groups.items()
    )


def merge_mig_parted(
    text: str,
    add: Mapping[str, Sequence[MigPartedEntry]],
    referenced: Collection[str],
) -> str:
    """``text`` with the configs in ``add`` put in, and unreferenced ``migslice-*`` ones gone.

    Every other config is carried over as written (not re-parsed into our types), but the file is
    rewritten as YAML, so comments do not survive. MigPartedError when mig-parted would refuse
    ``text`` (nothing is merged into a file MIG Manager cannot read).
    """
    loaded = _load(text)
    _configs_of(loaded)
    document: dict[str, Any] = loaded if isinstance(loaded, dict) else {"version": VERSION}
    ours: dict[str, Any] = {name: [entry_json(e) for e in entries] for name, entries in add.items()}
    existing = document.get("mig-configs")
    merged: dict[str, Any] = {
        name: entries
        for name, entries in (existing if isinstance(existing, dict) else {}).items()
        if name not in ours and (not name.startswith(OWN_PREFIX) or name in referenced)
    }
    merged.update(ours)
    if merged:
        document["mig-configs"] = merged
    else:  # mig-parted refuses an empty mig-configs; a file with only a version is valid
        document.pop("mig-configs", None)
    return goyaml.dump(document)


def removed_configs(before: str, after: str) -> list[str]:
    """Names present in ``before`` and absent from ``after`` (for the log)."""

    def names(text: str) -> set[str]:
        try:
            document = _load(text)
        except MigPartedError:
            return set()
        configs = document.get("mig-configs") if isinstance(document, dict) else None
        return set(configs) if isinstance(configs, dict) else set()

    return sorted(names(before) - names(after))
