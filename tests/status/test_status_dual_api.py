"""``migslice status`` and ``why`` on a node both NVIDIA's device plugin and its DRA driver serve
(device-plugin allocatable and ``gpu.nvidia.com`` ResourceSlices, docs/dra.md): the node is read
through its device plugin, and the instances claims of the DRA driver hold are drawn on its
map as held by them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import dra_slices
from harness.builders import make_mig_config_map, make_namespace, make_node, make_pod, make_policy
from migslice.mig import CATALOG, place
from migslice.objects import AgentGpu, AgentInstance, AgentReport, render_layout_annotation
from tests.dra_objects import make_claim, make_claim_pod, migslice_classes
from tests.status_cluster import run_cli, write_cluster_file

ALL_1G = """version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
LAYOUT = [("1g.10gb", start) for start in range(7)]
A100 = CATALOG.get("A100-80GB")


def _node_json(capsys: pytest.CaptureFixture[str], path: Path, name: str) -> dict[str, Any]:
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (node,) = [n for p in document["pools"] for n in p["nodes"] if n["name"] == name]
    return {**node, "idleGpus": sum(p["idleGpus"] for p in document["pools"])}


def _used(node: dict[str, Any]) -> dict[tuple[int, int], tuple[str | None, str | None]]:
    """(GPU index, start) -> (pod, claim) of every used instance."""
    return {
        (gpu["index"], slot["start"]): (slot["pod"], slot["claim"])
        for gpu in node["gpus"]
        for slot in gpu["instances"]
        if slot["used"]
    }


def _claimed(device: str) -> list[dict[str, Any]]:
    """Claim bc, allocated ``device`` of both-0 and reserved for pod bp running there."""
    return [
        make_claim("bc", allocated=[("both-0", device)], reserved_for=["bp"]),
        make_claim_pod("bp", {"gpu": "bc"}, node_name="both-0", phase="Running"),
    ]


