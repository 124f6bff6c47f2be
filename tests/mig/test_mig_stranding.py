"""Stranded compute: which placements fill a GPU's memory with compute left, and when the
cluster's held mix makes avoiding them pay (the 1g/2g compute held covers the room that the
3g instances held leave next to them)."""

from __future__ import annotations

from migslice.mig import CATALOG
from migslice.mig.stranding import (
    NO_MIX,
    FillerMix,
    filler_mix,
    strand_guard,
    strands_compute,
    strands_with,
)

A100 = CATALOG.get("A100-80GB")


def test_3g_next_to_3g_strands_a_compute_slice_and_3g_next_to_4g_does_not() -> None:
    three, four = A100.profile("3g.40gb"), A100.profile("4g.40gb")
    assert strands_compute(A100, 2 * three.memory_slices, 2 * three.compute_slices)
    assert not strands_compute(
        A100, three.memory_slices + four.memory_slices, three.compute_slices + four.compute_slices
    )
    # 3g + 2g + 1g + 1g takes every memory and compute slice; 3g alone leaves memory free.
    assert not strands_compute(A100, 4 + 2 + 1 + 1, 3 + 2 + 1 + 1)
    assert not strands_compute(A100, 4, 3)
    # 1g.20gb takes two memory slices for one compute slice.
    assert strands_compute(A100, 4 * 2, 4 * 1)
    assert strands_with(A100, ["3g.40gb", "3g.40gb"]) and strands_with(A100, ["1g.20gb"] * 4)
    assert not strands_with(A100, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])


def test_the_mix_counts_3g_room_against_1g_and_2g_compute_and_nothing_else() -> None:
    mix = filler_mix(A100, ["3g.40gb", "3g.40gb", "1g.10gb", "2g.20gb", "1g.10gb+me"])
    assert mix == FillerMix(fill=1 + 2 + 1, need=4 + 4)
    # 4g and 7g fill nothing and leave nothing; 1g.20gb strands itself; unknown names count 0.
    assert filler_mix(A100, ["4g.40gb", "7g.80gb", "1g.20gb", "9g.1tb"]) == NO_MIX
    h100 = CATALOG.get("H100-80GB")
    assert filler_mix(h100, ["3g.40gb", "2g.20gb"]) == FillerMix(fill=2, need=4)
    # A30 (4 memory, 4 compute slices) has no profile whose pair strands compute.
    a30 = CATALOG.get("A30-24GB")
    assert filler_mix(a30, a30.profile_names) == NO_MIX
    assert filler_mix(A100, ["3g.40gb"]) + filler_mix(h100, ["1g.10gb"]) - FillerMix(
        1, 0
    ) == FillerMix(0, 4)


def test_the_guard_is_on_while_the_fill_covers_the_need_with_a_tenth_of_hysteresis() -> None:
    assert not strand_guard(NO_MIX)
    assert not strand_guard(FillerMix(fill=40, need=0))
    assert not strand_guard(FillerMix(fill=39, need=40))
    assert strand_guard(FillerMix(fill=40, need=40))
    assert strand_guard(FillerMix(fill=36, need=40), was_on=True)
    assert not strand_guard(FillerMix(fill=35, need=40), was_on=True)
    assert not strand_guard(FillerMix(fill=36, need=40), was_on=False)
