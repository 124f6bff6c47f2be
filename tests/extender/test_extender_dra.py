"""The extender's contract for DRA: pods asking through ResourceClaims or extended resources,
on DRA nodes (static and DynamicMIG), device-plugin nodes and both in one cluster, with
ExtenderArgs exactly as kube-scheduler sends them; the Warning Events on unknown DRA nodes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from extender import ExtenderSettings, create_app
from extender.dra_warnings import EVENT_REASON, DraWarnings
from extender.state import state_from_objects
from harness import dra_slices as gen
from harness.builders import make_node, make_pod
from migslice.kube import discovery
from migslice.kube.discovery import DraDiscovery, dra_resources, follow_discovery
from migslice.kube.transport import ApiError
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import reasons
from tests.dra_objects import (
    fixture,
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)
from tests.hostile import json_values

DYNAMIC = "gpu-node-a100-8"  # DynamicMIG, 8 A100s
STATIC = "gpu-node-h100-s"  # static MIG 3g@4 2g@0 1g@2 1g@3
UNKNOWN = "gpu-node-a100-0"  # slices of a device type migslice does not know
PLUGIN = "gpu-plugin"  # NVIDIA's device plugin, all-1g.10gb
MIXED = "gpu-node-h100-0"  # device-plugin allocatable and DRA slices
ALL = [DYNAMIC, STATIC, UNKNOWN, PLUGIN, MIXED]


def cluster(
    claims: list[dict[str, Any]] | None = None, pods: list[dict[str, Any]] | None = None
) -> ClusterObjects:
    unknown = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    unknown[1]["spec"]["devices"][3]["attributes"]["type"] = {"string": "vfio"}
    slices = (
        fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
        + fixture_slices("h100-80gb-staticmig-3g2g1g1g-resourceslices.json")
        + unknown
        + fixture_slices("h100-80gb-dynamicmig-1gpu-resourceslices.json")
    )
    nodes = [
        make_dra_node(DYNAMIC, resource_version="21"),
        make_dra_node(STATIC),
        make_dra_node(UNKNOWN),
        make_node(PLUGIN, gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        make_node(
            MIXED,
            product="NVIDIA-H100-80GB-HBM3",
            gpu_count=1,
            mig={"3g.40gb": 2},
            config="all-3g.40gb",
        ),
    ]
    base = [
        make_claim("dyn-0", allocated=[(DYNAMIC, "gpu-0-mig-3g40gb-9-4")], reserved_for=["a"]),
        make_claim("st-0", allocated=[(STATIC, "gpu-0-mig-1g10gb-19-2")], reserved_for=["b"]),
    ]
    running = [
        make_claim_pod("a", {"gpu": "dyn-0"}, node_name=DYNAMIC, phase="Running"),
        make_claim_pod("b", {"gpu": "st-0"}, node_name=STATIC, phase="Running"),
    ]
    return ClusterObjects(
        nodes=tuple(nodes),
        pods=tuple(running + (pods or [])),
        resource_slices=tuple(slices),
        resource_claims=tuple(base + (claims or [])),
        device_classes=tuple(migslice_classes()),
    )


def client_of(objects: ClusterObjects) -> FlaskClient:
    state = state_from_objects(objects, ExtenderSettings())
    return create_app(ExtenderSettings(), state).test_client()


def names_args(pod: dict[str, Any], names: list[str]) -> str:
    return json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}, separators=(",", ":"))


def post(client: FlaskClient, verb: str, body: str) -> Any:
    response = client.post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200
    return json.loads(response.data)


def claim_pod(
    profile: str | None, *, class_name: str = "mig.nvidia.com", name: str = "train-0"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A pending pod whose template claim the resourceclaim controller has made."""
    claim = make_claim(f"{name}-gpu-x7k2p", profile=profile, device_class=class_name, owner=name)
    pod = make_claim_pod(name, {}, templates={"gpu": f"{name}-gpu-x7k2p"})
    return pod, claim


def _pool_metrics(objects: ClusterObjects) -> dict[str, str]:
    """The extender's ``migslice_`` samples over ``objects``, by name and labels."""
    text = client_of(objects).get("/metrics").get_data(as_text=True)
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("migslice_"))


