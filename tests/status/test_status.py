"""``migslice status`` and ``migslice why`` on a representative cluster file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.builders import STAMP, make_node, make_pod, unschedulable
from migslice.cli import main
from migslice.inventory import GpuState
from migslice.mig import CATALOG, Placed, place
from migslice.objects import node_facts_from_raw, parse_cluster_objects
from migslice.objects.pod_selection import pod_selection_of
from migslice.objects.times import format_time
from migslice.repartition import CarveSettings, ControllerSettings
from migslice.scheduling.fragmentation import FreeSpace, gpu_free_space
from migslice.scheduling.selection import CORDONED, SELECTOR, TAINT, scheduler_verdict
from migslice.status.cluster import StatusSettings, build_cluster
from migslice.status.report import build_status, render_text, scoped, status_document
from migslice.status.why import explain
from migslice.status.why_report import render_why, why_document
from tests import paths
from tests.status_cluster import NOW_S, representative_cluster, run_cli

DEMO = paths.ROOT / "migslice" / "demo" / "cluster.yaml"
A100 = CATALOG.get("A100-80GB")


def _cluster(**settings: Any) -> Any:
    objects = parse_cluster_objects(representative_cluster())
    return build_cluster(objects, StatusSettings(now_s=NOW_S, **settings))


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(representative_cluster()))
    return path


# -- status ------------------------------------------------------------------------------------


def test_no_line_of_the_default_output_exceeds_80_columns(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for path in (cluster_file, DEMO):
        out = run_cli(capsys, "status", "--cluster-file", str(path))
        too_wide = [line for line in out.splitlines() if len(line) > 80]
        assert not too_wide
        out = run_cli(capsys, "why", "-n", "team-a", "train-2", "--cluster-file", str(cluster_file))
        assert not [line for line in out.splitlines() if len(line) > 80]


def test_a_tenant_at_quota_is_counted_from_its_pods_and_says_which_limit() -> None:
    report = build_status(_cluster(), settings=ControllerSettings())
    team_a = next(t for t in report.tenants if t.name == "team-a")
    compute = team_a.dimension("computeSlices")
    assert compute is not None and (compute.used, compute.limit) == (9, 9)
    assert [d.field for d in team_a.at_limit] == ["spec.quota.computeSlices"]
    assert (team_a.bound_pods, team_a.waiting_pods) == (2, 1)
    # Its TenantPolicy's status.used (6) lags behind the pods: shown, as it differs.
    assert team_a.status_used is not None and team_a.status_used["computeSlices"] == 6
    team_b = next(t for t in report.tenants if t.name == "team-b")
    assert team_b.status_used is None
    one_g = team_b.dimension("profiles.1g.10gb")
    assert one_g is not None and (one_g.used, one_g.limit) == (6, 8)


def test_every_gpu_is_drawn_with_who_holds_each_instance() -> None:
    report = build_status(_cluster(), settings=ControllerSettings())
    pool = next(p for p in report.pools if p.name == "NVIDIA-A100-SXM4-80GB")
    a100 = next(n for n in pool.nodes if n.name == "a100-0")
    holders = [s.pod for s in a100.gpus[0].slots]
    assert holders == ["team-a/train-0", "team-a/train-1"]
    assert {s.tenant for s in a100.gpus[0].slots} == {"team-a"}
    text = render_text(report)
    assert "|3g.40gb*" in text and "team-a/team-a/train-0" in text
    # Nodes known only by counts say so, and why they take no pod now.
    a100_q = next(n for n in pool.nodes if n.name == "a100-q")
    assert a100_q.gpus == () and a100_q.condition.startswith("quarantined")


def test_the_first_line_counts_one_of_a_kind_in_the_singular() -> None:
    cluster = _cluster()
    report = build_status(cluster, settings=ControllerSettings())
    whole = render_text(report).splitlines()[0]
    assert " tenants; " in whole and " pools; " in whole, whole
    one = render_text(scoped(report, cluster, "team-a")).splitlines()[0]
    assert "; 1 tenant; " in one, one  # it said "1 tenants"


def test_pools_default_to_the_gpu_product_or_follow_a_label() -> None:
    by_product = build_status(_cluster(), settings=ControllerSettings())
    assert [p.name for p in by_product.pools] == [
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-A30",
        "NVIDIA-H100-80GB-HBM3",
    ]
    by_label = build_status(_cluster(pool_label="pool"), settings=ControllerSettings())
    # Nodes without the label are said to lack it, not a GPU product (they have one).
    assert [p.name for p in by_label.pools] == ["(no label pool)", "reserved"]
    assert "label pool" in render_text(by_label)


@pytest.mark.parametrize(
    ("gpu", "free", "largest"),
    [
        (
            GpuState(0, True, (Placed(0, "3g.40gb", 4), Placed(4, "3g.40gb", 4)), (False, False)),
            8,
            8,
        ),
        (
            GpuState(0, True, (Placed(0, "3g.40gb", 4), Placed(4, "3g.40gb", 4)), (True, False)),
            4,
            4,
        ),
        (
            GpuState(
                0,
                True,
                tuple(Placed(i, "1g.10gb", 1) for i in range(7)),
                (True, False, True, False, True, False, False),
            ),
            5,
            1,
        ),
        (GpuState(0, False, whole_held=True), 0, 0),
        (GpuState(0, False), 8, 8),
    ],
    ids=["idle", "half-used", "small-holes", "whole-held", "whole-free"],
)
def test_a_gpus_free_space_is_its_free_instances_or_all_of_it_when_idle(
    gpu: GpuState, free: int, largest: int
) -> None:
    space = gpu_free_space(gpu, A100)
    assert (space.free_slices, space.largest_slices) == (free, largest)


@pytest.mark.parametrize(
    ("held", "free", "largest"),
    [
        (("1g.10gb@0",), 7, 4),
        (("4g.40gb@0",), 4, 4),
        (("1g.10gb@0", "3g.40gb@4"), 3, 2),
        (("1g.10gb@0", "1g.10gb@2", "1g.10gb@4", "1g.10gb@6"), 4, 1),
        (("3g.40gb@0", "3g.40gb@4"), 0, 0),
    ],
    ids=["1g-held", "4g-held", "3g-beside", "holes", "full"],
)
def test_a_dynamic_mig_gpus_largest_free_region_is_the_largest_placement_left(
    held: tuple[str, ...], free: int, largest: int
) -> None:
    """A DynamicMIG GPU's instances are the partitions claims hold: its free space is carved
    on demand, so its largest region is the largest profile that can still be placed."""
    instances = tuple(place(A100, *_at(word)) for word in held)
    gpu = GpuState(0, True, instances, (True,) * len(instances))
    space = gpu_free_space(gpu, A100, dynamic=True)
    assert (space.free_slices, space.largest_slices) == (free, largest)
    assert gpu_free_space(gpu, A100).largest_slices == 0  # as instances: none free


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
def test_a_gpu_held_whole_with_mig_on_has_no_free_space(dynamic: bool) -> None:
    """A DRA claim may hold a Hopper GPU whole (``gpu-<minor>``) while MIG is on: nothing of it
    is free (it read 8 free, 8 in one piece)."""
    space = gpu_free_space(GpuState(0, True, whole_held=True), A100, dynamic=dynamic)
    assert (space.free_slices, space.largest_slices, space.total_slices) == (0, 0, 8)
    assert (space.gpus, space.idle_gpus) == (1, 0)


def _at(word: str) -> tuple[str, int]:
    profile, _, start = word.partition("@")
    return profile, int(start)


def test_the_fragmentation_index_is_one_minus_largest_over_free() -> None:
    assert FreeSpace().index == 0.0
    assert FreeSpace(free_slices=5, largest_slices=1).index == pytest.approx(0.8)
    assert (FreeSpace(8, 8) + FreeSpace(5, 1)).index == pytest.approx(1 - 9 / 13)


def test_waiting_pods_get_the_extenders_reasons_grouped_by_node_class() -> None:
    report = build_status(_cluster(), settings=ControllerSettings())
    train = next(w for w in report.waiting if w.key == "team-a/train-2")
    reasons = {c.reason: (c.outcome, c.nodes) for c in train.classes}
    assert reasons["all 3g.40gb MIG instances in use"] == ("failed", ("a100-0",))
    assert reasons["A30-24GB has no MIG profile 3g.40gb"] == ("unresolvable", ("a30-0",))
    assert reasons["node being re-partitioned (nvidia.com/mig.config.state=pending)"] == (
        "unresolvable",
        ("a100-2", "a100-q"),
    )
    assert reasons[TAINT] == ("kube-scheduler", ("h100-0",))
    assert train.fits == () and train.summary.startswith("0/7 nodes: 2 node being")
    assert train.waiting_s == pytest.approx(600.0)
    big = next(w for w in report.waiting if w.key == "team-c/big")
    assert big.classes[0].reason == SELECTOR and len(big.classes[0].nodes) == 6


def test_the_record_shows_the_plan_in_flight_and_the_quarantine() -> None:
    report = build_status(_cluster(), settings=ControllerSettings())
    (step,) = report.record.steps
    assert (step.node, step.state, step.serves) == ("a100-2", "applying", ("team-b/wait-plan",))
    held = {(h.node, h.why) for h in report.record.held}
    assert held == {("a100-q", "quarantined"), ("a100-1", "cooldown")}


def _carve_labelled(name: str) -> list[dict[str, Any]]:
    objects = representative_cluster()
    for obj in objects:
        if obj["kind"] == "Node" and obj["metadata"]["name"] == name:
            obj["metadata"]["labels"]["migslice.io/repartition-mode"] = "carve"
    return objects


def _cooling(objects: list[dict[str, Any]], settings: ControllerSettings) -> dict[str, float]:
    cluster = build_cluster(parse_cluster_objects(objects), StatusSettings(now_s=NOW_S))
    report = build_status(cluster, settings=settings)
    raw = next(p for p in parse_cluster_objects(objects).pods if p["metadata"]["name"] == "train-2")
    why = explain(cluster, raw, settings=settings)  # a100-1 could serve train-2 some day
    cooling = {h.node: h.until_s or 0.0 for h in report.record.held if h.why == "cooldown"}
    assert {h.node: h.until_s or 0.0 for h in why.held if h.why == "cooldown"} == cooling
    return cooling


def test_a_carve_mode_node_cools_down_for_the_carve_cooldown_not_mig_managers() -> None:
    """a100-1 finished 5 minutes ago. Labelled carve mode, the controller carves it again
    after --repartition-carve-cooldown-s (60 s): status and why said it cooled down 5 more
    minutes, as MIG Manager's 600 s would have it."""
    finished = NOW_S - 300
    carve = _carve_labelled("a100-1")
    assert _cooling(carve, ControllerSettings()) == {}
    longer = ControllerSettings(carve=CarveSettings(cooldown_s=420))
    assert _cooling(carve, longer) == {"a100-1": finished + 420}
    # unlabelled, the controller's default mode says which cooldown applies
    plain = representative_cluster()
    assert _cooling(plain, ControllerSettings()) == {"a100-1": finished + 600}
    by_default = ControllerSettings(carve=CarveSettings(default_mode="carve"))
    assert _cooling(plain, by_default) == {}


