"""A service over ``--cluster-file`` checks the file once before any worker starts, in a child
process (so the master's heap, which the workers inherit, never holds the parsed objects): the
counts come back, and a bad file is the file's own one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.builders import make_node, make_pod
from migslice.console import CommandError
from migslice.serving.apps import check_cluster_file


def write(path: Path, documents: list[dict[str, object]]) -> Path:
    path.write_text("".join(f"---\n{json.dumps(d)}\n" for d in documents))
    return path


def test_the_check_answers_the_files_counts(tmp_path: Path) -> None:
    nodes = [{"apiVersion": "v1", "kind": "Node", **make_node(f"gpu-{i}")} for i in range(3)]
    pods = [{"apiVersion": "v1", "kind": "Pod", **make_pod(f"p-{i}")} for i in range(2)]
    assert check_cluster_file(write(tmp_path / "c.yaml", [*nodes, *pods])) == (3, 2)


def test_a_bad_file_is_its_own_error_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("kind: Pod\nmetadata: {name: p, namespace: team-a}\nspec: oops\n")
    with pytest.raises(CommandError, match=r"^--cluster-file .*document 1 \(Pod team-a/p\): "):
        check_cluster_file(path)
    with pytest.raises(CommandError, match="--cluster-file"):
        check_cluster_file(tmp_path / "missing.yaml")


def test_an_item_of_a_list_is_named_by_its_position(tmp_path: Path) -> None:
    """``kubectl get pods -o yaml`` writes one ``List``: its bad item is named by its place in
    the list, not as the whole document."""
    good = {"apiVersion": "v1", "kind": "Pod", **make_pod("ok")}
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
    bad["spec"] = "oops"
    path = write(tmp_path / "c.yaml", [{"apiVersion": "v1", "kind": "List", "items": [good, bad]}])
    with pytest.raises(CommandError, match=r"document 1, item 2 of its List \(Pod team-a/p\): "):
        check_cluster_file(path)
    path = write(tmp_path / "d.yaml", [{"apiVersion": "v1", "kind": "List", "items": [good, 7]}])
    with pytest.raises(CommandError, match=r"document 1, item 2 of its List is not a Kubernetes"):
        check_cluster_file(path)
