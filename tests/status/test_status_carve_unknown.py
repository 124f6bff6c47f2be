"""``migslice status`` and ``why`` on a carve-mode node whose carve handshake cannot be read:
the repartition controller's request ``migslice.io/carve`` or the node agent's journal
``migslice.io/carve-state`` of another release, or edited by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.builders import (
    make_mig_config_map,
    make_namespace,
    make_pod,
    make_policy,
    unschedulable,
)
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION
from tests.carve_builders import carve_node_raw, gpu
from tests.status_cluster import run_cli, write_cluster_file

ALL_1G = gpu(*(f"1g.10gb@{start}" for start in range(7)))
ANNOTATIONS = {
    "request-of-another-release": (
        CARVE_ANNOTATION,
        '{"version":"v2","plan":"9c1e0f4a2b7d","gpus":[]}',
        "migslice.io/carve has version 'v2'",
    ),
    "request-not-json": (CARVE_ANNOTATION, "{plan: 9c1e", "migslice.io/carve is not JSON"),
    "journal-of-unknown-state": (
        CARVE_STATE_ANNOTATION,
        '{"version":"v1","plan":"9c1e0f4a2b7d","state":"carving","gpus":[]}',
        "migslice.io/carve-state: state='carving'",
    ),
}


def _cluster(tmp_path: Path, annotation: str, text: str) -> Path:
    """An idle carve-mode A100 laid out all-1g.10gb, the annotation on it; a 3g.40gb pod
    waits."""
    objects: list[dict[str, Any]] = [
        make_namespace("team-a"),
        make_policy("team-a"),
        make_mig_config_map(),
        carve_node_raw("a100-0", [ALL_1G], annotations={annotation: text}),
        unschedulable(make_pod("w", profile="3g.40gb")),
    ]
    return write_cluster_file(tmp_path / "cluster.yaml", objects)


@pytest.mark.parametrize("shape", sorted(ANNOTATIONS))
def test_a_node_whose_carve_annotation_cannot_be_read_is_said_to_be_of_unknown_carve_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str
) -> None:
    """The extender reads the node as not carving, as its agent acts on it: status drew it
    ready and idle, why weighed it for a carve, and neither said that a carve's state there
    is unknown (the annotation's problem only in a note of ``-o wide``)."""
    annotation, text, problem = ANNOTATIONS[shape]
    path = _cluster(tmp_path, annotation, text)
    remove = f"kubectl annotate node a100-0 {annotation}-"
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (node,) = [n for p in document["pools"] for n in p["nodes"]]
    said = node["carveUnknown"]
    assert said.startswith(problem) and remove in said
    status = run_cli(capsys, "status", "--cluster-file", str(path), "-o", "wide")
    assert f"carve state unknown: {problem}" in status
    argv = ("why", "w", "-n", "team-a", "--cluster-file", str(path))
    why = json.loads(run_cli(capsys, *argv, "-o", "json"))
    assert why["repartition"]["carveUnknown"] == [{"node": "a100-0", "reason": said}]
    assert f"carve state unknown: a100-0: {problem}" in run_cli(capsys, *argv, "-o", "wide")


def test_a_node_whose_carve_annotations_are_read_has_no_unknown_carve_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = '{"version":"v1","plan":"9c1e0f4a2b7d","state":"success","gpus":[]}'
    path = _cluster(tmp_path, CARVE_STATE_ANNOTATION, journal)
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    assert [n["carveUnknown"] for p in document["pools"] for n in p["nodes"]] == [None]
    assert "carve state unknown" not in run_cli(capsys, "status", "--cluster-file", str(path))