def test_a_claim_pod_is_kept_off_device_plugin_nodes_and_sent_to_the_best_dra_fit() -> None:
    pod, claim = claim_pod("1g.10gb")
    client = client_of(cluster([claim]))
    best = post(client, "filter-best-fit", names_args(pod, ALL))
    # DYNAMIC's first fit is 1g@0 of GPU 0 beside its held 3g@4 (6 + 4*5/8 = 8); STATIC's is
    # 1g@3 beside its held 1g@2 (6 + 4*2/8 = 7).
    assert best["NodeNames"] == [DYNAMIC] and best["Error"] == ""
    scores = {s["Host"]: s["Score"] for s in post(client, "prioritize", names_args(pod, ALL))}
    assert scores == {DYNAMIC: 8, STATIC: 7, UNKNOWN: 0, PLUGIN: 0, MIXED: 0}
    answer = post(client, "filter", names_args(pod, [UNKNOWN, PLUGIN, MIXED]))
    assert answer["NodeNames"] == [] and answer["FailedNodes"] == {}
    assert answer["FailedAndUnresolvableNodes"] == {
        UNKNOWN: reasons.DRA_UNKNOWN,
        PLUGIN: reasons.DEVICE_PLUGIN_NODE,
        MIXED: reasons.DEVICE_PLUGIN_NODE,
    }


@pytest.mark.parametrize(
    ("profile", "class_name"),
    [("3g.40gb", "mig.nvidia.com"), (None, "migslice-mig-3g.40gb")],
    ids=["nvidia-class-with-selector", "migslice-class"],
)
def test_a_claim_through_either_class_is_read_as_its_profile(
    profile: str | None, class_name: str
) -> None:
    pod, claim = claim_pod(profile, class_name=class_name)
    client = client_of(cluster([claim]))
    answer = post(client, "filter", names_args(pod, [DYNAMIC, STATIC, PLUGIN]))
    assert answer["NodeNames"] == [DYNAMIC, STATIC]
    # DYNAMIC's first fit, 3g@0 beside the held 3g@4, fills GPU 0 (10); STATIC's 3g@4, 8.
    answer = post(client, "filter-best-fit", names_args(pod, [DYNAMIC, STATIC]))
    assert answer["NodeNames"] == [DYNAMIC]


def test_a_full_static_node_fails_a_claim_and_an_absent_profile_is_unresolvable() -> None:
    taken = make_claim("st-1", allocated=[(STATIC, "gpu-0-mig-1g10gb-19-3")])
    pod, claim = claim_pod("1g.10gb")
    client = client_of(cluster([claim, taken]))
    answer = post(client, "filter", names_args(pod, [STATIC]))
    assert answer["FailedNodes"] == {STATIC: "all 1g.10gb MIG instances in use"}
    pod, claim = claim_pod("7g.80gb", name="big")
    answer = post(client_of(cluster([claim])), "filter", names_args(pod, [STATIC]))
    assert answer["FailedAndUnresolvableNodes"] == {
        STATIC: "no 7g.80gb instance in node's MIG layout"
    }


def test_an_extended_resource_pod_is_served_by_the_device_plugin_or_by_dra() -> None:
    client = client_of(cluster())
    pod = make_pod("infer-0", profile="1g.10gb")
    answer = post(client, "filter", names_args(pod, ALL))
    assert answer["NodeNames"] == [DYNAMIC, STATIC, PLUGIN]
    best = post(client, "filter-best-fit", names_args(pod, ALL))
    assert best["NodeNames"] == [DYNAMIC]  # a GPU in use (8) beats STATIC's (7), the idle one


def test_extended_resources_held_through_kube_schedulers_claim_are_counted_once() -> None:
    special = make_claim(
        "infer-0-extended-resources-p2x9s",
        requests=[
            {
                "name": "container-0-request-0",
                "exactly": {
                    "deviceClassName": "migslice-mig-1g.10gb",
                    "allocationMode": "ExactCount",
                    "count": 1,
                },
            }
        ],
        allocated=[(STATIC, "gpu-0-mig-1g10gb-19-3")],
        extended_resource=True,
        owner="infer-0",
    )
    served = make_claim_pod(
        "infer-0",
        {},
        node_name=STATIC,
        phase="Running",
        mig={"1g.10gb": 1},
        extended_claim="infer-0-extended-resources-p2x9s",
    )
    client = client_of(cluster([special], [served]))
    answer = post(client, "filter", names_args(make_pod("next", profile="2g.20gb"), [STATIC]))
    assert answer["NodeNames"] == [STATIC]  # the 2g.20gb is still free
    answer = post(client, "filter", names_args(make_pod("more", profile="1g.10gb"), [STATIC]))
    assert answer["FailedNodes"] == {STATIC: "all 1g.10gb MIG instances in use"}


