"""B7, the exact ILP of ``bench/exact.py``, against answers known by hand (needs scipy, the
``bench`` extra; skipped without it)."""

from __future__ import annotations

import pytest

from migslice.sim import SimPod

pytest.importorskip("scipy")

from bench.exact import optimum


def pods(*profiles: str) -> list[SimPod]:
    return [SimPod(f"p{i}", p) for i, p in enumerate(profiles)]


@pytest.mark.parametrize(
    ("arrived", "nodes", "slices"),
    [
        (pods(*["7g.80gb"] * 9), 1, 56),  # 8 GPUs, one 7g each
        (pods(*["4g.40gb"] * 16), 1, 32),  # one 4g per GPU
        (pods(*["4g.40gb", "3g.40gb"] * 8), 1, 56),  # 4g + 3g share a GPU (R510 and later)
        (pods(*["1g.10gb"] * 60), 1, 56),  # seven 1g per GPU
        ([SimPod("a", "7g.80gb", 8), SimPod("b", "7g.80gb", 8)], 1, 56),  # one fits
        ([SimPod("a", "7g.80gb", 5), SimPod("b", "7g.80gb", 5)], 2, 70),  # one per node
    ],
    ids=["7g", "4g", "4g+3g", "1g", "two-8x7g-one-node", "two-5x7g-two-nodes"],
)
def test_the_ilp_places_the_most_slices_any_placement_can(
    arrived: list[SimPod], nodes: int, slices: int
) -> None:
    value, proven = optimum(arrived, nodes)
    assert proven
    assert value == pytest.approx(slices)


def test_a_multi_gpu_pod_needs_its_gpus_on_one_node() -> None:
    # 2 nodes x 8 GPUs: 16 whole GPUs, but a 9 x 7g pod fits on neither node
    value, _ = optimum([SimPod("big", "7g.80gb", 9), SimPod("small", "1g.10gb")], 2)
    assert value == pytest.approx(1)
