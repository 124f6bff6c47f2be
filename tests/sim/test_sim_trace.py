"""Workload traces: the Alibaba v2023 pod list mapped to MIG profiles (benchmarks.md §5.1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from migslice.sim import (
    SYNTHETIC_MIX,
    MappingKind,
    SimPod,
    TraceError,
    TracePod,
    map_pod,
    map_trace,
    mix_counts,
    parse_pod_list,
    profile_for,
    synthetic_workload,
)
from tests import paths

BESIDE_THE_REPOSITORY = paths.SHARED_DATA
DATA_DIR = Path(os.environ.get("MIGSLICE_DATA_DIR") or BESIDE_THE_REPOSITORY)
DEFAULT_TRACE = DATA_DIR / "alibaba-cluster-trace-gpu-v2023" / "openb_pod_list_default.csv"
needs_trace = pytest.mark.skipif(
    not DEFAULT_TRACE.is_file(),
    reason=f"the Alibaba v2023 trace is not at {DEFAULT_TRACE} (../shared/data beside the repo)",
)

M1, M2 = MappingKind.COMPUTE_CEIL, MappingKind.COMPUTE_ROUND
M3, M4 = MappingKind.MEMORY_PROPORTIONAL, MappingKind.CAP_AT_4G

MAPPING_TABLE = [
    # gpu_milli, M1 (ceil 7m/1000), M2 (round, at least 1), M3 (memory too), M4 (5-6 -> 4g)
    (1, "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"),
    (125, "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"),
    (126, "1g.10gb", "1g.10gb", "1g.20gb", "1g.10gb"),
    (142, "1g.10gb", "1g.10gb", "1g.20gb", "1g.10gb"),
    (143, "2g.20gb", "1g.10gb", "2g.20gb", "2g.20gb"),
    (251, "2g.20gb", "2g.20gb", "3g.40gb", "2g.20gb"),
    (320, "3g.40gb", "2g.20gb", "3g.40gb", "3g.40gb"),
    (470, "4g.40gb", "3g.40gb", "4g.40gb", "4g.40gb"),
    (500, "4g.40gb", "4g.40gb", "4g.40gb", "4g.40gb"),
    (571, "4g.40gb", "4g.40gb", "7g.80gb", "4g.40gb"),
    (572, "7g.80gb", "4g.40gb", "7g.80gb", "4g.40gb"),
    (650, "7g.80gb", "7g.80gb", "7g.80gb", "4g.40gb"),
    (857, "7g.80gb", "7g.80gb", "7g.80gb", "4g.40gb"),
    (858, "7g.80gb", "7g.80gb", "7g.80gb", "7g.80gb"),
    (999, "7g.80gb", "7g.80gb", "7g.80gb", "7g.80gb"),
]


@pytest.mark.parametrize(
    ("gpu_milli", "ceil_profile", "round_profile", "memory_profile", "capped_profile"),
    MAPPING_TABLE,
    ids=[f"{row[0]}-milli" for row in MAPPING_TABLE],
)
def test_a_sharing_pod_maps_to_the_profile_of_its_compute_share(
    gpu_milli: int, ceil_profile: str, round_profile: str, memory_profile: str, capped_profile: str
) -> None:
    assert profile_for(gpu_milli, M1) == ceil_profile
    assert profile_for(gpu_milli, M2) == round_profile
    assert profile_for(gpu_milli, M3) == memory_profile
    assert profile_for(gpu_milli, M4) == capped_profile


def test_a_whole_gpu_pod_takes_k_whole_instances_on_one_node() -> None:
    pod = map_pod(TracePod("train", num_gpu=8, gpu_milli=1000), M1)
    assert pod == SimPod("train", "7g.80gb", 8)
    assert pod.compute_slices == 56


def test_cpu_only_pods_are_skipped_and_counted() -> None:
    pods = (TracePod("cpu", 0, 0), TracePod("share", 1, 470))
    workload = map_trace("t", pods, M1)
    assert workload.pods == (SimPod("share", "4g.40gb"),)
    assert workload.skipped_cpu_only == 1


def test_a_pod_list_without_the_gpu_columns_is_refused_with_their_names() -> None:
    with pytest.raises(TraceError, match="lacks column\\(s\\) num_gpu, gpu_milli"):
        parse_pod_list("name,cpu_milli\np,1000\n")


def test_a_non_numeric_cell_names_its_row_and_column() -> None:
    with pytest.raises(TraceError, match="row 3: gpu_milli='lots'"):
        parse_pod_list("name,num_gpu,gpu_milli\na,1,100\nb,1,lots\n")


def test_the_five_column_variant_parses() -> None:
    pods = parse_pod_list("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,1000\n")
    assert pods == (TracePod("p", 2, 1000),)


def test_the_synthetic_mix_has_the_documented_proportions() -> None:
    counts = mix_counts(synthetic_workload().pods)
    assert counts == dict(SYNTHETIC_MIX)


@needs_trace
@pytest.mark.parametrize(
    ("mapping", "expected", "compute_slices"),
    [
        (
            M1,
            {"1g.10gb": 32, "2g.20gb": 280, "3g.40gb": 389, "4g.40gb": 971, "7g.80gb": 1406},
            15485,
        ),
        (
            M2,
            {"1g.10gb": 106, "2g.20gb": 548, "3g.40gb": 946, "4g.40gb": 147, "7g.80gb": 1331},
            13945,
        ),
        (
            M3,
            {
                "1g.10gb": 31,
                "1g.20gb": 1,
                "2g.20gb": 276,
                "3g.40gb": 393,
                "4g.40gb": 899,
                "7g.80gb": 1478,
            },
            15705,
        ),
        (M4, {"1g.10gb": 32, "2g.20gb": 280, "3g.40gb": 389, "4g.40gb": 2377}, 11267),
    ],
    ids=["M1", "M2", "M3", "M4"],
)
def test_the_default_trace_maps_to_the_mix_of_the_benchmarks_note(
    mapping: MappingKind, expected: dict[str, int], compute_slices: int
) -> None:
    pods = parse_pod_list(DEFAULT_TRACE.read_text())
    sharing = [p for pod in pods if pod.is_sharing and (p := map_pod(pod, mapping))]
    assert len(sharing) == 3078
    assert mix_counts(sharing) == expected
    assert sum(p.compute_slices for p in sharing) == compute_slices
    workload = map_trace("default", pods, mapping)
    assert workload.skipped_cpu_only == 1088
    whole = [p for pod in pods if not pod.is_cpu_only and not pod.is_sharing]
    assert len(whole) == 3911 + 16 + 15 + 44
