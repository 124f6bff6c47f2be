"""`bench.packing.churn --add`: new points replace the same ones, and the section's CPU time
is that of the runs its points hold."""

from __future__ import annotations

from typing import Any

from bench.common.stats import ci
from bench.packing.churn import add_points


def _point(policy: str, cpu: list[float]) -> dict[str, Any]:
    return {
        "workload": "synthetic",
        "policy": policy,
        "load": 0.95,
        "t_reconf": 60.0,
        "cpu_s": ci(cpu),
    }


def _report(points: list[dict[str, Any]]) -> dict[str, Any]:
    total = sum(p["cpu_s"]["mean"] * p["cpu_s"]["n"] for p in points)
    return {"config": {"seeds": [0, 1], "cpu_s": total}, "points": points}


def test_a_replaced_points_cpu_time_no_longer_counts() -> None:
    old = _report([_point("M-dra", [10.0, 12.0]), _point("B9", [3.0, 5.0])])
    new = _report([_point("M-dra", [20.0, 22.0])])
    merged = add_points(old, new)
    assert [p["policy"] for p in merged["points"]] == ["B9", "M-dra"]
    assert merged["points"][1]["cpu_s"]["mean"] == 21.0
    assert merged["config"]["cpu_s"] == 8.0 + 42.0  # not 30 + 8 + 42
    assert merged["config"]["added"] == ["M-dra"]
