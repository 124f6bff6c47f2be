"""Room: how many more instances of each profile a GPU could still take, and what a change
costs in it (the fragmentation measure of carve mode).

The *room* of a GPU for a profile, given the instances that stay on it (``kept``), is the
largest number of instances of that profile that could be added to ``kept`` together, legally
(placements, no overlap, SM slices, maximum counts, media rules). Free memory slices that no
large profile can use any more are what fragmentation is; room says it per profile.

The *room loss* of a change is, per profile shape, the room before minus the room after.
Losses are compared largest shape first (SM slices, then memory): a change that keeps one
more 7g placement possible is better than any number of smaller ones, which keeps whole GPUs
whole and large free regions large, and fills holes before it opens new ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from migslice.mig.catalog import GpuModel, Profile
from migslice.mig.layout import DEFAULT_RULES, Occupancy, Placed, Rules

SHAPES: tuple[tuple[int, int], ...] = tuple(
    (compute, eighths) for compute in range(8, 0, -1) for eighths in range(8, 0, -1)
)
"""Every profile shape (SM slices, memory in eighths of the GPU), largest first: the positions
of a :data:`RoomLoss`, the same for every GPU model, so losses on different models add up."""
_POSITION = {shape: i for i, shape in enumerate(SHAPES)}

RoomLoss = tuple[int, ...]
"""The room lost per shape of :data:`SHAPES`. Tuples compare lexicographically, so ``min``
picks the least fragmenting change; profiles of one shape (``1g.10gb``, ``1g.10gb+me``) add up."""
NO_LOSS: RoomLoss = (0,) * len(SHAPES)


def room(
    model: GpuModel, kept: Sequence[Placed], profile: str, *, rules: Rules = DEFAULT_RULES
) -> int:
    """How many instances of ``profile`` could be added to ``kept`` together.

    Every placement of a profile has the same size, so taking the lowest free start each time
    packs the most (interval scheduling by earliest end); the other limits only cap a count.
    """
    return _room(model, tuple(kept), profile, rules)


@functools.lru_cache(maxsize=1 << 16)
def _room(model: GpuModel, kept: tuple[Placed, ...], profile: str, rules: Rules) -> int:
    """:func:`room`, remembered: planners ask it about the same few layouts again and again."""
    wanted = model.profile(profile)
    occupancy = Occupancy.of(model, kept)
    count = 0
    for start in sorted(wanted.placements):
        if occupancy.can_add(model, wanted, start, rules=rules):
            occupancy.add(wanted, Placed(start, wanted.name, wanted.memory_slices))
            count += 1
    return count


def shape_of(model: GpuModel, profile: Profile) -> tuple[int, int]:
    """A profile's shape: SM slices, and memory in eighths of the GPU."""
    return (profile.compute_slices, profile.memory_slices * 8 // model.memory_slices)


def room_loss(
    model: GpuModel,
    before: Sequence[Placed],
    after: Sequence[Placed],
    *,
    rules: Rules = DEFAULT_RULES,
) -> RoomLoss:
    """The room a change from ``before`` to ``after`` (the instances that stay) takes away,
    per shape, largest first; negative where the change gives room back."""
    return _room_loss(model, tuple(before), tuple(after), rules)


@functools.lru_cache(maxsize=1 << 16)
def _room_loss(
    model: GpuModel, before: tuple[Placed, ...], after: tuple[Placed, ...], rules: Rules
) -> RoomLoss:
    loss = [0] * len(SHAPES)
    for profile in model.profiles:
        lost = room(model, before, profile.name, rules=rules) - room(
            model, after, profile.name, rules=rules
        )
        loss[_POSITION[shape_of(model, profile)]] += lost
    return tuple(loss)


def add_losses(losses: Iterable[RoomLoss]) -> RoomLoss:
    """The sum of several losses (one pod's instances on several GPUs)."""
    items = list(losses)
    if len(items) == 1:  # most pods: one instance
        return tuple(items[0])
    return tuple(map(sum, zip(NO_LOSS, *items, strict=True)))
