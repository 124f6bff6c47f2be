"""DRA nodes in the inventory: NVIDIA's slices and the claims allocated from them become the
same NodeState values (GPUs, layouts, held instances, free counts) as device-plugin nodes, and
the allocator's first fit is predicted exactly as the real allocator takes it."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node
from migslice.inventory import ClusterIndex, LayoutSource, NodeState
from migslice.inventory.first_fit import PoolUse, Wanted, first_fit, first_solution
from migslice.mig import Placed, is_legal
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.dra_pool import DraMode, PoolState, read_pool
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.objects.resource_slices import DeviceKind, slice_facts_from_raw
from tests.dra_objects import (
    FIXTURES,
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)


def _state(
    slices: str | list[dict[str, Any]],
    *,
    node: dict[str, Any] | None = None,
    claims: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
) -> NodeState:
    raw = fixture_slices(slices) if isinstance(slices, str) else slices
    name = raw[0]["spec"]["nodeName"]
    objects = ClusterObjects(
        nodes=(node or make_dra_node(name),),
        pods=tuple(pods),
        resource_slices=tuple(raw),
        resource_claims=tuple(claims),
        device_classes=tuple(migslice_classes()),
    )
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state)
    index.load_objects(objects)
    state = index.get(name)
    assert state is not None
    return state


def _allocated(name: str, node: str, *devices: str, **kw: Any) -> dict[str, Any]:
    return make_claim(name, allocated=[(node, device) for device in devices], **kw)


A100 = "gpu-node-a100-8"
A100_ONE = "gpu-node-a100-0"
H100_ONE = "gpu-node-h100-0"
STATIC = "gpu-node-h100-s"


@pytest.mark.parametrize(
    ("name", "source", "offered"),
    [
        (
            "a100-80gb-dynamicmig-8gpu-resourceslices.json",
            LayoutSource.DRA_DYNAMIC,
            {
                "1g.10gb": 56,
                "1g.10gb.me": 8,
                "1g.20gb": 32,
                "2g.20gb": 24,
                "3g.40gb": 16,
                "4g.40gb": 8,
                "7g.80gb": 8,
            },
        ),
        (
            "h100-80gb-dynamicmig-1gpu-resourceslices.json",
            LayoutSource.DRA_DYNAMIC,
            {
                "1g.10gb": 7,
                "1g.10gb.me": 1,
                "1g.20gb": 4,
                "2g.20gb": 3,
                "3g.40gb": 2,
                "4g.40gb": 1,
                "7g.80gb": 1,
                "gpu": 1,
            },
        ),
        (
            "h100-80gb-staticmig-3g2g1g1g-resourceslices.json",
            LayoutSource.DRA_STATIC,
            {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
        ),
        ("h100-80gb-mig-disabled-static-resourceslices.json", LayoutSource.DRA_STATIC, {"gpu": 1}),
    ],
    ids=["a100-dynamic-8", "h100-dynamic", "h100-static", "h100-mig-off"],
)
def test_a_dra_node_offers_what_its_slices_publish(
    name: str, source: LayoutSource, offered: dict[str, int]
) -> None:
    state = _state(name)
    expected = tuple(
        sorted(
            ("nvidia.com/gpu" if p == "gpu" else f"nvidia.com/mig-{p}", n)
            for p, n in offered.items()
        )
    )
    assert state.source is source and state.notes == ()
    assert state.allocatable == expected and state.free == expected and state.allocated == ()
    assert state.dra is not None and state.dra.is_ready
    assert all(gpu.is_idle for gpu in state.gpus)


def test_static_instances_are_held_by_the_claims_that_name_them() -> None:
    claims = [
        _allocated("c", STATIC, "gpu-0-mig-1g10gb-19-3"),
        _allocated("d", STATIC, "gpu-0-mig-3g40gb-9-4"),
    ]
    state = _state("h100-80gb-staticmig-3g2g1g1g-resourceslices.json", claims=claims)
    (gpu,) = state.gpus
    assert [(p.profile, p.start, h) for p, h in zip(gpu.instances, gpu.held, strict=True)] == [
        ("2g.20gb", 0, False),
        ("1g.10gb", 2, False),
        ("1g.10gb", 3, True),
        ("3g.40gb", 4, True),
    ]
    assert dict(state.free)["nvidia.com/mig-1g.10gb"] == 1
    assert dict(state.free)["nvidia.com/mig-3g.40gb"] == 0


def test_dynamic_gpus_are_their_allocated_partitions_and_free_around_them() -> None:
    claims = [_allocated("c", A100, "gpu-3-mig-3g40gb-9-4")]
    state = _state("a100-80gb-dynamicmig-8gpu-resourceslices.json", claims=claims)
    gpu3 = state.gpus[3]
    assert gpu3.index == 3 and gpu3.instances == (Placed(4, "3g.40gb", 4),) and gpu3.held == (True,)
    free = dict(state.free)
    assert free["nvidia.com/mig-4g.40gb"] == 8  # 4g@0 still fits beside 3g@4
    assert free["nvidia.com/mig-7g.80gb"] == 7
    assert free["nvidia.com/mig-1g.10gb"] == 7 * 7 + 4
    assert state.allocated == (("nvidia.com/mig-3g.40gb", 1),)


def test_an_h100s_whole_gpu_is_free_only_while_no_partition_is_held() -> None:
    state = _state("h100-80gb-dynamicmig-1gpu-resourceslices.json")
    assert dict(state.free)["nvidia.com/gpu"] == 1
    taken = _state(
        "h100-80gb-dynamicmig-1gpu-resourceslices.json",
        claims=[_allocated("c", H100_ONE, "gpu-0-mig-1g10gb-19-6")],
    )
    assert dict(taken.free)["nvidia.com/gpu"] == 0
    whole = _state(
        "h100-80gb-dynamicmig-1gpu-resourceslices.json",
        claims=[_allocated("w", H100_ONE, "gpu-0", device_class="gpu.nvidia.com", profile=None)],
    )
    assert whole.gpus[0].whole_held and not any(n for r, n in whole.free if r != "nvidia.com/gpu")
    assert whole.allocated == (("nvidia.com/gpu", 1),)


def test_a_bound_pods_claim_not_yet_allocated_is_assumed_where_first_fit_puts_it() -> None:
    claims = [
        _allocated("c0", A100_ONE, "gpu-0-mig-1g10gb-19-0"),
        make_claim("pending", profile="2g.20gb"),
    ]
    pod = make_claim_pod("p", {"gpu": "pending"}, node_name=A100_ONE, phase="Pending")
    state = _state("a100-80gb-dynamicmig-1gpu-resourceslices.json", claims=claims, pods=[pod])
    assert state.dra is not None
    assert state.dra.assumed == frozenset({"gpu-0-mig-2g20gb-14-2"})
    assert state.gpus[0].instances == (Placed(0, "1g.10gb", 1), Placed(2, "2g.20gb", 2))


def test_a_claim_shared_by_two_pods_on_the_node_is_assumed_once() -> None:
    """Two pods bound (or nominated) to the node name one claim that no allocation shows yet:
    the allocator gives that claim its devices once, whatever the number of its consumers."""
    claims = [make_claim("shared", profile="2g.20gb")]
    pods = [
        make_claim_pod(name, {"gpu": "shared"}, node_name=A100_ONE, phase="Pending")
        for name in ("a", "b")
    ]
    state = _state("a100-80gb-dynamicmig-1gpu-resourceslices.json", claims=claims, pods=pods)
    assert state.dra is not None
    assert state.dra.assumed == frozenset({"gpu-0-mig-2g20gb-14-0"})
    assert state.allocated == (("nvidia.com/mig-2g.20gb", 1),)


def test_extended_resources_on_a_dra_node_are_held_once() -> None:
    claim = _allocated(
        "infer-0-extended-resources-x",
        A100_ONE,
        "gpu-0-mig-1g10gb-19-4",
        extended_resource=True,
        profile=None,
        device_class="migslice-mig-1g.10gb",
    )
    served = make_claim_pod(
        "infer-0",
        {},
        node_name=A100_ONE,
        mig={"1g.10gb": 1},
        extended_claim="infer-0-extended-resources-x",
        phase="Running",
    )
    assumed = make_claim_pod("infer-1", {}, node_name=A100_ONE, mig={"1g.10gb": 2}, phase="Pending")
    state = _state(
        "a100-80gb-dynamicmig-1gpu-resourceslices.json", claims=[claim], pods=[served, assumed]
    )
    assert state.dra is not None
    assert state.dra.held == {
        "gpu-0-mig-1g10gb-19-4",
        "gpu-0-mig-1g10gb-19-0",
        "gpu-0-mig-1g10gb-19-1",
    }
    assert state.allocated == (("nvidia.com/mig-1g.10gb", 3),)


def test_a_claim_not_seen_is_a_note_not_a_guess() -> None:
    pod = make_claim_pod("p", {"gpu": "missing"}, node_name=A100_ONE)
    state = _state("a100-80gb-dynamicmig-1gpu-resourceslices.json", pods=[pod])
    assert state.notes == ("pod team-a/p: ResourceClaim team-a/missing not seen yet",)
    assert state.allocated == ()


def test_device_plugin_allocatable_wins_over_the_nodes_slices() -> None:
    node = make_node(A100_ONE, gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb")
    state = _state("a100-80gb-dynamicmig-1gpu-resourceslices.json", node=node)
    assert state.dra is None and state.source is LayoutSource.MIG_PARTED
    assert state.allocatable == (("nvidia.com/mig-1g.10gb", 7),)
    assert any("KEP-5004" in note for note in state.notes)


def test_an_incomplete_or_unknown_pool_offers_nothing_and_says_why() -> None:
    incomplete = _state(fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")[:3])
    assert incomplete.dra is not None and incomplete.dra.pool.state is PoolState.INCOMPLETE
    assert incomplete.allocatable == () and incomplete.gpus == ()
    assert incomplete.notes == (
        "DRA pool gpu.nvidia.com incomplete: 3 of 9 slices of generation 1 listed",
    )


# -- the prediction against the real allocator ----------------------------------------------

ALLOCATIONS = json.loads((FIXTURES / "allocator-first-fit.json").read_text())


@pytest.mark.parametrize(
    "case", ALLOCATIONS, ids=lambda c: f"{c['slices'][:-20]}-{len(c['claims'])}"
)
def test_first_fit_takes_every_device_the_real_allocator_took(case: dict[str, Any]) -> None:
    raw = fixture_slices(case["slices"])
    node = raw[0]["spec"]["nodeName"]
    claims: list[dict[str, Any]] = []
    for step, (profile, device) in enumerate(case["claims"]):
        state = _state(raw, claims=claims)
        assert state.dra is not None and state.dra.use is not None
        requests = [
            (Wanted.whole() if p == "gpu" else Wanted.mig(p), 1) for p in profile.split("&")
        ]
        if len(requests) == 1:
            choice = first_fit(state.dra.pool, requests[0][0], state.dra.use)
            found = None if choice is None else choice.name
        else:
            solution = first_solution(state.dra.pool, requests, state.dra.use)
            found = None if solution is None else "&".join(c.name for c in solution)
        assert found == device, f"claim {step}: {profile}"
        if device is not None:
            claims.append(_allocated(f"c{step}", node, *device.split("&")))


def test_twenty_small_then_a_4g_and_a_7g_on_eight_a100s() -> None:
    """The sequence the real allocator was seen to take (GPU 0 and 1 starts 0-6, GPU 2 0-5)."""
    pool = _state("a100-80gb-dynamicmig-8gpu-resourceslices.json").dra
    assert pool is not None and pool.use is not None
    use = pool.use.copy()
    taken = []
    for profile in ["1g.10gb"] * 20 + ["4g.40gb", "7g.80gb"]:
        choice = first_fit(pool.pool, Wanted.mig(profile), use)
        assert choice is not None
        use.take(choice.gpu, choice.device)
        taken.append(choice.name)
    starts = [f"gpu-{g}-mig-1g10gb-19-{s}" for g in range(3) for s in range(7)][:20]
    assert taken == [*starts, "gpu-3-mig-4g40gb-5-0", "gpu-4-mig-7g80gb-0-0"]


def test_tainted_devices_are_skipped() -> None:
    state = _state("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    assert state.dra is not None and state.dra.use is not None
    choice = first_fit(
        state.dra.pool, Wanted.mig("1g.10gb"), state.dra.use, tainted={"gpu-0-mig-1g10gb-19-0"}
    )
    assert choice is not None and choice.name == "gpu-0-mig-1g10gb-19-1"


# -- free geometry equals a brute-force recomputation from the claims ----------------------

DYNAMIC_FIXTURES = [
    "a100-80gb-dynamicmig-8gpu-resourceslices.json",
    "h100-80gb-dynamicmig-8gpu-resourceslices.json",
    "a100-80gb-dynamicmig-1gpu-resourceslices.json",
    "h100-80gb-dynamicmig-1gpu-resourceslices.json",
]
PROFILES = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


def _brute_force_free(model: Any, held: list[Placed], profile: str) -> tuple[set[int], int]:
    """Every start of ``profile`` the catalog allows beside ``held``, and the most instances of
    it that fit beside ``held`` together (every subset of its starts tried)."""
    wanted = model.profile(profile)
    starts = {
        s
        for s in wanted.placements
        if is_legal(model, [*held, Placed(s, profile, wanted.memory_slices)])
    }
    most = 0
    for size in range(len(wanted.placements), 0, -1):
        for chosen in itertools.combinations(wanted.placements, size):
            added = [Placed(s, profile, wanted.memory_slices) for s in chosen]
            if is_legal(model, [*held, *added]):
                most = size
                break
        if most:
            break
    return starts, most


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(DYNAMIC_FIXTURES),
    steps=st.lists(
        st.tuples(st.sampled_from(PROFILES), st.integers(0, 99)), min_size=1, max_size=40
    ),
)
def test_free_geometry_after_any_first_fit_allocations_equals_a_brute_force_recomputation(
    name: str, steps: list[tuple[str, int]]
) -> None:
    raw = fixture_slices(name)
    facts = [slice_facts_from_raw(item) for item in raw]
    pool = read_pool(raw[0]["spec"]["nodeName"], [f for f in facts if f is not None])
    use = PoolUse(pool)
    taken: list[str] = []
    for profile, release in steps:
        if release < 15 and taken:  # now and then a claim ends
            taken.pop(release % len(taken))
            use = PoolUse(pool)
            for device in taken:
                assert use.hold(device)
            continue
        choice = first_fit(pool, Wanted.mig(profile), use)
        if choice is not None:
            use.take(choice.gpu, choice.device)
            taken.append(choice.name)
    node = pool.node
    claims = [_allocated(f"c{i}", node, device) for i, device in enumerate(taken)]
    state = _state(raw, claims=claims)
    view = state.dra
    assert view is not None and view.use is not None and state.model is not None
    model = state.model
    free_total = {f"nvidia.com/mig-{p.replace('+', '.')}": 0 for p in PROFILES}
    for g, gpu in enumerate(pool.gpus):
        held = list(state.gpus[g].instances)
        assert all(state.gpus[g].held)
        for profile in PROFILES:
            starts, most = _brute_force_free(model, held, profile)
            fits = {
                d.start
                for k, d in enumerate(gpu.devices)
                if d.kind is DeviceKind.MIG and d.profile == profile and view.use.fits(g, k)
            }
            assert fits == starts, (gpu.minor, profile, held)
            free_total[f"nvidia.com/mig-{profile.replace('+', '.')}"] += most
        if any(d.kind is DeviceKind.GPU for d in gpu.devices):  # an H100's whole GPU
            free_total["nvidia.com/gpu"] = free_total.get("nvidia.com/gpu", 0) + (not held)
    assert dict(state.free) == free_total
    assert sum(n for _, n in state.allocated) == len(taken)
    assert state.dra is not None and state.dra.pool.mode is DraMode.DYNAMIC


# -- the index, one event at a time ---------------------------------------------------------------


def _free(index: ClusterIndex[NodeState], node: str, resource: str) -> int:
    state = index.get(node)
    assert state is not None
    return dict(state.free).get(resource, 0)


def test_claim_slice_and_class_events_touch_exactly_the_nodes_they_change() -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state)
    other = make_node("gpu-plugin", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb")
    pod = make_claim_pod("p", {"gpu": "pending"}, node_name=A100_ONE)
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(A100_ONE), other),
            pods=(pod,),
            resource_slices=tuple(raw[:1]),
            device_classes=tuple(migslice_classes()),
        )
    )
    seven = "nvidia.com/mig-7g.80gb"
    assert index.get(A100_ONE) is not None and _free(index, A100_ONE, seven) == 0  # incomplete
    second = slice_facts_from_raw(raw[1])
    assert second is not None
    assert index.upsert_slice(second) == (A100_ONE,)
    assert _free(index, A100_ONE, seven) == 1
    claim = claim_facts_from_raw(make_claim("pending", profile="2g.20gb"))
    assert claim is not None
    assert index.upsert_claim(claim) == (A100_ONE,)  # the node of the pod that uses it
    assert _free(index, A100_ONE, seven) == 0  # assumed where first fit puts it
    allocated = claim_facts_from_raw(
        _allocated("pending", A100_ONE, "gpu-0-mig-2g20gb-14-4", profile="2g.20gb")
    )
    assert allocated is not None
    assert index.upsert_claim(allocated) == (A100_ONE,)
    state = index.get(A100_ONE)
    assert state is not None and state.dra is not None
    assert state.dra.held == {"gpu-0-mig-2g20gb-14-4"} and state.dra.assumed == frozenset()
    assert index.upsert_claim(allocated) == ()  # unchanged
    assert index.delete_claim("team-a/pending") == (A100_ONE,)
    assert index.upsert_class(_class_facts("migslice-mig-3g.40gb")) == ()  # unchanged
    assert index.delete_class("migslice-mig-3g.40gb") == (A100_ONE,)  # every DRA node
    assert index.delete_slice(raw[1]["metadata"]["name"]) == (A100_ONE,)
    index.replace_pods([])
    assert index.delete_claim("team-a/pending") == ()  # no pod uses it any more


def _class_facts(name: str) -> Any:
    found = next(c for c in migslice_classes() if c["metadata"]["name"] == name)
    return device_class_facts_from_raw(found)