class BlindCache:
    name = "resourceclaims"
    synced = True

    def blind_s(self) -> float | None:
        return 30.0

    def staleness_s(self) -> float | None:
        return 30.0


def test_a_pod_without_gpu_demand_passes_every_node_at_once_even_blind() -> None:
    state = state_from_objects(cluster(), ExtenderSettings())
    state.caches = (BlindCache(),)
    client = create_app(ExtenderSettings(), state).test_client()
    pod = make_pod("web", requests={"cpu": "1"})
    answer = post(client, "filter-best-fit", names_args(pod, [*ALL, "unknown-node", DYNAMIC]))
    assert answer["NodeNames"] == [*ALL, "unknown-node"]
    assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}
    scores = post(client, "prioritize", names_args(pod, ALL))
    assert scores == [{"Host": n, "Score": 0} for n in ALL]
    gpu_pod = make_pod("train", profile="1g.10gb")
    answer = post(client, "filter", names_args(gpu_pod, [DYNAMIC]))
    assert answer["Error"] == (
        "node state unknown: migslice cache resourceclaims lost the API server 30s ago (limit 5s)"
    )


@pytest.mark.parametrize("verb", ["filter", "filter-best-fit"])
def test_a_claim_not_seen_yet_is_an_error_kube_scheduler_retries_after_its_backoff(
    verb: str,
) -> None:
    """Every node failed used to leave the pod to kube-scheduler's next cluster event: the
    claim's own came before the pod's attempt, so in a quiet cluster the pod waited for the
    unschedulable pool's flush (60 s in e2e, 5 min by default) although the claim reached the
    cache milliseconds later. An extender's error is retried after the backoff."""
    client = client_of(cluster())
    for pod in (
        make_claim_pod("p", {}, templates={"gpu": "p-gpu-later"}),  # template's not made yet
        make_claim_pod("q", {"gpu": "made-but-not-cached"}),
    ):
        answer = post(client, verb, names_args(pod, [DYNAMIC, PLUGIN]))
        assert answer["Error"] == (
            f"{reasons.CLAIM_NOT_SEEN}; kube-scheduler retries after its backoff"
        )
        assert answer["NodeNames"] is None
        assert answer["FailedNodes"] == {} and answer["FailedAndUnresolvableNodes"] == {}
    metrics = client.get("/metrics").get_data(as_text=True)
    assert f'migslice_extender_requests_total{{outcome="waiting",verb="{verb}"}} 2.0' in metrics


def test_full_node_objects_of_a_dra_node_are_judged_with_its_cached_pool() -> None:
    pod, claim = claim_pod("7g.80gb")
    client = client_of(cluster([claim]))
    node = make_dra_node(DYNAMIC, resource_version="99")
    body = json.dumps({"Pod": pod, "Nodes": {"metadata": {}, "items": [node]}, "NodeNames": None})
    answer = post(client, "filter", body)
    assert answer["Nodes"]["items"] == [node] and answer["NodeNames"] is None


def test_metrics_count_dra_nodes_by_the_state_of_their_pool() -> None:
    partial = fixture_slices("h100-80gb-dynamicmig-8gpu-resourceslices.json")[:2]
    objects = cluster()
    objects = ClusterObjects(
        nodes=(*objects.nodes, make_dra_node("gpu-node-h100-8")),
        pods=objects.pods,
        resource_slices=objects.resource_slices + tuple(partial),
        resource_claims=objects.resource_claims,
        device_classes=objects.device_classes,
    )
    text = client_of(objects).get("/metrics").get_data(as_text=True)
    assert 'migslice_extender_dra_nodes{state="ready"} 2.0' in text
    assert 'migslice_extender_dra_nodes{state="unknown"} 1.0' in text
    assert 'migslice_extender_dra_nodes{state="incomplete"} 1.0' in text


