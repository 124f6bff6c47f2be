"""The one reader of a pod's GPU requests: the webhook charges what the extender places."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod, make_policy
from migslice import names
from migslice.admission import usage_of
from migslice.inventory import ClusterIndex, NodeState
from migslice.objects import gpu_requests, node_facts_from_raw, pod_facts_from_raw, read_pod_gpu
from migslice.objects.nodes import node_name_of, node_product_of, slim_node
from migslice.objects.pods import (
    annotations_of,
    bound_node_of,
    is_terminal,
    nominated_node_of,
    pod_key,
    slim_pod,
)
from webhook.state import ClusterState

RESOURCES = ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
VALUES: list[object] = ["0", "1", "2", "3", 1, 2, "1k", "2e0", "abc", "half", "500m", "1.5", "-1"]
VALUES += [None, True, ""]

SECTION = st.dictionaries(st.sampled_from(RESOURCES), st.sampled_from(VALUES), max_size=2)
RESOURCES_FIELD = st.fixed_dictionaries({}, optional={"limits": SECTION, "requests": SECTION})
CONTAINER = st.fixed_dictionaries(
    {"name": st.sampled_from(["a", "b", "c"]), "resources": RESOURCES_FIELD},
    optional={"restartPolicy": st.just("Always")},
)


def bound_pod(app: list[dict[str, Any]], init: list[dict[str, Any]]) -> dict[str, Any]:
    pod = make_pod("p", node_name="gpu-a", phase="Running")
    pod["spec"]["containers"] = [dict(c, image="x") for c in app] or [{"name": "main"}]
    for container in pod["spec"]["containers"]:
        container.pop("restartPolicy", None)
    if init:
        pod["spec"]["initContainers"] = [dict(c, image="x") for c in init]
    return pod


def webhook_charge(pod: dict[str, Any]) -> dict[str, int]:
    """Instances per profile the webhook's state charges the tenant for the pod it sees."""
    state = ClusterState()
    state.upsert_policy(make_policy())
    state.upsert_node(make_node("gpu-a"))
    state.upsert_pod(pod)
    return dict(state.tenant_usage("team-a").profiles)


def extender_placement(pod: dict[str, Any]) -> dict[str, int]:
    """Instances per profile the extender's index counts as held on the pod's node."""
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state)
    index.replace_nodes([node_facts_from_raw(make_node("gpu-a", mig={"1g.10gb": 7}))])
    facts = pod_facts_from_raw(pod)
    index.replace_pods([facts] if facts is not None else [])
    state = index.get("gpu-a")
    assert state is not None
    return {
        resource.removeprefix("nvidia.com/mig-"): count
        for resource, count in state.allocated
        if count
    }


@settings(max_examples=300, deadline=None)
@given(st.lists(CONTAINER, max_size=3), st.lists(CONTAINER, max_size=3))
def test_the_webhook_charges_every_pod_as_the_extender_places_it(
    app: list[dict[str, Any]], init: list[dict[str, Any]]
) -> None:
    pod = bound_pod(app, init)
    assert webhook_charge(pod) == extender_placement(pod)
    assert usage_of(dict(gpu_requests(pod)), ("A100-80GB",)).profiles == tuple(
        sorted(extender_placement(pod).items())
    )


def test_limits_and_requests_of_one_container_count_once_beside_a_malformed_quantity() -> None:
    """A container that sets both limits and requests was counted twice by the placement
    cache when another quantity of the pod did not parse, while the webhook charged it once."""
    pod = bound_pod(
        [
            {
                "name": "a",
                "resources": {
                    "limits": {"nvidia.com/mig-1g.10gb": "1"},
                    "requests": {"nvidia.com/mig-1g.10gb": "1"},
                },
            },
            {"name": "b", "resources": {"limits": {"nvidia.com/mig-2g.20gb": "half"}}},
        ],
        [],
    )
    assert extender_placement(pod) == {"1g.10gb": 1} == webhook_charge(pod)


