"""Fitting profiles onto one GPU, and how fragmented a GPU's free part is.

:func:`fit` places requested profiles beside existing instances (complete backtracking over
legal starts, largest first) or gives the precise reason no placement exists: a per-GPU
maximum, the compute or memory slices, the pre-R510 rule, or the geometry itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.mig.catalog import GpuModel, Profile
from migslice.mig.layout import (
    DEFAULT_RULES,
    Layout,
    Occupancy,
    Placed,
    Rules,
    is_3g_shape,
    is_4g_shape,
    make_layout,
    violations,
)


@dataclass(frozen=True, slots=True)
class FitResult:
    """The answer of :func:`fit`: a legal placement of the new instances, or why none exists."""

    feasible: bool
    placement: Layout
    reason: str

    @property
    def layout(self) -> Layout:
        """Not only the new instances: the full layout after the fit."""
        return self.placement


def fit(
    model: GpuModel,
    requested: Sequence[str],
    *,
    existing: Sequence[Placed] = (),
    rules: Rules = DEFAULT_RULES,
) -> FitResult:
    """Place ``requested`` profiles beside ``existing`` instances on one GPU.

    Returns the full layout (existing plus new) or the precise reason no placement exists.
    Complete: if any legal placement exists, one is found (backtracking over legal starts).
    """
    wanted = [model.profile(name) for name in requested]
    problems = violations(model, existing, rules)
    if problems:
        return FitResult(False, (), "the existing layout is not legal: " + "; ".join(problems))
    reason = _capacity_reason(model, wanted, existing, rules)
    if reason:
        return FitResult(False, (), reason)
    # Largest first; equal profiles in increasing start order to avoid permutations.
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    occupancy = Occupancy.of(model, existing)
    placed: list[Placed] = []

    def search(index: int, min_start: int) -> bool:
        if index == len(wanted):
            return True
        profile = wanted[index]
        for start in profile.placements:
            if start < min_start or not occupancy.can_add(model, profile, start, rules=rules):
                continue
            instance = Placed(start, profile.name, profile.memory_slices)
            occupancy.add(profile, instance)
            placed.append(instance)
            same_next = index + 1 < len(wanted) and wanted[index + 1].name == profile.name
            if search(index + 1, start + 1 if same_next else 0):
                return True
            placed.pop()
            occupancy.remove(profile, instance)
        return False

    if search(0, 0):
        return FitResult(True, make_layout([*existing, *placed]), "")
    return FitResult(False, (), _geometry_reason(model, wanted, existing, rules))


def _describe(profiles: Sequence[Profile]) -> str:
    """``4g.40gb + 2 x 2g.20gb``: largest first."""
    counts = Counter(profiles)
    ordered = sorted(counts, key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    return " + ".join(f"{counts[p]} x {p.name}" if counts[p] > 1 else p.name for p in ordered)


def _need(profiles: Sequence[Profile]) -> str:
    """The verb after :func:`_describe`: ``7g.80gb needs``, ``2 x 3g.40gb need``."""
    return "needs" if len(profiles) == 1 else "need"


def _capacity_reason(
    model: GpuModel, wanted: Sequence[Profile], existing: Sequence[Placed], rules: Rules
) -> str:
    existing_profiles = [model.profile(p.profile) for p in existing]
    total_counts = Counter(p.name for p in [*existing_profiles, *wanted])
    for name, count in sorted(total_counts.items()):
        limit = model.profile(name).max_count
        if count > limit:
            return f"{count} x {name} exceed the maximum of {limit} per GPU on {model.key}"
    media = sum(p.is_media_extended for p in [*existing_profiles, *wanted])
    if media > 1:
        return f"{media} +me instances requested; {model.key} allows one per GPU"
    used_compute = sum(p.compute_slices for p in existing_profiles)
    need_compute = sum(p.compute_slices for p in wanted)
    if used_compute + need_compute > model.compute_slices:
        return (
            f"{_describe(wanted)} {_need(wanted)} {need_compute} compute slices; {model.key} has "
            f"{model.compute_slices - used_compute} free of {model.compute_slices}"
        )
    used_memory = sum(p.memory_slices for p in existing_profiles)
    need_memory = sum(p.memory_slices for p in wanted)
    if used_memory + need_memory > model.memory_slices:
        return (
            f"{_describe(wanted)} {_need(wanted)} {need_memory} memory slices; {model.key} has "
            f"{model.memory_slices - used_memory} free of {model.memory_slices}"
        )
    everything = [*existing_profiles, *wanted]
    if rules.pre_r510 and any(map(is_4g_shape, everything)) and any(map(is_3g_shape, everything)):
        return "4g and 3g instances together need driver R510 or later"
    return ""


def _geometry_reason(
    model: GpuModel, wanted: Sequence[Profile], existing: Sequence[Placed], rules: Rules
) -> str:
    occupancy = Occupancy.of(model, existing)
    free = [i for i in range(model.memory_slices) if not occupancy.mask >> i & 1]
    starts = "; ".join(
        f"{p.name} at {','.join(map(str, p.placements))}"
        for p in sorted(set(wanted), key=lambda p: p.name)
    )
    return (
        f"no legal arrangement of {_describe(wanted)} on {model.key}: free memory slices "
        f"{_ranges(free) or 'none'}; legal starts: {starts}"
    )


def _ranges(indices: Sequence[int]) -> str:
    parts: list[str] = []
    for index in indices:
        if parts and int(parts[-1].split("-")[-1]) == index - 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ",".join(parts)
