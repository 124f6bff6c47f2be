"""Which free instance of a profile a pod takes on a node: one ranking for everyone.

The device plugin, not the scheduler, picks the device, so nobody knows for sure which
instance a pod holds; migslice assumes the one its own score steers towards, and uses that
one assumption everywhere: the extender's score (:mod:`migslice.scheduling.fragmentation`),
the inventory's guess of which instances bound pods hold (:mod:`migslice.inventory.layouts`),
and the simulator's placement.

The score of placing one unit on a GPU, with ``M`` the memory slices of the GPU's instances
(its partitioned capacity; the whole GPU when it has none) and ``h'`` the memory slices pods
hold on it after the placement: ``6 + floor(4 h' / M)`` on a GPU already in use, else
``1 + floor(3 h' / M)``, plus 1 when another GPU of the node is in use. The best GPU has the
highest score, then the higher ``h'``, then the lower index; on it, the pod takes the first
free instance of its profile (lowest start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from migslice.mig import Placed

MAX_SCORE = 10
MIN_SCORE = 0
"""Scores run from 0 (the node cannot take the pod) to 10."""


def gpu_unit_score(held_after: int, memory_slices: int, *, in_use: bool, node_in_use: bool) -> int:
    """The score of one unit placed on a GPU (see the module docstring)."""
    if in_use:
        return 6 + (4 * held_after) // memory_slices
    return 1 + (3 * held_after) // memory_slices + (1 if node_in_use else 0)


def node_level_score(held_after: int, total: int) -> int:
    """The score of a node known only by counts, or of whole GPUs: ``1 + floor(9 u' / U)``
    with ``u'`` what pods hold after the placement and ``U`` the node's total."""
    if total <= 0:
        return MIN_SCORE
    return min(MAX_SCORE, 1 + (9 * min(held_after, total)) // total)


@dataclass(frozen=True, slots=True)
class Occupancy:
    """One GPU as the ranking sees it: its index, instances, which are held, and whether a pod
    holds it whole (MIG off). ``capacity``: the memory slices of its instances, summed once
    (a node's picks in a row read it for every GPU)."""

    index: int
    instances: Sequence[Placed]
    held: Sequence[bool]
    whole_held: bool = False
    capacity: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", sum(p.size for p in self.instances))


@dataclass(frozen=True, slots=True)
class Pick:
    """The chosen instance: positions in the caller's GPU list and in that GPU's instances."""

    gpu: int
    instance: int
    score: int


def held_slices(gpus: Sequence[Occupancy], memory_slices: int) -> list[int]:
    """The memory slices held on each GPU (a whole-GPU holder holds ``memory_slices``)."""
    return [
        sum(p.size for p, h in zip(gpu.instances, gpu.held, strict=True) if h)
        + (memory_slices if gpu.whole_held else 0)
        for gpu in gpus
    ]


def best_free_instance(
    gpus: Sequence[Occupancy],
    profile: str,
    memory_slices: int,
    used: Sequence[int] | None = None,
) -> Pick | None:
    """The free instance of ``profile`` the ranking picks, or None if the node has none.

    ``memory_slices``: the GPU model's memory slices (the capacity of a GPU with no instances,
    and what a whole-GPU holder occupies); ``used``: :func:`held_slices` of ``gpus`` when the
    caller keeps it (picking several instances in a row), else computed here."""
    if used is None:
        used = held_slices(gpus, memory_slices)
    node_in_use = any(used)
    best: tuple[tuple[int, int, int], Pick] | None = None
    for g, gpu in enumerate(gpus):
        held = gpu.held
        for k, placed in enumerate(gpu.instances):
            if placed.profile == profile and not held[k]:
                break  # the GPU's first free instance of the profile
        else:
            continue
        after = used[g] + placed.size
        score = gpu_unit_score(
            after, gpu.capacity or memory_slices, in_use=used[g] > 0, node_in_use=node_in_use
        )
        rank = (-score, -after, gpu.index)
        if best is None or rank < best[0]:
            best = (rank, Pick(g, k, score))
    return None if best is None else best[1]
