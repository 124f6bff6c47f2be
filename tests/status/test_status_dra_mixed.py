"""``migslice status`` and ``why`` on clusters that mix device-plugin nodes and NVIDIA DRA
driver nodes: DRA nodes whose slices migslice cannot read, claims without a pod or shared by
several pods, and the nodes the repartition controller leaves alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import dra_slices
from harness.builders import make_namespace, make_node, make_policy
from tests.dra_objects import make_claim, make_claim_pod, make_dra_node, migslice_classes
from tests.status_cluster import run_cli, write_cluster_file


def _pod(raw: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **raw}


def _node(raw: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", **raw}


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
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (pool,) = document["pools"]
    # the pool of its siblings whose slices are read: the label, else the model they name
    assert pool["name"] == ("NVIDIA-A100-SXM4-80GB" if labelled else "A100-80GB")
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
            "devices": ["gpu-0-mig-1g10gb-19-3"],
        }
    ]
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert text.startswith("1 GPU node,")
    assert "no GPU nodes" not in text and "no GPU resources" not in text
    assert "dra-static" not in text and "has no NVIDIA GPU" not in text
    assert "GPUs unknown: " + said in text
    assert "team-a/team-a/p: ResourceClaim team-a/c (gpu-0-mig-1g10gb-19-3)" in text


def _claims_cluster() -> list[dict[str, Any]]:
    """A DynamicMIG node: a 1g.10gb claim reserved for two pods (s1, s2), a 2g.20gb claim
    allocated with no pod left (its reservation gone), and a 1g.20gb claim whose owning pod
    is gone (deleted; the claim not yet)."""
    node = "dra-0"
    return [
        make_namespace("team-a"),
        make_policy("team-a"),
        _node(make_dra_node(node)),
        *dra_slices.node_slices(node, f"uid-{node}", [dra_slices.a100(0), dra_slices.a100(1)]),
        *migslice_classes(),
        make_claim(
            "shared", allocated=[(node, "gpu-0-mig-1g10gb-19-3")], reserved_for=["s1", "s2"]
        ),
        _pod(make_claim_pod("s1", {"gpu": "shared"}, node_name=node, phase="Running")),
        _pod(make_claim_pod("s2", {"gpu": "shared"}, node_name=node, phase="Running")),
        make_claim("orphan", profile="2g.20gb", allocated=[(node, "gpu-1-mig-2g20gb-14-4")]),
        make_claim(
            "owned", profile="1g.20gb", allocated=[(node, "gpu-1-mig-1g20gb-15-0")], owner="gone"
        ),
    ]


def test_a_claim_without_a_pod_and_a_claim_shared_by_pods_show_their_holders(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A device held by a claim no live pod uses was drawn ``!`` "busy (no pod known)" (the
    mark of processes the node agent sees), or given to the gone pod that owned the claim; a
    claim several pods share named the first alone, and ``why`` of the second said it held
    nothing."""
    path = write_cluster_file(tmp_path / "cluster.yaml", _claims_cluster())
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (node,) = document["pools"][0]["nodes"]
    slots = {
        (g["index"], s["profile"]): (s["pod"], s["tenant"], s["claim"], s["sharedWith"])
        for g in node["gpus"]
        for s in g["instances"]
    }
    assert slots == {
        (0, "1g.10gb"): ("team-a/s1", "team-a", "team-a/shared", ["team-a/s2"]),
        (1, "2g.20gb"): (None, "team-a", "team-a/orphan", []),
        (1, "1g.20gb"): (None, "team-a", "team-a/owned", []),
    }
    assert not any(s["busyWithoutPod"] for g in node["gpus"] for s in g["instances"])
    assert all(s["used"] for g in node["gpus"] for s in g["instances"])
    text = run_cli(capsys, "status", "--cluster-file", str(path), "-o", "wide")
    assert "busy (no pod known)" not in text and "!" not in text
    assert "2g.20gb@4 team-a/ResourceClaim team-a/orphan (no pod)" in text
    assert "1g.10gb@3 team-a/team-a/s1, team-a/s2 (ResourceClaim team-a/shared)" in text
    assert "gone" not in text
    why = json.loads(
        run_cli(capsys, "why", "s2", "-n", "team-a", "--cluster-file", str(path), "-o", "json")
    )
    assert [(h["profile"], h["start"]) for h in why["holds"]] == [("1g.10gb", 3)]


