"""Layouts: placed GPU instances on one GPU, their legality, and enumeration.

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

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter

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
    return tuple(sorted(instances, key=_FIELDS))


_FIELDS = attrgetter("start", "profile", "size")
"""Placed's order (its fields in turn, as ``order=True`` compares), read once per instance."""


def place(model: GpuModel, profile: str, start: int) -> Placed:
    """A placed instance of ``profile`` at ``start`` (size from the catalog)."""
    return Placed(start, profile, model.profile(profile).memory_slices)


@dataclass(frozen=True, slots=True)
class Rules:
    """Driver-dependent rules. ``pre_r510``: drivers before R510 forbid 4g next to 3g."""

    pre_r510: bool = False


DEFAULT_RULES = Rules()


@dataclass(slots=True)
class Occupancy:
    """Running totals of a layout, for constant-time "can I add this" checks (package use)."""

    mask: int
    compute: int
    counts: Counter[str]
    media: int
    all_media: int
    non_no_media: int
    fours: int
    threes: int

    @classmethod
    def of(cls, model: GpuModel, instances: Iterable[Placed]) -> Occupancy:
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
        self.fours += is_4g_shape(profile)
        self.threes += is_3g_shape(profile)

    def remove(self, profile: Profile, placed: Placed) -> None:
        self.mask &= ~placed.mask
        self.compute -= profile.compute_slices
        self.counts[profile.name] -= 1
        self.media -= profile.is_media_extended
        self.all_media -= profile.has_all_media
        self.non_no_media -= not profile.has_no_media
        self.fours -= is_4g_shape(profile)
        self.threes -= is_3g_shape(profile)

    def can_add(self, model: GpuModel, profile: Profile, start: int, *, rules: Rules) -> bool:
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
            (is_4g_shape(profile) and self.threes) or (is_3g_shape(profile) and self.fours)
        ):
            return False
        return True


def is_4g_shape(profile: Profile) -> bool:
    return profile.compute_slices == 4 and profile.memory_slices == 4


def is_3g_shape(profile: Profile) -> bool:
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
            continue
        if placed.start not in profile.placements:
            starts = ",".join(map(str, profile.placements))
            problems.append(
                f"{placed.profile} cannot start at memory slice {placed.start}; "
                f"legal starts on {model.key}: {starts}"
            )
            continue
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
    if (
        rules.pre_r510
        and any(is_4g_shape(p) for p, _ in known)
        and any(is_3g_shape(p) for p, _ in known)
    ):
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
    *,
    rules: Rules = DEFAULT_RULES,
) -> tuple[Placed, ...]:
    """Every placement of ``profile`` that can be added to ``layout`` as it is."""
    return _free_placements(model, tuple(layout), profile, rules)


@functools.lru_cache(maxsize=1 << 15)
def _free_placements(
    model: GpuModel, layout: tuple[Placed, ...], profile: str, rules: Rules
) -> tuple[Placed, ...]:
    wanted = model.profile(profile)
    occupancy = Occupancy.of(model, layout)
    return tuple(
        Placed(start, wanted.name, wanted.memory_slices)
        for start in wanted.placements
        if occupancy.can_add(model, wanted, start, rules=rules)
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
    occupancy = Occupancy.of(model, ())

    def is_maximal() -> bool:
        return not any(occupancy.can_add(model, p, s, rules=rules) for p, s in candidates)

    def extend(first: int) -> None:
        if is_maximal():
            found.append(make_layout(chosen))
            return
        for index in range(first, len(candidates)):
            profile, start = candidates[index]
            if not occupancy.can_add(model, profile, start, rules=rules):
                continue
            placed = Placed(start, profile.name, profile.memory_slices)
            occupancy.add(profile, placed)
            chosen.append(placed)
            extend(index + 1)
            chosen.pop()
            occupancy.remove(profile, placed)

    extend(0)
    return sorted(found)
