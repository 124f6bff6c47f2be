"""``migslice status`` and ``why`` on clusters that mix device-plugin nodes and NVIDIA DRA
driver nodes: DRA nodes whose slices migslice cannot read, claims without a pod or shared by
several pods, and the nodes the repartition controller leaves alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import dra_slices
from harness.builders import make_namespace, make_policy
from migslice.cli import main
from tests.dra_objects import make_claim, make_claim_pod, make_dra_node, migslice_classes


def _pod(raw: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **raw}


def _node(raw: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", **raw}


def _write(tmp_path: Path, objects: list[dict[str, Any]]) -> Path:
    for raw in objects:
        raw.setdefault("apiVersion", "v1")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def _unknown_slices(node: str) -> list[dict[str, Any]]:
    """A device type migslice does not know (a later driver's): the pool is unknown."""
    slices = dra_slices.node_slices(node, f"uid-{node}", [dra_slices.a100(0)])
    slices[1]["spec"]["devices"][0]["attributes"]["type"] = {"string": "vgpu"}
    return slices


def _incomplete_slices(node: str) -> list[dict[str, Any]]:
    """The driver mid-publish: 2 of the 3 slices it announces."""
    return dra_slices.node_slices(node, f"uid-{node}", [dra_slices.a100(0), dra_slices.a100(1)])[
        :-1
    ]


SHAPES = {
    "unknown": (_unknown_slices, "DRA pool gpu.nvidia.com unknown", "not understood"),
    "incomplete": (_incomplete_slices, "DRA pool gpu.nvidia.com incomplete", "not all published"),
}


@pytest.mark.parametrize("labelled", [False, True], ids=["no-gfd-label", "gfd-label"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_dra_node_whose_slices_cannot_be_read_is_shown_unknown_with_its_claims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shape: str, labelled: bool
) -> None:
    """A DRA node whose ResourceSlices migslice cannot read (a device of a type it does not
    know) or that its driver has not all published yet: status left it out of every pool
    ("0 GPU nodes ... no GPU nodes") without GFD's label, and with it said "layout from
    dra-static", "no per-GPU layout; no GPU resources" (and, mid-publish, "node has no NVIDIA
    GPU"), while a pod held a claim there."""
    slices, said, condition = SHAPES[shape]
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"} if labelled else {}
    objects: list[dict[str, Any]] = [
        make_namespace("team-a"),
        make_policy("team-a"),
        _node(make_dra_node("dra-0", **labels)),
        *slices("dra-0"),
        *migslice_classes(),
        make_claim("c", allocated=[("dra-0", "gpu-0-mig-1g10gb-19-3")], reserved_for=["p"]),
        _pod(make_claim_pod("p", {"gpu": "c"}, node_name="dra-0", phase="Running")),
    ]
    path = _write(tmp_path, objects)
    document = json.loads(_run(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (pool,) = document["pools"]
    assert pool["name"] == "NVIDIA-A100-SXM4-80GB"
    (node,) = pool["nodes"]
    assert (node["name"], node["layoutSource"], node["gpus"]) == ("dra-0", "dra-unknown", [])
    assert node["unknown"].startswith(said)
    assert condition in node["condition"]
    assert node["holdings"] == [
        {
            "pod": "team-a/p",
            "tenant": "team-a",
            "resource": None,
            "count": 1,
            "claim": "team-a/c",
        }
    ]
    text = _run(capsys, "status", "--cluster-file", str(path))
    assert text.startswith("1 GPU node,")
    assert "no GPU nodes" not in text and "no GPU resources" not in text
    assert "dra-static" not in text and "has no NVIDIA GPU" not in text
    assert "GPUs unknown: " + said in text
    assert "team-a/team-a/p: ResourceClaim team-a/c" in text
