"""The configuration-LP limit (benchmarks.md §5.6), with brute force as the oracle."""

from __future__ import annotations

import itertools
import os
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import is_legal
from migslice.sim import (
    GPU_MODEL,
    MappingKind,
    count_geometries,
    map_pod,
    parse_pod_list,
    slice_bound,
)
from migslice.sim.limits import (
    arrived_instances,
    maximise,
    oracle_layouts,
    sampled_first_failure_pct,
    sampled_limit,
)
from migslice.sim.trace import SimPod, synthetic_workload
from tests import paths

GEOMETRIES = count_geometries(GPU_MODEL)
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
BESIDE_THE_REPOSITORY = paths.SHARED_DATA
DATA_DIR = Path(os.environ.get("MIGSLICE_DATA_DIR") or BESIDE_THE_REPOSITORY)
DEFAULT_TRACE = DATA_DIR / "alibaba-cluster-trace-gpu-v2023/openb_pod_list_default.csv"


def brute_force(arrived: dict[str, int], gpus: int) -> int:
    best = 0
    for chosen in itertools.combinations_with_replacement(GEOMETRIES, gpus):
        total = 0
        for profile, count in arrived.items():
            supplied = sum(g.count(profile) for g in chosen)
            total += GPU_MODEL.profile(profile).compute_slices * min(count, supplied)
        best = max(best, total)
    return best


def test_the_simplex_solves_a_textbook_lp() -> None:
    # max 3x + 5y  s.t.  x <= 4, 2y <= 12, 3x + 2y <= 18  ->  x=2, y=6, value 36
    rows = [[Fraction(1), Fraction(0)], [Fraction(0), Fraction(2)], [Fraction(3), Fraction(2)]]
    value, solution = maximise(
        [Fraction(3), Fraction(5)], rows, [Fraction(4), Fraction(12), Fraction(18)]
    )
    assert value == 36
    assert solution == [2, 6]


def test_every_count_geometry_is_realised_by_a_legal_layout() -> None:
    assert all(is_legal(GPU_MODEL, g.layout) for g in GEOMETRIES)
    assert len({g.counts for g in GEOMETRIES}) == len(GEOMETRIES)


@settings(max_examples=25, deadline=None)
@given(
    arrived=st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 5), min_size=1),
    gpus=st.integers(1, 2),
)
def test_the_lp_bound_is_never_below_the_best_integer_packing(
    arrived: dict[str, int], gpus: int
) -> None:
    bound = slice_bound(
        GPU_MODEL, {p: float(n) for p, n in arrived.items()}, gpus, geometries=GEOMETRIES
    )
    demand = sum(GPU_MODEL.profile(p).compute_slices * n for p, n in arrived.items())
    assert brute_force(arrived, gpus) <= bound.slices + 1e-9
    assert bound.slices <= min(demand, 7 * gpus) + 1e-9


@pytest.mark.skipif(not DEFAULT_TRACE.is_file(), reason=f"no trace at {DEFAULT_TRACE}")
@pytest.mark.parametrize(
    ("mapping", "gpus"),
    [(MappingKind.COMPUTE_CEIL, 2377), (MappingKind.COMPUTE_ROUND, 2028)],
    ids=["M1", "M2"],
)
def test_the_default_traces_sharing_pods_need_the_gpus_of_the_benchmarks_note(
    mapping: MappingKind, gpus: int
) -> None:
    # §5.6, "if 4g + 3g allowed" (the catalog's default rules, driver R510 and later)
    pods = [
        p
        for pod in parse_pod_list(DEFAULT_TRACE.read_text())
        if pod.is_sharing and (p := map_pod(pod, mapping))
    ]
    arrived: dict[str, float] = {}
    for pod in pods:
        arrived[pod.profile] = arrived.get(pod.profile, 0.0) + 1
    demand = sum(p.compute_slices for p in pods)
    assert slice_bound(GPU_MODEL, arrived, gpus).slices == pytest.approx(demand)
    assert slice_bound(GPU_MODEL, arrived, gpus - 1).slices < demand - 1e-6


def test_oracle_layouts_give_every_gpu_a_legal_layout_with_whole_gpus_first() -> None:
    layouts = oracle_layouts(synthetic_workload().pods, GPU_MODEL, 16)
    assert len(layouts) == 16
    assert all(is_legal(GPU_MODEL, layout) for layout in layouts)
    whole = [i for i, layout in enumerate(layouts) if layout[0].profile == "7g.80gb"]
    assert whole == list(range(len(whole)))


def test_the_limit_of_the_drawn_pods_is_the_bound_of_what_had_arrived_at_each_load() -> None:
    pods = [SimPod(f"p{i}", profile) for i, profile in enumerate(["7g.80gb", "4g.40gb"] * 4)]
    # 2 GPUs = 14 slices; after 2 pods 11 slices (78 %), after 3 pods 18 (128 %)
    counts = arrived_instances(pods, 14, [50, 78, 100, 128])
    assert counts[50] == {"7g.80gb": 1}
    assert counts[78] == {"7g.80gb": 1, "4g.40gb": 1}
    assert counts[100] == counts[128] == {"7g.80gb": 2, "4g.40gb": 1}
    points = sampled_limit(pods, GPU_MODEL, 2, arrived_pcts=[78, 128])
    assert [p.slice_allocation for p in points] == [11 / 14, 1.0]
    # the first two pods fit (11 slices), the third cannot join them on 2 GPUs
    assert sampled_first_failure_pct(pods, GPU_MODEL, 2) == pytest.approx(100 * 11 / 14)
