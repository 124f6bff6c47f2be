"""NVIDIA mig-parted configs, read and applied the way mig-parted and MIG Manager do.

The file MIG Manager applies (``version: v1``; ``mig-configs`` maps a name to a list of
entries, each with an optional ``device-filter`` of PCI ids, ``devices`` as ``all`` or GPU
indices, ``mig-enabled`` and ``mig-devices`` counts per MIG device name). The node label
``nvidia.com/mig.config`` selects a config by name. Everything here follows NVIDIA's code at the
pinned versions, NVIDIA/mig-parted @bd7160f (go-nvlib v0.12.0, sigs.k8s.io/yaml v1.6.0) and
NVIDIA/k8s-device-plugin @1b826ac (docs/mig-parted.md says what that means in practice):

* :func:`parse_mig_parted` gives the verdicts of ``api/spec/v1/spec.go`` (``Spec`` and
  ``MigConfigSpec.UnmarshalJSON``) on a file read as mig-parted reads it
  (:mod:`migslice.mig.goyaml`: go-yaml v2 scalars, then ``encoding/json``).
* ``mig-devices`` keys are checked as go-nvlib's ``parseMigProfile`` checks them: a format, not a
  catalog lookup (``0g.0gb`` and ``1g.5gb+foo`` pass; whether the GPU has them shows at apply).
* ``device-filter`` matching is ``pkg/types/device.go`` (``NewDeviceIDFromString``, ``Matches``):
  against the GPU's PCI device id ``0xDDDD10DE``, never the GPU model.
* Which entry sets which GPU is ``cmd/nvidia-mig-parted/assert/assert.go``
  (``WalkSelectedMigConfigForEachGPU``) with ``apply/mode.go`` and ``apply/config.go``: every entry
  is applied, in order, to each GPU its filter and ``devices`` select; a GPU no entry selects is
  left as it is.
* MIG Manager's generated names are ``pkg/mig/builder`` and ``pkg/mig/discovery``.
* Compute-instance names (``1c.3g.20gb``) create instances as ``pkg/mig/config/config.go``
  (``SetMigConfig``) does; the device plugin's mixed strategy advertises only devices whose
  compute instance spans the GPU instance (k8s-device-plugin ``internal/rm/rm.go``
  ``AddDefaultResourcesToConfig``) and fails to build its device map on any other
  (``internal/rm/device_map.go`` ``buildMigDeviceMap``: "does not match any resource patterns").
"""

from __future__ import annotations

import enum
import re
import string
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from migslice.errors import InvalidInputError
from migslice.mig import goyaml
from migslice.mig.catalog import GpuModel, strip_product_suffix
from migslice.mig.fitting import fit
from migslice.mig.layout import Placed
from migslice.names import OWN_CONFIG_PREFIX
from migslice.whynot import WhyNot

VERSION = "v1"
OWN_PREFIX = OWN_CONFIG_PREFIX
NVIDIA_VENDOR_ID = 0x10DE
RESOURCE_PREFIX = "nvidia.com/mig-"

# Compute-instance sizes a GPU instance of G slices offers (mig-parted
# pkg/mig/config/known_configs.go, A100-SXM4-40GB: 1c.1g .. 7c.7g).
CI_SIZES: Mapping[int, tuple[int, ...]] = {
    1: (1,),
    2: (1, 2),
    3: (1, 2, 3),
    4: (1, 2, 4),
    7: (1, 2, 3, 4, 7),
}

# MIG Manager's all-balanced, G -> count, by the GPU's largest G (pkg/mig/builder/balanced.go).
BALANCED_FORMULA: Mapping[int, Mapping[int, int]] = {
    7: {1: 2, 2: 1, 3: 1},
    4: {1: 2, 2: 1},
}


class MigPartedError(InvalidInputError):
    """A mig-parted config that mig-parted would refuse; the message says where and why."""


