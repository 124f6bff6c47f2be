"""``migslice why`` against the deciders it explains: on the same objects, its placement
verdict is the extender's filter (over the nodes kube-scheduler's own filters send it), node
for node, with the extender's reasons."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender import ExtenderSettings, create_app
from extender.state import state_from_objects
from harness.builders import (
    make_mig_config_map,
    make_namespace,
    make_node,
    make_pod,
    make_policy,
    unschedulable,
)
from migslice.names import RECORD_ANNOTATION
from migslice.objects.clusterfile import ClusterObjects, parse_cluster_objects
from migslice.repartition import ControllerSettings, StepKind, decide
from migslice.status.cluster import StatusSettings, build_cluster
from migslice.status.waiting import FAILED, SCHEDULER, UNRESOLVABLE
from migslice.status.why import explain
from tests.extender.test_extender_dra import STATIC, claim_pod, cluster
from tests.status_cluster import MIG_CONFIGS, RECORD

NOW_S = 1750000200.0
BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def _extender(objects: ClusterObjects, pod: dict[str, Any], names: list[str]) -> Any:
    state = state_from_objects(objects, ExtenderSettings())
    client = create_app(ExtenderSettings(), state).test_client()
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    response = client.post("/filter", data=body, content_type="application/json")
    assert response.status_code == 200
    return json.loads(response.data)


def assert_why_agrees(objects: ClusterObjects, pod: dict[str, Any]) -> tuple[str, ...]:
    """Why's verdict for ``pod`` is the extender filter's; returns the nodes it fits."""
    report = explain(
        build_cluster(objects, StatusSettings(now_s=NOW_S)), pod, settings=ControllerSettings()
    )
    waiting = report.waiting
    assert waiting is not None and not waiting.error, report
    judged = {c.outcome: {n: c.reason for n in c.nodes} for c in waiting.classes}
    by_outcome: dict[str, dict[str, str]] = {FAILED: {}, UNRESOLVABLE: {}}
    for c in waiting.classes:
        if c.outcome != SCHEDULER:
            by_outcome[c.outcome].update(dict.fromkeys(c.nodes, c.reason))
    names = sorted([*waiting.fits, *by_outcome[FAILED], *by_outcome[UNRESOLVABLE]])
    answer = _extender(objects, pod, names)
    assert sorted(answer["NodeNames"]) == sorted(waiting.fits), (answer, judged)
    if not waiting.fits:
        assert answer["FailedNodes"] == by_outcome[FAILED], (answer, judged)
        assert answer["FailedAndUnresolvableNodes"] == by_outcome[UNRESOLVABLE], (answer, judged)
    return waiting.fits


def _node() -> dict[str, Any]:
    return make_node("gpu-a", gpu_count=1, mig=BALANCED, config="all-balanced")


def test_why_of_a_preemptor_does_not_count_its_own_nomination() -> None:
    # kube-scheduler nominated the pod to gpu-a after evicting its victim: the extender fits
    # it there; why said "all 1g.10gb MIG instances in use" (its own nomination counted).
    other = make_pod("other", profile="1g.10gb", node_name="gpu-a", phase="Running")
    preemptor = unschedulable(make_pod("hi", profile="1g.10gb", nominated_node_name="gpu-a"))
    objects = ClusterObjects(nodes=(_node(),), pods=(other, preemptor))
    assert assert_why_agrees(objects, preemptor) == ("gpu-a",)


def test_why_counts_a_nomination_only_for_pods_of_its_priority_or_lower() -> None:
    other = make_pod("other", profile="1g.10gb", node_name="gpu-a", phase="Running")
    low = make_pod("low", profile="1g.10gb", nominated_node_name="gpu-a", spec={"priority": 100})
    high = unschedulable(make_pod("high", profile="1g.10gb", spec={"priority": 1000}))
    same = unschedulable(make_pod("same", profile="1g.10gb", spec={"priority": 100}))
    objects = ClusterObjects(nodes=(_node(),), pods=(other, low, high, same))
    assert assert_why_agrees(objects, high) == ("gpu-a",)
    assert assert_why_agrees(objects, same) == ()


def test_why_of_a_dra_preemptor_does_not_count_its_own_nominated_claim() -> None:
    pod, claim = claim_pod("1g.10gb")
    pod["status"]["nominatedNodeName"] = STATIC
    unschedulable(pod)
    assert STATIC in assert_why_agrees(cluster([claim], [pod]), pod)


PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")


@st.composite
def _clusters(draw: st.DrawFn) -> tuple[ClusterObjects, dict[str, Any]]:
    """A DRA cluster beside device-plugin nodes, pods bound, nominated (of some priority) and
    one waiting pod (extended resources or a ResourceClaim), maybe nominated itself."""
    nodes = [f"gpu-{i}" for i in range(draw(st.integers(1, 3)))]
    extra = [
        make_node(n, gpu_count=1, mig=BALANCED, config="all-balanced", resource_version="1")
        for n in nodes
    ]
    every = [*nodes, STATIC]
    pods: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 5))):
        profile = draw(st.sampled_from(PROFILES))
        where = draw(st.sampled_from(nodes))
        priority = draw(st.sampled_from((0, 100, 1000)))
        if draw(st.booleans()):
            pods.append(
                make_pod(f"p{i}", profile=profile, node_name=where, spec={"priority": priority})
            )
        else:
            pods.append(
                make_pod(
                    f"p{i}",
                    profile=profile,
                    nominated_node_name=where,
                    spec={"priority": priority},
                )
            )
    nominated = draw(st.none() | st.sampled_from(every))
    priority = draw(st.sampled_from((0, 100, 1000)))
    claims = []
    if draw(st.booleans()):
        pod, claim = claim_pod(draw(st.sampled_from(PROFILES)), name="w")
        claims.append(claim)
        pod["spec"]["priority"] = priority
    else:
        pod = make_pod("w", profile=draw(st.sampled_from(PROFILES)), spec={"priority": priority})
    if nominated is not None:
        pod["status"]["nominatedNodeName"] = nominated
    unschedulable(pod)
    base = cluster(claims, [pod, *pods])
    # A pod of the DRA cluster nominated too (claim pods count on their nominated node).
    if draw(st.booleans()):
        other, other_claim = claim_pod("1g.10gb", name="n")
        other["status"]["nominatedNodeName"] = STATIC
        other["spec"]["priority"] = draw(st.sampled_from((0, 100, 1000)))
        base = cluster([*claims, other_claim], [pod, other, *pods])
    objects = ClusterObjects(
        nodes=base.nodes + tuple(extra),
        pods=base.pods,
        resource_slices=base.resource_slices,
        resource_claims=base.resource_claims,
        device_classes=base.device_classes,
    )
    return objects, pod


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_clusters())
def test_why_agrees_with_the_extender_filter(drawn: tuple[ClusterObjects, dict[str, Any]]) -> None:
    objects, pod = drawn
    assert_why_agrees(objects, pod)


def _repartition_cluster(
    record: dict[str, Any] | None, node: str = "a100-0", config: str = "all-1g.10gb"
) -> tuple[Any, dict[str, Any]]:
    """One A100 node of seven 1g instances (its label ``config``, MIG Manager done unless
    the record's plan holds it) and a waiting 3g pod; the mig-parted ConfigMap with
    ``record``, none when ``record`` is None."""
    state = "success" if config == "all-1g.10gb" else "pending"
    objects: list[dict[str, Any]] = [
        make_node(node, gpu_count=1, mig={"1g.10gb": 7}, config=config, config_state=state),
        unschedulable(make_pod("w", profile="3g.40gb"), "2025-06-15T15:00:00Z"),
        make_namespace("team-a"),
        make_policy("team-a"),
    ]
    if record is not None:
        annotations = {RECORD_ANNOTATION: json.dumps(record)}
        objects.append(make_mig_config_map(MIG_CONFIGS, annotations=annotations))
    for raw in objects:
        raw.setdefault("apiVersion", "v1")
        raw.setdefault("kind", "Pod" if "containers" in raw.get("spec", {}) else "Node")
    cluster = build_cluster(parse_cluster_objects(objects), StatusSettings(now_s=NOW_S))
    return cluster, objects[1]


def test_why_follows_the_controllers_round_past_a_quarantine_release() -> None:
    # The record quarantines a node that is gone: the controller's first step releases it,
    # and in the same round it decides again and starts a plan that re-shapes a100-0 for the
    # pod. why ran one decide() and said "no plan serves it (the planner found no idle GPU
    # to re-shape for it)".
    record = {
        "version": "v1",
        "quarantine": {"gone": {"since": "2025-06-15T14:40:00Z", "config": "c", "detail": "x"}},
    }
    cluster, pod = _repartition_cluster(record)
    stored = cluster.mig_file.record
    assert stored is not None
    first = decide(stored, cluster.states(), [], file_configs=cluster.mig_file.names, now=NOW_S)
    assert first.kind is StepKind.QUARANTINE
    report = explain(cluster, pod, settings=ControllerSettings())
    repartition = report.repartition
    assert repartition is not None
    assert [v.node for v in repartition.serving] == ["a100-0"], repartition
    assert repartition.unserved == ""
    assert repartition.decision.startswith("quarantine: gone released")
    assert "; then start: plan " in repartition.decision


def test_why_says_no_planner_ran_when_the_round_stops_before_planning() -> None:
    # Without the mig-parted ConfigMap the controller waits before it plans. why said "no
    # plan serves it (the planner found no idle GPU to re-shape for it)", though a100-0 is
    # idle and no planner ran.
    cluster, pod = _repartition_cluster(None)
    report = explain(cluster, pod, settings=ControllerSettings())
    repartition = report.repartition
    assert repartition is not None
    assert repartition.decision == "wait: mig-parted ConfigMap missing or unreadable"
    assert "idle GPU" not in repartition.unserved
    assert repartition.unserved == (
        "no new plan this round (wait: mig-parted ConfigMap missing or unreadable)"
    )


def test_why_gives_the_planners_reason_when_a_plan_in_flight_is_observed() -> None:
    # A plan in flight is applied and observed (MIG Manager still working on a100-2): the
    # controller then runs the planner to let more nodes join, and it finds no idle GPU for
    # w. why said "no new plan this round (wait: plan ...: waiting for a100-2 ...)", as though
    # no planner had run, and hid the planner's reason.
    record: dict[str, Any] = {"version": "v1", "plan": copy.deepcopy(RECORD["plan"])}
    record["plan"]["nodes"][0]["serves"] = ["team-a/other"]
    cluster, pod = _repartition_cluster(record, "a100-2", "migslice-a100-2-1a2b3c4d")
    report = explain(cluster, pod, settings=ControllerSettings())
    repartition = report.repartition
    assert repartition is not None
    assert repartition.decision.startswith("wait: plan 9c1e0f4a2b7d: waiting for a100-2")
    assert repartition.unserved == "no idle GPU can take it"
