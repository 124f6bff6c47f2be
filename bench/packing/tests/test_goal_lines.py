"""The packing report's goals against the baselines say when a missed margin is out of any
policy's reach: the baseline plus the margin above the LP limit."""

from __future__ import annotations

from typing import Any

from bench.packing.packing_report import baseline_goal_line


def _policy(name: str, per_seed: list[float]) -> dict[str, Any]:
    mean = sum(per_seed) / len(per_seed)
    return {
        "name": name,
        "per_seed": {"130": per_seed},
        "at": {"130": {"slice_allocation": {"mean": mean}}},
    }


def _block(limit: float) -> dict[str, Any]:
    return {
        "workload": "default/M1",
        "limit": {"at": {"130": {"mean": limit}}},
        "policies": {
            "migslice": _policy("migslice", [0.985, 0.985]),
            "B8": _policy("B8 HAMi", [0.98, 0.98]),
            "B9": _policy("B9 DRA", [0.94, 0.94]),
        },
    }


def test_a_margin_above_the_limit_is_said_out_of_reach() -> None:
    line = baseline_goal_line(_block(1.0))
    assert "≥ B8 + 3 pp: MISSED (0.5 pp; out of reach: 101.0 % > the LP limit 100.0 %)" in line
    assert "≥ B9 + 3 pp: met (4.5 pp)" in line


def test_a_margin_within_the_limit_is_only_missed() -> None:
    block = _block(1.0)
    block["policies"]["B8"] = _policy("B8 HAMi", [0.95, 0.95])
    line = baseline_goal_line(block)
    assert "≥ B8 + 3 pp: met (3.5 pp)" in line
    block["policies"]["B8"] = _policy("B8 HAMi", [0.965, 0.965])
    assert "≥ B8 + 3 pp: MISSED (2.0 pp)" in baseline_goal_line(block)


def test_an_opt_in_mode_is_judged_on_its_own_line() -> None:
    block = _block(1.0)
    block["policies"]["M-dra-reserve"] = _policy("M-dra with the reserve", [0.975, 0.975])
    # the best shipped mode stays migslice (the reserve is not a default) ...
    assert baseline_goal_line(block).startswith("- **default/M1** (migslice): ")
    # ... and the reserve gets the same checks, apart
    line = baseline_goal_line(block, "M-dra-reserve")
    assert line.startswith("- **default/M1** (M-dra with the reserve): ")
    assert "≥ B9 + 3 pp: met (3.5 pp)" in line


def _large(policy: dict[str, Any], pods: float, slices: float, seven: float, multi: float) -> None:
    policy["large_accepted_per_seed"] = {"130": [pods, pods]}
    policy["large_accepted"] = {"130": {"mean": pods}}
    policy["large_slices_accepted_per_seed"] = {"130": [slices, slices]}
    policy["class_accepted"] = {"130": {"7g": {"mean": seven}, "multi-GPU": {"mean": multi}}}


def test_a_large_job_miss_shows_the_same_pods_counted_by_the_slices_they_asked() -> None:
    # B9 places more 7g/multi-GPU pods by turning the 8 x 7g jobs away: by pods migslice
    # misses, by the compute slices those pods asked for it is ahead, and the line says so
    block = _block(1.0)
    policies = block["policies"]
    _large(policies["migslice"], 0.77, 0.80, 0.76, 0.78)
    _large(policies["B9"], 0.89, 0.70, 0.94, 0.40)
    _large(policies["B8"], 0.80, 0.75, 0.80, 0.70)
    line = baseline_goal_line(block)
    assert (
        "7g and multi-GPU acceptance ≥ the best baseline (B9): MISSED (-12.0 pp; by the compute "
        "slices they asked for 10.0 pp, 7g pods 76.0 against 94.0 %, multi-GPU pods 78.0 "
        "against 40.0 %)"
    ) in line
    _large(policies["migslice"], 0.90, 0.80, 0.95, 0.78)
    assert "≥ the best baseline (B9): met (1.0 pp)" in baseline_goal_line(block)