# -- MIG device names ---------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+")
_NAME_HINT = (
    "expected <G>g.<GB>gb or <C>c.<G>g.<GB>gb, optionally with +attr or -attr "
    "(e.g. 3g.40gb, 1c.3g.40gb, 1g.10gb+me, 1g.24gb-me)"
)


@dataclass(frozen=True, slots=True)
class MigDeviceName:
    """A ``mig-devices`` key as go-nvlib parses it: C compute slices in a G-slice GPU instance.

    ``3g.40gb`` is C = G = 3. ``1c.3g.40gb`` is a 3g.40gb GPU instance holding a 1-slice compute
    instance. ``attributes`` follow ``+`` (``me``, ``me.all``, ``gfx``), ``negative_attributes``
    follow ``-`` (``me``); both sorted, as go-nvlib compares them.
    """

    compute_slices: int
    gpu_slices: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    negative_attributes: tuple[str, ...] = ()

    @property
    def _suffix(self) -> str:
        if self.negative_attributes:
            return "-" + ",".join(self.negative_attributes)
        return "+" + ",".join(self.attributes) if self.attributes else ""

    def __str__(self) -> str:
        """go-nvlib's ``MigProfileInfo.String``: the C prefix only when C differs from G."""
        if self.compute_slices == self.gpu_slices:
            return self.gpu_instance
        return f"{self.compute_slices}c.{self.gpu_instance}"

    @property
    def gpu_instance(self) -> str:
        """The GPU-instance profile it lives in (``1c.3g.40gb`` -> ``3g.40gb``)."""
        return f"{self.gpu_slices}g.{self.memory_gb}gb{self._suffix}"

    @property
    def is_compute_instance(self) -> bool:
        """A compute instance smaller than its GPU instance (``1c.3g.40gb``)."""
        return self.compute_slices != self.gpu_slices

    @property
    def resource(self) -> str | None:
        """The mixed-strategy resource the device plugin advertises for it, or None.

        k8s-device-plugin ``internal/rm/rm.go`` registers only profiles with C == G
        (``if info.C != info.G { return nil }``), as ``mig-<profile>`` with ``+`` -> ``.``.
        """
        if self.is_compute_instance:
            return None
        return RESOURCE_PREFIX + self.gpu_instance.replace("+", ".")


