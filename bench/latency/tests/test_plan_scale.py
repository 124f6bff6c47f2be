"""``bench.latency.plan_scale``: the cluster it builds is read by the controller's own readers
as it says (every pending pod needs a re-partition), both modes decide to start a plan the
shipped budgets bound, and the carve memo's size is measured while it is held."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.latency.plan_scale import main, measure
from migslice.names import MODE_CARVE, MODE_MIG_MANAGER


def test_each_mode_starts_a_plan_within_its_budget() -> None:
    mig_manager = measure(20, 40, MODE_MIG_MANAGER, 1)
    assert mig_manager["step"] == "start"
    assert mig_manager["nodes_changed"] == 2  # one node per GPU product
    assert 0 < mig_manager["pods_served"] < 40
    carve = measure(20, 40, MODE_CARVE, 1)
    assert carve["step"] == "start"
    assert carve["nodes_changed"] == 4  # four nodes carve at once
    assert 0 < carve["pods_served"] < 40
    # the carve memo holds the nodes' costs while the decision is measured (about 10 KB here,
    # the losses shared with the planner's caches); MIG Manager mode keeps none
    assert mig_manager["memo_mib"] < carve["memo_mib"]


def test_a_quick_run_writes_its_section(tmp_path: Path) -> None:
    assert main(["--nodes", "10", "--pending", "8", "--rounds", "1", "--out", str(tmp_path)]) == 0
    report = orjson.loads((tmp_path / "report.json").read_bytes())
    runs = report["plan_scale"]["runs"]
    assert [(r["nodes"], r["pending"], r["mode"]) for r in runs] == [
        (10, 8, MODE_MIG_MANAGER),
        (10, 8, MODE_CARVE),
    ]
    assert "| 10 | 8 | carve |" in (tmp_path / "report.md").read_text()
