"""The extender wire contract, with ExtenderArgs exactly as kube-scheduler sends them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import pytest
from flask.testing import FlaskClient

from extender import ExtenderSettings, ExtenderState, create_app
from extender.state import new_index, state_from_objects
from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import PreparedNode, reasons
from tests import paths

BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
FILTER_KEYS = ["Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"]


def cluster_nodes() -> list[dict[str, Any]]:
    return [
        make_node("gpu-a", gpu_count=1, mig=BALANCED, config="all-balanced", resource_version="11"),
        make_node("gpu-b", gpu_count=1, mig=BALANCED, config="all-balanced", resource_version="12"),
        make_node(
            "gpu-full", gpu_count=1, mig={"3g.40gb": 2}, config="all-3g.40gb", resource_version="13"
        ),
        make_node(
            "gpu-a30", product="NVIDIA-A30", gpu_count=1, mig={"1g.6gb": 4}, resource_version="14"
        ),
        make_node(
            "gpu-busy", gpu_count=1, mig=BALANCED, config_state="pending", resource_version="15"
        ),
    ]


def cluster_pods() -> list[dict[str, Any]]:
    return [
        make_pod("a", profile="1g.10gb", node_name="gpu-a", phase="Running"),
        make_pod("f1", profile="3g.40gb", node_name="gpu-full", phase="Running"),
        make_pod("f2", profile="3g.40gb", node_name="gpu-full", phase="Running"),
        make_pod("done", profile="1g.10gb", node_name="gpu-b", phase="Succeeded"),
    ]


@pytest.fixture
def client() -> FlaskClient:
    objects = ClusterObjects(nodes=tuple(cluster_nodes()), pods=tuple(cluster_pods()))
    state = state_from_objects(objects, ExtenderSettings())
    return create_app(ExtenderSettings(), state).test_client()


def scheduled_pod(**kw: Any) -> dict[str, Any]:
    """The Pod as kube-scheduler embeds it: no managedFields, no apiVersion/kind."""
    pod = make_pod("train-0", **kw)
    assert "managedFields" not in pod["metadata"] and "kind" not in pod
    return pod


def names_args(pod: dict[str, Any], names: list[str]) -> str:
    # Go's encoding/json: compact, fields in struct order, the unused pointer as null.
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}, separators=(",", ":"))


def nodes_args(pod: dict[str, Any], nodes: list[dict[str, Any]]) -> str:
    for node in nodes:
        node["metadata"]["managedFields"] = [{"manager": "kubelet", "operation": "Update"}]
        assert "kind" not in node
    items = {"metadata": {}, "items": nodes}
    return json.dumps({"Pod": pod, "Nodes": items, "NodeNames": None}, separators=(",", ":"))


def post(client: FlaskClient, verb: str, body: str | bytes) -> Any:
    response = client.post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200
    return json.loads(response.data), response.data


ALL = ["gpu-a", "gpu-b", "gpu-full", "gpu-a30", "gpu-busy"]


def test_filter_with_node_names_answers_names_with_exact_keys(client: FlaskClient) -> None:
    answer, _ = post(client, "filter", names_args(scheduled_pod(profile="3g.40gb"), ALL))
    assert list(answer) == FILTER_KEYS
    assert answer["Nodes"] is None
    assert answer["NodeNames"] == ["gpu-a", "gpu-b"]
    # kube-scheduler reads failures only when no node is left: none are sent while one fits
    assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}
    assert answer["Error"] == ""


def test_the_scheduling_doc_says_an_answer_partitions_its_input_only_when_no_node_fits(
    client: FlaskClient,
) -> None:
    """docs/scheduling.md said "the three parts always partition the input", while the
    answer leaves the failures out as soon as one node fits."""
    answer, _ = post(client, "filter", names_args(scheduled_pod(profile="3g.40gb"), ALL))
    parts = [*answer["NodeNames"], *answer["FailedNodes"], *answer["FailedAndUnresolvableNodes"]]
    assert answer["NodeNames"] and sorted(parts) != sorted(ALL)
    page = (paths.DOCS / "scheduling.md").read_text()
    text = " ".join(page.split())
    assert "always partition the input" not in text
    assert "the answer carries all three only when no node fits" in text


def test_the_scheduling_doc_gives_an_unknown_node_the_outcome_filter_answers(
    client: FlaskClient,
) -> None:
    """docs/scheduling.md's table listed a node the caches lack as failed (a preemption
    candidate) after the filter made it unresolvable."""
    answer, _ = post(client, "filter", names_args(scheduled_pod(profile="3g.40gb"), ["ghost"]))
    assert answer["FailedAndUnresolvableNodes"] == {"ghost": reasons.UNKNOWN_NODE}
    rows = [
        line
        for line in (paths.DOCS / "scheduling.md").read_text().splitlines()
        if f"`{reasons.UNKNOWN_NODE}`" in line
    ]
    assert rows and all(row.startswith("| unresolvable |") for row in rows), rows


@pytest.mark.parametrize("verb", ["filter", "filter-best-fit"])
def test_when_no_node_fits_every_node_comes_back_with_its_reason(
    client: FlaskClient, verb: str
) -> None:
    names = ["gpu-full", "gpu-a30", "gpu-busy"]
    answer, _ = post(client, verb, names_args(scheduled_pod(profile="3g.40gb"), names))
    assert list(answer) == FILTER_KEYS and answer["Error"] == ""
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"] == {"gpu-full": "all 3g.40gb MIG instances in use"}
    assert answer["FailedAndUnresolvableNodes"] == {
        "gpu-a30": "A30-24GB has no MIG profile 3g.40gb",
        "gpu-busy": "node being re-partitioned (nvidia.com/mig.config.state=pending)",
    }
    nodes = [node for node in cluster_nodes() if node["metadata"]["name"] in names]
    answer, _ = post(client, verb, nodes_args(scheduled_pod(profile="3g.40gb"), nodes))
    assert answer["Nodes"]["items"] == []
    assert set(answer["FailedNodes"]) == {"gpu-full"}
    assert set(answer["FailedAndUnresolvableNodes"]) == {"gpu-a30", "gpu-busy"}


def test_filter_with_full_nodes_answers_the_same_node_objects(client: FlaskClient) -> None:
    nodes = cluster_nodes()
    answer, _ = post(client, "filter", nodes_args(scheduled_pod(profile="3g.40gb"), nodes))
    assert list(answer) == FILTER_KEYS
    assert answer["NodeNames"] is None
    assert answer["Nodes"]["metadata"] == {}
    assert answer["Nodes"]["items"] == [nodes[0], nodes[1]]
    assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}


@pytest.mark.parametrize("mode", ["names", "nodes"])
def test_best_fit_filter_answers_only_the_best_scored_fits(client: FlaskClient, mode: str) -> None:
    pod = scheduled_pod(profile="1g.10gb")
    nodes = cluster_nodes()
    body = names_args(pod, ALL) if mode == "names" else nodes_args(pod, nodes)
    full, _ = post(client, "filter", body)
    best, _ = post(client, "filter-best-fit", body)
    scores, _ = post(client, "prioritize", names_args(pod, ALL))
    assert list(best) == FILTER_KEYS and best["Error"] == ""
    # gpu-a's GPU is in use, gpu-b's idle: the pod belongs on gpu-a
    assert {s["Host"]: s["Score"] for s in scores}["gpu-a"] > {
        s["Host"]: s["Score"] for s in scores
    }["gpu-b"]
    if mode == "names":
        assert full["NodeNames"] == ["gpu-a", "gpu-b"] and best["NodeNames"] == ["gpu-a"]
        assert best["Nodes"] is None
    else:
        assert best["NodeNames"] is None and best["Nodes"]["items"] == [nodes[0]]
    assert best["FailedNodes"] == full["FailedNodes"] == {}
    assert best["FailedAndUnresolvableNodes"] == full["FailedAndUnresolvableNodes"] == {}


def test_full_node_mode_judges_the_node_as_sent_when_it_is_newer_than_the_cache(
    client: FlaskClient,
) -> None:
    newer = make_node("gpu-full", gpu_count=1, mig={"3g.40gb": 3}, resource_version="99")
    answer, _ = post(client, "filter", nodes_args(scheduled_pod(profile="3g.40gb"), [newer]))
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["gpu-full"]
    unknown = make_node("gpu-new", gpu_count=1, mig=BALANCED)
    answer, _ = post(client, "filter", nodes_args(scheduled_pod(profile="1g.10gb"), [unknown]))
    assert [n["metadata"]["name"] for n in answer["Nodes"]["items"]] == ["gpu-new"]


@pytest.mark.parametrize("mode", ["names", "nodes"])
def test_prioritize_answers_integer_scores_for_input_names_only(
    client: FlaskClient, mode: str
) -> None:
    pod = scheduled_pod(profile="1g.10gb")
    names = ["gpu-b", "gpu-a", "ghost"]
    if mode == "names":
        body = names_args(pod, names)
    else:
        by_name = {n["metadata"]["name"]: n for n in cluster_nodes()}
        body = nodes_args(pod, [by_name["gpu-b"], by_name["gpu-a"]])
        names = ["gpu-b", "gpu-a"]
    answer, raw = post(client, "prioritize", body)
    assert [entry["Host"] for entry in answer] == names
    assert all(list(entry) == ["Host", "Score"] for entry in answer)
    assert all(type(entry["Score"]) is int and 0 <= entry["Score"] <= 10 for entry in answer)
    assert re.search(rb'"Score":\d+[.eE]', raw) is None
    scores = {entry["Host"]: entry["Score"] for entry in answer}
    assert scores["gpu-a"] > scores["gpu-b"]  # gpu-a's GPU is in use already


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "request body is not JSON ExtenderArgs"),
        (b"[1, 2]", "ExtenderArgs must be a JSON object, got list"),
        (b'{"Nodes": null, "NodeNames": ["gpu-a"]}', "ExtenderArgs.Pod is missing"),
        (b'{"Pod": "x", "NodeNames": []}', "ExtenderArgs.Pod is str"),
        (b'{"Pod": {}, "Nodes": null, "NodeNames": null}', "neither NodeNames nor Nodes"),
        (b'{"Pod": {}, "Nodes": null, "NodeNames": "gpu-a"}', "NodeNames must be a list"),
        (
            b'{"Pod": {}, "Nodes": {"items": [{}]}, "NodeNames": null}',
            "items[0] has no metadata.name",
        ),
        (b"", "request body is not JSON"),
    ],
    ids=[
        "not-json",
        "array",
        "no-pod",
        "pod-not-object",
        "both-null",
        "names-not-list",
        "nameless-node",
        "empty",
    ],
)
def test_bad_input_gets_200_with_a_clear_error(
    client: FlaskClient, body: bytes, message: str
) -> None:
    answer, _ = post(client, "filter", body)
    assert list(answer) == FILTER_KEYS
    assert message in answer["Error"]
    answer, _ = post(client, "prioritize", body)
    assert message in answer["Error"]


def test_unknown_names_and_malformed_quantities_get_per_node_reasons(
    client: FlaskClient,
) -> None:
    pod = scheduled_pod(requests={"nvidia.com/mig-1g.10gb": "1.5"})
    answer, _ = post(client, "filter", names_args(pod, ["gpu-a", "ghost"]))
    assert answer["Error"] == ""
    assert answer["NodeNames"] == []
    assert answer["FailedNodes"] == {}
    unresolvable = answer["FailedAndUnresolvableNodes"]
    assert unresolvable["ghost"] == "node unknown to migslice extender (cache not synced yet)"
    assert "'1.5' is not a whole count" in unresolvable["gpu-a"]
    scores, _ = post(client, "prioritize", names_args(pod, ["gpu-a", "ghost"]))
    assert scores == [{"Host": "gpu-a", "Score": 0}, {"Host": "ghost", "Score": 0}]


def test_a_body_over_the_cap_is_refused_with_an_error() -> None:
    app = create_app(ExtenderSettings(max_body_bytes=100))
    answer, _ = post(app.test_client(), "filter", names_args(scheduled_pod(), ["a"] * 50))
    assert "limit 100" in answer["Error"]


class BrokenIndex(ClusterIndex[PreparedNode]):
    """A fake index that fails on every read: our own failure, not the caller's."""

    def get(self, name: str) -> PreparedNode | None:
        raise RuntimeError("index exploded")


