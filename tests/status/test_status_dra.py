"""``migslice status`` and ``why`` on a DRA node: NVIDIA's DynamicMIG slices of two A100s, two
claims allocated (one 1g.10gb on GPU 0, one 4g.40gb on GPU 1) and a pod whose 7g.80gb claim no
free placement can host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import dra_slices
from harness.builders import make_namespace, make_node, make_policy
from migslice.admission import AdmissionSettings, PodAdmission, decide
from migslice.admission.usage import SliceUsage
from migslice.objects import load_cluster_text
from migslice.status.cluster import StatusSettings, build_cluster
from migslice.status.tenants import tenant_views
from tests.dra_objects import (
    maintenance_rule,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)
from tests.status_cluster import run_cli
from webhook.state import ClusterState

NODE = "dra-0"


def dra_cluster() -> list[dict[str, Any]]:
    node = {"apiVersion": "v1", "kind": "Node", **make_dra_node(NODE)}
    objects: list[dict[str, Any]] = [node, make_namespace("team-a"), make_policy("team-a")]
    objects += dra_slices.node_slices(NODE, f"uid-{NODE}", [dra_slices.a100(0), dra_slices.a100(1)])
    objects += migslice_classes()
    objects.append(
        make_claim(
            "a", profile="1g.10gb", allocated=[(NODE, "gpu-0-mig-1g10gb-19-0")], reserved_for=["a"]
        )
    )
    objects.append(
        make_claim("c", profile="4g.40gb", allocated=[(NODE, "gpu-1-mig-4g40gb-5-0")], owner="c")
    )
    objects.append(make_claim("d", profile="7g.80gb"))
    for name, node_name in (("a", NODE), ("c", NODE), ("d", None)):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            **make_claim_pod(name, {"gpu": name}, node_name=node_name),
        }
        if node_name is None:
            pod["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2025-06-15T15:00:00Z",
                }
            ]
        objects.append(pod)
    for raw in objects:
        raw.setdefault("apiVersion", "v1")
    return objects


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all(dra_cluster()))
    return path


def test_the_map_shows_each_claims_partition_and_its_pod(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "json")
    )
    (pool,) = document["pools"]
    (node,) = pool["nodes"]
    assert node["layoutSource"] == "dra-dynamic"
    held = {
        (g["index"], s["profile"], s["start"]): (s["pod"], s["tenant"])
        for g in node["gpus"]
        for s in g["instances"]
    }
    # Reserved for its pod, or owned by it: the holder is known, not assumed.
    assert held == {
        (0, "1g.10gb", 0): ("team-a/a", "team-a"),
        (1, "4g.40gb", 0): ("team-a/c", "team-a"),
    }
    free = {p["resource"]: (p["free"], p["offered"]) for p in node["draPlacements"]}
    assert free["nvidia.com/mig-7g.80gb"] == (0, 2)
    assert free["nvidia.com/mig-1g.10gb"] == (9, 14)
    assert (pool["freeSlices"], pool["totalSlices"]) == (11, 16)
    text = run_cli(capsys, "status", "--cluster-file", str(cluster_file))
    assert "|1g.10gb*|" in text and "1g.10gb team-a/team-a/a" in text
    assert "4g.40gb team-a/team-a/c" in text
    assert "free slices carved on demand" in text and "7g.80gb 0/2" in text


def test_a_dynamic_mig_gpus_largest_free_region_is_its_largest_free_placement(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A DynamicMIG GPU has no instance but those claims hold: beside GPU 0's 1g.10gb@0 and
    GPU 1's 4g.40gb@0 a 3g.40gb@4 can still be carved on each (FRAG read 1.00, largest 0)."""
    document = json.loads(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "json")
    )
    (pool,) = document["pools"]
    (node,) = pool["nodes"]
    by_gpu = {g["index"]: (g["freeSlices"], g["largestFreeSlices"]) for g in node["gpus"]}
    assert by_gpu == {0: (7, 4), 1: (4, 4)}
    assert (pool["freeSlices"], pool["largestFreeSlices"]) == (11, 8)
    assert pool["fragmentation"] == pytest.approx(1 - 8 / 11, abs=1e-4)


