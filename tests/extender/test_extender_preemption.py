"""The extender beside kube-scheduler's preemption: a pod only nominated to a node (a
preemptor whose victims are leaving) counts there as kube-scheduler counts it, for pods of at
most its priority and never for itself (``addGENominatedPods`` in its framework runtime).
Counted against itself, the preemptor found the node it had cleared full, and kube-scheduler
evicted a second victim elsewhere (seen on the real v1.37.2 control plane)."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from flask.testing import FlaskClient

from extender import ExtenderSettings, catch_up, create_app
from extender.state import state_from_objects
from harness.builders import make_node, make_pod
from migslice.objects.clusterfile import ClusterObjects
from tests.extender.test_extender_dra import STATIC, claim_pod, cluster, names_args, post
from tests.extender.test_extender_dra import client_of as dra_client

BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def client_of(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> FlaskClient:
    objects = ClusterObjects(nodes=tuple(nodes), pods=tuple(pods))
    state = state_from_objects(objects, ExtenderSettings())
    return create_app(ExtenderSettings(), state).test_client()


def filtered(client: FlaskClient, pod: dict[str, Any], names: list[str], verb: str) -> Any:
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    response = client.post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200
    return json.loads(response.data)


def gpu_node() -> dict[str, Any]:
    return make_node("gpu-a", gpu_count=1, mig=BALANCED, config="all-balanced")


def test_a_preemptor_is_not_blocked_by_its_own_nomination() -> None:
    other = make_pod("other", profile="1g.10gb", node_name="gpu-a", phase="Running")
    preemptor = make_pod("hi", profile="1g.10gb", nominated_node_name="gpu-a")
    client = client_of([gpu_node()], [other, preemptor])
    for verb in ("filter", "filter-best-fit"):
        assert filtered(client, preemptor, ["gpu-a"], verb)["NodeNames"] == ["gpu-a"]


def test_a_preemptor_is_not_blocked_by_its_own_nomination_when_sent_whole_nodes() -> None:
    # An extender without nodeCacheCapable is sent the Node objects themselves: the node as
    # sent, with the cached pods on it but the preemptor's own nomination.
    node = gpu_node()
    other = make_pod("other", profile="1g.10gb", node_name="gpu-a", phase="Running")
    preemptor = make_pod("hi", profile="1g.10gb", nominated_node_name="gpu-a")
    client = client_of([node], [other, preemptor])
    body = json.dumps({"Pod": preemptor, "Nodes": {"items": [node]}, "NodeNames": None})
    for verb in ("filter", "filter-best-fit"):
        response = client.post(f"/{verb}", data=body, content_type="application/json")
        answer = json.loads(response.data)
        assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["gpu-a"], answer
    full = make_pod("third", profile="1g.10gb")  # of the same priority: the nomination counts
    body = json.dumps({"Pod": full, "Nodes": {"items": [node]}, "NodeNames": None})
    answer = json.loads(client.post("/filter", data=body, content_type="application/json").data)
    assert answer["Nodes"]["items"] == [] and "gpu-a" in answer["FailedNodes"], answer


def test_a_nomination_holds_room_against_pods_of_its_priority_and_lower_only() -> None:
    other = make_pod("other", profile="1g.10gb", node_name="gpu-a", phase="Running")
    nominated = make_pod(
        "low", profile="1g.10gb", nominated_node_name="gpu-a", spec={"priority": 100}
    )
    client = client_of([gpu_node()], [other, nominated])
    higher = make_pod("high", profile="1g.10gb", spec={"priority": 1000})
    assert filtered(client, higher, ["gpu-a"], "filter")["NodeNames"] == ["gpu-a"]
    for priority in (100, 0):  # the nominated pod's instance is kept for it
        same = make_pod("same", profile="1g.10gb", spec={"priority": priority})
        answer = filtered(client, same, ["gpu-a"], "filter")
        assert answer["NodeNames"] == [] and "gpu-a" in answer["FailedNodes"], answer


def test_a_dra_preemptor_is_not_blocked_by_its_own_nominated_claim() -> None:
    pod, claim = claim_pod("1g.10gb")
    assert post(dra_client(cluster([claim])), "filter", names_args(pod, [STATIC]))["NodeNames"] == [
        STATIC
    ]
    pod["status"]["nominatedNodeName"] = STATIC
    answer = post(dra_client(cluster([claim], [pod])), "filter", names_args(pod, [STATIC]))
    assert answer["NodeNames"] == [STATIC], answer


def full_node_with_victim() -> tuple[FlaskClient, Any, dict[str, Any]]:
    """One 1g.10gb instance on ``gpu-a``, held by a low-priority victim that kube-scheduler
    has evicted but the extender's pod cache still holds; the preemptor nominated there."""
    node = make_node("gpu-a", gpu_count=1, mig={"1g.10gb": 1}, config="all-1g.10gb")
    victim = make_pod("low", profile="1g.10gb", node_name="gpu-a", spec={"priority": 10})
    victim["status"]["phase"] = "Running"
    preemptor = make_pod(
        "hi", profile="1g.10gb", nominated_node_name="gpu-a", spec={"priority": 1000}
    )
    objects = ClusterObjects(nodes=(node,), pods=(victim, preemptor))
    state = state_from_objects(objects, ExtenderSettings())
    return create_app(ExtenderSettings(), state).test_client(), state, preemptor