def test_the_reader_names_each_problem_and_holds_nothing_for_it() -> None:
    pod = bound_pod(
        [
            {"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "500m"}}},
            {"name": "b", "resources": {"requests": {"nvidia.com/mig-2g.20gb": "1"}}},
            {"name": "c", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "abc"}}},
        ],
        [],
    )
    gpu = read_pod_gpu(pod)
    assert gpu.problems == (
        'container "a" sets nvidia.com/mig-1g.10gb: 500m; GPU resources are whole units '
        "(resources.limits)",
        'container "b" requests nvidia.com/mig-2g.20gb: 1 but sets no limit for it; Kubernetes '
        "needs a limit, equal to the request, for a GPU resource (resources.limits)",
    )
    assert gpu.malformed == (
        "spec.containers[2].resources.limits[nvidia.com/mig-3g.40gb]: 'abc' is not a Kubernetes "
        "quantity; expected a number with an optional suffix such as 20Gi, 500M, 1 or 250m",
    )
    assert gpu.requests == (("nvidia.com/mig-2g.20gb", 1),)


def test_a_count_no_node_could_hold_is_a_problem_not_a_holding() -> None:
    """Measured before: a bound pod asking nvidia.com/mig-1g.10gb: 1e30 hung status and plan
    (a loop per unit) and crashed status on the demo cluster (OverflowError); 1e8 took 15 s
    and 1.6 GB."""
    for count in ("1e30", "1e8", "1025"):
        pod = bound_pod(
            [{"name": "a", "resources": {"limits": {"nvidia.com/mig-1g.10gb": count}}}], []
        )
        gpu = read_pod_gpu(pod)
        assert gpu.problems == (
            f'container "a" sets nvidia.com/mig-1g.10gb: {count}; no node holds more than '
            "1024 units of one GPU resource (resources.limits)",
        )
        assert gpu.requests == ()
        # the extender, why and the webhook say it (1e30: past any count, said so first)
        assert "nvidia.com/mig-1g.10gb" in gpu.count_error and count in gpu.count_error
    pod = bound_pod([{"name": "a", "resources": {"limits": {"nvidia.com/gpu.shared": "1Ki"}}}], [])
    assert read_pod_gpu(pod).requests == (("nvidia.com/gpu.shared", 1024),)


MALFORMED: list[object] = [None, "x", 3, [], {"name": "odd", "resources": "lots"}]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(CONTAINER, max_size=3),
    st.lists(CONTAINER, max_size=3),
    st.sampled_from(["Running", "Pending", "Succeeded", "Failed", None]),
    st.sampled_from([*MALFORMED, "keep"]),
)
def test_the_slim_pod_the_webhook_caches_reads_as_the_whole_pod(
    app: list[dict[str, Any]], init: list[dict[str, Any]], phase: str | None, odd: object
) -> None:
    pod = bound_pod(app, init)
    pod["metadata"]["annotations"] = {
        names.RESERVATION: "uid-1",
        "kubectl.kubernetes.io/last-applied-configuration": "{" * 500,
    }
    pod["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "train", "uid": "u"}]
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    for container in pod["spec"]["containers"]:
        container["env"] = [{"name": "A", "value": "1"}]
    if odd != "keep":
        pod["spec"]["containers"].append(odd)
    if phase is None:
        del pod["status"]["phase"]
    else:
        pod["status"]["phase"] = phase
    slim = slim_pod(pod)
    assert read_pod_gpu(slim) == read_pod_gpu(pod)
    assert webhook_charge(slim) == webhook_charge(pod)
    for reader in (pod_key, is_terminal, bound_node_of, nominated_node_of):
        assert reader(slim) == reader(pod)
    assert annotations_of(slim) == {names.RESERVATION: "uid-1"}  # migslice's own, no others
    assert "managedFields" not in slim["metadata"] and "volumes" not in slim["spec"]


def test_the_slim_node_the_webhook_caches_keeps_its_name_and_product() -> None:
    node = make_node("gpu-a", extra_labels={"topology.kubernetes.io/zone": "z1"})
    node["status"]["images"] = [{"names": ["image"], "sizeBytes": 1}]
    slim = slim_node(node)
    assert node_name_of(slim) == "gpu-a"
    assert node_product_of(slim) == node_product_of(node) is not None
    assert slim == {"metadata": {"name": "gpu-a", "labels": slim["metadata"]["labels"]}}
    assert "topology.kubernetes.io/zone" not in slim["metadata"]["labels"]