def test_a_claim_pod_that_no_free_placement_hosts_waits_with_the_extenders_reason(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "json")
    )
    (waiting,) = document["waiting"]
    assert waiting["pod"] == "team-a/d"
    assert waiting["requests"] == {"nvidia.com/mig-7g.80gb": 1}
    (reason,) = waiting["nodes"]
    assert (reason["outcome"], reason["names"]) == ("failed", [NODE])
    assert "7g.80gb" in reason["reason"]
    why = json.loads(
        run_cli(
            capsys, "why", "-n", "team-a", "d", "--cluster-file", str(cluster_file), "-o", "json"
        )
    )
    assert why["admission"]["asked"] == {"ResourceClaim": "team-a/d"}
    assert why["placement"]["nodes"] == waiting["nodes"]


@pytest.mark.parametrize("with_class", [True, False], ids=["class-maps-it", "no-class"])
def test_an_extended_resource_reaches_a_dra_node_only_through_a_class_that_maps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], with_class: bool
) -> None:
    from harness.builders import make_pod, unschedulable

    objects = [
        o for o in dra_cluster() if with_class or o["metadata"]["name"] != "migslice-mig-3g.40gb"
    ]
    objects.append(
        {"kind": "Pod", "apiVersion": "v1", **unschedulable(make_pod("big", profile="3g.40gb"))}
    )
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    big = next(w for w in document["waiting"] if w["pod"] == "team-a/big")
    if with_class:
        assert big["fits"] == [NODE]
    else:
        (dropped,) = big["nodes"]
        assert (dropped["outcome"], dropped["names"]) == ("kube-scheduler", [NODE])
        assert dropped["reason"].startswith("Insufficient nvidia.com/mig-3g.40gb")


def test_a_device_taint_rule_keeps_a_claim_off_and_why_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only GPU 0's 1g.10gb@0 is held: a 7g.80gb fits GPU 1 unless an admin's DeviceTaintRule
    (maintenance) taints that GPU's devices; then the pod fails there by the taint, not by
    room. migslice's own steer rules are counted apart."""
    objects = [o for o in dra_cluster() if o["metadata"]["name"] != "c"]
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    assert [w["pod"] for w in document["waiting"]] == ["team-a/d"]
    assert document["waiting"][0]["fits"] == [NODE]
    maintenance = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-1-maintenance"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": NODE, "device": ""},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    rules = []
    for device in ("gpu-1-mig-7g80gb-0-0", "gpu-1-mig-4g40gb-5-0"):
        rule = json.loads(json.dumps(maintenance))
        rule["metadata"]["name"] = f"maintenance-{device}"
        rule["spec"]["deviceSelector"]["device"] = device
        rules.append(rule)
    steer = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"migslice-steer-{NODE}-gpu-1-mig-1g10gb-19-0"},
        "spec": {
            "deviceSelector": {
                "driver": "gpu.nvidia.com",
                "pool": NODE,
                "device": "gpu-1-mig-1g10gb-19-0",
            },
            "taint": {"key": "migslice.io/steer", "value": "1g.10gb", "effect": "NoSchedule"},
        },
    }
    path.write_text(yaml.safe_dump_all([*objects, *rules, steer]))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (node,) = document["pools"][0]["nodes"]
    assert (node["draDevicesTainted"], node["draDevicesSteered"]) == (2, 1)
    (waiting,) = document["waiting"]
    assert waiting["fits"] == []
    (reason,) = waiting["nodes"]
    assert reason["outcome"] == "failed" and "tainted" in reason["reason"]
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert "2 device(s) tainted" in text


