"""``migslice plan`` on a cluster with DRA nodes: they are listed as left to NVIDIA's DRA
driver, with the reason, in the table and in the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migslice.cli import main

DEMO = Path(__file__).resolve().parents[2] / "migslice" / "demo" / "cluster.yaml"


def test_plan_lists_the_dra_node_as_left_to_the_driver(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--cluster-file", str(DEMO)]) == 0
    out = capsys.readouterr().out
    assert "DRA nodes, left to NVIDIA's DRA driver:" in out
    assert "  a100-dra: a DRA DynamicMIG node: NVIDIA's DRA driver creates each MIG instance" in out
    assert main(["plan", "--cluster-file", str(DEMO), "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert [n["node"] for n in answer["draNodes"]] == ["a100-dra"]