def _left_alone_cluster() -> list[dict[str, Any]]:
    """An idle A100 whose device plugin serves seven 1g.10gb, which NVIDIA's DRA driver
    publishes too (both-0), and a DynamicMIG A100 in carve mode that one 7g.80gb claim fills
    (dyn-0); a pod waits for a 3g.40gb, and a pod waits for its 1g.10gb claim."""
    from harness.builders import make_mig_config_map, make_pod, unschedulable

    layout = [("1g.10gb", start) for start in range(7)]
    carve = {"migslice.io/repartition-mode": "carve"}
    return [
        make_namespace("team-a"),
        make_policy("team-a"),
        make_mig_config_map(),
        _node(make_node("both-0", mig={"1g.10gb": 7}, gpu_count=1)),
        *dra_slices.node_slices(
            "both-0", "uid-both-0", [dra_slices.a100(0)], dynamic=False, layouts=[layout]
        ),
        _node(make_dra_node("dyn-0", **carve)),
        *dra_slices.node_slices("dyn-0", "uid-dyn-0", [dra_slices.a100(0)]),
        *migslice_classes(),
        make_claim(
            "full", profile="7g.80gb", allocated=[("dyn-0", "gpu-0-mig-7g80gb-0-0")], owner="f"
        ),
        _pod(make_claim_pod("f", {"gpu": "full"}, node_name="dyn-0", phase="Running")),
        _pod(unschedulable(make_pod("w", profile="3g.40gb"))),
        make_claim("pend"),
        _pod(unschedulable(make_claim_pod("p", {"gpu": "pend"}))),
    ]


@pytest.mark.parametrize("mode", ["mig-manager", "carve"])
def test_why_names_the_dra_nodes_the_controller_leaves_alone_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    """why said only "no plan for it: no idle GPU can take it", beside an idle GPU the
    controller leaves alone because the device plugin and the DRA driver both serve it (as
    `migslice plan` says under "nodes left alone")."""
    from migslice.repartition.modes import DRA_AND_DEVICE_PLUGIN, DRA_DYNAMIC

    path = write_cluster_file(tmp_path / "cluster.yaml", _left_alone_cluster())
    argv = ("why", "w", "-n", "team-a", "--cluster-file", str(path), "--mode-default", mode)
    document = json.loads(run_cli(capsys, *argv, "-o", "json"))
    assert document["repartition"]["leftAlone"] == [
        {"node": "both-0", "reason": "dra-and-device-plugin", "message": DRA_AND_DEVICE_PLUGIN},
        {"node": "dyn-0", "reason": "dra-dynamic", "message": DRA_DYNAMIC},
    ]
    text = run_cli(capsys, *argv, "-o", "wide")
    assert f"left alone: both-0 (dra-and-device-plugin): {DRA_AND_DEVICE_PLUGIN}" in text
    assert f"left alone: dyn-0 (dra-dynamic): {DRA_DYNAMIC}" in text


