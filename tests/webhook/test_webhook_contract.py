"""The webhook's HTTP contract with AdmissionReview v1 exactly as kube-apiserver sends it."""

from __future__ import annotations

import base64
import copy
import json
import threading
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.builders import make_created_pod, make_namespace, make_node, make_policy, make_review
from tests.hostile import assert_clear_admission_answer, json_values
from webhook.app import create_app
from webhook.quota import MemoryLedgers, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState

VERSIONS = ["1.30", "1.31", "1.32", "1.33", "1.34"]


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def monotonic_s(self) -> float:
        return self.now_s


def make_state(*policies: dict[str, Any], clock: FakeClock | None = None) -> ClusterState:
    state = ClusterState(clock=clock or FakeClock())
    for policy in policies or (make_policy(quota={"computeSlices": 8}),):
        state.upsert_policy(policy)
    state.upsert_node(make_node("gpu-1"))
    state.upsert_node(make_node("gpu-2", product="NVIDIA-H100-80GB-HBM3"))
    return state


@pytest.fixture
def state() -> ClusterState:
    return make_state()


@pytest.fixture
def client(state: ClusterState) -> FlaskClient:
    return create_app(WebhookSettings(), state).test_client()


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


@pytest.mark.parametrize("version", VERSIONS)
def test_a_generate_name_pod_is_patched_so_that_the_result_is_a_valid_pod(
    client: FlaskClient, version: str
) -> None:
    minor = int(version.split(".")[1])
    pod = make_created_pod(annotations=None, k8s_minor=minor, limits=None)
    pod["metadata"].pop("annotations", None)
    # GPU intent through a direct request so that the pod arrives with no annotations map.
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    assert "name" not in pod["metadata"] and "uid" not in pod["metadata"]
    assert ("creationTimestamp" in pod["metadata"]) == (minor <= 33)
    body = make_review(pod)
    reply = client.post("/mutate", json=body)
    assert reply.status_code == 200
    review = reply.get_json()
    assert (review["apiVersion"], review["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert review["response"]["uid"] == body["request"]["uid"]
    assert review["response"]["allowed"] is True
    ops = patch_of(review["response"])
    assert {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {
            "migslice.io/tenant": "team-a",
            "migslice.io/profile": "1g.10gb",
            "migslice.io/policy": "team-a@1",
            "migslice.io/reservation": body["request"]["uid"],
        },
    } in ops
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    kubernetes_validate.validate(patched, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sized_pod_with_annotations_gets_escaped_paths_and_validates(
    client: FlaskClient, version: str
) -> None:
    pod = make_created_pod(
        annotations={"migslice.io/gpu-size": "large"}, k8s_minor=int(version[2:])
    )
    review = client.post("/mutate", json=make_review(pod)).get_json()
    ops = patch_of(review["response"])
    paths = [op["path"] for op in ops]
    assert "/metadata/annotations/migslice.io~1tenant" in paths
    assert "/spec/containers/0/resources/limits" in paths
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-3g.40gb": "1"
    }
    kubernetes_validate.validate(patched, version, strict=True)


def test_limits_already_present_get_escaped_member_paths(client: FlaskClient) -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    pod["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}
    ops = patch_of(client.post("/mutate", json=make_review(pod)).get_json()["response"])
    assert "/spec/containers/0/resources/limits/nvidia.com~1mig-1g.10gb" in [o["path"] for o in ops]
    jsonpatch.apply_patch(pod, ops)


def test_a_pod_without_gpu_intent_gets_no_patch(client: FlaskClient) -> None:
    response = client.post("/mutate", json=make_review(make_created_pod())).get_json()["response"]
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_a_policy_denial_is_http_200_with_allowed_false_and_a_status(client: FlaskClient) -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "huge"})
    reply = client.post("/mutate", json=make_review(pod))
    assert reply.status_code == 200
    response = reply.get_json()["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403
    assert 'size "huge" is not defined' in response["status"]["message"]


MALFORMED = [
    (b"not json", "not JSON"),
    (b"[]", "not a JSON object"),
    (
        json.dumps(
            {**make_review(make_created_pod()), "apiVersion": "admission.k8s.io/v1beta1"}
        ).encode(),
        "expected admission.k8s.io/v1",
    ),
    (
        json.dumps({**make_review(make_created_pod()), "kind": "Pod"}).encode(),
        "expected admission.k8s.io/v1",
    ),
    (
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
        "no request",
    ),
    (json.dumps(make_review(make_created_pod(), uid="")).encode(), "no uid"),
    (json.dumps(make_review(None)).encode(), "has no object"),
    (json.dumps(make_review({"metadata": {}, "spec": {"containers": "x"}})).encode(), "containers"),
    (
        json.dumps(make_review(make_created_pod(), kind=("apps", "v1", "Deployment"))).encode(),
        "handles core/v1 Pod",
    ),
    (
        json.dumps(make_review(make_created_pod(limits={"nvidia.com/gpu": "abc"}))).encode(),
        "not a Kubernetes quantity",
    ),
]


@pytest.mark.parametrize(("body", "text"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_reviews_are_http_400_with_a_reason(
    client: FlaskClient, body: bytes, text: str
) -> None:
    reply = client.post("/mutate", data=body, content_type="application/json")
    assert reply.status_code == 400
    assert text in reply.get_json()["error"]


def test_an_over_size_body_is_http_400(state: ClusterState) -> None:
    client = create_app(WebhookSettings(max_body_bytes=1 << 20), state).test_client()
    reply = client.post("/mutate", data=b" " * ((1 << 20) + 1), content_type="application/json")
    assert reply.status_code == 400
    assert "larger than the limit of 1048576 bytes" in reply.get_json()["error"]


def test_the_default_limit_takes_the_largest_review_kube_apiserver_sends() -> None:
    # bench/serving/request_sizes.py: a 3 MiB pod CREATE of many small fields arrives as
    # 8,268,112 B.
    assert WebhookSettings().max_body_bytes > 8_268_112


def test_quota_holds_under_concurrent_requests_to_one_replica() -> None:
    state = make_state(make_policy(quota={"computeSlices": 8}))
    app = create_app(WebhookSettings(), state)
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    allowed: list[bool] = []

    def send(i: int) -> None:
        reply = app.test_client().post("/mutate", json=make_review(pod, uid=f"uid-{i}"))
        allowed.append(reply.get_json()["response"]["allowed"])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert allowed.count(True) == 4  # 4 x 2 compute slices = 8


def test_a_charge_is_settled_by_its_pod_and_released_when_its_pod_never_came() -> None:
    clock = FakeClock()
    state = make_state(make_policy(quota={"computeSlices": 2}), clock=clock)
    keeper = QuotaKeeper(state, MemoryLedgers(state), hold_s=45.0, wall_clock=clock.monotonic_s)
    client = create_app(WebhookSettings(), state, keeper).test_client()
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    first = client.post("/mutate", json=make_review(pod, uid="a")).get_json()["response"]
    assert first["allowed"]
    assert not client.post("/mutate", json=make_review(pod, uid="b")).get_json()["response"][
        "allowed"
    ]
    # The pod appears in the cache: its usage replaces the charge (still over quota).
    created = jsonpatch.apply_patch(copy.deepcopy(pod), patch_of(first))
    created["metadata"]["name"] = "train-x1"
    state.upsert_pod(created)
    assert state.pending_charges() == 0
    assert not client.post("/mutate", json=make_review(pod, uid="c")).get_json()["response"][
        "allowed"
    ]
    state.delete_pod("team-a", "train-x1")
    assert client.post("/mutate", json=make_review(pod, uid="d")).get_json()["response"]["allowed"]
    clock.now_s += 44  # the create of d may still land: d still counts
    assert not client.post("/mutate", json=make_review(pod, uid="e")).get_json()["response"][
        "allowed"
    ]
    clock.now_s += 2  # past the hold, and the pods listed lack d: it was never created
    assert client.post("/mutate", json=make_review(pod, uid="f")).get_json()["response"]["allowed"]


def test_validate_refuses_a_policy_with_field_paths_and_namespace_conflicts(
    client: FlaskClient,
) -> None:
    bad = make_policy("team-b", namespaces=["team-a"], sizes={"huge": {"memory": "500Gi"}})
    body = make_review(
        bad,
        namespace="",
        kind=("migslice.io", "v1alpha1", "TenantPolicy"),
        resource="tenantpolicies",
    )
    reply = client.post("/validate", json=body)
    response = reply.get_json()["response"]
    assert reply.status_code == 200 and response["allowed"] is False
    message = response["status"]["message"]
    assert "spec.sizes.huge:" in message
    assert 'namespace team-a already belongs to TenantPolicy "team-a"' in message


def test_validate_names_form_and_catalog_errors_in_one_answer(client: FlaskClient) -> None:
    """Measured before: a policy wrong in form (maxSlicesPerPod 0) was refused naming only
    that; its size no model can serve was named by the next try."""
    bad = make_policy(
        "team-b",
        namespaces=["team-a"],
        sizes={"huge": {"memory": "500Gi"}, "bad": {"memory": "x"}},
        maxSlicesPerPod=0,
    )
    body = make_review(
        bad,
        namespace="",
        kind=("migslice.io", "v1alpha1", "TenantPolicy"),
        resource="tenantpolicies",
    )
    message = client.post("/validate", json=body).get_json()["response"]["status"]["message"]
    assert "spec.maxSlicesPerPod: must be at least 1" in message
    assert "spec.sizes.huge:" in message
    assert 'namespace team-a already belongs to TenantPolicy "team-a"' in message
    assert message.count("spec.sizes.bad") == 1  # wrong in form: not checked again


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (("metadata", "generation"), "metadata.generation: must be an integer, got [[[["),
        (("spec", "namespaces"), "spec.namespaces: "),
        (("spec", "quota", "computeSlices"), "spec.quota.computeSlices: must be an integer"),
    ],
    ids=["generation", "namespaces", "quota"],
)
def test_validate_names_a_value_nested_past_pythons_recursion_limit(
    client: FlaskClient, path: tuple[str, ...], said: str
) -> None:
    """A policy's field nested 1,000 levels deep (the body is parsed to 1,024) was shown in
    its FieldError by repr, which raised RecursionError: a 500 for a malformed policy."""
    policy = make_policy("team-b", namespaces=["team-b"], quota={"computeSlices": 4})
    holder: Any = policy
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = "DEEP"
    review = make_review(policy, namespace="", kind=("migslice.io", "v1alpha1", "TenantPolicy"))
    deep = "[" * 1000 + "1" + "]" * 1000
    body = json.dumps(review).replace('"DEEP"', deep)
    reply = client.post("/validate", data=body, content_type="application/json")
    assert reply.status_code == 200, reply.get_data(as_text=True)
    response = reply.get_json()["response"]
    assert not response["allowed"] and said in response["status"]["message"]


def test_validate_accepts_a_good_policy(client: FlaskClient) -> None:
    body = make_review(
        make_policy("team-b", namespaces=["team-b"]),
        namespace="",
        kind=("migslice.io", "v1alpha1", "TenantPolicy"),
    )
    assert client.post("/validate", json=body).get_json()["response"]["allowed"] is True


def policy_update(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    body = make_review(
        new,
        namespace="",
        operation="UPDATE",
        kind=("migslice.io", "v1alpha1", "TenantPolicy"),
        resource="tenantpolicies",
    )
    body["request"]["oldObject"] = old
    return body


def test_validate_lets_an_update_that_keeps_the_spec_through_a_policy_in_conflict() -> None:
    """A policy that came to share a namespace with another (a namespace labelled after both
    were admitted) is not valid by the checks of /validate, but an UPDATE that leaves its
    spec as it is changes nothing they check. Measured before: a foreground deletion's
    finalizer could not be removed (the garbage collector's patch was refused with the
    conflict, the policy stayed Terminating and kept denying the namespace's GPU pods), nor
    was ``kubectl annotate`` allowed."""
    state = make_state(
        make_policy("team-a", namespaces=None, namespaceSelector={"matchLabels": {"team": "a"}})
    )
    state.upsert_policy(make_policy("team-b", namespaces=["shared"]))
    state.upsert_namespace(make_namespace("shared", {"team": "a"}))
    client = create_app(WebhookSettings(), state).test_client()
    stored = make_policy("team-b", namespaces=["shared"])
    deleting = copy.deepcopy(stored)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T18:19:10Z"
    deleting["metadata"]["finalizers"] = ["foregroundDeletion"]
    finalized = copy.deepcopy(deleting)
    del finalized["metadata"]["finalizers"]
    annotated = copy.deepcopy(stored)
    annotated["metadata"]["annotations"] = {"note": "moving to team-a"}
    for old, new in ((deleting, finalized), (stored, annotated)):
        reply = client.post("/validate", json=policy_update(old, new)).get_json()["response"]
        assert reply["allowed"] is True, reply

    raised = make_policy("team-b", namespaces=["shared"], quota={"computeSlices": 8})
    reply = client.post("/validate", json=policy_update(stored, raised)).get_json()["response"]
    assert reply["allowed"] is False
    assert 'namespace shared already belongs to TenantPolicy "team-a"' in reply["status"]["message"]


def test_readyz_waits_for_the_caches_and_healthz_does_not() -> None:
    state = make_state()
    state.expect("pods")
    client = create_app(WebhookSettings(), state).test_client()
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 503
    state.mark_synced("pods")
    assert client.get("/readyz").status_code == 200


def test_metrics_count_requests_denials_by_reason_and_latency(client: FlaskClient) -> None:
    client.post(
        "/mutate", json=make_review(make_created_pod(annotations={"migslice.io/gpu-size": "huge"}))
    )
    client.post("/mutate", data=b"x")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'migslice_webhook_denials_total{endpoint="mutate",reason="unknown-size"} 1.0' in text
    assert 'migslice_webhook_requests_total{endpoint="mutate",outcome="malformed"} 1.0' in text
    assert "migslice_webhook_request_duration_seconds_bucket" in text


def test_namespace_labels_select_a_tenant_through_its_selector() -> None:
    policy = make_policy(
        "research", namespaces=None, namespaceSelector={"matchLabels": {"team": "r"}}
    )
    state = make_state(policy)
    state.upsert_namespace(make_namespace("lab-1", {"team": "r"}))
    client = create_app(WebhookSettings(), state).test_client()
    pod = make_created_pod(namespace="lab-1", annotations={"migslice.io/gpu-size": "small"})
    response = client.post("/mutate", json=make_review(pod, namespace="lab-1")).get_json()[
        "response"
    ]
    assert response["allowed"] is True


# -- fuzz ------------------------------------------------------------------------------------

annotation_values = st.sampled_from(
    ["small", "medium", "huge", "20Gi", "lots", "-1", "2", "0", "main", "", "1e9"]
)
annotation_maps = st.dictionaries(
    st.sampled_from(
        [
            "migslice.io/gpu-size",
            "migslice.io/gpu-memory",
            "migslice.io/gpu-compute",
            "migslice.io/gpu-count",
            "migslice.io/gpu-container",
            "migslice.io/reservation",
            "other",
        ]
    ),
    annotation_values | st.integers(),
    max_size=4,
)
limits = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-9g.1gb",
            "nvidia.com/mig-x",
            "cpu",
        ]
    ),
    st.sampled_from(["1", "2", "0", "abc", "1.5"]) | st.integers(-1, 3),
    max_size=3,
)


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    pod = make_created_pod(annotations=None, k8s_minor=draw(st.sampled_from([33, 34])))
    if draw(st.booleans()):
        pod["metadata"]["annotations"] = draw(annotation_maps)
    pod["spec"]["containers"][0]["resources"] = draw(st.sampled_from([{}, None])) or {
        "limits": draw(limits)
    }
    if draw(st.booleans()):
        pod["spec"][
            draw(st.sampled_from(["affinity", "nodeSelector", "containers", "initContainers"]))
        ] = draw(json_values)
    review = make_review(pod, namespace=draw(st.sampled_from(["team-a", "other", ""])))
    if draw(st.booleans()):
        review["request"][
            draw(st.sampled_from(["uid", "kind", "object", "operation", "namespace"]))
        ] = draw(json_values)
    if draw(st.booleans()):
        review[draw(st.sampled_from(["apiVersion", "kind", "request"]))] = draw(json_values)
    return review


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(review=reviews())
def test_fuzzed_reviews_never_get_a_500_or_a_patch_that_does_not_apply(
    client: FlaskClient, review: Any
) -> None:
    assert_clear_admission_answer(review, client.post("/mutate", json=review))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_fuzzed_bodies_are_answered_400_or_200(client: FlaskClient, body: bytes) -> None:
    assert client.post("/mutate", data=body).status_code in (200, 400)
    assert client.post("/validate", data=body).status_code in (200, 400)


@pytest.mark.parametrize("count", ["500m", "-1", "1500m"])
def test_a_gpu_count_that_apiserver_validation_refuses_is_a_denial_not_a_malformed_review(
    client: FlaskClient, count: str
) -> None:
    body = make_review(make_created_pod(limits={"nvidia.com/mig-1g.10gb": count}))
    reply = client.post("/mutate", json=body)
    assert reply.status_code == 200
    response = reply.get_json()["response"]
    assert response["allowed"] is False and response["status"]["code"] == 422
    message = response["status"]["message"]
    assert f"nvidia.com/mig-1g.10gb: {count}; GPU resources are whole units" in message
