"""New-shape pods' waits as the churn and carve reports give them: the carve report judges the
goal for the per-pod carvers too (every pod of theirs is given an instance of its own, so its
wait is a new shape's, not 0), and the churn report gives no planned-for wait for a policy that
plans nothing, and quotes the per-pod carvers' beside carve mode's goal."""

from __future__ import annotations

from typing import Any

from bench.packing.carve import workload_section
from bench.packing.churn_report import base_table, goals


def _summary(mean: float) -> dict[str, float]:
    return {"mean": mean, "ci": 0.0, "min": mean, "max": mean, "n": 1}


def _point(policy: str, name: str, t_carve: float, waits: float, planned: float) -> dict[str, Any]:
    return {
        "workload": "default/M1",
        "policy": policy,
        "name": name,
        "t_carve": t_carve,
        "min_pending": 10.0 if policy.startswith("M-carve") else 0.0,
        "interval": 15.0 if policy.startswith("M-carve") else 0.0,
        "acceptance": _summary(0.99),
        "slice_acceptance": _summary(0.96),
        "repartitions_per_20_placed": _summary(0.0),
        "disrupted_pods": 0,
        "per_seed": {"acceptance": [0.99], "slice_acceptance": [0.96]},
        "waits": {"p50_s": _summary(5.0), "p99_s": _summary(waits)},
        "repartition_waits": {"p50_s": _summary(0.0), "p99_s": _summary(planned)},
        "repartition_leads": {"p50_s": _summary(0.0), "p99_s": _summary(planned)},
    }


def _row(lines: list[str], start: str) -> str:
    return next(line for line in lines if line.startswith(start))


def test_a_per_pod_carver_is_judged_on_every_pods_wait() -> None:
    report = {
        "points": [
            _point("M-carve 5s pending 10s rounds 15s", "migslice carve mode", 5.0, 40.0, 199.0),
            _point("B6 5s", "B6 FGD-for-MIG", 5.0, 136.0, 0.0),
            _point("B8 5s", "B8 HAMi v2.10 MIG", 5.0, 20.0, 0.0),
        ]
    }
    lines = workload_section(report, "default/M1")
    # M-carve: the pods a carve was planned for
    assert "| 0 / 199 | ≤ 35: MISSED by 164 s |" in _row(lines, "| migslice carve mode")
    # per-pod carvers: every pod, carve included
    assert "| 5 / 136 | ≤ 35: MISSED by 101 s | — |" in _row(lines, "| B6 FGD-for-MIG 5 s")
    assert "| 5 / 20 | ≤ 35: met |" in _row(lines, "| B8 HAMi v2.10 MIG 5 s")


def _churn_point(
    policy: str, name: str, waits: float, planned: float, plans: float
) -> dict[str, Any]:
    p = _point(policy, name, 5.0, waits, planned)
    p.update(
        load=95.0,
        t_reconf=60.0,
        slice_allocation=_summary(0.92),
        mean_pending=_summary(2.0),
        gpus_repartitioned=_summary(plans * 10),
        repartitions_per_20_placed=_summary(plans),
    )
    p["waits"]["p90_s"] = _summary(waits / 2)
    return p


def test_the_churn_report_gives_no_planned_for_wait_where_nothing_was_planned() -> None:
    at = (95.0, 60.0)
    report = {
        "config": {"mixes": {}, "t_carve_s": 5.0},
        "points": [
            _churn_point("migslice", "migslice", 130.0, 249.0, 0.17),
            _churn_point("M-carve", "migslice carve mode", 112.0, 199.0, 0.25),
            _churn_point("M-dra", "M-dra", 199.0, 0.0, 0.0),
            _churn_point("B6", "B6 FGD-for-MIG", 136.0, 0.0, 0.0),
            _churn_point("B8", "B8 HAMi v2.10 MIG", 84.0, 0.0, 0.0),
        ],
    }
    table = base_table(report, "default/M1", at)
    assert "| 5 / 68 / 136 | — |" in _row(table, "| B6 FGD-for-MIG |")
    assert "| 5 / 65 / 130 | 0 / 249 |" in _row(table, "| migslice |")
    carve_goal = _row(goals(report, "default/M1", at), "- **M-carve")
    assert "MISSED (p50 0 s, p99 199 s" in carve_goal
    assert "p99 M-dra 199 s, B6 136 s, B8 84 s." in carve_goal