def test_a_taint_on_the_free_placements_of_gpus_in_use_is_named_as_the_taint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both GPUs are in use (1g.10gb@0, 4g.40gb@0) and each has its 3g.40gb@4 free; an admin's
    DeviceTaintRules taint both. A 3g.40gb pod fits but for the taints: status, why and the
    extender said "all 3g.40gb MIG instances in use" (the free counts of a GPU in use left
    tainted devices out, those of an idle GPU did not), and the node's DRA placements said
    3g.40gb 0/4 beside "2 device(s) tainted", where the claims leave 2."""
    from harness.builders import make_pod, unschedulable
    from migslice.scheduling import reasons
    from tests.status.test_why_agrees import assert_why_agrees

    big = {"kind": "Pod", "apiVersion": "v1", **unschedulable(make_pod("big", profile="3g.40gb"))}
    rules = [maintenance_rule(NODE, f"gpu-{g}-mig-3g40gb-9-4") for g in (0, 1)]
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all([*dra_cluster(), big, *rules]))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (node,) = document["pools"][0]["nodes"]
    free = {p["resource"]: (p["free"], p["offered"]) for p in node["draPlacements"]}
    assert free["nvidia.com/mig-3g.40gb"] == (2, 4) and node["draDevicesTainted"] == 2
    waiting = next(w for w in document["waiting"] if w["pod"] == "team-a/big")
    assert waiting["fits"] == []
    assert waiting["nodes"] == [
        {"reason": reasons.DEVICES_TAINTED, "outcome": "failed", "count": 1, "names": [NODE]}
    ]
    why = json.loads(
        run_cli(capsys, "why", "-n", "team-a", "big", "--cluster-file", str(path), "-o", "json")
    )
    assert why["placement"]["nodes"] == waiting["nodes"]
    objects = load_cluster_text(path.read_text())
    pod = next(p for p in objects.pods if p["metadata"]["name"] == "big")
    assert assert_why_agrees(objects, pod) == ()  # the extender fails it for the taint too


def test_who_may_not_list_device_taint_rules_still_reads_the_cluster() -> None:
    from migslice.console import CommandError
    from migslice.status.gather import read_cluster
    from tests.local_api import Request, local_api

    objects = dra_cluster()
    kinds = {"nodes": "Node", "pods": "Pod", "resourceslices": "ResourceSlice"}

    def answer(forbidden: str) -> Any:
        def respond(request: Request) -> tuple[int, Any]:
            resource = request.path.rstrip("/").rsplit("/", 1)[-1]
            if resource == forbidden:
                return 403, {"kind": "Status", "code": 403, "message": "forbidden"}
            kind = kinds.get(resource)
            items = [o for o in objects if kind and o["kind"] == kind]
            return 200, {"kind": "List", "metadata": {}, "items": items}

        return respond

    with local_api(answer("devicetaintrules")) as transport:
        read = read_cluster(transport, ("migslice-system", "mig-parted-config"))
    slices = [o for o in objects if o["kind"] == "ResourceSlice"]
    assert len(read.resource_slices) == len(slices) > 0 and read.device_taint_rules == ()
    with local_api(answer("resourceslices")) as transport, pytest.raises(CommandError):
        read_cluster(transport, ("migslice-system", "mig-parted-config"))


# -- usage: the tenant's claims, as the webhook charges them -----------------------------------

EXTENDED = "e-extended-resources-k2x9z"


def _with_paying_pod(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``objects`` and pod e, bound, whose nvidia.com/mig-2g.20gb kube-scheduler serves from
    DRA through the claim it made for the pod (KEP-5004), which the pod pays for."""
    pod = make_claim_pod(
        "e", {}, mig={"2g.20gb": 1}, node_name=NODE, phase="Running", extended_claim=EXTENDED
    )
    claim = make_claim(
        EXTENDED,
        device_class="migslice-mig-2g.20gb",
        profile=None,
        owner="e",
        extended_resource=True,
        allocated=[(NODE, "gpu-0-mig-2g20gb-14-2")],
        reserved_for=["e"],
    )
    return [*objects, {"apiVersion": "v1", "kind": "Pod", **pod}, claim]


def _named_by_another_pod() -> list[dict[str, Any]]:
    other = make_claim_pod("q", {"gpu": EXTENDED}, node_name=NODE, phase="Running")
    return [*_with_paying_pod(dra_cluster()), {"apiVersion": "v1", "kind": "Pod", **other}]


def _owner_of_another_uid() -> list[dict[str, Any]]:
    objects = _with_paying_pod(dra_cluster())
    objects[-1]["metadata"]["ownerReferences"][0]["uid"] = "uid-e-before-it-was-recreated"
    return objects


