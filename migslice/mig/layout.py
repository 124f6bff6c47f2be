"""Layouts: placed GPU instances on one GPU, their legality, enumeration and fitting.

A GPU has ``model.memory_slices`` memory slices (8 on A100/H100-class parts) and
``model.compute_slices`` SM slices (7). An instance of a profile occupies ``memory_slices``
consecutive memory slices from one of the profile's legal starts and ``compute_slices`` SM
slices. A layout is legal when (NVIDIA MIG User Guide; NVML placement semantics):

1. every instance starts at a legal start of its profile and fits on the GPU;
2. no two instances share a memory slice;
3. the SM slices used add up to at most ``model.compute_slices``;
4. no profile exceeds its maximum count;
5. at most one ``+me`` instance per GPU; a ``+me.all`` instance allows only ``-me`` others;
6. before driver R510, a 4-compute/4-memory and a 3-compute/4-memory instance never coexist.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migslice.mig.catalog import GpuModel, Profile


@dataclass(frozen=True, slots=True, order=True)
class Placed:
    """One GPU instance: a profile at a start memory slice (size in memory slices)."""

    start: int
    profile: str
    size: int

    def as_dict(self) -> dict[str, int | str]:
        return {"profile": self.profile, "start": self.start, "size": self.size}

    @property
    def mask(self) -> int:
        return ((1 << self.size) - 1) << self.start


Layout = tuple[Placed, ...]
"""A layout is a tuple of placed instances sorted by start."""


def make_layout(instances: Iterable[Placed]) -> Layout:
    return tuple(sorted(instances))


def place(model: GpuModel, profile: str, start: int) -> Placed:
    """A placed instance of ``profile`` at ``start`` (size from the catalog)."""
    return Placed(start, profile, model.profile(profile).memory_slices)


@dataclass(frozen=True, slots=True)
class Rules:
    """Driver-dependent rules. ``pre_r510``: drivers before R510 forbid 4g next to 3g."""

    pre_r510: bool = False


DEFAULT_RULES = Rules()


@dataclass(slots=True)
class _Occupancy:
    """Running totals of a layout, for constant-time "can I add this" checks."""

    mask: int
    compute: int
    counts: Counter[str]
    media: int
    all_media: int
    non_no_media: int
    fours: int
    threes: int

    @classmethod
    def of(cls, model: GpuModel, instances: Iterable[Placed]) -> _Occupancy:
        occupancy = cls(0, 0, Counter(), 0, 0, 0, 0, 0)
        for placed in instances:
            occupancy.add(model.profile(placed.profile), placed)
        return occupancy

    def add(self, profile: Profile, placed: Placed) -> None:
        self.mask |= placed.mask
        self.compute += profile.compute_slices
        self.counts[profile.name] += 1
        self.media += profile.is_media_extended
        self.all_media += profile.has_all_media
        self.non_no_media += not profile.has_no_media
        self.fours += _is_4g(profile)
        self.threes += _is_3g(profile)

    def remove(self, profile: Profile, placed: Placed) -> None:
        self.mask &= ~placed.mask
        self.compute -= profile.compute_slices
        self.counts[profile.name] -= 1
        self.media -= profile.is_media_extended
        self.all_media -= profile.has_all_media
        self.non_no_media -= not profile.has_no_media
        self.fours -= _is_4g(profile)
        self.threes -= _is_3g(profile)

    def can_add(self, model: GpuModel, profile: Profile, start: int, rules: Rules) -> bool:
        size = profile.memory_slices
        if start not in profile.placements or start + size > model.memory_slices:
            return False
        if self.mask & (((1 << size) - 1) << start):
            return False
        if self.compute + profile.compute_slices > model.compute_slices:
            return False
        if self.counts[profile.name] >= profile.max_count:
            return False
        if profile.is_media_extended and self.media >= 1:
            return False
        if profile.has_all_media and (self.all_media >= 1 or self.non_no_media > 0):
            return False
        if self.all_media and not profile.has_no_media:
            return False
        if rules.pre_r510 and (
            (_is_4g(profile) and self.threes) or (_is_3g(profile) and self.fours)
        ):
            return False
        return True


def _is_4g(profile: Profile) -> bool:
    return profile.compute_slices == 4 and profile.memory_slices == 4


def _is_3g(profile: Profile) -> bool:
    return profile.compute_slices == 3 and profile.memory_slices == 4


def violations(
    model: GpuModel, instances: Sequence[Placed], rules: Rules = DEFAULT_RULES
) -> list[str]:
    """Every reason why ``instances`` is not a legal layout on ``model`` (empty if legal)."""
    problems: list[str] = []
    known: list[tuple[Profile, Placed]] = []
    for placed in instances:
        if not model.has_profile(placed.profile):
            problems.append(
                f"{model.key} has no profile {placed.profile!r} "
                f"(its profiles: {', '.join(model.profile_names)})"
            )
            continue
        profile = model.profile(placed.profile)
        if placed.size != profile.memory_slices:
            problems.append(
                f"{placed.profile}@{placed.start} has size {placed.size}; "
                f"{placed.profile} occupies {profile.memory_slices} memory slices"
            )
        elif placed.start not in profile.placements:
            starts = ",".join(map(str, profile.placements))
            problems.append(
                f"{placed.profile} cannot start at memory slice {placed.start}; "
                f"legal starts on {model.key}: {starts}"
            )
        known.append((profile, placed))
    used = 0
    for _, placed in known:
        if placed.mask & used:
            problems.append(f"{placed.profile}@{placed.start} overlaps another instance")
        used |= placed.mask
    compute = sum(p.compute_slices for p, _ in known)
    if compute > model.compute_slices:
        problems.append(
            f"instances use {compute} compute slices; {model.key} has {model.compute_slices}"
        )
    counts = Counter(p.name for p, _ in known)
    for name, count in sorted(counts.items()):
        limit = model.profile(name).max_count
        if count > limit:
            problems.append(f"{count} x {name} exceed the maximum of {limit} per GPU")
    media = sum(p.is_media_extended for p, _ in known)
    if media > 1:
        problems.append(f"{media} +me instances; at most one per GPU")
    if any(p.has_all_media for p, _ in known) and sum(not p.has_no_media for p, _ in known) > 1:
        problems.append("a +me.all instance allows only -me instances beside it")
    if rules.pre_r510 and any(_is_4g(p) for p, _ in known) and any(_is_3g(p) for p, _ in known):
        problems.append("4g and 3g instances together need driver R510 or later")
    return problems


def is_legal(model: GpuModel, instances: Sequence[Placed], rules: Rules = DEFAULT_RULES) -> bool:
    return not violations(model, instances, rules)


def _profiles(model: GpuModel, names: Sequence[str] | None) -> tuple[Profile, ...]:
    if names is None:
        return model.profiles
    return tuple(model.profile(name) for name in dict.fromkeys(names))


def free_placements(
    model: GpuModel,
    layout: Sequence[Placed],
    profile: str,
    rules: Rules = DEFAULT_RULES,
) -> tuple[Placed, ...]:
    """Every placement of ``profile`` that can be added to ``layout`` as it is."""
    wanted = model.profile(profile)
    occupancy = _Occupancy.of(model, layout)
    return tuple(
        Placed(start, wanted.name, wanted.memory_slices)
        for start in wanted.placements
        if occupancy.can_add(model, wanted, start, rules)
    )


def _candidates(profiles: Sequence[Profile]) -> list[tuple[Profile, int]]:
    order = {p.name: i for i, p in enumerate(profiles)}
    pairs = [(p, s) for p in profiles for s in p.placements]
    pairs.sort(key=lambda pair: (pair[1], order[pair[0].name]))
    return pairs


def enumerate_maximal_layouts(
    model: GpuModel,
    profiles: Sequence[str] | None = None,
    rules: Rules = DEFAULT_RULES,
) -> list[Layout]:
    """All maximal layouts built from ``profiles`` (default: all of the model's).

    A layout is maximal when no instance of any of the given profiles can be added. Every
    layout is produced once, ordered by its placements.
    """
    candidates = _candidates(_profiles(model, profiles))
    found: list[Layout] = []
    chosen: list[Placed] = []
    occupancy = _Occupancy.of(model, ())

    def is_maximal() -> bool:
        return not any(occupancy.can_add(model, p, s, rules) for p, s in candidates)

    def extend(first: int) -> None:
        if is_maximal():
            found.append(make_layout(chosen))
            return
        for index in range(first, len(candidates)):
            profile, start = candidates[index]
            if not occupancy.can_add(model, profile, start, rules):
                continue
            placed = Placed(start, profile.name, profile.memory_slices)
            occupancy.add(profile, placed)
            chosen.append(placed)
            extend(index + 1)
            chosen.pop()
            occupancy.remove(profile, placed)

    extend(0)
    return sorted(found)


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
    occupancy = _Occupancy.of(model, existing)
    placed: list[Placed] = []

    def search(index: int, min_start: int) -> bool:
        if index == len(wanted):
            return True
        profile = wanted[index]
        for start in profile.placements:
            if start < min_start or not occupancy.can_add(model, profile, start, rules):
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
            f"{_describe(wanted)} need {need_compute} compute slices; {model.key} has "
            f"{model.compute_slices - used_compute} free of {model.compute_slices}"
        )
    used_memory = sum(p.memory_slices for p in existing_profiles)
    need_memory = sum(p.memory_slices for p in wanted)
    if used_memory + need_memory > model.memory_slices:
        return (
            f"{_describe(wanted)} need {need_memory} memory slices; {model.key} has "
            f"{model.memory_slices - used_memory} free of {model.memory_slices}"
        )
    everything = [*existing_profiles, *wanted]
    if rules.pre_r510 and any(map(_is_4g, everything)) and any(map(_is_3g, everything)):
        return "4g and 3g instances together need driver R510 or later"
    return ""


def _geometry_reason(
    model: GpuModel, wanted: Sequence[Profile], existing: Sequence[Placed], rules: Rules
) -> str:
    occupancy = _Occupancy.of(model, existing)
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


@dataclass(frozen=True, slots=True)
class Fragmentation:
    """How useful the free part of a GPU still is.

    ``placeable`` maps each profile to how many more instances of it alone could be added;
    ``largest_free_run`` is the longest run of free consecutive memory slices;
    ``largest_placeable`` is the profile with the most memory (then compute) that still fits.
    """

    free_memory_slices: int
    free_compute_slices: int
    largest_free_run: int
    placeable: tuple[tuple[str, int], ...]
    largest_placeable: str | None


def fragmentation(
    model: GpuModel, layout: Sequence[Placed], rules: Rules = DEFAULT_RULES
) -> Fragmentation:
    occupancy = _Occupancy.of(model, layout)
    free_bits = [not occupancy.mask >> i & 1 for i in range(model.memory_slices)]
    longest = run = 0
    for is_free in free_bits:
        run = run + 1 if is_free else 0
        longest = max(longest, run)
    placeable: list[tuple[str, int]] = []
    for profile in model.profiles:
        count = 0
        while fit(model, [profile.name] * (count + 1), layout, rules).feasible:
            count += 1
        placeable.append((profile.name, count))
    fitting = [model.profile(name) for name, count in placeable if count]
    largest = max(fitting, key=lambda p: (p.memory_slices, p.compute_slices), default=None)
    return Fragmentation(
        free_memory_slices=sum(free_bits),
        free_compute_slices=model.compute_slices - occupancy.compute,
        largest_free_run=longest,
        placeable=tuple(placeable),
        largest_placeable=largest.name if largest else None,
    )
