"""The packing report's tenants: per tenant acceptance and quota denials summed over seeds,
Jain's index without the tenants too small to count, and a table only where there are
tenants to compare."""

from __future__ import annotations

from typing import Any

from bench.packing.packing import tenant_summary
from bench.packing.packing_report import reserve_table, tenants


def _run(seed: int, rows: list[list[Any]]) -> dict[str, Any]:
    return {"seed": seed, "tenants": rows}


def test_acceptance_and_denials_per_tenant_and_jain_without_the_tiny_ones() -> None:
    runs = [
        _run(0, [["BE", 100, 50, 10], ["LS", 100, 100, 0], ["Guaranteed", 1, 0, 0]]),
        _run(1, [["BE", 100, 50, 10], ["LS", 100, 100, 0], ["Guaranteed", 1, 0, 0]]),
    ]
    summary = tenant_summary(runs)
    assert summary["tenant_arrived"] == {"BE": 200, "Guaranteed": 2, "LS": 200}
    assert summary["tenant_accepted"]["BE"]["mean"] == 0.5
    assert summary["tenant_denied"]["BE"]["mean"] == 0.1
    # Guaranteed (1 pod of 201) is left out: Jain of (0.5, 1.0) = 2.25 / 2.5
    assert round(summary["jain"]["mean"], 6) == 0.9
    assert tenant_summary([{"seed": 0}]) == {}


def test_the_table_shows_workloads_with_two_tenants_or_more() -> None:
    two = tenant_summary([_run(0, [["BE", 10, 5, 0], ["LS", 30, 30, 0]])])
    quota = tenant_summary([_run(0, [["BE", 10, 4, 6], ["LS", 30, 27, 3]])])
    one = tenant_summary([_run(0, [["default", 10, 9, 0]])])
    blocks = [
        {
            "workload": "default/M1",
            "policies": {
                "B9": {"name": "B9 DRA", **two},
                "B9+quota": {"name": "B9 DRA, tenant quotas", **quota},
            },
        },
        {"workload": "multigpu50/M1", "policies": {"B9": {"name": "B9 DRA", **one}}},
        {"workload": "default/M2", "policies": {"B9": {"name": "B9 DRA", **two}}},
    ]
    text = "\n".join(tenants(blocks))
    assert "**default/M1** (tenants' shares of the arrived pods: LS 75.0 %, BE 25.0 %)" in text
    assert "| B9 DRA | 100.0 | 50.0 | 0.900 |" in text
    assert "| B9 DRA, tenant quotas | 90.0 (10.0 denied) | 40.0 (60.0 denied) |" in text
    assert "multigpu50" not in text and "default/M2" not in text  # one tenant; no quota runs
    assert tenants(blocks[1:]) == []


def test_the_reserve_table_pairs_m_dra_with_and_without_where_both_ran() -> None:
    def policy(name: str, slices: float, pods: float, large: float) -> dict[str, Any]:
        cell = {"100": {"mean": pods, "ci": 0.0}, "130": {"mean": pods, "ci": 0.0}}
        big = {"100": {"mean": large, "ci": 0.0}, "130": {"mean": large, "ci": 0.0}}
        at = {x: {"slice_allocation": {"mean": slices, "ci": 0.0}} for x in ("100", "130")}
        return {"name": name, "at": at, "accepted": cell, "large_accepted": big}

    blocks = [
        {
            "workload": "default/M1",
            "policies": {
                "M-dra": policy("M-dra", 0.977, 0.978, 0.976),
                "M-dra-reserve": policy("M-dra, reserve", 0.986, 0.977, 1.0),
            },
        },
        {"workload": "default/M3", "policies": {"M-dra": policy("M-dra", 0.98, 0.98, 0.98)}},
    ]
    text = "\n".join(reserve_table(blocks))
    assert "| default/M1 | M-dra, reserve | 98.6 | 98.6 | 97.7 | 97.7 | 100.0 | 100.0 |" in text
    assert "default/M3" not in text
    assert reserve_table(blocks[1:]) == []