def test_our_own_failure_is_a_200_with_error() -> None:
    broken = BrokenIndex(lambda state: None)  # type: ignore[arg-type,return-value]
    client = create_app(state=ExtenderState(broken)).test_client()
    answer, _ = post(client, "filter", names_args(scheduled_pod(profile="1g.10gb"), ["a"]))
    assert answer["Error"] == "migslice extender internal error: index exploded"
    answer, _ = post(client, "prioritize", names_args(scheduled_pod(profile="1g.10gb"), ["a"]))
    assert answer == {"Error": "migslice extender internal error: index exploded"}


class FakeCache:
    def __init__(self, synced: bool, blind_s: float | None, staleness_s: float = 0.0) -> None:
        self.name = "nodes"
        self.synced = synced
        self._blind_s = blind_s
        self._staleness_s = staleness_s

    def blind_s(self) -> float | None:
        return self._blind_s

    def staleness_s(self) -> float | None:
        return self._staleness_s


@pytest.mark.parametrize(
    ("synced", "blind", "staleness", "status", "text"),
    [
        (True, 0.0, 3.0, 200, "ok"),
        (True, 0.0, 900.0, 200, "ok"),
        (True, 4.0, 4.0, 200, "ok"),
        (False, None, 0.0, 503, "cache nodes has not listed once yet"),
        (True, 27.0, 27.0, 503, "cache nodes lost the API server 27s ago (limit 5s)"),
    ],
    ids=["connected", "quiet-cluster", "short-blip", "not-synced", "watch-broken"],
)
def test_readiness_is_connected_and_synced_not_heard_from_lately(
    synced: bool, blind: float | None, staleness: float, status: int, text: str
) -> None:
    """A quiet cluster's caches hear nothing for minutes and are healthy; readiness on "last
    heard from" flapped there with the former --max-staleness-s 10 and missed a 30 s outage at
    180."""
    state = ExtenderState(new_index(), (FakeCache(synced, blind, staleness),))
    response = create_app(state=state).test_client().get("/readyz")
    assert response.status_code == status
    assert text in response.get_data(as_text=True)