def test_why_of_a_pod_waiting_for_its_claims_allocation_says_why_it_is_no_demand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod whose 1g.10gb claim waits for allocation is no demand of the repartition
    controller's (DRA nodes are never re-partitioned): why said "whole-GPU requests need MIG
    disabled; not re-partitioned"."""
    path = write_cluster_file(tmp_path / "cluster.yaml", _left_alone_cluster())
    argv = ("why", "p", "-n", "team-a", "--cluster-file", str(path))
    document = json.loads(run_cli(capsys, *argv, "-o", "json"))
    assert document["admission"]["asked"] == {"ResourceClaim": "team-a/pend"}
    (dyn,) = [c for c in document["placement"]["nodes"] if c["names"] == ["dyn-0"]]
    assert dyn["outcome"] == "failed"
    unserved = document["repartition"]["unserved"]
    assert "whole-GPU" not in unserved
    assert unserved.startswith("not demand: it asks its GPUs through ResourceClaims")
    assert "whole-GPU" not in run_cli(capsys, *argv)


def _steered_cluster() -> list[dict[str, Any]]:
    """Two DynamicMIG A100s: GPU 0 holds a 4g.40gb and a 2g.20gb (one 1g.10gb placement left,
    at 6), GPU 1 is idle and migslice's steer taints its 1g.10gb placements; a pod waits for
    a claim of two 1g.10gb, which fits the node unsteered (GPU 0's 1g@6 and one of GPU 1's)."""
    node = "dyn-0"
    objects: list[dict[str, Any]] = [
        make_namespace("team-a"),
        make_policy("team-a"),
        _node(make_dra_node(node)),
        *dra_slices.node_slices(node, f"uid-{node}", [dra_slices.a100(0), dra_slices.a100(1)]),
        *migslice_classes(),
        make_claim("a", profile="4g.40gb", allocated=[(node, "gpu-0-mig-4g40gb-5-0")], owner="h"),
        make_claim("b", profile="2g.20gb", allocated=[(node, "gpu-0-mig-2g20gb-14-4")], owner="h"),
        _pod(make_claim_pod("h", {"a": "a", "b": "b"}, node_name=node, phase="Running")),
        make_claim("two", count=2),
    ]
    for start in range(7):
        device = dra_slices.mig_device_name(1, "1g.10gb", 19, start)
        objects.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceTaintRule",
                "metadata": {"name": f"migslice-steer-{node}-{device}"},
                "spec": {
                    "deviceSelector": {"driver": "gpu.nvidia.com", "pool": node, "device": device},
                    "taint": {
                        "key": "migslice.io/steer",
                        "value": "1g.10gb",
                        "effect": "NoSchedule",
                    },
                },
            }
        )
    from harness.builders import unschedulable

    objects.append(_pod(unschedulable(make_claim_pod("w", {"gpu": "two"}))))
    return objects


def test_a_pod_the_steer_keeps_off_a_node_with_room_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Seven 1g.10gb placements are free on GPU 1, tainted by migslice's steer: the filter (and
    so status, why and kube-scheduler's Event) said "all 1g.10gb MIG instances in use", a
    node without room, where the steer alone keeps the pod off until it lifts."""
    from migslice.objects import load_cluster_text
    from migslice.scheduling import reasons
    from tests.status.test_why_agrees import assert_why_agrees

    path = write_cluster_file(tmp_path / "cluster.yaml", _steered_cluster())
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (waiting,) = document["waiting"]
    assert waiting["fits"] == []
    assert waiting["nodes"] == [
        {"reason": reasons.DEVICES_STEERED, "outcome": "failed", "count": 1, "names": ["dyn-0"]}
    ]
    assert "in use" not in waiting["summary"]
    objects = load_cluster_text(path.read_text())
    pod = next(p for p in objects.pods if p["metadata"]["name"] == "w")
    assert assert_why_agrees(objects, pod) == ()
    text = run_cli(capsys, "why", "w", "-n", "team-a", "--cluster-file", str(path))
    assert "held back by migslice's steer" in text


def test_a_pod_whose_claim_is_allocated_waits_for_the_allocations_node_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kube-scheduler allocated the pod's 3g.40gb claim on dyn-0 and has not bound the pod
    yet: its DRA plugin keeps the pod on that node ("resourceclaim not available on the node"
    elsewhere). Status and why said it asks nothing and fits every node, the device-plugin
    node and the other DRA node too."""
    objects = _left_alone_cluster()
    objects = [o for o in objects if o["metadata"]["name"] not in ("full", "f", "w", "p", "pend")]
    objects += [
        _node(make_dra_node("dyn-1")),
        *dra_slices.node_slices("dyn-1", "uid-dyn-1", [dra_slices.a100(0)]),
        make_claim(
            "c",
            profile="3g.40gb",
            allocated=[("dyn-0", "gpu-0-mig-3g40gb-9-4")],
            reserved_for=["b"],
        ),
        _pod(make_claim_pod("b", {"gpu": "c"})),
    ]
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (waiting,) = document["waiting"]
    assert waiting["requests"] == {"nvidia.com/mig-3g.40gb": 1}
    assert waiting["fits"] == ["dyn-0"]
    (elsewhere,) = waiting["nodes"]
    assert (elsewhere["outcome"], elsewhere["names"]) == ("kube-scheduler", ["both-0", "dyn-1"])
    assert elsewhere["reason"] == (
        "resourceclaim not available on the node (ResourceClaim team-a/c is allocated on dyn-0)"
    )
    why = json.loads(
        run_cli(capsys, "why", "b", "-n", "team-a", "--cluster-file", str(path), "-o", "json")
    )
    assert why["placement"]["nodes"] == waiting["nodes"]
    assert why["placement"]["fits"] == ["dyn-0"]


