"""``bench.plane.status_scale``: the cluster it times is the one it says, and its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.plane.status_scale import build, main, markdown, summary
from migslice.cli import main as migslice
from migslice.objects import parse_cluster_objects


def test_the_cluster_holds_the_pods_and_nodes_it_says(tmp_path: Path) -> None:
    objects = parse_cluster_objects([build(10, 80, 8, 4)])
    assert len(objects.nodes) == 10 and len(objects.tenant_policies) == 4
    bound = [p for p in objects.pods if p["spec"].get("nodeName")]
    assert (len(bound), len(objects.pods) - len(bound)) == (80, 8)


def test_status_reads_it_as_built(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(build(10, 80, 8, 4)))
    assert migslice(["status", "--cluster-file", str(path), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sum(t["boundPods"] for t in document["tenants"]) == 80
    assert len(document["waiting"]) == 8
    (pool,) = document["pools"]
    held = [s for n in pool["nodes"] for g in n["gpus"] for s in g["instances"] if s["pod"]]
    assert len(held) == 80 and pool["gpus"] == 80


def test_a_small_run_writes_its_section_and_renders(tmp_path: Path) -> None:
    argv = ["--nodes", "4", "--pods", "16", "--waiting", "2", "--tenants", "2", "--runs", "2"]
    assert main([*argv, "--label", "tiny", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    run = report["status_scale"]["tiny"]
    assert len(run["seconds"]) == 2 and run["nodes"] == 4
    assert len(run["cpu_seconds"]) == 2 and all(s > 0 for s in run["cpu_seconds"])
    assert "| tiny |" in (tmp_path / "report.md").read_text()


def test_the_summary_and_the_table() -> None:
    found = summary([2.9, 2.5, 2.7])
    assert (found["median_s"], found["spread_s"], found["met"]) == (2.7, 0.4, True)
    run = {"code": "abc", "when": "now", "nodes": 1, "pods": 2, "waiting": 0, "file_mb": 0.1}
    text = markdown({"x": {**run, **summary([3.5]), "load_average": 1.0}})
    assert "| x | abc |" in text and text.rstrip().endswith("| no |")
