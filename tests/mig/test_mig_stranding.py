"""Stranded compute: which placements fill a GPU's memory with compute left, and when the
cluster's held mix makes avoiding them pay (the 1g/2g compute held covers the room that the
3g instances held leave next to them); which placements keep every compute slice reachable,
and when the held mix makes that the steer's preference (3g room against 4g held)."""

from __future__ import annotations

from migslice.mig import CATALOG, place
from migslice.mig.stranding import (
    NO_MIX,
    FillerMix,
    complete_rule,
    completes,
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
    # 4g counts as wide (the memory it holds); 7g fills nothing and leaves nothing; 1g.20gb
    # strands itself; unknown names count 0.
    assert filler_mix(A100, ["4g.40gb", "4g.40gb"]) == FillerMix(wide=8)
    assert filler_mix(A100, ["7g.80gb", "1g.20gb", "9g.1tb"]) == NO_MIX
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


def test_a_gpu_completes_while_2g_and_larger_instances_can_still_use_every_compute_slice() -> None:
    def completes_with(*words: str) -> bool:
        return completes(A100, [place(A100, w.split("@")[0], int(w.split("@")[1])) for w in words])

    # The A100's 2g.20gb starts are 0, 2 and 4: beside 3g@0 and 2g@4 only a 1g fits.
    assert not completes_with("2g.20gb@4")  # a later 3g can only take 0
    assert completes_with("2g.20gb@0") and completes_with("2g.20gb@2")  # 3g@4 + a second 2g
    assert not completes_with("3g.40gb@0", "2g.20gb@4")
    assert completes_with("3g.40gb@4", "2g.20gb@0")
    assert not completes_with("3g.40gb@0", "3g.40gb@4")  # 6 of 7, as strands_with says
    assert completes_with("1g.10gb@6") and not completes_with("1g.10gb@0")
    assert completes_with("4g.40gb@0")
    # Every model of the catalog can be filled from empty, so the rule never ranks them all last.
    assert all(completes(model, []) for model in CATALOG.models)


def test_the_full_compute_rule_weighs_3g_room_against_twice_the_4g_memory_held() -> None:
    assert not complete_rule(NO_MIX)
    assert not complete_rule(FillerMix(fill=8, wide=0))  # no 3g held: nothing to complete
    assert complete_rule(FillerMix(need=4))
    assert complete_rule(FillerMix(need=8, wide=4)) and not complete_rule(FillerMix(need=7, wide=4))
    # A tenth of hysteresis once on.
    assert complete_rule(FillerMix(need=36, wide=20), was_on=True)
    assert not complete_rule(FillerMix(need=35, wide=20), was_on=True)
    assert not complete_rule(FillerMix(need=36, wide=20))