def test_a_pod_naming_a_claim_that_is_not_there_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod whose ``resourceClaimName`` names no ResourceClaim: kube-scheduler does not try
    it until the claim exists. Status and why, which read every claim, said every node failed
    it with "pod's ResourceClaim not seen by migslice extender yet", the extender's word for
    its cache lagging."""
    from harness.builders import unschedulable

    objects = _claims_cluster()
    objects.append(_pod(unschedulable(make_claim_pod("g", {"gpu": "nosuch"}))))
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (waiting,) = document["waiting"]
    assert (waiting["pod"], waiting["fits"], waiting["nodes"]) == ("team-a/g", [], [])
    assert waiting["summary"].startswith("waiting for its ResourceClaim(s) team-a/nosuch: ")
    assert "not seen" not in waiting["summary"]
    text = run_cli(capsys, "why", "g", "-n", "team-a", "--cluster-file", str(path))
    assert "team-a/nosuch" in text and "not seen" not in text


def test_claims_on_a_node_both_device_apis_serve_are_shown_beside_its_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """both-0's device plugin and NVIDIA's DRA driver both serve its A100; a pod holds one of
    its 1g.10gb through a claim the driver allocated. The node is read through its device
    plugin, whose counts do not see the claim: status said "mig-1g.10gb 0/7 held" and named
    no holder (the reason only in a note of ``-o wide``)."""
    objects = [o for o in _left_alone_cluster() if o["metadata"]["name"] not in ("w", "p", "pend")]
    device = dra_slices.mig_device_name(0, "1g.10gb", 19, 2)
    objects += [
        make_claim("bc", allocated=[("both-0", device)], reserved_for=["bp"]),
        _pod(make_claim_pod("bp", {"gpu": "bc"}, node_name="both-0", phase="Running")),
    ]
    path = write_cluster_file(tmp_path / "cluster.yaml", objects)
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (both,) = [n for p in document["pools"] for n in p["nodes"] if n["name"] == "both-0"]
    assert both["draClaimsBeside"] == [
        {
            "pod": "team-a/bp",
            "tenant": "team-a",
            "resource": None,
            "count": 1,
            "claim": "team-a/bc",
            "devices": [device],
        }
    ]
    text = run_cli(capsys, "status", "--cluster-file", str(path), "-o", "wide")
    assert f"team-a/team-a/bp: ResourceClaim team-a/bc ({device})" in text
    assert "not in its counts above" in run_cli(capsys, "status", "--cluster-file", str(path))
