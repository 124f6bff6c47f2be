"""``bench.packing.packing``'s flags: a bad ``--percentage-of-nodes-to-score`` or a lone
``--partitioned-ahead`` is refused in one line, before any work."""

from __future__ import annotations

import pytest

from bench.packing.packing import (
    TENANT_POLICIES,
    TENANT_WORKLOADS,
    WORKLOADS,
    main,
    parse_args,
    tasks,
)
from bench.packing.packing_report import matrix_cost


def test_bench_packing_refuses_a_bad_setting_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--data-dir", ".", "--percentage-of-nodes-to-score", "100,abc"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "bench.packing.packing: --percentage-of-nodes-to-score: 'abc' is not a whole number "
        "0..100 (e.g. 100,0,30)"
    )


def test_bench_packing_takes_partitioned_ahead_only_with_settings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--data-dir", ".", "--partitioned-ahead"]) == 2
    assert "--partitioned-ahead needs --percentage-of-nodes-to-score" in capsys.readouterr().err


def test_the_default_matrix_holds_the_tenant_and_sensitivity_runs() -> None:
    """A plain run reproduces every table (the tenants' quota runs included); ``--add`` runs
    only the policies it names."""
    runs = {(spec, policy) for kind, spec, policy, _ in tasks(parse_args([])) if kind == "run"}
    for spec in TENANT_WORKLOADS:
        assert {(spec, f"{p}+quota") for p in TENANT_POLICIES} <= runs
    assert ("synthetic", "M-dra+quota") not in runs
    assert ("default/M1", "B9-least-allocated") in runs
    # the opt-in large-job reserve is one of migslice's modes: every workload runs it
    reserve = {spec for spec, policy in runs if policy == "M-dra-reserve"}
    assert reserve == set(WORKLOADS)
    assert ("gpushare100/M1", "B9-least-allocated") not in runs
    added = tasks(parse_args(["--add", "--policies", "M-dra", "--seeds", "2"]))
    assert {(kind, policy) for kind, _, policy, _ in added} == {("run", "M-dra")}
    assert len(added) == 2 * len(WORKLOADS)


def test_the_matrix_cost_counts_the_runs_the_report_holds() -> None:
    blocks = [
        {"policies": {"M-carve": {"cpu_s": {"mean": 3.0, "n": 10}}, "B0": {}}},
        {"policies": {"M-carve": {"cpu_s": {"mean": 6.0, "n": 10}}}},
    ]
    line = matrix_cost(blocks)
    assert line.startswith("The matrix's runs as they stand: 1.5 CPU-min (the goal ≤ 30")
    assert "M-carve 1.5" in line and ": met)" in line
