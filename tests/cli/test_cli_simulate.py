"""``migslice simulate``: one policy on one workload, a metrics table."""

from __future__ import annotations

from pathlib import Path

import pytest

from migslice.cli import main


def test_simulate_prints_the_metrics_table_and_progress(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--mapping", "synthetic", "--nodes", "1", "--policy", "migslice"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "ARRIVED   SLICE ALLOC" in out
    assert "130%" in out
    assert "0 pods disrupted" in out
    assert "arrived 100%: slice allocation" in err


def test_a_missing_data_directory_is_named_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    code = main(["simulate", "--mapping", "M1", "--nodes", "1", "--data-dir", str(missing)])
    assert code == 1
    err = capsys.readouterr().err
    assert f"data directory {missing} not found" in err
    assert "--data-dir DIR (the folder holding alibaba-cluster-trace-gpu-v2023/)" in err
    assert "which needs no trace (`migslice simulate --mapping synthetic`" in err


def test_a_missing_trace_file_is_named_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["simulate", "--mapping", "M2", "--data-dir", str(tmp_path), "--trace", "nope"])
    assert code == 1
    assert "openb_pod_list_nope.csv not found" in capsys.readouterr().err