def test_the_pool_fragmentation_of_dynamic_mig_gpus_counts_the_placements_left_free() -> None:
    """One A100 whose claim holds 1g.10gb@0, one whose claim holds 4g.40gb@0: each can still
    carve a 3g.40gb@4, so 8 of the 11 free memory slices are in the largest regions (the
    metric read 1.0: a DynamicMIG GPU has no free instances to count)."""
    node = "dra-0"
    held = [("gpu-0-mig-1g10gb-19-0", "1g.10gb"), ("gpu-1-mig-4g40gb-5-0", "4g.40gb")]
    objects = ClusterObjects(
        nodes=(make_dra_node(node),),
        resource_slices=tuple(gen.node_slices(node, f"uid-{node}", [gen.a100(0), gen.a100(1)])),
        resource_claims=tuple(
            make_claim(f"c{i}", profile=profile, allocated=[(node, device)])
            for i, (device, profile) in enumerate(held)
        ),
        device_classes=tuple(migslice_classes()),
    )
    metrics = _pool_metrics(objects)
    assert float(metrics['migslice_extender_pool_fragmentation{pool="A100-80GB"}']) == (
        pytest.approx(1 - 8 / 11)
    )
    assert float(metrics['migslice_extender_pool_free_slices{pool="A100-80GB"}']) == 11


def test_the_pool_metrics_count_a_whole_dynamic_mig_hopper_gpu_a_claim_holds_as_full() -> None:
    """On Hopper NVIDIA's driver publishes a DynamicMIG GPU's ``gpu-<minor>`` too: a claim
    holding ``gpu-0`` leaves that GPU nothing, so of 16 slices 8 are free, in one piece (the
    metrics read 16 free: MIG being on, the whole-GPU hold was not counted)."""
    node = "dra-h100"
    objects = ClusterObjects(
        nodes=(make_dra_node(node),),
        resource_slices=tuple(gen.node_slices(node, f"uid-{node}", [gen.h100(0), gen.h100(1)])),
        resource_claims=(
            make_claim(
                "w", device_class="gpu.nvidia.com", profile=None, allocated=[(node, "gpu-0")]
            ),
        ),
        device_classes=tuple(migslice_classes()),
    )
    metrics = _pool_metrics(objects)
    assert float(metrics['migslice_extender_pool_free_slices{pool="H100-80GB"}']) == 8
    assert float(metrics['migslice_extender_pool_slices{pool="H100-80GB"}']) == 16
    assert float(metrics['migslice_extender_pool_fragmentation{pool="H100-80GB"}']) == 0