@pytest.mark.parametrize("cache_mode", ["names", "nodes"])
def test_blind_caches_answer_an_error_so_nothing_binds_and_nothing_is_preempted(
    cache_mode: str,
) -> None:
    """After an API-server outage the caches stayed stale 27 s while a node went to
    mig.config.state=pending; a pod was bound onto it 0.4 s later."""
    objects = ClusterObjects(nodes=tuple(cluster_nodes()), pods=tuple(cluster_pods()))
    state = state_from_objects(objects, ExtenderSettings())
    state.caches = (FakeCache(True, 27.0),)
    client = create_app(ExtenderSettings(), state).test_client()
    pod = scheduled_pod(profile="1g.10gb")
    body = names_args(pod, ALL) if cache_mode == "names" else nodes_args(pod, cluster_nodes())
    answer, _ = post(client, "filter", body)
    reason = "node state unknown: migslice cache nodes lost the API server 27s ago (limit 5s)"
    # An Error, not every node failed: kube-scheduler reads an answer that leaves no node as
    # a pod that fits nowhere and preempts (it evicted a running GPU pod on every full node
    # while the caches were blind, e2e/test_preemption_e2e.py).
    assert answer["Error"] == reason
    assert not answer.get("NodeNames") and not (answer.get("Nodes") or {}).get("items")
    assert not answer.get("FailedNodes") and not answer.get("FailedAndUnresolvableNodes")
    text = client.get("/metrics").get_data(as_text=True)
    assert 'migslice_extender_requests_total{outcome="blind",verb="filter"} 1.0' in text
    assert 'migslice_extender_cache_blind_seconds{cache="nodes"} 27.0' in text


