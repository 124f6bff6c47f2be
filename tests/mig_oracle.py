"""A brute-force oracle for MIG geometry, written from the rules alone (not from our engine).

Used by the property tests: legality here is checked on explicit sets of memory-slice indices,
and every legal layout is found by exhaustive search (legality is closed under taking subsets,
so pruning illegal partial sets loses nothing).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from functools import cache

from migslice.mig import CATALOG, GpuModel

Instance = tuple[str, int]  # (profile name, start)


def slices_of(model: GpuModel, instance: Instance) -> set[int]:
    name, start = instance
    size = model.profile(name).memory_slices
    return set(range(start, start + size))


def is_legal(model: GpuModel, instances: Iterable[Instance], pre_r510: bool = False) -> bool:
    items = list(instances)
    occupied: set[int] = set()
    for name, start in items:
        profile = model.profile(name)
        if start not in profile.placements:
            return False
        cells = slices_of(model, (name, start))
        if max(cells) >= model.memory_slices or cells & occupied:
            return False
        occupied |= cells
    profiles = [model.profile(name) for name, _ in items]
    if sum(p.compute_slices for p in profiles) > model.compute_slices:
        return False
    counts = Counter(p.name for p in profiles)
    if any(count > model.profile(name).max_count for name, count in counts.items()):
        return False
    if sum(p.name.endswith("+me") for p in profiles) > 1:
        return False
    if any(p.name.endswith("+me.all") for p in profiles) and (
        sum(not p.name.endswith("-me") for p in profiles) > 1
    ):
        return False
    shapes = {(p.compute_slices, p.memory_slices) for p in profiles}
    return not (pre_r510 and (4, 4) in shapes and (3, 4) in shapes)


def candidates(model: GpuModel, names: Iterable[str] | None = None) -> list[Instance]:
    chosen = list(names) if names is not None else list(model.profile_names)
    return [(n, s) for n in chosen for s in model.profile(n).placements]


@cache
def legal_sets(
    model_key: str, names: tuple[str, ...] | None = None, pre_r510: bool = False
) -> tuple[frozenset[Instance], ...]:
    """Every legal set of instances (including the empty one)."""
    model = CATALOG.get(model_key)
    pool = candidates(model, names)
    found: list[frozenset[Instance]] = []

    def walk(index: int, current: list[Instance]) -> None:
        if index == len(pool):
            found.append(frozenset(current))
            return
        walk(index + 1, current)
        current.append(pool[index])
        if is_legal(model, current, pre_r510):
            walk(index + 1, current)
        current.pop()

    walk(0, [])
    return tuple(found)


def maximal_sets(
    model_key: str, names: tuple[str, ...] | None = None, pre_r510: bool = False
) -> set[frozenset[Instance]]:
    model = CATALOG.get(model_key)
    pool = candidates(model, names)
    return {
        s
        for s in legal_sets(model_key, names, pre_r510)
        if not any(c not in s and is_legal(model, [*s, c], pre_r510) for c in pool)
    }


def can_fit(model_key: str, existing: frozenset[Instance], wanted: Counter[str]) -> bool:
    """Is there a legal superset of ``existing`` whose extra instances are exactly ``wanted``?"""
    for legal in legal_sets(model_key):
        if existing <= legal and Counter(n for n, _ in legal - existing) == wanted:
            return True
    return False


def driver_create(model: GpuModel, existing: list[Instance], name: str) -> Instance | None:
    """The driver's placement for CreateGpuInstance without a placement: highest free start.

    This reproduces the MIG User Guide's example (``-cgi 19,19,14,9`` fails on an A100 where
    ``9,19,14,19`` works).
    """
    for start in sorted(model.profile(name).placements, reverse=True):
        if is_legal(model, [*existing, (name, start)]):
            return (name, start)
    return None
