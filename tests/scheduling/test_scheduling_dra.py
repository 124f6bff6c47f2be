"""Filter and score on DRA nodes: the same verdicts, reasons and fragmentation score, for pods
asking through ResourceClaims or extended resources, on DRA, device-plugin and mixed nodes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import dra_slices as gen
from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex
from migslice.inventory.first_fit import Wanted, first_fit
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.resource_claims import ClaimFacts, claim_facts_from_raw
from migslice.scheduling import (
    Outcome,
    PreparedNode,
    best_fit_nodes,
    check_node,
    demand_of,
    filter_nodes,
    prepare_node,
    reasons,
    score_nodes,
)
from migslice.scheduling.demand import PodDemand, with_claims
from migslice.scheduling.fragmentation import score_units
from tests.dra_objects import (
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
    profile_selector,
)

PROFILES = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def _index(
    nodes: Sequence[dict[str, Any]],
    slices: Sequence[dict[str, Any]],
    claims: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
) -> ClusterIndex[PreparedNode]:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.load_objects(
        ClusterObjects(
            nodes=tuple(nodes),
            pods=tuple(pods),
            resource_slices=tuple(slices),
            resource_claims=tuple(claims),
            device_classes=tuple(migslice_classes()),
        )
    )
    return index


def _allocated(name: str, node: str, *devices: str) -> dict[str, Any]:
    return make_claim(name, allocated=[(node, d) for d in devices])


def _claim_demand(index: ClusterIndex[PreparedNode], pod: dict[str, Any]) -> PodDemand:
    return with_claims(demand_of(pod), pod, index.claim, index.classes)


def _facts(raw: dict[str, Any]) -> ClaimFacts:
    facts = claim_facts_from_raw(raw)
    assert facts is not None
    return facts


A100 = "gpu-node-a100-8"
SLICES_8 = "a100-80gb-dynamicmig-8gpu-resourceslices.json"


def _claim_pod(index_claims: list[dict[str, Any]], profile: str, name: str = "p") -> dict[str, Any]:
    index_claims.append(make_claim(f"{name}-claim", profile=profile))
    return make_claim_pod(name, {"gpu": f"{name}-claim"})


def test_a_claim_for_a_profile_fits_a_dra_node_with_a_free_placement() -> None:
    slices = fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
    claims = [_allocated("big", A100, *(f"gpu-{g}-mig-7g80gb-0-0" for g in range(7)))]
    medium = _claim_pod(claims, "4g.40gb", "medium")
    large = _claim_pod(claims, "7g.80gb", "large")
    index = _index([make_dra_node(A100)], slices, claims)
    demand = _claim_demand(index, medium)
    assert [(u.resource, u.count, u.claim) for u in demand.units] == [
        ("nvidia.com/mig-4g.40gb", 1, True)
    ]
    assert check_node(demand, index.get(A100)).outcome is Outcome.FITS
    assert check_node(_claim_demand(index, large), index.get(A100)).outcome is Outcome.FITS
    index.upsert_claim(_facts(_allocated("small", A100, "gpu-7-mig-1g10gb-19-6")))
    verdict = check_node(_claim_demand(index, large), index.get(A100))
    assert (verdict.outcome, verdict.reason) == (Outcome.FAILED, "all 7g.80gb MIG instances in use")
    assert check_node(_claim_demand(index, medium), index.get(A100)).outcome is Outcome.FITS


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (
            make_node("dp", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
            reasons.DEVICE_PLUGIN_NODE,
        ),
        (make_dra_node("plain"), reasons.NO_DRA),
    ],
    ids=["device-plugin", "no-gpu"],
)
def test_a_claim_cannot_be_served_where_no_dra_driver_publishes(
    node: dict[str, Any], reason: str
) -> None:
    claims: list[dict[str, Any]] = []
    pod = _claim_pod(claims, "1g.10gb")
    index = _index([node], [], claims)
    name = node["metadata"]["name"]
    verdict = check_node(_claim_demand(index, pod), index.get(name))
    assert (verdict.outcome, verdict.reason) == (Outcome.UNRESOLVABLE, reason)


def test_extended_resources_are_served_by_the_device_plugin_or_by_dra() -> None:
    slices = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    dp = make_node("dp", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb")
    index = _index([dp, make_dra_node("gpu-node-a100-0")], slices)
    demand = demand_of(make_pod("p", profile="1g.10gb"))
    result = filter_nodes(demand, [(n, index.get(n)) for n in ("dp", "gpu-node-a100-0")])
    assert result.fits == ("dp", "gpu-node-a100-0")


def test_an_unknown_pool_is_unresolvable_and_an_incomplete_one_failed() -> None:
    unknown = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    unknown[1]["spec"]["devices"][0]["attributes"]["type"] = {"string": "vfio"}
    partial = fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")[:4]
    index = _index([make_dra_node("gpu-node-a100-0"), make_dra_node(A100)], unknown + partial)
    demand = demand_of(make_pod("p", profile="1g.10gb"))
    result = filter_nodes(demand, [(n, index.get(n)) for n in ("gpu-node-a100-0", A100)])
    assert result.unresolvable == {"gpu-node-a100-0": reasons.DRA_UNKNOWN}
    assert result.failed == {A100: reasons.DRA_INCOMPLETE}
    nothing = demand_of(make_pod("cpu", requests={"cpu": "1"}))
    assert filter_nodes(nothing, [(A100, index.get(A100))]).fits == (A100,)


def test_a_claim_not_seen_yet_fails_every_node_for_now() -> None:
    index = _index(
        [make_dra_node(A100)], fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
    )
    for pod in (
        make_claim_pod("p", {"gpu": "not-yet"}),
        make_claim_pod("q", {}, templates={"gpu": None}),
    ):
        verdict = check_node(_claim_demand(index, pod), index.get(A100))
        assert (verdict.outcome, verdict.reason) == (Outcome.FAILED, reasons.CLAIM_NOT_SEEN)


def test_a_claim_migslice_cannot_read_is_left_to_kube_schedulers_dra_filter() -> None:
    claims = [make_claim("any-mig", profile=None)]
    index = _index(
        [make_dra_node(A100)],
        fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json"),
        claims,
    )
    demand = _claim_demand(index, make_claim_pod("p", {"gpu": "any-mig"}))
    assert demand.units == () and not demand.wait
    allocated = [_allocated("done", A100, "gpu-0-mig-1g10gb-19-0")]
    index = _index(
        [make_dra_node(A100)],
        fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json"),
        allocated,
    )
    assert _claim_demand(index, make_claim_pod("p", {"gpu": "done"})).units == ()


def test_devices_a_claim_has_with_admin_access_are_not_counted_as_held() -> None:
    """kube-scheduler's allocator counts no result with ``adminAccess: true`` as in use
    (``foreachAllocatedDevice``): a monitoring claim's admin access to the only idle GPU's
    device leaves that device to the next claim, so the node must not look full."""
    claims = [_allocated("big", A100, *(f"gpu-{g}-mig-7g80gb-0-0" for g in range(7)))]
    admin = make_claim(
        "monitor",
        namespace="monitoring",
        requests=[
            {
                "name": "all",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "allocationMode": "All",
                    "adminAccess": True,
                },
            }
        ],
        allocated=[(A100, "gpu-7-mig-7g80gb-0-0")],
        reserved_for=["dcgm"],
    )
    for result in admin["status"]["allocation"]["devices"]["results"]:
        result["adminAccess"] = True
    claims.append(admin)
    large = _claim_pod(claims, "7g.80gb", "large")
    index = _index([make_dra_node(A100)], fixture_slices(SLICES_8), claims)
    node = index.get(A100)
    assert node is not None
    assert node.free.get("nvidia.com/mig-7g.80gb") == 1
    assert check_node(_claim_demand(index, large), node).outcome is Outcome.FITS


def test_units_must_fit_together_on_a_dynamic_gpu() -> None:
    slices = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    index = _index([make_dra_node("gpu-node-a100-0")], slices)
    node = index.get("gpu-node-a100-0")
    apart = demand_of(
        make_pod("p", requests={"nvidia.com/mig-4g.40gb": "1", "nvidia.com/mig-7g.80gb": "1"})
    )
    together = demand_of(
        make_pod("q", requests={"nvidia.com/mig-4g.40gb": "1", "nvidia.com/mig-3g.40gb": "1"})
    )
    assert check_node(apart, node).outcome is Outcome.FAILED
    assert check_node(together, node).outcome is Outcome.FITS


def test_the_score_is_that_of_the_gpu_the_allocators_first_fit_lands_on() -> None:
    """GPU 0 holds a 3g.40gb: a 1g.10gb lands there (first fit), an exact fit on a GPU in use;
    a 7g.80gb lands on GPU 1, breaking an idle GPU of a node in use."""
    claims = [_allocated("c", A100, "gpu-0-mig-3g40gb-9-4")]
    index = _index(
        [make_dra_node(A100)],
        fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json"),
        claims,
    )
    node = index.get(A100)
    assert node is not None
    assert node.unit_scores["nvidia.com/mig-1g.10gb"] == 6 + (4 * 5) // 8
    assert node.unit_scores["nvidia.com/mig-7g.80gb"] == 1 + (3 * 8) // 8 + 1
    idle = _index(
        [make_dra_node(A100)], fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
    ).get(A100)
    assert idle is not None and idle.unit_scores["nvidia.com/mig-1g.10gb"] == 1


def test_a_static_node_scores_the_instance_its_published_order_gives_first() -> None:
    slices = fixture_slices("a100-80gb-staticmig-4g1g1g1g-resourceslices.json")
    index = _index([make_dra_node("gpu-node-a100-s")], slices)
    node = index.get("gpu-node-a100-s")
    assert node is not None and node.state.dra is not None and node.state.dra.use is not None
    choice = first_fit(node.state.dra.pool, Wanted.mig("1g.10gb"), node.state.dra.use)
    assert choice is not None and choice.name == "gpu-0-mig-1g10gb-19-6"
    assert node.unit_scores["nvidia.com/mig-1g.10gb"] == 1 + (3 * 1) // 7


def test_the_best_fit_filter_prefers_the_dra_node_whose_gpu_is_in_use() -> None:
    a = gen.node_slices("a", "uid-a", [gen.a100(0)])
    b = gen.node_slices("b", "uid-b", [gen.a100(0)])
    claims = [_allocated("c", "b", "gpu-0-mig-2g20gb-14-0")]
    index = _index([make_dra_node("a"), make_dra_node("b")], a + b, claims)
    demand = demand_of(make_pod("p", profile="1g.10gb"))
    assert best_fit_nodes(demand, [(n, index.get(n)) for n in ("a", "b")]).fits == ("b",)


# -- properties over DRA clusters ----------------------------------------------------------------


@st.composite
def dra_clusters(draw: st.DrawFn) -> tuple[ClusterIndex[PreparedNode], PodDemand, list[str]]:
    nodes: list[dict[str, Any]] = []
    slices: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 4))):
        name = f"n{n}"
        kind = draw(st.sampled_from(("a100", "h100", "static", "dp", "plain")))
        if kind == "dp":
            nodes.append(make_node(name, gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"))
            continue
        nodes.append(make_dra_node(name))
        if kind == "plain":
            continue
        gpus = draw(st.integers(1, 3))
        maker = gen.h100 if kind == "h100" else gen.a100
        layout = [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]
        raw = gen.node_slices(
            name,
            f"uid-{name}",
            [maker(i) for i in range(gpus)],
            dynamic=kind != "static",
            layouts=[layout] * gpus,
        )
        slices += raw
        index = _index([make_dra_node(name)], raw)
        state = index.get(name)
        assert state is not None and state.state.dra is not None and state.state.dra.use is not None
        use = state.state.dra.use.copy()
        for k, profile in enumerate(draw(st.lists(st.sampled_from(PROFILES), max_size=10))):
            choice = first_fit(state.state.dra.pool, Wanted.mig(profile), use)
            if choice is not None:
                use.take(choice.gpu, choice.device)
                claims.append(_allocated(f"{name}-c{k}", name, choice.name))
    index = _index(nodes, slices, claims)
    profile = draw(st.sampled_from(PROFILES))
    if draw(st.booleans()):
        pod_claims: list[dict[str, Any]] = []
        pod = _claim_pod(pod_claims, profile, "candidate")
        for raw in pod_claims:
            index.upsert_claim(_facts(raw))
        demand = _claim_demand(index, pod)
    else:
        count = draw(st.integers(1, 2))
        demand = demand_of(
            make_pod(
                "candidate", requests={f"nvidia.com/mig-{profile.replace('+', '.')}": str(count)}
            )
        )
    names = [n["metadata"]["name"] for n in nodes] + draw(st.lists(st.just("ghost"), max_size=1))
    return index, demand, names


@settings(max_examples=60, deadline=None)
@given(dra_clusters())
def test_on_dra_clusters_filter_partitions_exactly_and_the_fast_path_agrees(
    cluster: tuple[ClusterIndex[PreparedNode], PodDemand, list[str]],
) -> None:
    index, demand, names = cluster
    candidates = [(n, index.get(n)) for n in names]
    result = filter_nodes(demand, candidates)
    parts = set(result.fits), set(result.failed), set(result.unresolvable)
    assert set().union(*parts) == set(names) and sum(map(len, parts)) == len(set(names))
    for name, node in dict(candidates).items():
        verdict = check_node(demand, node)
        assert (name in result.fits) == (verdict.outcome is Outcome.FITS)
    scored = dict(score_nodes(demand, candidates))
    assert all(0 <= s <= 10 for s in scored.values())
    assert all(scored[n] >= 1 for n in result.fits)
    assert all(scored[n] == 0 for n in names if n not in result.fits)
    best = best_fit_nodes(demand, candidates)
    top = max((scored[n] for n in result.fits), default=None)
    tied = [n for n in result.fits if scored[n] == top]
    # among nodes of the top score, the fullest (the most memory slices held) take the pod
    held = {n: node.held_slices for n, node in candidates if node is not None}
    fullest = max((held[n] for n in tied), default=None)
    assert best.fits == tuple(n for n in tied if held[n] == fullest)


@settings(max_examples=40, deadline=None)
@given(dra_clusters())
def test_on_dra_nodes_the_kept_unit_scores_are_the_score_of_one_unit(
    cluster: tuple[ClusterIndex[PreparedNode], PodDemand, list[str]],
) -> None:
    index, _, names = cluster
    for name in names:
        node = index.get(name)
        if node is None or node.state.dra is None:
            continue
        for resource, score in node.unit_scores.items():
            assert score == score_units(node.state, ((resource, 1),))


# NVIDIA's driver taints a device whose health monitor saw a fatal XID with key
# gpu.nvidia.com/xid, effect NoSchedule (kubernetes-sigs/dra-driver-nvidia-gpu @95932046,
# cmd/gpu-kubelet-plugin/device_health.go:36-80), republishing its slice with the taint
# (driver.go:529-540); an admin's DeviceTaintRule taints alike. kube-scheduler's allocator
# skips a tainted device only for a request that does not tolerate the taint
# (k8s.io/dynamic-resource-allocation v0.37.2, structured/internal/incubating/
# allocator_incubating.go:1543-1562, taintPreventsAllocation/taintTolerated with
# resourceclaim/devicetoleration.go:35-56 ToleratesTaint): a claim whose request carries
# `tolerations` gets the tainted device, and the extender must not fail the node for it.
XID_TAINT = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoSchedule"}
STATIC_H100 = "gpu-node-h100-s"


def _xid_tainted_static_h100() -> list[dict[str, Any]]:
    slices = fixture_slices("h100-80gb-staticmig-3g2g1g1g-resourceslices.json")
    for device in slices[0]["spec"]["devices"]:
        device["taints"] = [dict(XID_TAINT, timeAdded="2026-08-10T09:30:00Z")]
    return slices


def _tolerating_claim(name: str, profile: str, toleration: dict[str, Any]) -> dict[str, Any]:
    exactly = {
        "deviceClassName": "mig.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": profile_selector(profile)}}],
        "tolerations": [toleration],
    }
    return make_claim(name, requests=[{"name": "mig", "exactly": exactly}])


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "48"},
        {"operator": "Exists"},
    ],
    ids=["key-exists", "key-equal-value", "everything"],
)
def test_a_claim_that_tolerates_the_drivers_taint_is_not_failed_for_it(
    toleration: dict[str, Any],
) -> None:
    claims = [_tolerating_claim("tolerant", "1g.10gb", toleration)]
    index = _index([make_dra_node(STATIC_H100)], _xid_tainted_static_h100(), claims)
    pod = make_claim_pod("p", {"gpu": "tolerant"})
    verdict = check_node(_claim_demand(index, pod), index.get(STATIC_H100))
    # The real allocator gives this claim gpu-0-mig-1g10gb-19-2: the node fits.
    assert verdict.outcome is Outcome.FITS, verdict.reason


def test_a_claim_that_does_not_tolerate_the_drivers_taint_still_fails_on_it() -> None:
    claims = [
        make_claim("plain", profile="1g.10gb"),
        _tolerating_claim("other", "1g.10gb", {"key": "example.com/other", "operator": "Exists"}),
    ]
    index = _index([make_dra_node(STATIC_H100)], _xid_tainted_static_h100(), claims)
    verdict = check_node(
        _claim_demand(index, make_claim_pod("p", {"gpu": "plain"})), index.get(STATIC_H100)
    )
    assert (verdict.outcome, verdict.reason) == (Outcome.FAILED, reasons.DEVICES_TAINTED)
    # A claim with tolerations is left to kube-scheduler's own DRA filter (which runs before
    # the extender and matches each toleration against each taint).
    other = _claim_demand(index, make_claim_pod("q", {"gpu": "other"}))
    assert other.units == () and not other.wait
