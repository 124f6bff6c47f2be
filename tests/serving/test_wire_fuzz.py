"""Fuzzing both wire formats with mutated valid samples, through the real apps.

Each example takes a valid AdmissionReview or ExtenderArgs, exactly as kube-apiserver and
kube-scheduler send them, and changes one to three places in it: a value replaced by any JSON
value, a key removed, a value wrapped in a list or an object. The servers must answer every one
through their error channels (webhook: 200 or 400; extender: always 200), echo the review's
uid, log no traceback, and every patch must apply to the object as sent — and leave a valid Pod
when the Pod sent was valid.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Iterator
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.app import create_app as create_extender
from extender.settings import ExtenderSettings
from extender.state import state_from_objects
from harness.builders import (
    make_created_pod,
    make_namespace,
    make_node,
    make_pod,
    make_policy,
    make_review,
)
from migslice.objects import parse_cluster_objects
from webhook.app import create_app as create_webhook
from webhook.settings import WebhookSettings
from webhook.state import ClusterState

EXAMPLES = 1000
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def places(document: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside ``document`` (keys and indices)."""
    if isinstance(document, dict):
        for key, value in document.items():
            yield (*path, key)
            yield from places(value, (*path, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            yield (*path, index)
            yield from places(value, (*path, index))


@st.composite
def mutated(draw: st.DrawFn, samples: list[dict[str, Any]]) -> dict[str, Any]:
    return draw(mutated_where(samples))[0]


@st.composite
def mutated_where(
    draw: st.DrawFn, samples: list[dict[str, Any]]
) -> tuple[dict[str, Any], set[tuple[Any, ...]]]:
    """A mutated sample, and the paths it changed."""
    document = copy.deepcopy(draw(st.sampled_from(samples)))
    changed: set[tuple[Any, ...]] = set()
    for _ in range(draw(st.integers(1, 3))):
        paths = list(places(document))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        key = path[-1]
        changed.add(path)
        action = draw(st.sampled_from(["replace", "replace", "delete", "wrap-list", "wrap-dict"]))
        if action == "replace":
            parent[key] = draw(JSON)
        elif action == "delete":
            del parent[key]
        elif action == "wrap-list":
            parent[key] = [parent[key]]
        else:
            parent[key] = {"x": parent[key]}
    return document, changed


def pod_samples() -> list[dict[str, Any]]:
    sized = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    direct = make_created_pod(limits={"nvidia.com/mig-1g.10gb": "1"}, containers=("a", "b"))
    memory = make_created_pod(
        annotations={"migslice.io/gpu-memory": "20Gi", "migslice.io/gpu-compute": "2"},
        affinity={"nodeAffinity": {}},
        node_selector={"disk": "ssd"},
    )
    init = make_created_pod(limits={"nvidia.com/gpu": "1"}, k8s_minor=33)
    init["spec"]["initContainers"] = [
        {"name": "warm", "image": "warm:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    return [make_review(pod, uid=f"uid-{i}") for i, pod in enumerate([sized, direct, memory, init])]


def policy_samples() -> list[dict[str, Any]]:
    policy = make_policy("team-b", namespaces=["team-b"], quota={"computeSlices": 8})
    return [
        make_review(
            policy,
            uid="uid-policy",
            namespace="",
            kind=("migslice.io", "v1alpha1", "TenantPolicy"),
            resource="tenantpolicies",
        )
    ]


def extender_samples() -> list[dict[str, Any]]:
    pod = make_pod("train", profile="1g.10gb", node_selector={"nvidia.com/gpu.product": "X"})
    nodes = [make_node(f"gpu-{i}", mig={"1g.10gb": 7}, resource_version=str(i)) for i in range(3)]
    return [
        {"Pod": pod, "Nodes": None, "NodeNames": ["gpu-0", "gpu-1", "gpu-2", "nope"]},
        {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None},
    ]


@pytest.fixture
def webhook() -> Any:
    state = ClusterState()
    state.upsert_policy(make_policy(quota={"computeSlices": 8}))
    state.upsert_namespace(make_namespace("team-a"))
    state.upsert_node(make_node("gpu-1"))
    return create_webhook(WebhookSettings(), state).test_client()


@pytest.fixture
def extender() -> Any:
    nodes = [make_node(f"gpu-{i}", mig={"1g.10gb": 7}) for i in range(3)]
    objects = parse_cluster_objects([{"kind": "Node", **n} for n in nodes])
    settings_ = ExtenderSettings()
    return create_extender(settings_, state_from_objects(objects, settings_)).test_client()


def no_traceback(records: list[logging.LogRecord]) -> None:
    tracebacks = [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert not tracebacks, tracebacks[0].getMessage()


def valid_pod(pod: Any) -> bool:
    try:
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "Pod", **pod}, "1.34", strict=True
        )
    except Exception:
        return False
    return True


@FUZZ
@given(example=mutated_where(pod_samples()))
def test_mutated_pod_reviews_get_an_answer_that_applies(
    webhook: Any,
    example: tuple[dict[str, Any], set[tuple[Any, ...]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    review, changed = example
    caplog.clear()
    with caplog.at_level(logging.INFO):
        reply = webhook.post("/mutate", json=review)
    no_traceback(caplog.records)
    assert reply.status_code in (200, 400), reply.get_data(as_text=True)
    if reply.status_code == 400:
        assert reply.get_json()["error"]
        return
    response = reply.get_json()["response"]
    assert response["uid"] == review["request"]["uid"]
    if not response["allowed"]:
        assert response["status"]["message"]
    if "patch" not in response:
        return
    sent = review["request"]["object"]
    ops = json.loads(base64.b64decode(response["patch"]))
    patched = jsonpatch.apply_patch(copy.deepcopy(sent), ops)
    if not any(path[:2] == ("request", "object") for path in changed):
        assert valid_pod(sent)  # the samples are valid Pods, and this one was left as sent
        assert valid_pod(patched), ops


@settings(FUZZ, max_examples=EXAMPLES // 2)
@given(review=mutated(policy_samples()))
def test_mutated_policy_reviews_are_answered_200_or_400(
    webhook: Any, review: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO):
        reply = webhook.post("/validate", json=review)
    no_traceback(caplog.records)
    assert reply.status_code in (200, 400), reply.get_data(as_text=True)
    if reply.status_code == 200:
        assert reply.get_json()["response"]["uid"] == review["request"]["uid"]


@FUZZ
@given(
    args=mutated(extender_samples()),
    verb=st.sampled_from(["filter", "filter-best-fit", "prioritize"]),
)
def test_mutated_extender_args_are_answered_200_with_every_node_accounted_for(
    extender: Any, args: dict[str, Any], verb: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    with caplog.at_level(logging.INFO):
        reply = extender.post(f"/{verb}", json=args)
    no_traceback(caplog.records)
    assert reply.status_code == 200
    answer = reply.get_json()
    if isinstance(answer, dict) and answer.get("Error"):
        return
    if verb == "prioritize":
        assert isinstance(answer, list)
        assert all(0 <= item["Score"] <= 10 for item in answer)
        return
    names = args.get("NodeNames")
    if isinstance(names, list):
        judged = set(answer["NodeNames"]) | set(answer["FailedNodes"])
        judged |= set(answer["FailedAndUnresolvableNodes"])
        if answer["NodeNames"]:  # failures are sent only when no node fits
            assert not answer["FailedNodes"] and not answer["FailedAndUnresolvableNodes"]
            assert judged <= set(names)  # best-fit leaves out the fits of a lower score
        else:
            assert judged == set(names)