def test_a_blind_answer_counts_no_node_as_failed() -> None:
    """The blind answer is an Error that fails no node: migslice_extender_filter_nodes_total
    counts the nodes filter judged, and read a blind minute as every node failed."""
    objects = ClusterObjects(nodes=tuple(cluster_nodes()), pods=tuple(cluster_pods()))
    state = state_from_objects(objects, ExtenderSettings())
    state.caches = (FakeCache(True, 27.0),)
    client = create_app(ExtenderSettings(), state).test_client()
    answer, _ = post(client, "filter", names_args(scheduled_pod(profile="1g.10gb"), ALL))
    assert answer["Error"]
    text = client.get("/metrics").get_data(as_text=True)
    assert 'migslice_extender_requests_total{outcome="blind",verb="filter"} 1.0' in text
    for result in ("fits", "failed", "unresolvable"):
        assert f'migslice_extender_filter_nodes_total{{result="{result}"}} 0.0' in text


def test_a_refused_caller_is_counted_as_the_webhook_counts_one() -> None:
    """With --client-ca-file a caller without the scheduler's certificate gets 403 and no
    answer: kube-scheduler misconfigured so places no MIG pod, and /metrics must say so
    (the webhook counts such calls as outcome="unauthenticated")."""
    import dataclasses

    settings = ExtenderSettings()
    settings = dataclasses.replace(
        settings, server=dataclasses.replace(settings.server, client_ca="ca.crt")
    )
    client = create_app(settings).test_client()
    reply = client.post("/filter", data=names_args(scheduled_pod(profile="1g.10gb"), ALL))
    assert reply.status_code == 403
    text = client.get("/metrics").get_data(as_text=True)
    assert 'migslice_extender_requests_total{outcome="unauthenticated",verb="filter"} 1.0' in text