def _beside_a_labelled_a100_40gb() -> list[dict[str, Any]]:
    """A device-plugin A100 40GB node beside the unlabelled DRA node: 1g.10gb is 2 memory
    slices there, 1 on the DRA node's A100 80GB (its ResourceSlices' productName)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        **make_node("gfd-0", product="NVIDIA-A100-SXM4-40GB"),
    }
    return [*dra_cluster(), node]


CLAIMS = SliceUsage(3, 12, 13, (("1g.10gb", 1), ("4g.40gb", 1), ("7g.80gb", 1)))
TWO_G = SliceUsage(1, 2, 2, (("2g.20gb", 1),))
USAGE = [
    ("claims-allocated-and-not", dra_cluster, CLAIMS),
    (
        "a-pod-pays-its-extended-resource-claim",
        lambda: _with_paying_pod(dra_cluster()),
        CLAIMS + TWO_G,
    ),
    ("a-marked-claim-another-pod-names-is-charged", _named_by_another_pod, CLAIMS + TWO_G + TWO_G),
    ("a-marked-claim-of-another-uid-is-charged", _owner_of_another_uid, CLAIMS + TWO_G + TWO_G),
    ("priced-on-the-dra-nodes-own-product", _beside_a_labelled_a100_40gb, CLAIMS),
]


@pytest.mark.parametrize(("build", "expected"), [u[1:] for u in USAGE], ids=[u[0] for u in USAGE])
def test_a_tenants_usage_counts_its_claims_as_the_webhooks_cluster_state_does(
    build: Any, expected: SliceUsage
) -> None:
    """The status header says usage is "as the webhook counts them": the same objects loaded
    into the webhook's ClusterState give the same usage, claims included."""
    objects = load_cluster_text(yaml.safe_dump_all(build()))
    state = ClusterState()
    state.load(objects)
    cluster = build_cluster(objects, StatusSettings(now_s=1_750_000_000.0))
    assert cluster.usage_of("team-a") == state.tenant_usage("team-a") == expected
    (tenant,) = tenant_views(cluster)
    assert tenant.usage == expected


def test_status_and_why_show_the_claims_in_the_tenants_quota(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = [o for o in dra_cluster() if o["kind"] != "TenantPolicy"]
    objects.append(make_policy("team-a", quota={"computeSlices": 12}))
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (tenant,) = document["tenants"]
    used = {d["dimension"]: (d["used"], d["limit"]) for d in tenant["usage"]}
    assert used["computeSlices"] == (12, 12) and used["instances"] == (3, None)
    why = json.loads(
        run_cli(capsys, "why", "-n", "team-a", "d", "--cluster-file", str(path), "-o", "json")
    )
    quota = {d["dimension"]: d["used"] for d in why["admission"]["quota"]}
    assert quota["computeSlices"] == 12


def test_why_f_answers_as_the_webhook_on_a_cluster_of_dra_nodes_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The DRA node has no GFD label: its product comes from its ResourceSlices, as the
    webhook reads it, and the claims fill the tenant's 12 compute slices, so a small pod is
    refused for quota, not for a product the cluster lacks."""
    objects = [o for o in dra_cluster() if o["kind"] != "TenantPolicy"]
    objects.append(make_policy("team-a", quota={"computeSlices": 12}))
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "new",
            "namespace": "team-a",
            "annotations": {"migslice.io/gpu-size": "small"},
        },
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:13.0.0-base"}]},
    }
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod))
    state = ClusterState()
    state.load(load_cluster_text(path.read_text()))
    webhook = decide(PodAdmission("team-a", pod, request_uid="uid-new"), state, AdmissionSettings())
    assert (webhook.allowed, webhook.reason) == (False, "quota")
    why = json.loads(
        run_cli(capsys, "why", "-f", str(manifest), "--cluster-file", str(path), "-o", "json")
    )
    absent = why["absent"]
    assert (absent["allowed"], absent["reason"], absent["message"]) == (
        False,
        "quota",
        webhook.message,
    )
    objects[-1] = make_policy("team-a")  # no quota: admitted, sized on the DRA node's model
    path.write_text(yaml.safe_dump_all(objects))
    why = json.loads(
        run_cli(capsys, "why", "-f", str(manifest), "--cluster-file", str(path), "-o", "json")
    )
    assert (why["absent"]["allowed"], why["absent"]["profile"]) == (True, "1g.10gb")


def test_a_resource_claim_tenants_sized_pod_whose_claim_is_not_made_yet_waits_for_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The webhook gives a deviceAPI: ResourceClaim tenant's sized pod a claim from its
    template migslice-mig-1g.10gb; until the resourceclaim controller has made it (a claim the
    webhook refused for quota leaves the pod so while the controller retries, docs/policy.md)
    status left the pod out and why said it "asks for no GPU (no nvidia.com/* request):
    migslice does not place it"."""
    import copy

    import jsonpatch

    objects = [o for o in dra_cluster() if o["kind"] != "TenantPolicy"]
    objects.append(make_policy("team-a", deviceAPI="ResourceClaim"))
    state = ClusterState()
    state.load(load_cluster_text(yaml.safe_dump_all(objects)))
    created = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "sized",
            "namespace": "team-a",
            "uid": "uid-sized",
            "annotations": {"migslice.io/gpu-size": "small"},
        },
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/cuda:13.0.0-base"}]},
    }
    decision = decide(PodAdmission("team-a", created, "uid-1"), state, AdmissionSettings())
    assert decision.allowed and decision.templates == (("team-a", "1g.10gb"),)
    pod = jsonpatch.apply_patch(copy.deepcopy(created), [op.to_json() for op in decision.patch])
    pod["status"] = {"phase": "Pending"}
    path = tmp_path / "dra.yaml"
    path.write_text(yaml.safe_dump_all([*objects, pod]))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (tenant,) = document["tenants"]
    assert (tenant["boundPods"], tenant["waitingPods"]) == (2, 2)
    sized = next(w for w in document["waiting"] if w["pod"] == "team-a/sized")
    assert "migslice-mig-1g.10gb" in sized["summary"]
    assert "not made" in sized["summary"] and sized["fits"] == []
    text = run_cli(capsys, "why", "-n", "team-a", "sized", "--cluster-file", str(path))
    assert "asks for no GPU" not in text
    assert "migslice.io/gpu-size=small" in text and "migslice-mig-1g.10gb" in text