def test_an_instance_a_claim_holds_is_drawn_held_by_its_pod_on_the_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two A100s that MIG Manager laid out all-1g.10gb, which the device plugin serves and the
    DRA driver publishes too. Its minor numbers run against the PCI bus order (minor 0 is
    NVML's GPU 1). Claim bc holds gpu-0-mig-1g10gb-19-2; a device-plugin pod holds one
    1g.10gb. The map drew the claim's instance free (one GPU idle, 15 of 16 slices free) and
    listed the claim below it; why of its pod said it held nothing."""
    gpus = [
        dra_slices.a100(0, dra_slices.DGX_A100_BUS_IDS[1]),
        dra_slices.a100(1, dra_slices.DGX_A100_BUS_IDS[0]),
    ]
    objects = [
        make_namespace("team-a"),
        make_policy("team-a"),
        make_mig_config_map(ALL_1G),
        make_node(
            "both-0",
            mig={"1g.10gb": 14},
            gpu_count=2,
            config="all-1g.10gb",
            config_state="success",
        ),
        *dra_slices.node_slices(
            "both-0", "uid-both-0", gpus, dynamic=False, layouts=[LAYOUT, LAYOUT]
        ),
        *migslice_classes(),
        *_claimed(dra_slices.mig_device_name(0, "1g.10gb", 19, 2)),
        make_pod("dp", profile="1g.10gb", node_name="both-0"),
    ]
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    node = _node_json(capsys, path, "both-0")
    assert _used(node) == {(0, 0): ("team-a/dp", None), (1, 2): ("team-a/bp", "team-a/bc")}
    assert node["idleGpus"] == 0
    assert [g["freeSlices"] for g in node["gpus"]] == [7, 7]
    assert node["draClaimsBeside"] == []
    why = json.loads(
        run_cli(capsys, "why", "bp", "-n", "team-a", "--cluster-file", str(path), "-o", "json")
    )
    assert why["holds"] == [{"gpu": 1, "profile": "1g.10gb", "start": 2, "assumed": False}]
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert "1g.10gb team-a/team-a/bp" in text
    assert "not in its counts or map" not in text


def _agent_node(uuids: bool) -> dict[str, Any]:
    """both-0 with the node agent's layout: all-1g.10gb, its instance at start 2 busy (the
    claim's pod runs there); ``uuids``: the agent publishes the GPU's UUID, as it does."""
    gpu = dra_slices.a100(0)
    placed = [place(A100, profile, start) for profile, start in LAYOUT]
    report = AgentReport(
        product="NVIDIA-A100-SXM4-80GB",
        gpus=(
            AgentGpu(
                0,
                True,
                tuple(AgentInstance(p.profile, p.start, p.size, p.start == 2) for p in placed),
                gpu.uuid if uuids else "",
            ),
        ),
        pci_device_id=0x20B2,
    )
    return make_node(
        "both-0",
        mig={"1g.10gb": 7},
        gpu_count=1,
        layout_annotation=render_layout_annotation(report),
    )


def _agent_cluster(uuids: bool) -> list[dict[str, Any]]:
    return [
        make_namespace("team-a"),
        make_policy("team-a"),
        _agent_node(uuids),
        *dra_slices.node_slices(
            "both-0", "uid-both-0", [dra_slices.a100(0)], dynamic=False, layouts=[LAYOUT]
        ),
        *migslice_classes(),
        *_claimed(dra_slices.mig_device_name(0, "1g.10gb", 19, 2)),
        make_pod("dp", profile="1g.10gb", node_name="both-0"),
    ]


def test_a_busy_instance_a_claim_holds_is_the_claims_not_a_device_plugin_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent sees processes on the instance claim bc holds (start 2), matched to the DRA
    driver's GPU by UUID. The inventory assumes the device-plugin pod dp on the busy instance:
    the map gave it dp, and bc's pod nothing."""
    path = write_cluster_file(tmp_path / "cluster.yaml", _agent_cluster(uuids=True))
    node = _node_json(capsys, path, "both-0")
    used = _used(node)
    assert used.pop((0, 2)) == ("team-a/bp", "team-a/bc")
    assert list(used.values()) == [("team-a/dp", None)]
    assert node["draClaimsBeside"] == []


def test_a_claim_the_map_cannot_place_is_listed_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent that does not publish its GPU's UUID: which DRA GPU is which of the map's is
    not known, so the claim is listed under the map with its device, not drawn on a guess."""
    path = write_cluster_file(tmp_path / "cluster.yaml", _agent_cluster(uuids=False))
    node = _node_json(capsys, path, "both-0")
    assert (0, 2) not in _used(node) or _used(node)[(0, 2)][1] is None
    device = dra_slices.mig_device_name(0, "1g.10gb", 19, 2)
    assert [(h["pod"], h["claim"], h["devices"]) for h in node["draClaimsBeside"]] == [
        ("team-a/bp", "team-a/bc", [device])
    ]
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert f"team-a/team-a/bp: ResourceClaim team-a/bc ({device})" in text
    assert "that its map cannot place" in text


def test_why_of_a_pod_that_fits_by_the_device_plugins_counts_names_the_claims_it_does_not_see(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Six device-plugin pods and claim bc hold all seven 1g.10gb of both-0; the device
    plugin counts one free. why of a waiting 1g.10gb pod said only that it fits both-0 now,
    beside a map with no free 1g.10gb there: the device plugin may give it bc's device."""
    from harness.builders import unschedulable

    objects = _agent_cluster(uuids=True)
    objects += [make_pod(f"dp{i}", profile="1g.10gb", node_name="both-0") for i in range(1, 6)]
    objects.append(unschedulable(make_pod("w", profile="1g.10gb")))
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    node = _node_json(capsys, path, "both-0")
    assert all(s["used"] for g in node["gpus"] for s in g["instances"])
    argv = ("why", "w", "-n", "team-a", "--cluster-file", str(path))
    why = json.loads(run_cli(capsys, *argv, "-o", "json"))
    assert why["placement"]["fits"] == ["both-0"]
    ((name, said),) = [(b["node"], b["message"]) for b in why["placement"]["claimsUnseen"]]
    assert name == "both-0"
    assert "1 x 1g.10gb" in said and "team-a/bc" in said
    text = run_cli(capsys, *argv, "-o", "wide")
    assert f"{name}: {said}" in text