def test_status_takes_the_carve_cooldown_and_the_default_mode_as_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``migslice status`` reads the clock: the record's a100-1 finished 5 minutes ago."""
    finished = int(time.time()) - 300
    objects = _carve_labelled("a100-1")
    record = json.loads(objects[0]["metadata"]["annotations"]["migslice.io/repartition"])
    record["finished"] = {"a100-1": format_time(finished)}
    objects[0]["metadata"]["annotations"]["migslice.io/repartition"] = json.dumps(record)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))

    def cooling(*flags: str) -> list[tuple[str, str]]:
        argv = ["status", "--cluster-file", str(path), "-o", "json", *flags]
        held = json.loads(run_cli(capsys, *argv))["repartition"]["held"]
        return [(h["node"], h["until"]) for h in held if h["why"] == "cooldown"]

    assert cooling() == []
    assert cooling("--carve-cooldown-s", "420") == [("a100-1", format_time(finished + 420))]
    del objects[2]["metadata"]["labels"]["migslice.io/repartition-mode"]
    path.write_text(yaml.safe_dump_all(objects))
    assert cooling() == [("a100-1", format_time(finished + 600))]
    assert cooling("--mode-default", "carve") == []


def test_status_as_json_and_yaml_carries_every_value(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "json")
    )
    assert document["poolLabel"] == "nvidia.com/gpu.product"
    assert {t["name"] for t in document["tenants"]} == {"team-a", "team-b", "team-c"}
    assert document["repartition"]["steps"][0]["state"] == "applying"
    again = yaml.safe_load(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "yaml")
    )
    assert again["tenants"] == document["tenants"]
    assert "gpu-operator" in document["repartition"]["where"]
    wide = run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-o", "wide")
    assert "3g.40gb@0" in wide