def parse_mig_device_name(text: str) -> MigDeviceName:
    """go-nvlib's ``parseMigProfile``; MigPartedError says what is wrong with ``text``."""

    def fail(reason: str) -> MigPartedError:
        return MigPartedError(f"{text!r} is not a MIG profile name: {reason}; {_NAME_HINT}")

    if not text:
        raise fail("empty")
    plus, minus = text.split("+", 1), text.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise fail("it has both + and - attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) not in (2, 3):
        raise fail("it needs 2 or 3 dot-separated fields")
    numbers = [
        _name_field(field, suffix, fail)
        for field, suffix in zip(fields, ("c", "g", "gb")[3 - len(fields) :], strict=True)
    ]
    compute, gpu, memory = numbers if len(numbers) == 3 else [numbers[0], *numbers]
    attributes = _name_attributes(parts[1], fail) if len(parts) == 2 else ()
    if len(minus) == 2:
        return MigDeviceName(compute, gpu, memory, (), attributes)
    return MigDeviceName(compute, gpu, memory, attributes)


def _name_field(field: str, suffix: str, fail: Callable[[str], MigPartedError]) -> int:
    if field.strip() != field:
        raise fail(f"spaces around '%d{suffix}'")
    number = field.removesuffix(suffix)
    if number == field or not _DIGITS.fullmatch(number) or int(number) >= 1 << 63:
        raise fail(f"'{field}' is not '<number>{suffix}'")
    return int(number)


def _name_attributes(text: str, fail: Callable[[str], MigPartedError]) -> tuple[str, ...]:
    attributes = text.split(",")
    if len(set(attributes)) != len(attributes):
        raise fail("an attribute is repeated")
    for attribute in attributes:
        allowed = string.ascii_letters + string.digits + "."
        if not attribute or not all(char in allowed for char in attribute):
            raise fail(f"attribute {attribute!r} is not letters, digits and dots")
        if attribute[0] in string.digits or "." in (attribute[0], attribute[-1]):
            raise fail(f"attribute {attribute!r} starts with a digit or starts or ends with a dot")
    return tuple(sorted(attributes))


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """A GPU instance mig-parted creates and the compute instances it puts in it."""

    profile: str
    compute: tuple[str, ...]


def gpu_instances(mig_devices: Mapping[str, int]) -> tuple[GpuInstance, ...]:
    """The instances ``SetMigConfig`` creates for ``mig-devices`` (first creation order tried).

    mig-parted flattens the counts (largest G first, then largest C, then attributes) and creates
    each device in turn; a device whose GPU-instance profile is the one just created is put into
    that GPU instance as a further compute instance when it fits, else into a new GPU instance.
    So ``{"1c.3g.20gb": 4}`` is two 3g.20gb GPU instances, with 3 and 1 compute instances. When
    this order does not fit the GPU, mig-parted tries others. MigPartedError for a compute size
    the GPU instance does not offer.
    """
    flat: list[MigDeviceName] = []
    for text, count in sorted(mig_devices.items()):
        flat.extend([parse_mig_device_name(text)] * max(count, 0))
    flat.sort(key=lambda n: ",".join(n.attributes), reverse=True)
    flat.sort(key=lambda n: (-n.gpu_slices, -n.compute_slices))
    made: list[tuple[str, int, list[str]]] = []  # (GPU instance, compute slices used, CIs)
    for name in flat:
        full = name.compute_slices == name.gpu_slices
        if not full and name.compute_slices not in CI_SIZES.get(name.gpu_slices, ()):
            raise MigPartedError(
                f"{name} asks for a {name.compute_slices}-slice compute instance in a "
                f"{name.gpu_slices}-slice GPU instance, which offers {_sizes(name.gpu_slices)}"
            )
        if made and made[-1][0] == name.gpu_instance:
            profile, used, cis = made[-1]
            if used + name.compute_slices <= name.gpu_slices:
                made[-1] = (profile, used + name.compute_slices, [*cis, str(name)])
                continue
        made.append((name.gpu_instance, name.compute_slices, [str(name)]))
    return tuple(GpuInstance(profile, tuple(cis)) for profile, _, cis in made)


def _sizes(gpu_slices: int) -> str:
    sizes = CI_SIZES.get(gpu_slices, ())
    return ", ".join(f"{c}c" for c in sizes) if sizes else "none that mig-parted knows"


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
    return tuple(sorted(Counter(p.profile for p in layout).items()))


def mig_parted_entries(
    model: GpuModel,
    layouts: Mapping[int, Sequence[Placed]],
    device_filter: Sequence[str] | None = None,
) -> tuple[MigPartedEntry, ...]:
    """Entries for GPUs by index; GPUs with the same counts share one entry. mig-parted picks
    placements itself, so an entry carries counts, not starts."""
    groups: dict[tuple[tuple[str, int], ...], list[int]] = {}
    for index in sorted(layouts):
        groups.setdefault(profile_counts(layouts[index]), []).append(index)
    filters = tuple(device_filter) if device_filter is not None else model.pci_filters
    return tuple(
        MigPartedEntry(tuple(indices), True, counts, filters)
        for counts, indices in sorted(groups.items(), key=lambda item: item[1][0])
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


# -- what MIG Manager does with a config --------------------------------------------------------


class Outcome(enum.StrEnum):
    SET = "set"  # the entries listed set the GPU (the last one applied wins)
    UNTOUCHED = "untouched"  # no entry selects the GPU; MIG Manager leaves it as it is
    FAILS = "fails"  # mig-parted's apply fails on this GPU
    UNKNOWN = "unknown"  # the answer depends on a PCI id that is not known here


@dataclass(frozen=True, slots=True)
class GpuSetting:
    """What applying a config does to one GPU, and which entries (by position) select it."""

    index: int
    outcome: Outcome
    entries: tuple[int, ...] = ()
    mig_enabled: bool = False
    mig_devices: tuple[tuple[str, int], ...] = ()
    reason: str = ""


def resolve_gpus(
    entries: Sequence[MigPartedEntry], pci_device_ids: Sequence[Sequence[int]]
) -> tuple[GpuSetting, ...]:
    """Per GPU index, what the config does, given each GPU's possible PCI device ids.

    mig-parted walks the entries in order and applies each to every GPU its ``device-filter``
    (by PCI device id) and ``devices`` select. Two entries selecting one GPU are both applied:
    the MIG mode of the last stays, so entries that disagree on ``mig-enabled`` fail the apply
    (``apply/config.go``: "unable to apply MIG config with MIG mode disabled"), and otherwise
    the last entry's devices are what the GPU ends with. A GPU with several possible PCI ids
    (no node agent, a model sold under several) has an answer only when every id gives the same.
    """
    settings = []
    for index, candidates in enumerate(pci_device_ids):
        answers = {pci: _settle(entries, index, pci) for pci in candidates}
        ids = ", ".join(f"0x{pci:04X}" for pci in answers)
        distinct = set(answers.values())
        if not distinct:
            reason = f"no PCI device id is known for GPU {index}"
            settings.append(GpuSetting(index, Outcome.UNKNOWN, reason=reason))
        elif len(distinct) == 1:
            setting = distinct.pop()
            if setting.outcome is Outcome.UNTOUCHED:
                reason = (
                    f"no entry selects GPU {index} (PCI device id {ids}), so MIG Manager "
                    "leaves it as it is"
                )
                setting = GpuSetting(index, Outcome.UNTOUCHED, reason=reason)
            settings.append(setting)
            continue
        else:
            detail = "; ".join(f"0x{pci:04X}: {_describe(s)}" for pci, s in answers.items())
            reason = (
                f"GPU {index} could have PCI device id {ids} and the config treats them "
                f"differently ({detail}); the node agent's annotation says which"
            )
            settings.append(GpuSetting(index, Outcome.UNKNOWN, reason=reason))
    return tuple(settings)


def _settle(entries: Sequence[MigPartedEntry], index: int, pci: int) -> GpuSetting:
    chosen: list[int] = []
    for position, entry in enumerate(entries):
        if not entry.selects_index(index):
            continue
        selects = entry.selects_device(DeviceId(pci))
        if selects is None:
            reason = (
                f"entry {position}'s device-filter names a PCI subsystem id, and GPU {index}'s "
                "is not known here"
            )
            return GpuSetting(index, Outcome.UNKNOWN, reason=reason)
        if selects:
            chosen.append(position)
    if not chosen:
        return GpuSetting(index, Outcome.UNTOUCHED)
    last = entries[chosen[-1]]
    if any(entries[k].mig_enabled != last.mig_enabled for k in chosen):
        on = [str(k) for k in chosen if entries[k].mig_enabled]
        off = [str(k) for k in chosen if not entries[k].mig_enabled]
        reason = (
            f"GPU {index} is selected by entries {', '.join(on)} (MIG on) and "
            f"{', '.join(off)} (MIG off); mig-parted keeps the mode of entry {chosen[-1]} and "
            "then fails on the others"
        )
        return GpuSetting(index, Outcome.FAILS, tuple(chosen), reason=reason)
    return GpuSetting(index, Outcome.SET, tuple(chosen), last.mig_enabled, last.mig_devices)


def _describe(setting: GpuSetting) -> str:
    if setting.outcome is Outcome.SET:
        return f"entry {setting.entries[-1]}"
    if setting.outcome is Outcome.UNTOUCHED:
        return "no entry, left as is"
    return setting.outcome.value


# PCI device ids per GFD product label (the NVML name), from the PCI id database that go-nvlib
# v0.12.0 ships (2025-07-11) and the comments of mig-parted's default config. A product missing
# here (NVIDIA-H100-94GB-HBM2e: 0x2339 or another?) counts as any id of its catalog model.
PRODUCT_PCI_IDS: Mapping[str, tuple[int, ...]] = {
    "NVIDIA-A30": (0x20B7,),
    "NVIDIA-A100-SXM4-40GB": (0x20B0,),
    "NVIDIA-A100-PCIE-40GB": (0x20B1, 0x20F1),
    "NVIDIA-A800-SXM4-40GB": (0x20BD,),
    "NVIDIA-A100-SXM4-80GB": (0x20B2,),
    "NVIDIA-A100-80GB-PCIE": (0x20B5,),
    "NVIDIA-A800-SXM4-80GB": (0x20F3,),
    "NVIDIA-A800-80GB-PCIE": (0x20F5,),
    "NVIDIA-H100-80GB-HBM3": (0x2330,),
    "NVIDIA-H800": (0x2324,),
    "NVIDIA-H100-PCIE": (0x2331,),
    "NVIDIA-H800-PCIE": (0x2322,),
    "NVIDIA-H100-NVL": (0x2321,),
    "NVIDIA-H800-NVL": (0x233A,),
    "NVIDIA-GH200-480GB": (0x2342,),
    "NVIDIA-H100-96GB-HBM3": (0x233D,),
    "NVIDIA-H20": (0x2329,),
    "NVIDIA-GH200-144G-HBM3E": (0x2348,),
    "NVIDIA-H200": (0x2335,),
    "NVIDIA-H200-NVL": (0x233B,),
    "NVIDIA-B200": (0x2901,),
    "NVIDIA-GB200": (0x2941,),
    "NVIDIA-RTX-PRO-6000-BLACKWELL-SERVER-EDITION": (0x2BB5,),
    "NVIDIA-RTX-PRO-6000-BLACKWELL-WORKSTATION-EDITION": (0x2BB1,),
    "NVIDIA-RTX-PRO-6000-BLACKWELL-MAX-Q-WORKSTATION-EDITION": (0x2BB4,),
}


def gpu_pci_ids(model: GpuModel, product: str | None, reported: int | None) -> tuple[int, ...]:
    """The PCI device ids a node's GPUs may have: the one the node agent reports, else those of
    the GFD product label, else every id of the catalog model (some products and models have
    several; :func:`resolve_gpus` answers only where they all agree)."""
    if reported is not None:
        return (reported,)
    label = strip_product_suffix(product or "").strip().upper().replace(" ", "-")
    known = PRODUCT_PCI_IDS.get(label, ())
    if known and set(known) <= set(model.pci_device_ids):
        return known
    return model.pci_device_ids


def per_gpu_counts(
    name: str,
    model: GpuModel,
    gpu_count: int,
    *,
    configs: Mapping[str, Sequence[MigPartedEntry]],
    pci_device_ids: Sequence[int] | None = None,
) -> list[tuple[bool, dict[str, int]]] | WhyNot:
    """(MIG enabled, GPU-instance counts) per GPU index after MIG Manager applies ``name``, or
    why that is not known.

    ``name`` is looked up in ``configs`` (the mig-parted file), else among MIG Manager's
    generated names (:func:`builtin_counts`). Entries select GPUs by PCI device id, each GPU
    being any of ``pci_device_ids`` (see :func:`gpu_pci_ids`; default: every id of ``model``).
    Counts are keyed by GPU-instance profile (``3c.3g.20gb`` counts as ``3g.20gb``).
    """
    entries = configs.get(name)
    if entries is None:
        builtin = builtin_counts(name, model)
        if builtin is None:
            return WhyNot("config-not-found", f"mig-parted config {name!r} not found")
        return [builtin] * gpu_count
    candidates = tuple(pci_device_ids) if pci_device_ids is not None else model.pci_device_ids
    result: list[tuple[bool, dict[str, int]]] = []
    for setting in resolve_gpus(entries, [candidates] * gpu_count):
        if setting.outcome is not Outcome.SET:
            return WhyNot(
                "gpu-not-set", f"mig-parted config {name!r} on {model.key}: {setting.reason}"
            )
        for position in setting.entries[:-1]:  # applied first, then replaced by the last
            problem = _apply_problem(model, entries[position].mig_devices)
            if problem:
                return WhyNot(
                    "apply-fails",
                    f"mig-parted config {name!r} entry {position}, GPU {setting.index}: {problem}",
                )
        problem = _device_plugin_problem(setting.mig_devices)
        if problem:
            return WhyNot(
                "no-device-plugin-resource",
                f"mig-parted config {name!r} GPU {setting.index}: {problem}",
            )
        counts: Counter[str] = Counter()
        for device, count in setting.mig_devices:
            counts[parse_mig_device_name(device).gpu_instance] += count
        result.append((setting.mig_enabled, dict(counts)))
    return result


def _apply_problem(model: GpuModel, mig_devices: Sequence[tuple[str, int]]) -> str:
    try:
        made = gpu_instances(dict(mig_devices))
    except MigPartedError as error:
        return str(error)
    wanted = [instance.profile for instance in made]
    missing = sorted({p for p in wanted if not model.has_profile(p)})
    if missing:
        return f"{model.key} has no MIG profile {', '.join(missing)}"
    result = fit(model, wanted)
    return "" if result.feasible else result.reason


def _device_plugin_problem(mig_devices: Sequence[tuple[str, int]]) -> str:
    """Why the device plugin's mixed strategy cannot serve a GPU with these devices, or ""."""
    partial = [d for d, n in mig_devices if n and parse_mig_device_name(d).is_compute_instance]
    if not partial:
        return ""
    try:
        made = "; ".join(
            f"{i.profile} holding {', '.join(i.compute)}"
            for i in gpu_instances(dict(mig_devices))
            if any(parse_mig_device_name(c).is_compute_instance for c in i.compute)
        )
    except MigPartedError as error:
        return str(error)
    return (
        f"{', '.join(partial)} creates compute instances smaller than their GPU instance "
        f"({made}); the device plugin's mixed strategy advertises no resource for them and "
        "stops serving the node ('does not match any resource patterns')"
    )


def builtin_counts(name: str, model: GpuModel) -> tuple[bool, dict[str, int]] | None:
    """A config MIG Manager generates from the hardware, for a GPU of ``model``, or None.

    ``pkg/mig/builder``: ``all-disabled``, ``all-enabled`` (MIG on, no devices), ``all-balanced``
    (2 x 1g + 1 x 2g + 1 x 3g on 7-slice GPUs, 2 x 1g + 1 x 2g on 4-slice ones, taking per G
    the plain profile with the highest max count) and ``all-<profile>`` (``+`` written ``.``) at
    the profile's max count, for every profile of the GPU; none for compute-instance profiles.
    """
    if name == "all-disabled":
        return (False, {})
    if name == "all-enabled":
        return (True, {})
    if name == "all-balanced":
        return _balanced(model)
    wanted = name.removeprefix("all-")
    for profile in model.profiles:
        if name.startswith("all-") and profile.name.replace("+", ".") == wanted:
            return (True, {profile.name: profile.max_count})
    return None


def _balanced(model: GpuModel) -> tuple[bool, dict[str, int]] | None:
    plain = [p for p in model.profiles if not p.parsed.attribute]
    formula = BALANCED_FORMULA.get(max((p.compute_slices for p in plain), default=0))
    if formula is None:
        return None
    chosen: dict[int, str] = {}
    best: dict[int, int] = {}
    for profile in plain:
        g = profile.compute_slices
        if g in formula and profile.max_count > best.get(g, 0):
            chosen[g], best[g] = profile.name, profile.max_count
    if set(chosen) != set(formula):
        return None
    return (True, {chosen[g]: count for g, count in sorted(formula.items())})