def test_a_claim_holding_a_whole_dynamic_mig_hopper_gpu_shows_it_held(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On Hopper NVIDIA's driver publishes a DynamicMIG GPU's ``gpu-<minor>`` too, which takes
    every counter of the GPU: a claim holding ``gpu-0`` leaves it nothing free. Status drew it
    ``|...|`` with no holder and counted its 8 slices free (FREE 16/16) while the placements
    read 7g.80gb 1/2."""
    node = "dra-h100"
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Node", **make_dra_node(node)},
        make_namespace("team-a"),
        make_policy("team-a"),
        *dra_slices.node_slices(node, f"uid-{node}", [dra_slices.h100(0), dra_slices.h100(1)]),
        *migslice_classes(),
        make_claim(
            "w",
            device_class="gpu.nvidia.com",
            profile=None,
            allocated=[(node, "gpu-0")],
            reserved_for=["w"],
        ),
        {"apiVersion": "v1", "kind": "Pod", **make_claim_pod("w", {"gpu": "w"}, node_name=node)},
    ]
    path = tmp_path / "h100.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    (pool,) = document["pools"]
    (view,) = pool["nodes"]
    assert view["layoutSource"] == "dra-dynamic"
    by_gpu = {g["index"]: g for g in view["gpus"]}
    assert (by_gpu[0]["freeSlices"], by_gpu[0]["largestFreeSlices"]) == (0, 0)
    assert [(s["profile"], s["pod"]) for s in by_gpu[0]["instances"]] == [("whole GPU", "team-a/w")]
    assert (by_gpu[1]["freeSlices"], by_gpu[1]["instances"]) == (8, [])
    assert (pool["freeSlices"], pool["totalSlices"], pool["idleGpus"]) == (8, 16, 1)
    assert pool["fragmentation"] == 0.0
    free = {p["resource"]: (p["free"], p["offered"]) for p in view["draPlacements"]}
    assert free["nvidia.com/mig-7g.80gb"] == (1, 2)
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert "whole GPU team-a/team-a/w" in text
    assert "8/16" in text and "16/16" not in text