def test_a_policy_that_asks_what_the_catalog_cannot_serve_shows_its_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """status showed such a tenant as healthy, while doctor's tenant-policies failed it and the
    webhook marks it Ready=False (InvalidSpec) and refuses the pods that hit it."""
    typo = {
        "apiVersion": "migslice.io/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": "typo"},
        "spec": {
            "namespaces": ["typo"],
            "sizes": {"small": {"memory": "10Gi"}},
            "allowedProfiles": ["1g.10gb", "2g.25gb"],
        },
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*representative_cluster(), typo]))
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    problems = {t["name"]: t["problem"] for t in document["tenants"]}
    assert problems["typo"] == (
        "asks what the catalog cannot serve: spec.allowedProfiles[1]: no GPU model in the "
        'catalog has profile "2g.25gb"'
    )
    assert problems["team-a"] is None
    text = run_cli(capsys, "status", "--cluster-file", str(path))
    assert "problem: asks what the catalog cannot serve: spec.allowedProfiles[1]" in text


def test_status_of_one_namespace_keeps_its_tenant_and_waiting_pods(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(
        run_cli(capsys, "status", "--cluster-file", str(cluster_file), "-n", "team-b", "-o", "json")
    )
    assert [t["name"] for t in document["tenants"]] == ["team-b"]
    assert {w["pod"] for w in document["waiting"]} == {"team-b/wait-plan", "team-b/fresh"}


def test_status_document_matches_the_text() -> None:
    report = build_status(_cluster(), settings=ControllerSettings())
    document = status_document(report)
    assert [p["name"] for p in document["pools"]] == [p.name for p in report.pools]


# -- why ---------------------------------------------------------------------------------------


def _why(key: str) -> Any:
    cluster = _cluster()
    objects = parse_cluster_objects(representative_cluster())
    raw = next(
        p for p in objects.pods if f"{p['metadata']['namespace']}/{p['metadata']['name']}" == key
    )
    return explain(cluster, raw, settings=ControllerSettings())


def test_why_says_admission_then_placement_then_repartition_then_held_nodes() -> None:
    report = _why("team-a/train-2")
    assert report.admission.tenant == "team-a"
    assert report.admission.profile == "3g.40gb"
    reached = [d for d in report.admission.dimensions if d.is_reached]
    assert [(d.used, d.limit, d.field) for d in reached] == [(9, 9, "spec.quota.computeSlices")]
    text = render_why(report, NOW_S)
    order = [text.index(f"{n}. ") for n in (1, 2, 3, 4)]
    assert order == sorted(order)
    assert "1 node: all 3g.40gb MIG instances in use [failed] (a100-0)" in text
    assert "a100-q: quarantined" in text


def test_why_names_the_plan_in_flight_that_serves_the_pod() -> None:
    report = _why("team-b/wait-plan")
    (step,) = report.repartition.in_record
    assert (step.node, step.state) == ("a100-2", "applying")
    assert "plan 9c1e0f4a2b7d on a100-2 is applying" in render_why(report, NOW_S)


def test_why_of_a_bound_pod_says_where_it_is() -> None:
    report = _why("team-a/train-1")
    assert report.node == "a100-0" and report.waiting is None
    ((index, slot),) = report.holds
    assert (index, slot.profile, slot.start) == (0, "3g.40gb", 4)
    assert "not waiting: bound to a100-0" in render_why(report, NOW_S)


@pytest.mark.parametrize("node_name", [None, "cpu-0"], ids=["pending", "running"])
def test_why_of_a_sized_pod_the_webhook_never_saw_says_it_was_not_sized(
    node_name: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod with migslice.io/gpu-size and no GPU request was never seen by the webhook (its
    namespace excluded, let through unmatched, made before the install): why said it "asks for
    no GPU", of a pod that asks for one by size."""
    objects = representative_cluster()
    objects.append(
        {
            "kind": "Pod",
            "apiVersion": "v1",
            **make_pod(
                "notebook",
                namespace="sandbox",
                tenant=None,
                scheduler_name=None,
                node_name=node_name,
                phase="Running" if node_name else "Pending",
                annotations={"migslice.io/gpu-size": "small"},
            ),
        }
    )
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    out = run_cli(capsys, "why", "-n", "sandbox", "notebook", "--cluster-file", str(path))
    text = " ".join(out.split())
    assert "asks for no GPU" not in text
    assert (
        "pod sandbox/notebook asks for a GPU by annotation (migslice.io/gpu-size=small) but "
        "requests none: migslice's webhook did not size it" in text
    ), text


def test_why_of_a_pod_without_gpu_and_of_a_missing_pod(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_cli(capsys, "why", "-n", "team-c", "web", "--cluster-file", str(cluster_file))
    assert "asks for no GPU" in out
    assert main(["why", "-n", "team-c", "nope", "--cluster-file", str(cluster_file)]) == 1
    assert "pod team-c/nope not found" in capsys.readouterr().err


def test_why_as_json(cluster_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(
        run_cli(
            capsys,
            "why",
            "-n",
            "team-a",
            "train-2",
            "--cluster-file",
            str(cluster_file),
            "-o",
            "json",
        )
    )
    assert document["admission"]["tenant"] == "team-a"
    assert document["placement"]["fits"] == []
    assert why_document(_why("team-a/train-2"))["pod"] == "team-a/train-2"


# -- kube-scheduler's own filters --------------------------------------------------------------

UNSCHEDULABLE = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
CORDONED_SPEC = {"unschedulable": True, "taints": [{**UNSCHEDULABLE, "timeAdded": STAMP}]}


@pytest.mark.parametrize(
    ("pod", "node", "verdict"),
    [
        (make_pod("p"), make_node("n"), None),
        (make_pod("p", node_selector={"pool": "x"}), make_node("n"), SELECTOR),
        (make_pod("p", affinity_products=["NVIDIA-H100-80GB-HBM3"]), make_node("n"), SELECTOR),
        (make_pod("p", affinity_products=["NVIDIA-A100-SXM4-80GB"]), make_node("n"), None),
        (make_pod("p"), make_node("n", spec=CORDONED_SPEC), CORDONED),
        (
            make_pod("p", spec={"tolerations": [UNSCHEDULABLE]}),
            make_node("n", spec=CORDONED_SPEC),
            None,
        ),
        (make_pod("p"), make_node("n", real=True), TAINT),
        (make_pod("p", real=True), make_node("n", real=True), None),
    ],
    ids=[
        "plain",
        "node-selector",
        "affinity-excludes",
        "affinity-includes",
        "cordoned",
        "cordoned-tolerated",
        "gpu-taint",
        "gpu-taint-tolerated",
    ],
)
def test_kube_schedulers_node_selection_is_judged_first(
    pod: dict[str, Any], node: dict[str, Any], verdict: str | None
) -> None:
    assert scheduler_verdict(pod_selection_of(pod), node_facts_from_raw(node)) == verdict


# -- the kubectl plugin ------------------------------------------------------------------------


def test_the_kubectl_plugin_takes_kubectls_flags_before_or_after_the_command(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from migslice.cli.kubectl import command_first
    from migslice.cli.kubectl import main as plugin

    assert command_first(["--context", "c", "-n", "x", "why", "p"]) == [
        "why",
        "--context",
        "c",
        "-n",
        "x",
        "p",
    ]
    assert plugin(["--cluster-file", str(cluster_file), "status", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["poolLabel"] == "nvidia.com/gpu.product"
    assert plugin(["-n", "team-a", "why", "train-2", "--cluster-file", str(cluster_file)]) == 0
    assert "tenant team-a" in capsys.readouterr().out


def test_the_kubectl_plugin_takes_a_flags_value_named_as_a_command_for_the_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kubectl migslice -n status why web`` ran status in namespace why ("unrecognized
    arguments: web"): the value of -n was taken for the command."""
    from migslice.cli.kubectl import command_first
    from migslice.cli.kubectl import main as plugin

    assert command_first(["-n", "status", "why", "web"]) == ["why", "-n", "status", "web"]
    assert command_first(["--context", "why", "status"]) == ["status", "--context", "why"]
    assert command_first(["--namespace=why", "why", "p"]) == ["why", "--namespace=why", "p"]
    objects = representative_cluster()
    web = make_pod("web", namespace="status", tenant=None, node_name="cpu-0", phase="Running")
    objects.append({"kind": "Pod", "apiVersion": "v1", **web})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    assert plugin(["-n", "status", "why", "web", "--cluster-file", str(path)]) == 0
    assert "pod status/web asks for no GPU" in " ".join(capsys.readouterr().out.split())


def test_why_takes_its_namespace_from_the_context_it_connects_with(tmp_path: Path) -> None:
    """With several files in $KUBECONFIG, why connects with the first file's current context
    (kubectl's); it took the default namespace from the last file's (the Python client's
    merge), so it looked for team-b/train-0 on the cluster of ctx-a."""
    import os
    import subprocess
    import sys

    from harness.builders import make_namespace, make_policy, unschedulable
    from tests.local_api import Request, local_api_url

    pod = unschedulable(make_pod("train-0", namespace="team-a", profile="1g.10gb"))
    lists = {
        "pods": [{"apiVersion": "v1", "kind": "Pod", **pod}],
        "namespaces": [make_namespace("team-a"), make_namespace("team-b")],
        "tenantpolicies": [make_policy("team-a")],
    }
    asked: list[str] = []

    def answer(request: Request) -> tuple[int, Any]:
        asked.append(request.path)
        if request.path == "/version":
            return 200, {"major": "1", "minor": "34", "gitVersion": "v1.34.1"}
        if "/configmaps/" in request.path:
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}
        plural = request.path.rstrip("/").rsplit("/", 1)[-1]
        return 200, {"kind": "List", "metadata": {}, "items": lists.get(plural, [])}

    with local_api_url(answer) as url:
        files = []
        for name, namespace in (("a", "team-a"), ("b", "team-b")):
            path = tmp_path / f"{name}.kubeconfig"
            path.write_text(
                "apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: c, cluster: {{server: '{url}'}}}}]\n"
                "users: [{name: u, user: {token: t}}]\n"
                f"contexts: [{{name: ctx-{name}, "
                f"context: {{cluster: c, user: u, namespace: {namespace}}}}}]\n"
                f"current-context: ctx-{name}\n"
            )
            files.append(str(path))
        environment = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        environment["KUBECONFIG"] = os.pathsep.join(files)
        answered = subprocess.run(
            [sys.executable, "-m", "migslice.cli", "why", "train-0"],
            capture_output=True,
            text=True,
            env=environment,
            timeout=120,
        )
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.startswith("pod team-a/train-0 (Pending)")
    assert not [p for p in asked if "/namespaces/team-b/" in p]


@pytest.mark.parametrize(
    "entry", ["migslice.cli:main", "migslice.cli.kubectl:main"], ids=["migslice", "kubectl"]
)
def test_a_reader_that_goes_away_stops_the_output_quietly(cluster_file: Path, entry: str) -> None:
    """``kubectl migslice status | head``: the reader closes the pipe; the plugin printed a
    BrokenPipeError traceback where ``migslice`` stops as a tool stopped by SIGPIPE does."""
    import signal
    import subprocess
    import sys

    module, _, function = entry.partition(":")
    program = f"import sys; from {module} import {function}; sys.exit({function}())"
    argv = [sys.executable, "-c", program, "status", "--cluster-file", str(cluster_file)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.close()  # before the child, still importing, writes a line: no reader
        err = child.stderr.read().decode()
        code = child.wait(timeout=120)
    assert (code, err) == (128 + signal.SIGPIPE, "")


def test_the_plugin_is_installed_as_kubectl_migslice() -> None:
    import tomllib

    root = paths.ROOT
    scripts = tomllib.loads((root / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-migslice"] == "migslice.cli.kubectl:main"


def test_json_logs_carry_the_pod_namespace_tenant_and_node_as_fields() -> None:
    import logging

    from migslice.console import JsonFormatter

    record = logging.LogRecord(
        "extender.controller",
        logging.WARNING,
        __file__,
        1,
        "re-check failed node=%s pod=%s tenant=%s; retrying",
        ("gpu-a", "team-a/train-0", "team-a"),
        None,
    )
    line = json.loads(JsonFormatter().format(record))
    assert (line["node"], line["pod"], line["namespace"], line["tenant"]) == (
        "gpu-a",
        "train-0",
        "team-a",
        "team-a",
    )
    assert line["level"] == "warning" and line["message"].startswith("re-check failed")


def test_a_json_log_lines_time_says_its_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``time`` is read by log pipelines as RFC 3339: it names its offset (UTC, ``Z``), so a
    pod whose TZ is not UTC does not log local times that read as UTC."""
    import datetime
    import logging
    import time

    from migslice.console import JsonFormatter

    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        record = logging.LogRecord("webhook", logging.INFO, __file__, 1, "ready", (), None)
        record.created, record.msecs = 1_767_225_600.25, 250.0  # 2026-01-01T00:00:00.250Z
        line = json.loads(JsonFormatter().format(record))
    finally:
        monkeypatch.undo()
        time.tzset()
    assert line["time"] == "2026-01-01T00:00:00.250Z"
    stamp = datetime.datetime.fromisoformat(line["time"])
    assert stamp == datetime.datetime(2026, 1, 1, 0, 0, 0, 250000, tzinfo=datetime.UTC)


def test_a_json_log_line_about_several_pods_names_each_pod_and_each_namespace() -> None:
    """The repartition controller's plans name every pod they serve (``about``): each
    ``pod=NAMESPACE/NAME`` gives its name to ``pod`` and its namespace to ``namespace``."""
    import logging

    from migslice.console import JsonFormatter

    record = logging.LogRecord(
        "extender.controller",
        logging.INFO,
        __file__,
        1,
        "repartition start: plan (node=gpu-a node=gpu-b pod=team-a/train-0 "
        "pod=team-b/infer-1 pod=team-a/train-1)",
        (),
        None,
    )
    line = json.loads(JsonFormatter().format(record))
    assert line["node"] == "gpu-a,gpu-b"
    assert line["pod"] == "train-0,infer-1,train-1"
    assert line["namespace"] == "team-a,team-b"


def test_a_pod_behind_the_admission_gate_waits_for_admission_and_holds_nothing() -> None:
    """A fail-open namespace's pod created while the webhook was down (docs/outages.md) is not
    the tenant's usage yet: the webhook's gate reconciler admits it, up to quota."""
    objects = representative_cluster()
    before = build_status(
        build_cluster(parse_cluster_objects(objects), StatusSettings(now_s=NOW_S)),
        settings=ControllerSettings(),
    )
    gated = make_pod("gated-0", namespace="team-b", profile="3g.40gb")
    gated["spec"]["schedulingGates"] = [{"name": "migslice.io/admission"}]
    with_gated = [*objects, {"apiVersion": "v1", "kind": "Pod", **gated}]
    report = build_status(
        build_cluster(parse_cluster_objects(with_gated), StatusSettings(now_s=NOW_S)),
        settings=ControllerSettings(),
    )

    def used(r: Any) -> Any:
        team_b = next(t for t in r.tenants if t.name == "team-b")
        return team_b.dimension("computeSlices")

    assert used(report) == used(before)
    (waiting,) = [w for w in report.waiting if w.key == "team-b/gated-0"]
    assert waiting.error is not None and waiting.error.startswith("waiting for admission")


def _gated_report(**condition: str) -> Any:
    gated = make_pod("gated-0", namespace="team-b", profile="3g.40gb")
    gated["metadata"]["creationTimestamp"] = "2025-06-15T14:50:00Z"  # NOW_S - 20 min
    gated["spec"]["schedulingGates"] = [{"name": "migslice.io/admission"}]
    if condition:
        gated["status"]["conditions"] = [{"type": "migslice.io/Admitted", **condition}]
    objects = [*representative_cluster(), {"apiVersion": "v1", "kind": "Pod", **gated}]
    report = build_status(
        build_cluster(parse_cluster_objects(objects), StatusSettings(now_s=NOW_S)),
        settings=ControllerSettings(),
    )
    (waiting,) = [w for w in report.waiting if w.key == "team-b/gated-0"]
    return waiting.error


def test_a_pod_gated_long_says_how_long_why_and_the_command_that_frees_it() -> None:
    """A pod behind the admission gate was reported as "waiting for admission" however long
    it had waited and whatever held it: the reconciler's own reason (its condition), or no
    reason at all (no leader decides), and what to run, were nowhere."""
    waits = _gated_report(
        status="False",
        reason="AdmissionWaiting",
        message='tenant "team-b" would use 3 GPU instances; policy "team-b" allows 2',
    )
    assert "gated for 20m" in waits and "AdmissionWaiting" in waits
    assert 'policy "team-b" allows 2' in waits
    assert "kubectl edit tenantpolicy team-b" in waits
    denied = _gated_report(status="False", reason="AdmissionDenied", message="no such profile")
    assert "no such profile" in denied and "kubectl delete pod -n team-b gated-0" in denied
    silent = _gated_report()
    assert "gated for 20m" in silent and "no gate reconciler has decided it" in silent
    assert "kubectl -n migslice-system get lease migslice-admission-gate" in silent


def test_a_pod_held_by_another_controllers_scheduling_gate_is_not_called_placeable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kueue holds a pod behind its gate until its workload is admitted: kube-scheduler does
    not try it, however much room there is, so status and why name the gate, not nodes."""
    gated = make_pod("queued-0", namespace="team-a", profile="1g.10gb")
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    gated["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": "Scheduling is blocked due to non-empty scheduling gates",
            "lastTransitionTime": "2025-06-15T15:00:00Z",
        }
    ]
    objects = [*representative_cluster(), {"apiVersion": "v1", "kind": "Pod", **gated}]
    free = make_pod("free-0", namespace="team-a", profile="1g.10gb")
    ungated = [*representative_cluster(), {"apiVersion": "v1", "kind": "Pod", **free}]
    said = (
        "held by scheduling gate(s) kueue.x-k8s.io/admission: kube-scheduler does not try it "
        "until their controller removes them"
    )
    for raw, key in ((objects, "team-a/queued-0"), (ungated, "team-a/free-0")):
        report = build_status(
            build_cluster(parse_cluster_objects(raw), StatusSettings(now_s=NOW_S)),
            settings=ControllerSettings(),
        )
        (waiting,) = [w for w in report.waiting if w.key == key]
        if key == "team-a/free-0":
            assert waiting.fits  # the room is there: only the gate holds queued-0
        else:
            assert (waiting.error, waiting.fits, waiting.classes) == (said, (), ())
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    text = run_cli(capsys, "why", "-n", "team-a", "queued-0", "--cluster-file", str(path))
    assert "held by scheduling gate(s) kueue.x-k8s.io/admission" in text
    assert "fit now" not in text


def _failed_scheduling(pod: str, message: str, last: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{pod}.{last}", "namespace": "team-a"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "team-a"},
        "reason": "FailedScheduling",
        "message": message,
        "count": count,
        "lastTimestamp": last,
    }


def test_why_of_a_waiting_pod_gives_kube_schedulers_last_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reserve = (
        "0/4 nodes are available: 1 kept whole for 7g and multi-GPU pods: 1 idle DynamicMIG "
        "GPU(s) left, the large-job reserve keeps 1.1 (...), 3 all 2g.20gb MIG instances in use."
    )
    events = [
        _failed_scheduling(
            "train-2", "0/4 nodes are available: 4 Insufficient cpu.", "2026-12-05T10:00:00Z"
        ),
        _failed_scheduling("train-2", reserve, "2026-12-05T10:05:00Z", count=3),
        _failed_scheduling("train-1", "another pod's words", "2026-12-05T10:06:00Z"),
    ]
    objects = representative_cluster()
    waiting = next(o for o in objects if o["metadata"].get("name") == "train-2")
    retried = "hold-ended 2026-12-05T10:06:01Z"
    waiting["metadata"].setdefault("annotations", {})["migslice.io/retry"] = retried
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all([*objects, *events]))
    out = run_cli(capsys, "why", "-n", "team-a", "train-2", "--cluster-file", str(path))
    assert (
        "the extender asked kube-scheduler to try it again (hold-ended, 2026-12-05T10:06:01Z)"
        in " ".join(out.split())
    )
    said = f"kube-scheduler said (3x, last 2026-12-05T10:05:00Z): {reserve}"
    assert " ".join(said.split()) in " ".join(out.split())  # wrapped at 80 columns
    assert "another pod's words" not in out
    document = json.loads(
        run_cli(capsys, "why", "-n", "team-a", "train-2", "--cluster-file", str(path), "-o", "json")
    )
    assert document["placement"]["retried"] == retried
    listed = document["placement"]["schedulerSaid"]
    assert [e["message"] for e in listed] == [
        reserve,
        "0/4 nodes are available: 4 Insufficient cpu.",
    ]


def test_status_says_whether_the_planners_stranding_rules_are_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = make_node("gpu-busy", gpu_count=1, mig={"3g.40gb": 1, "2g.20gb": 2})
    objects: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Node", **node}]
    for i, profile in enumerate(["3g.40gb", "2g.20gb", "2g.20gb"]):
        pod = make_pod(f"held-{i}", profile=profile, node_name="gpu-busy")
        objects.append({"apiVersion": "v1", "kind": "Pod", **pod})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    text = " ".join(run_cli(capsys, "status", "--cluster-file", str(path)).split())
    said = "stranding rule on (1g/2g pods hold 4 compute slices; the 3g pods leave 4 memory"
    assert said in text
    document = json.loads(run_cli(capsys, "status", "--cluster-file", str(path), "-o", "json"))
    rule = document["repartition"]["strandingRule"]
    assert rule == {
        "on": True,
        "fillComputeSlices": 4,
        "needMemorySlices": 4,
        "fullComputeRule": True,
        "wideMemorySlices": 0,
    }
    assert "full-compute rule on (the 3g pods leave 4 memory slices beside them; the 4g" in text
    # Without a 3g held the rule cannot apply, and the text says nothing of it.
    path.write_text(yaml.safe_dump_all(objects[:1] + objects[2:]))
    assert "stranding rule" not in run_cli(capsys, "status", "--cluster-file", str(path))


@pytest.mark.parametrize("command", ["status", "why"])
def test_a_context_with_a_cluster_file_is_refused_not_ignored(
    command: str, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--context prod --cluster-file F answered from F, silently: an admin who meant prod was
    shown the file."""
    argv = [command, "--cluster-file", str(cluster_file), "--context", "prod"]
    assert main([*argv, *(["-n", "team-a", "train-2"] if command == "why" else [])]) == 1
    err = capsys.readouterr().err
    assert "--context prod names a kubeconfig context; --cluster-file reads no cluster" in err


@pytest.mark.parametrize("command", [["status"], ["why", "-n", "team-a", "train-2"]])
def test_credentials_the_api_server_refuses_are_said_so_not_an_api_server_that_does_not_answer(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An expired token (kube-apiserver answers 401 to every request, /version too) was told
    "the API server does not answer (HTTP 401: GET /version: Unauthorized); check ... /readyz"."""
    from tests.local_api import UNAUTHORIZED, kubeconfig_file, local_api_url

    with local_api_url(lambda request: (401, UNAUTHORIZED)) as url:
        path = kubeconfig_file(tmp_path, url)
        assert main([*command, "--kubeconfig", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        "migslice: error: the API server refuses the credentials of the kubeconfig's user "
        "(HTTP 401: GET /version: "
    ), err
    assert "does not answer" not in err and err.count("\n") == 1


def test_a_read_status_may_not_do_says_what_to_grant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `view` ClusterRole lacks Nodes: status said "cannot read the cluster: HTTP 403 ..."
    and no more, where doctor's line says what to grant."""
    from tests.local_api import kubeconfig_file, local_api_url

    forbidden = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes is forbidden: User "dev" cannot list resource "nodes" in API group "" '
        "at the cluster scope",
        "reason": "Forbidden",
        "details": {"kind": "nodes"},
        "code": 403,
    }

    def answer(request: Any) -> tuple[int, Any]:
        if request.path == "/version":
            return 200, {"major": "1", "minor": "37", "gitVersion": "v1.37.2"}
        return 403, forbidden

    with local_api_url(answer) as url:
        assert main(["status", "--kubeconfig", str(kubeconfig_file(tmp_path, url))]) == 1
    err = capsys.readouterr().err
    assert err.startswith("migslice: error: cannot read the cluster: HTTP 403: GET /api/v1/nodes")
    assert "grant get and list on Nodes, Pods, Namespaces, TenantPolicies" in err, err
    assert "(docs/status.md, Rights)" in err and err.count("\n") == 1


@pytest.mark.parametrize("with_plan", [False, True], ids=["no-plan", "a-plan-for-another-pod"])
def test_why_of_a_whole_gpu_pod_says_no_plan_turns_mig_off_for_it(
    with_plan: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod of migslice-scheduler asking for nvidia.com/gpu, marked Unschedulable: why said
    "not yet demand: kube-scheduler has not marked it Unschedulable (or it is not
    migslice-scheduler's)", both false; and nothing at all while the controller would start a
    plan for another pod, as though that plan served it."""
    objects = list(yaml.safe_load_all(DEMO.read_text()))
    whole = unschedulable(make_pod("nb", namespace="inference", requests={"nvidia.com/gpu": 1}))
    objects.append({"kind": "Pod", "apiVersion": "v1", **whole})
    if with_plan:
        big = unschedulable(make_pod("big", namespace="inference", profile="7g.80gb"))
        objects.append({"kind": "Pod", "apiVersion": "v1", **big})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    out = run_cli(capsys, "why", "-n", "inference", "nb", "--cluster-file", str(path))
    text = " ".join(out.split())
    assert "not yet demand" not in text
    assert "no plan for it: whole-GPU requests need MIG disabled; not re-partitioned" in text, text
