"""The extender beside kube-scheduler's preemption: a pod only nominated to a node (a
preemptor whose victims are leaving) counts there as kube-scheduler counts it, for pods of at
most its priority and never for itself (``addGENominatedPods`` in its framework runtime).
Counted against itself, the preemptor found the node it had cleared full, and kube-scheduler
evicted a second victim elsewhere (seen on the real v1.37.2 control plane)."""

from __future__ import annotations

import json
from typing import Any

from flask.testing import FlaskClient

from extender import ExtenderSettings, create_app
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
