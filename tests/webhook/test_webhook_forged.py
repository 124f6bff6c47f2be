"""A tenant's own ``migslice.io/*`` annotations change nothing: each is recomputed or ignored.

Every test goes through the real app (AdmissionReview in, JSON patch out) over the webhook's
real state, as a hostile tenant would: first the honest requests, then the forged one.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
import pytest
from flask.testing import FlaskClient

from harness.builders import make_created_pod, make_node, make_pod, make_policy, make_review
from migslice import names
from webhook.app import create_app
from webhook.settings import WebhookSettings
from webhook.state import ClusterState


@pytest.fixture
def state() -> ClusterState:
    state = ClusterState()
    state.upsert_policy(make_policy(quota={"instances": 2}))
    state.upsert_policy(make_policy("team-b", namespaces=["team-b"], quota={"instances": 1}))
    state.upsert_node(make_node("gpu-1"))
    return state


@pytest.fixture
def client(state: ClusterState) -> FlaskClient:
    return create_app(WebhookSettings(), state).test_client()


def admit(
    client: FlaskClient, uid: str, annotations: dict[str, str], namespace: str = "team-a"
) -> dict[str, Any]:
    pod = make_created_pod(
        namespace=namespace, annotations={names.GPU_SIZE: "small", **annotations}
    )
    review = make_review(pod, uid=uid, namespace=namespace)
    response: dict[str, Any] = client.post("/mutate", json=review).get_json()["response"]
    if response["allowed"]:
        patch = json.loads(base64.b64decode(response["patch"]))
        response["pod"] = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
    return response


def test_a_forged_reservation_does_not_hide_an_earlier_admission_from_the_quota(
    client: FlaskClient, state: ClusterState
) -> None:
    """With a quota of 2 instances, a pod naming an earlier admission's reservation was left
    out of the tenant's usage and admitted, 6 of 6 times. A tenant reads a reservation only on
    a stored pod (one still in flight is a reinvocation's own: test_webhook_quota.py)."""
    first = admit(client, "uid-1", {})
    assert first["allowed"]
    first["pod"]["metadata"]["name"] = "train-1"
    state.upsert_pod(first["pod"])
    assert admit(client, "uid-2", {})["allowed"]
    for forged in range(6):
        answer = admit(client, f"uid-x{forged}", {names.RESERVATION: "uid-1"})
        assert not answer["allowed"], answer
        assert "spec.quota.instances" in answer["status"]["message"]


def test_a_reinvocation_of_the_same_request_is_not_charged_twice(client: FlaskClient) -> None:
    first = admit(client, "uid-1", {})
    second = admit(client, "uid-2", {})
    assert first["allowed"] and second["allowed"]
    again = admit(client, "uid-2", {names.RESERVATION: "uid-2"})
    assert again["allowed"], again


def test_a_pod_without_a_gpu_cannot_release_an_admission_by_its_annotation(
    client: FlaskClient, state: ClusterState
) -> None:
    """GPU-less pods never reach the webhook, so their annotations may say anything."""
    assert admit(client, "uid-1", {})["allowed"]
    assert admit(client, "uid-2", {})["allowed"]
    cpu_only = make_pod("cpu", node_name="gpu-1", phase="Running")
    cpu_only["metadata"]["annotations"][names.RESERVATION] = "uid-1"
    state.upsert_pod(cpu_only)
    assert state.pending_charges() == 2
    assert not admit(client, "uid-3", {})["allowed"]


def test_a_pod_in_another_namespace_cannot_release_a_tenants_admission(
    client: FlaskClient, state: ClusterState
) -> None:
    assert admit(client, "uid-b1", {}, namespace="team-b")["allowed"]
    admitted = admit(client, "uid-a1", {})
    intruder = copy.deepcopy(admitted["pod"])
    intruder["metadata"].update(name="train-a1", annotations={names.RESERVATION: "uid-b1"})
    state.upsert_pod(intruder)
    assert not admit(client, "uid-b2", {}, namespace="team-b")["allowed"]


@pytest.mark.parametrize(
    ("annotation", "forged"),
    [
        (names.TENANT, "team-b"),
        (names.PROFILE, "7g.80gb"),
        (names.POLICY, "team-b@9"),
        (names.RESERVATION, "uid-0"),
    ],
    ids=["tenant", "profile", "policy", "reservation"],
)
def test_every_output_annotation_a_tenant_sets_is_recomputed(
    client: FlaskClient, annotation: str, forged: str
) -> None:
    answer = admit(client, "uid-1", {annotation: forged})
    assert answer["allowed"]
    written = answer["pod"]["metadata"]["annotations"]
    assert written[names.TENANT] == "team-a"
    assert written[names.PROFILE] == "1g.10gb"
    assert written[names.POLICY] == "team-a@1"
    assert written[names.RESERVATION] == "uid-1"


def test_the_repartition_touch_annotation_a_tenant_sets_changes_nothing(
    client: FlaskClient,
) -> None:
    plain = admit(client, "uid-1", {})
    touched = admit(client, "uid-2", {names.TOUCH_ANNOTATION: "migslice-gpu-1-deadbeef"})
    assert plain["allowed"] and touched["allowed"]
    assert not admit(client, "uid-3", {names.TOUCH_ANNOTATION: "x"})["allowed"]


def test_a_retried_request_whose_answer_was_lost_is_not_charged_twice(
    client: FlaskClient,
) -> None:
    """kube-apiserver calls again with the same request uid when an answer never arrived; the
    charge the first call wrote is this request's own."""
    assert admit(client, "uid-1", {})["allowed"]
    assert admit(client, "uid-2", {})["allowed"]
    assert admit(client, "uid-2", {})["allowed"]
    assert not admit(client, "uid-3", {})["allowed"]
