"""What MIG Manager does with a config on a node: which entry sets which GPU (by PCI device
id), the resulting GPU instances, and the names MIG Manager generates."""

from __future__ import annotations

import enum
import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice.mig.catalog import GpuModel, strip_product_suffix
from migslice.mig.fitting import FitResult, fit
from migslice.mig.migparted.common import BALANCED_FORMULA, MigPartedError
from migslice.mig.migparted.names import (
    GpuInstance,
    MigDeviceName,
    creation_orders,
    gpu_instances,
    instances_in_order,
    parse_mig_device_name,
)
from migslice.mig.migparted.spec import DeviceId, MigPartedEntry
from migslice.whynot import WhyNot

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
# v0.12.0 ships (2025-07-11), the comments of mig-parted's default config and the NVML names
# NVIDIA/open-gpu-kernel-modules@df1c9a3d README.md lists per id. A product missing here counts
# as any id of its catalog model.
PRODUCT_PCI_IDS: Mapping[str, tuple[int, ...]] = {
    "NVIDIA-A30": (0x20B7,),
    "NVIDIA-A100-SXM4-40GB": (0x20B0,),
    "NVIDIA-A100-PCIE-40GB": (0x20B1, 0x20F1),
    "NVIDIA-A800-SXM4-40GB": (0x20BD,),
    "NVIDIA-A800-40GB-ACTIVE": (0x20F6,),
    "NVIDIA-A100-SXM4-80GB": (0x20B2,),
    "NVIDIA-A100-80GB-PCIE": (0x20B5,),
    "NVIDIA-A800-SXM4-80GB": (0x20F3,),
    "NVIDIA-A800-80GB-PCIE": (0x20F5,),
    "NVIDIA-H100-80GB-HBM3": (0x2330,),
    "NVIDIA-H800": (0x2324,),
    "NVIDIA-H100-PCIE": (0x2331,),
    "NVIDIA-H800-PCIE": (0x2322,),
    "NVIDIA-H100-NVL": (0x2321,),
    "NVIDIA-H100": (0x2339,),
    "NVIDIA-H800-NVL": (0x233A,),
    "NVIDIA-GH200-480GB": (0x2342,),
    "NVIDIA-GH200-120GB": (0x2342,),
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
    # NVIDIA/open-gpu-kernel-modules@df1c9a3d README.md:962-969 (the 72GB card, subsystem 227A,
    # shares the device id and is not in the catalog; see docs/catalog.md)
    "NVIDIA-RTX-PRO-5000-BLACKWELL": (0x2BB3,),
    # README.md:981-984; 0x2C3A (pci.ids "RTX PRO 4500 Blackwell Server Edition") has no NVML
    # name there and no MIG User Guide row, so it is not in the catalog
    "NVIDIA-RTX-PRO-4500-BLACKWELL": (0x2C31,),
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
    gpu_pci_ids: Mapping[int, int] | None = None,
) -> list[tuple[bool, dict[str, int]]] | WhyNot:
    """(MIG enabled, GPU-instance counts) per GPU index after MIG Manager applies ``name``, or
    why that is not known.

    ``name`` is looked up in ``configs`` (the mig-parted file), else among MIG Manager's
    generated names (:func:`builtin_counts`). Entries select GPUs by PCI device id, each GPU
    being any of ``pci_device_ids`` (see :func:`gpu_pci_ids`; default: every id of ``model``)
    unless ``gpu_pci_ids`` gives its own (the node agent's, per GPU index).
    Counts are keyed by GPU-instance profile (``3c.3g.20gb`` counts as ``3g.20gb``).
    """
    entries = configs.get(name)
    if entries is None:
        builtin = builtin_counts(name, model)
        if builtin is None:
            return WhyNot("config-not-found", f"mig-parted config {name!r} not found")
        return [builtin] * gpu_count
    candidates = tuple(pci_device_ids) if pci_device_ids is not None else model.pci_device_ids
    own = gpu_pci_ids or {}
    per_gpu = [(own[i],) if i in own else candidates for i in range(gpu_count)]
    result: list[tuple[bool, dict[str, int]]] = []
    for setting in resolve_gpus(entries, per_gpu):
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
        problem = _device_plugin_problem(model, setting.mig_devices)
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


def applied_instances(
    model: GpuModel, mig_devices: Mapping[str, int]
) -> tuple[GpuInstance, ...] | str:
    """The GPU instances mig-parted ends with on a GPU of ``model`` for ``mig-devices``, or
    why it cannot apply them: the first creation order (:func:`creation_orders`, in the order
    ``iteratePermutationsUntilSuccess`` tries them; NVIDIA/mig-parted@bd7160f4
    pkg/mig/config/config.go:255-293) whose GPU instances fit the GPU, as the geometry engine
    judges them. ``{1c.3g.20gb: 2, 2c.3g.20gb: 2}`` on an A100-40GB fails in the first order
    (2c, 2c, 1c, 1c makes three 3g.20gb, the last 1c finding the newest one full) and applies
    in the second (2c, 1c, 2c, 1c: two 3g.20gb, each 2c + 1c). When no order fits, the reason
    is the first order's, as mig-parted logs it first."""
    orders = creation_orders(mig_devices)
    try:
        first = instances_in_order(next(orders, ()))
    except MigPartedError as error:
        return str(error)  # a compute size no GPU instance offers: every order fails on it
    missing = sorted({i.profile for i in first if not model.has_profile(i.profile)})
    if missing:
        return f"{model.key} has no MIG profile {', '.join(missing)}"
    reason = _fit_reason(model, first)
    if not reason:
        return first
    compute = sum(n.compute_slices * c for n, c in _parsed_counts(mig_devices))
    if compute > model.compute_slices:  # no order can fit: skip the multinomial of them
        return (
            f"{reason}; its compute instances need {compute} compute slices of "
            f"{model.compute_slices}, so no order mig-parted tries fits"
        )
    tried = 1
    for order in orders:
        tried += 1
        made = instances_in_order(order)
        if not _fit_reason(model, made):
            return made
    if tried == 1:
        return f"{reason} (in the one order mig-parted can try)"
    return f"{reason} (in the first of the {tried} orders mig-parted tries; none fits)"


def _parsed_counts(mig_devices: Mapping[str, int]) -> list[tuple[MigDeviceName, int]]:
    return [(parse_mig_device_name(text), count) for text, count in mig_devices.items()]


def _fit_reason(model: GpuModel, made: Sequence[GpuInstance]) -> str:
    result = _fit_gpu_instances(model, tuple(sorted(i.profile for i in made)))
    return "" if result.feasible else result.reason


@functools.lru_cache(maxsize=1024)
def _fit_gpu_instances(model: GpuModel, profiles: tuple[str, ...]) -> FitResult:
    return fit(model, profiles)


def _apply_problem(model: GpuModel, mig_devices: Sequence[tuple[str, int]]) -> str:
    made = applied_instances(model, dict(mig_devices))
    return made if isinstance(made, str) else ""


def _device_plugin_problem(model: GpuModel, mig_devices: Sequence[tuple[str, int]]) -> str:
    """Why the device plugin's mixed strategy cannot serve a GPU with these devices, or ""."""
    partial = [d for d, n in mig_devices if n and parse_mig_device_name(d).is_compute_instance]
    if not partial:
        return ""
    try:
        applied = applied_instances(model, dict(mig_devices))
        made = "; ".join(
            f"{i.profile} holding {', '.join(i.compute)}"
            for i in (gpu_instances(dict(mig_devices)) if isinstance(applied, str) else applied)
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