def test_a_preemptor_waits_for_the_cache_to_see_its_victim_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kube-scheduler's cache lost the victim a moment before the extender's: answered full,
    # the preemptor fitted no node and kube-scheduler evicted a second victim elsewhere (both
    # victims gone on the real control plane, on a loaded machine).
    monkeypatch.setattr(catch_up, "CATCH_UP_S", 60.0)  # ends when the victim leaves
    for verb in ("filter", "filter-best-fit"):
        client, state, preemptor = full_node_with_victim()
        assert state.index.holds_lower("gpu-a", 1000)  # the victim is still cached
        leaving = threading.Timer(0.1, state.index.delete_pod, args=("team-a/low",))
        leaving.start()
        try:
            assert filtered(client, preemptor, ["gpu-a"], verb)["NodeNames"] == ["gpu-a"]
        finally:
            leaving.join()


def test_a_preemptor_is_answered_full_when_its_node_stays_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The lower-priority pod does not leave (not a victim of this preemption): the node is
    # answered failed once the wait is spent, as before.
    monkeypatch.setattr(catch_up, "CATCH_UP_S", 0.05)
    client, _, preemptor = full_node_with_victim()
    answer = filtered(client, preemptor, ["gpu-a"], "filter")
    assert answer["NodeNames"] == [] and "gpu-a" in answer["FailedNodes"], answer


def test_node_changes_wake_only_the_watch_of_the_changed_node() -> None:
    changes = catch_up.NodeChanges()
    with changes.watching("gpu-a") as changed_a, changes.watching("gpu-b") as changed_b:
        changes("gpu-a")
        assert changed_a()
        changes("gpu-c")
        changes(None)  # every node
        assert changed_b()
    changes("gpu-a")  # no watch left: nothing is kept
    assert not changes._seen and not changes._waiting


@pytest.mark.parametrize("mode", ["names", "nodes"])
def test_prioritize_scores_a_node_as_filter_judges_it_past_nominations_not_counted(
    mode: str,
) -> None:
    # kube-scheduler's scores never count a nominated pod; its filters count one only for pods
    # of at most its priority. Prioritize counted every nomination: a node the filter passed
    # for a pod of higher priority was scored 0 ("cannot take it") in the weighted placement.
    node, other = gpu_node(), make_node("gpu-b", gpu_count=1, mig=BALANCED, config="all-balanced")
    nominated = make_pod(
        "low", profile="3g.40gb", nominated_node_name="gpu-a", spec={"priority": 100}
    )
    client = client_of([node, other], [nominated])
    higher = make_pod("high", profile="3g.40gb", spec={"priority": 1000})
    if mode == "names":
        body = json.dumps({"Pod": higher, "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]})
    else:
        body = json.dumps({"Pod": higher, "Nodes": {"items": [node, other]}, "NodeNames": None})
    fits = json.loads(client.post("/filter", data=body, content_type="application/json").data)
    assert fits["NodeNames"] == ["gpu-a", "gpu-b"] or len(fits["Nodes"]["items"]) == 2, fits
    answer = client.post("/prioritize", data=body, content_type="application/json")
    scores = {entry["Host"]: entry["Score"] for entry in json.loads(answer.data)}
    assert scores["gpu-a"] == scores["gpu-b"] > 0, scores
    for preemptor in (nominated, make_pod("same", profile="3g.40gb", spec={"priority": 100})):
        # the preemptor is scored without its own nomination; a pod of its priority with it
        body = json.dumps({"Pod": preemptor, "Nodes": None, "NodeNames": ["gpu-a", "gpu-b"]})
        answer = client.post("/prioritize", data=body, content_type="application/json")
        scores = {entry["Host"]: entry["Score"] for entry in json.loads(answer.data)}
        assert (scores["gpu-a"] > 0) is (preemptor is nominated), scores