def test_the_example_claim_pod_of_the_fixtures_reads_as_one_1g() -> None:
    """The template pod, its allocated claim and its class exactly as the API stores them."""
    pod = fixture("pod-with-resourceclaim-template.yaml")
    claim = fixture("resourceclaim-allocated-dynamicmig-a100.yaml")
    objects = ClusterObjects(
        nodes=(make_dra_node("gpu-node-a100-0"),),
        pods=(pod,),
        resource_slices=tuple(fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")),
        resource_claims=(claim,),
        device_classes=tuple(migslice_classes()),
    )
    state = state_from_objects(objects, ExtenderSettings())
    node = state.index.get("gpu-node-a100-0")
    assert node is not None and node.free["nvidia.com/mig-1g.10gb"] == 6
    assert node.free["nvidia.com/mig-7g.80gb"] == 0 and node.free["nvidia.com/mig-4g.40gb"] == 0


# -- Warning Events on unknown DRA nodes -------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record_warning(self, node: str, reason: str, message: str) -> None:
        self.events.append((node, reason, message))


def test_an_unknown_dra_node_gets_one_warning_event_per_change_of_reason() -> None:
    state = state_from_objects(cluster(), ExtenderSettings())
    problems = state.dra_problems()
    assert set(problems) == {UNKNOWN}
    recorder = Recorder()
    warnings = DraWarnings(recorder)
    assert warnings.review(problems) == [UNKNOWN]
    assert warnings.review(problems) == []  # the same reason: no new Event
    ((node, reason, message),) = recorder.events
    assert (node, reason) == (UNKNOWN, EVENT_REASON)
    assert "has device type 'vfio'" in message and "\n" not in message
    changed = {UNKNOWN: ("unknown", "another reason")}
    assert warnings.review(changed) == [UNKNOWN]
    assert warnings.review({}) == [] and warnings.review(changed) == [UNKNOWN]  # back again
    assert warnings.review({"n": ("incomplete", "2 of 9 slices")}) == []


def test_only_the_lease_holder_records_warnings() -> None:
    recorder = Recorder()
    leader = [False]
    warnings = DraWarnings(recorder, may_record=lambda: leader[0])
    problems = {UNKNOWN: ("unknown", "why")}
    assert warnings.review(problems) == []
    leader[0] = True
    assert warnings.review(problems) == [UNKNOWN] and len(recorder.events) == 1


class Discovery:
    """Answers discovery with each of ``answers`` in turn (an exception is raised)."""

    def __init__(self, *answers: Exception | None) -> None:
        self.answers = list(answers)
        self.asked = 0

    def get_json(self, path: str, query: Any) -> dict[str, Any]:
        self.asked += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer is not None:
            raise answer
        resources = [{"name": "resourceslices"}, {"name": "devicetaintrules"}]
        return {
            "kind": "APIResourceList",
            "groupVersion": "resource.k8s.io/v1",
            "resources": resources,
        }


@pytest.mark.parametrize(
    ("answers", "served", "asked"),
    [
        ((None,), frozenset({"resourceslices", "devicetaintrules"}), 1),
        ((ApiError(404, "not found"),), None, 1),
        ((ApiError(403, "forbidden"),), frozenset(), 1),
        # unreachable, then 503, then 429, then it answers: asked until it does
        (
            (
                ApiError(0, "connection refused"),
                ApiError(503, "unavailable"),
                ApiError(429, "slow"),
                None,
            ),
            frozenset({"resourceslices", "devicetaintrules"}),
            4,
        ),
        ((ApiError(0, "connection refused"), ApiError(404, "not found")), None, 2),
    ],
    ids=["served", "not-served", "refused", "away-then-served", "away-then-not-served"],
)
def test_dra_discovery_is_asked_again_while_the_api_server_is_away(
    answers: tuple[Exception | None, ...], served: frozenset[str] | None, asked: int
) -> None:
    """A service started while the API server was away ran for good without its DRA caches
    (webhook and extender 503 on a cluster without DRA) or without the steer (its
    DeviceTaintRule cache never started), until restarted by hand."""
    api = Discovery(*answers)
    slept: list[float] = []
    found = dra_resources(api, sleep=slept.append, wait_s=60.0)  # type: ignore[arg-type]
    assert found.known and found.resources == served
    assert api.asked == asked and len(slept) == asked - 1


def test_an_api_server_away_past_the_start_wait_is_followed_in_the_background() -> None:
    """The worker must start (gunicorn's boot timeout, the liveness probe): past the wait it
    starts without DeviceTaintRules and asks on; an answer that calls for other caches
    restarts the worker."""
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    away = Discovery(ApiError(0, "connection refused"))
    found = dra_resources(away, sleep=sleep, clock=lambda: now[0], wait_s=20.0)  # type: ignore[arg-type]
    assert found == discovery.UNKNOWN and now[0] <= 20.0
    back = Discovery(ApiError(503, "unavailable"), None)
    changed: list[DraDiscovery] = []
    thread = follow_discovery(
        back,  # type: ignore[arg-type]
        found,
        changed.append,
        wanted=lambda d: d.resources is not None and "devicetaintrules" in d.resources,
        sleep=lambda _: None,
    )
    assert thread is not None
    thread.join(5.0)
    assert [d.resources for d in changed] == [frozenset({"resourceslices", "devicetaintrules"})]
    assert follow_discovery(back, DraDiscovery(None), changed.append) is None  # type: ignore[arg-type]


# -- hostile pods ------------------------------------------------------------------------------

quantities = st.sampled_from(["1", "2", "0", "-1", "1.5", "500m", "1e3", "abc", ""]) | json_values
resources = st.dictionaries(
    st.sampled_from(
        [
            "nvidia.com/mig-1g.10gb",
            "nvidia.com/mig-3g.40gb",
            "nvidia.com/mig-9g.1gb",
            "nvidia.com/gpu",
            "cpu",
        ]
    ),
    quantities,
    max_size=3,
)


@st.composite
def scheduled_pods(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        pod = make_claim_pod(
            "train-0",
            draw(st.dictionaries(st.sampled_from(["gpu", "x"]), st.sampled_from(["mine", "gone"]))),
            templates=draw(
                st.dictionaries(st.sampled_from(["t", "u"]), st.sampled_from(["mine", None]))
            ),
        )
    else:
        pod = make_pod("train-0", requests=draw(resources))
    spec, metadata = pod["spec"], pod["metadata"]
    container = spec["containers"][0]
    parts = [pod, spec, metadata, container, container["resources"]]
    for _ in range(draw(st.integers(0, 2))):
        where = draw(st.sampled_from(parts))
        key = draw(
            st.sampled_from(
                [*where, "status", "resourceClaims", "annotations", "limits", "claims", "uid"]
            )
        )
        where[key] = draw(json_values)
    if draw(st.booleans()):
        pod["status"] = {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": draw(st.sampled_from(["False", "True", 7])),
                    "reason": "Unschedulable",
                    "lastTransitionTime": draw(
                        st.sampled_from(["2026-12-06T08:00:00Z", "yesterday", None])
                    ),
                }
            ],
            "resourceClaimStatuses": draw(json_values),
        }
    return draw(st.sampled_from([pod, pod, draw(json_values)]))


