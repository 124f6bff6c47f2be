"""A brute-force oracle for carve planning, from the MIG rules alone (``tests.mig_oracle``):
the room a GPU keeps for each profile, and the least fragmenting way to carve one instance."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import combinations

from migslice.mig import GpuModel, Placed
from tests.mig_oracle import Instance, is_legal


def room(model: GpuModel, kept: Sequence[Instance], profile: str) -> int:
    """The most instances of ``profile`` that can join ``kept``, by trying every subset."""
    starts = model.profile(profile).placements
    for size in range(len(starts), 0, -1):
        for chosen in combinations(starts, size):
            if is_legal(model, [*kept, *((profile, s) for s in chosen)]):
                return size
    return 0


def loss(model: GpuModel, kept: Sequence[Instance], added: Instance) -> dict[tuple[int, int], int]:
    """Room lost per shape (SM slices, memory in eighths) by adding ``added`` to ``kept``."""
    lost: Counter[tuple[int, int]] = Counter()
    for profile in model.profiles:
        shape = (profile.compute_slices, profile.memory_slices * 8 // model.memory_slices)
        lost[shape] += room(model, kept, profile.name) - room(model, [*kept, added], profile.name)
    return dict(lost)


def as_vector(lost: dict[tuple[int, int], int]) -> tuple[int, ...]:
    """Largest shape first, every shape (absent ones lose nothing)."""
    shapes = [(c, m) for c in range(8, 0, -1) for m in range(8, 0, -1)]
    return tuple(lost.get(shape, 0) for shape in shapes)


def best_carve(
    model: GpuModel, gpus: Sequence[tuple[Sequence[Placed], Sequence[bool]]], profile: str
) -> tuple[tuple[int, ...], int] | None:
    """The least (room lost, instances destroyed) of any way to create one ``profile``
    instance on any of ``gpus`` (layout, pinned flags), or None when there is none."""
    best: tuple[tuple[int, ...], int] | None = None
    size = model.profile(profile).memory_slices
    for layout, pinned in gpus:
        kept = [(p.profile, p.start) for p, pin in zip(layout, pinned, strict=True) if pin]
        idle = [(p.profile, p.start) for p, pin in zip(layout, pinned, strict=True) if not pin]
        for start in model.profile(profile).placements:
            new = (profile, start)
            cells = set(range(start, start + size))
            if any(cells & set(range(s, s + model.profile(n).memory_slices)) for n, s in kept):
                continue
            for count in range(len(idle) + 1):
                gone = next(
                    (
                        set(chosen)
                        for chosen in combinations(idle, count)
                        if is_legal(model, [*kept, *(i for i in idle if i not in chosen), new])
                    ),
                    None,
                )
                if gone is not None:
                    option = (as_vector(loss(model, kept, new)), len(gone))
                    best = option if best is None or option < best else best
                    break
    return best