def test_health_and_metrics_are_served(client: FlaskClient) -> None:
    assert client.get("/healthz").status_code == 200
    post(client, "filter", names_args(scheduled_pod(profile="1g.10gb"), ALL))
    text = client.get("/metrics").get_data(as_text=True)
    for needle in (
        'migslice_extender_requests_total{outcome="ok",verb="filter"} 1.0',
        "migslice_extender_cached_nodes 5.0",
        "migslice_extender_cached_pods 3.0",
        'migslice_extender_cache_synced{cache="cluster-file"} 1.0',
        'migslice_extender_filter_nodes_total{result="fits"}',
        "migslice_extender_request_duration_seconds_bucket",
    ):
        assert needle in text


def test_metrics_content_type_names_each_parameter_once(client: FlaskClient) -> None:
    """The exposition's media type as a scraper reads it: ``text/plain`` with its format
    version and charset, each parameter once (RFC 6838 4.3: a parameter given twice is an
    error; Flask's ``mimetype=`` appended a second ``charset`` to prometheus_client's)."""
    content_type = client.get("/metrics").headers["Content-Type"]
    kind, *parameters = (part.strip() for part in content_type.split(";"))
    names = [parameter.partition("=")[0].lower() for parameter in parameters]
    assert kind == "text/plain"
    assert sorted(names) == ["charset", "version"], content_type


def test_two_apps_keep_separate_metrics() -> None:
    first, second = create_app().test_client(), create_app().test_client()
    post(first, "filter", b"nope")
    text: Mapping[str, str] = {"second": second.get("/metrics").get_data(as_text=True)}
    assert 'outcome="error"' not in text["second"]


@pytest.mark.parametrize("verb", ["filter", "filter-best-fit", "prioritize"])
def test_the_verbs_answer_the_same_through_the_thin_layer_as_through_flask(verb: str) -> None:
    objects = ClusterObjects(nodes=tuple(cluster_nodes()), pods=tuple(cluster_pods()))
    app = create_app(ExtenderSettings(), state_from_objects(objects, ExtenderSettings()))
    body = names_args(scheduled_pod(profile="1g.10gb"), ALL)
    response = app.test_client().post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert response.headers["Content-Length"] == str(len(response.data))
    with app.test_request_context(
        f"/{verb}", method="POST", data=body, content_type="application/json"
    ):
        through_flask = app.full_dispatch_request()
    assert through_flask.status_code == 200 and through_flask.get_data() == response.data
    refused = app.test_client().get(f"/{verb}")
    allowed = {method.strip() for method in refused.headers["Allow"].split(",")}
    assert refused.status_code == 405 and "POST" in allowed and "GET" not in allowed