FUZZ_CLIENT: list[FlaskClient] = []


@settings(max_examples=200, deadline=None)
@given(
    pod=scheduled_pods(),
    names=st.lists(st.sampled_from([*ALL, "ghost"]), max_size=6, unique=True),
    verb=st.sampled_from(["filter", "filter-best-fit", "prioritize"]),
)
def test_fuzzed_pods_get_an_answer_for_every_node_and_never_a_500(
    pod: Any, names: list[str], verb: str
) -> None:
    if not FUZZ_CLIENT:  # one cluster for every example: answering must not change it
        mine = make_claim("mine", profile="1g.10gb", owner="train-0")
        FUZZ_CLIENT.append(client_of(cluster([mine])))
    answer = post(FUZZ_CLIENT[0], verb, names_args(pod, names))
    if verb == "prioritize":
        if isinstance(answer, dict):  # a pod it cannot read: the error, no scores
            assert answer["Error"]
            return
        assert [s["Host"] for s in answer] == names
        assert all(0 <= s["Score"] <= 10 for s in answer)
        return
    assert list(answer) == [
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    ]
    if answer["Error"]:
        return
    passed = answer["NodeNames"] or []
    failed = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert set(passed) <= set(names)
    if verb == "filter-best-fit":
        assert len(passed) <= len(names)
    # kube-scheduler reads the failures only when no node is left: then each has its reason
    if not passed:
        assert sorted(failed) == sorted(set(names))
        assert all(isinstance(reason, str) and reason for reason in failed.values())


def test_the_pool_metrics_count_an_instance_a_claim_holds_on_a_dual_api_node_as_held() -> None:
    """Two A100s laid out all-1g.10gb that the device plugin serves and NVIDIA's DRA driver
    publishes too (minor 0 is NVML's GPU 1: the minors run against the PCI bus order). A
    device-plugin pod holds one 1g.10gb, claim bc holds gpu-0-mig-1g10gb-19-2: one instance
    held on each GPU, 14 of 16 slices free, one slice the largest region of each, as
    ``migslice status`` draws it. The metrics read the claim's GPU idle (15 free, 1 - 9/15)."""
    from harness.builders import make_mig_config_map

    layout = [("1g.10gb", start) for start in range(7)]
    node = "both-0"
    gpus = [gen.a100(0, gen.DGX_A100_BUS_IDS[1]), gen.a100(1, gen.DGX_A100_BUS_IDS[0])]
    objects = ClusterObjects(
        nodes=(
            make_node(
                node,
                mig={"1g.10gb": 14},
                gpu_count=2,
                config="all-1g.10gb",
                config_state="success",
            ),
        ),
        pods=(
            make_claim_pod("bp", {"gpu": "bc"}, node_name=node, phase="Running"),
            make_pod("dp", profile="1g.10gb", node_name=node),
        ),
        config_maps=(
            make_mig_config_map(
                "version: v1\nmig-configs:\n  all-1g.10gb:\n    - devices: all\n"
                '      mig-enabled: true\n      mig-devices: {"1g.10gb": 7}\n'
            ),
        ),
        resource_slices=tuple(
            gen.node_slices(node, f"uid-{node}", gpus, dynamic=False, layouts=[layout, layout])
        ),
        resource_claims=(
            make_claim(
                "bc",
                allocated=[(node, gen.mig_device_name(0, "1g.10gb", 19, 2))],
                reserved_for=["bp"],
            ),
        ),
        device_classes=tuple(migslice_classes()),
    )
    metrics = _pool_metrics(objects)
    assert float(metrics['migslice_extender_pool_free_slices{pool="NVIDIA-A100-SXM4-80GB"}']) == 14
    assert float(metrics['migslice_extender_pool_slices{pool="NVIDIA-A100-SXM4-80GB"}']) == 16
    assert float(metrics['migslice_extender_pool_fragmentation{pool="NVIDIA-A100-SXM4-80GB"}']) == (
        pytest.approx(1 - 2 / 14)
    )
