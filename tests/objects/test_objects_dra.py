"""Reading NVIDIA's ResourceSlices, ResourceClaims and DeviceClasses exactly as the driver and
kube-apiserver write them (tests/fixtures/dra), and refusing every shape not known."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import dra_slices as gen
from harness.dra_slices import DRIVER
from migslice.mig import CATALOG
from migslice.mig.catalog import product_label_of
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.dra_pool import DraMode, PoolState, read_pool
from migslice.objects.pods import pod_claims, pod_facts_from_raw
from migslice.objects.resource_claims import GpuAsks, claim_facts_from_raw, gpu_asks
from migslice.objects.resource_slices import DeviceKind, slice_facts_from_raw
from tests.dra_objects import (
    SLICE_FIXTURES,
    fixture,
    fixture_slices,
    make_claim,
    make_claim_pod,
    migslice_classes,
)
from tests.hostile import json_values

# -- the generator is the driver's formulas: it writes every fixture again ----------------------

GENERATED: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "a100-80gb-dynamicmig-1gpu-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-a100-0", "6b1c0a4e-77d2-4f0e-9a51-2c3d4e5f6a01", [gen.a100(0)]
    ),
    "a100-80gb-dynamicmig-8gpu-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-a100-8", "6b1c0a4e-77d2-4f0e-9a51-2c3d4e5f6a08", [gen.a100(i) for i in range(8)]
    ),
    "a100-80gb-dynamicmig-2gpu-combined-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-a100-c",
        "6b1c0a4e-77d2-4f0e-9a51-2c3d4e5f6a0c",
        [gen.a100(0), gen.a100(1)],
        split=False,
    ),
    "h100-80gb-dynamicmig-1gpu-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-h100-0", "9d2e1f3a-5b6c-4d7e-8f90-a1b2c3d4e5f6", [gen.h100(0)]
    ),
    "h100-80gb-dynamicmig-8gpu-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-h100-8", "9d2e1f3a-5b6c-4d7e-8f90-a1b2c3d4e5f8", [gen.h100(i) for i in range(8)]
    ),
    "h100-80gb-staticmig-3g2g1g1g-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-h100-s",
        "2a3b4c5d-6e7f-4a8b-9c0d-1e2f3a4b5c6d",
        [gen.h100(0)],
        dynamic=False,
        layouts=[[("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)]],
    ),
    "a100-80gb-staticmig-4g1g1g1g-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-a100-s",
        "6b1c0a4e-77d2-4f0e-9a51-2c3d4e5f6a05",
        [gen.a100(0)],
        dynamic=False,
        layouts=[[("1g.10gb", 6), ("4g.40gb", 0), ("1g.10gb", 5), ("1g.10gb", 4)]],
    ),
    "h100-80gb-mig-disabled-static-resourceslices.json": lambda: gen.node_slices(
        "gpu-node-h100-f",
        "7e8f9a0b-1c2d-4e3f-8a4b-5c6d7e8f9a0b",
        [gen.mig_off(gen.h100(0))],
        dynamic=False,
    ),
}


def test_every_slice_fixture_has_its_generator() -> None:
    assert sorted(GENERATED) == sorted(SLICE_FIXTURES)


@pytest.mark.parametrize("name", SLICE_FIXTURES)
def test_the_generator_writes_each_fixture_again(name: str) -> None:
    assert gen.slice_list(GENERATED[name]()) == fixture(name)


@pytest.mark.parametrize("gpus", range(1, 9))
@pytest.mark.parametrize("maker", [gen.a100, gen.h100], ids=["a100", "h100"])
def test_generated_nodes_of_one_to_eight_gpus_read_ready(gpus: int, maker: Any) -> None:
    raw = gen.node_slices("n", "uid-n", [maker(i) for i in range(gpus)])
    pool = _pool(raw)
    assert pool.state is PoolState.READY, pool.reason
    assert [gpu.minor for gpu in pool.gpus] == list(range(gpus))
    static = gen.node_slices(
        "n",
        "uid-n",
        [maker(i) for i in range(gpus)],
        dynamic=False,
        layouts=[[("7g.80gb", 0)]] * gpus,
    )
    assert _pool(static).mode is DraMode.STATIC and len(_pool(static).gpus) == gpus


def test_for_create_leaves_what_the_api_server_fills_in() -> None:
    created = gen.for_create(GENERATED["a100-80gb-dynamicmig-1gpu-resourceslices.json"]()[0])
    assert set(created["metadata"]) == {"generateName", "ownerReferences"}


# -- the fixtures as migslice reads them -------------------------------------------------------


def _pool(raw_slices: list[dict[str, Any]]) -> Any:
    facts = [slice_facts_from_raw(raw) for raw in raw_slices]
    kept = [f for f in facts if f is not None]
    node = kept[0].node_name if kept else "n"
    return read_pool(node, kept)


@pytest.mark.parametrize(
    ("name", "mode", "model", "gpus", "devices"),
    [
        ("a100-80gb-dynamicmig-1gpu-resourceslices.json", DraMode.DYNAMIC, "A100-80GB", 1, 25),
        ("a100-80gb-dynamicmig-8gpu-resourceslices.json", DraMode.DYNAMIC, "A100-80GB", 8, 25),
        (
            "a100-80gb-dynamicmig-2gpu-combined-resourceslices.json",
            DraMode.DYNAMIC,
            "A100-80GB",
            2,
            25,
        ),
        ("h100-80gb-dynamicmig-1gpu-resourceslices.json", DraMode.DYNAMIC, "H100-80GB", 1, 26),
        ("h100-80gb-dynamicmig-8gpu-resourceslices.json", DraMode.DYNAMIC, "H100-80GB", 8, 26),
        ("h100-80gb-staticmig-3g2g1g1g-resourceslices.json", DraMode.STATIC, "H100-80GB", 1, 4),
        ("a100-80gb-staticmig-4g1g1g1g-resourceslices.json", DraMode.STATIC, "A100-80GB", 1, 4),
        ("h100-80gb-mig-disabled-static-resourceslices.json", DraMode.STATIC, "H100-80GB", 1, 1),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith(".json") else None,
)
def test_each_fixture_reads_as_a_ready_pool_of_its_gpus(
    name: str, mode: DraMode, model: str, gpus: int, devices: int
) -> None:
    pool = _pool(fixture_slices(name))
    assert (pool.state, pool.reason) == (PoolState.READY, "")
    assert pool.mode is mode
    assert pool.model is not None and pool.model.key == model
    assert len(pool.gpus) == gpus and all(len(g.devices) == devices for g in pool.gpus)


def test_gpus_come_in_pci_bus_id_order_and_devices_in_slice_order() -> None:
    pool = _pool(fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json"))
    assert [g.pci_bus_id for g in pool.gpus] == list(gen.DGX_A100_BUS_IDS)
    first = pool.gpus[0]
    names = [d.name(first.minor) for d in first.devices]
    assert names == sorted(names) and names[0] == "gpu-0-mig-1g10gb-19-0"
    static = _pool(fixture_slices("a100-80gb-staticmig-4g1g1g1g-resourceslices.json")).gpus[0]
    assert [d.name(0) for d in static.devices] == [
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-4g40gb-5-0",
        "gpu-0-mig-1g10gb-19-5",
        "gpu-0-mig-1g10gb-19-4",
    ]


def test_a_dynamic_h100_publishes_its_whole_gpu_first_an_a100_does_not() -> None:
    h100 = _pool(fixture_slices("h100-80gb-dynamicmig-1gpu-resourceslices.json")).gpus[0]
    a100 = _pool(fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")).gpus[0]
    assert h100.devices[0].kind is DeviceKind.GPU and h100.devices[0].slices == 0xFF
    assert all(d.kind is DeviceKind.MIG for d in a100.devices)


def test_static_instances_keep_their_placements() -> None:
    gpu = _pool(fixture_slices("h100-80gb-staticmig-3g2g1g1g-resourceslices.json")).gpus[0]
    assert [(d.profile, d.start, gpu.size_of(d)) for d in gpu.devices] == [
        ("3g.40gb", 4, 4),
        ("2g.20gb", 0, 2),
        ("1g.10gb", 2, 1),
        ("1g.10gb", 3, 1),
    ]
    assert gpu.uuid == "GPU-8c3e5b9a-2f71-4d06-b8e3-1a9c4f620000"


def test_slices_of_another_driver_are_not_kept() -> None:
    raw = fixture_slices("h100-80gb-mig-disabled-static-resourceslices.json")[0]
    raw["spec"]["driver"] = "nic.example.com"
    assert slice_facts_from_raw(raw) is None


def test_nvidia_product_names_map_to_the_catalog_by_their_gfd_label() -> None:
    assert product_label_of("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert product_label_of("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert product_label_of("NVIDIA-TITAN-X-(Pascal)") == "NVIDIA-TITAN-X-Pascal"
    model = CATALOG.by_product(product_label_of("NVIDIA H100 80GB HBM3"))
    assert model is not None and model.key == "H100-80GB"


# -- incomplete and unknown pools ------------------------------------------------------------------


def test_a_pool_missing_a_slice_is_incomplete() -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
    pool = _pool(raw[:5])
    assert pool.state is PoolState.INCOMPLETE
    assert pool.reason == "5 of 9 slices of generation 1 listed"


def test_a_pool_with_an_older_generation_still_listed_is_incomplete() -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    newer = copy.deepcopy(raw)
    for item in newer:
        item["metadata"]["name"] += "-new"
        item["spec"]["pool"]["generation"] = 2
    pool = _pool(raw[:1] + newer)
    assert pool.state is PoolState.INCOMPLETE
    assert "generation 2 published while an older one is still listed" in pool.reason
    assert _pool(newer).state is PoolState.READY


def _device(raw: list[dict[str, Any]], slice_index: int = 1, index: int = 0) -> dict[str, Any]:
    return raw[slice_index]["spec"]["devices"][index]


def _rename(d: dict[str, Any]) -> None:
    d["name"] = "gpu-0-mig1g10gb-19-0"


def _type(d: dict[str, Any]) -> None:
    d["attributes"]["type"] = {"string": "vfio"}


def _no_product(d: dict[str, Any]) -> None:
    del d["attributes"]["productName"]


def _no_parent(d: dict[str, Any]) -> None:
    del d["attributes"]["parentUUID"]


def _other_product(d: dict[str, Any]) -> None:
    d["attributes"]["productName"] = {"string": "NVIDIA B999"}


def _profile_mismatch(d: dict[str, Any]) -> None:
    d["attributes"]["profile"] = {"string": "1g.12gb"}


def _shifted_counter(d: dict[str, Any]) -> None:
    counters = d["consumesCounters"][0]["counters"]
    counters["memory-slice-1"] = counters.pop("memory-slice-0")


def _unknown_counter(d: dict[str, Any]) -> None:
    d["consumesCounters"][0]["counters"]["tensor-cores"] = {"value": "1"}


def _bad_quantity(d: dict[str, Any]) -> None:
    d["consumesCounters"][0]["counters"]["memory"] = {"value": "lots"}


def _two_sets(d: dict[str, Any]) -> None:
    d["consumesCounters"].append(copy.deepcopy(d["consumesCounters"][0]))


def _shared(d: dict[str, Any]) -> None:
    d["allowMultipleAllocations"] = True


def _typed_twice(d: dict[str, Any]) -> None:
    d["attributes"]["type"] = {"string": "mig", "int": 1}


def _illegal_start(d: dict[str, Any]) -> None:
    d["name"] = "gpu-0-mig-1g10gb-19-7"
    counters = d["consumesCounters"][0]["counters"]
    counters["memory-slice-7"] = counters.pop("memory-slice-0")


def _wrong_id(d: dict[str, Any]) -> None:
    d["name"] = "gpu-0-mig-1g10gb-21-0"


def _unknown_profile(d: dict[str, Any]) -> None:
    d["name"] = "gpu-0-mig-1g5gb-19-0"
    d["attributes"]["profile"] = {"string": "1g.5gb"}


UNKNOWN_DEVICES = [
    (_rename, "is not gpu-<minor>-mig-<profile>-<profile id>-<start>"),
    (_type, "has device type 'vfio'; migslice knows 'mig' and 'gpu'"),
    (_no_product, "has no productName attribute"),
    (_no_parent, "has no parentUUID attribute"),
    (_other_product, "differs from GPU 0's other devices in product, UUID, PCI bus id"),
    (_profile_mismatch, "does not name its profile attribute '1g.12gb'"),
    (_shifted_counter, "consumes memory slices 1; its placement covers 0"),
    (_unknown_counter, "consumes counter tensor-cores its counter set lacks"),
    (_bad_quantity, "memory='lots' is not a quantity"),
    (_two_sets, "consumes 2 counter sets; the driver writes one"),
    (_shared, "allows multiple allocations"),
    (_typed_twice, "attribute type is not one typed value"),
    (_illegal_start, "1g.10gb cannot start at memory slice 7 on A100-80GB"),
    (_wrong_id, "GI profile id 21; the catalog gives 1g.10gb on A100-80GB id 19"),
    (_unknown_profile, "A100-80GB has no MIG profile 1g.5gb"),
]


@pytest.mark.parametrize(
    ("change", "reason"), UNKNOWN_DEVICES, ids=lambda v: getattr(v, "__name__", "")
)
def test_a_device_of_a_shape_not_known_makes_the_node_unknown_with_its_reason(
    change: Callable[[dict[str, Any]], None], reason: str
) -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    change(_device(raw))
    pool = _pool(raw)
    assert pool.state is PoolState.UNKNOWN
    assert reason in pool.reason and "\n" not in pool.reason


def _static_capacity_off(raw: list[dict[str, Any]]) -> None:
    capacity = raw[0]["spec"]["devices"][0]["capacity"]
    del capacity["memorySlice4"]


def _static_whole_and_mig(raw: list[dict[str, Any]]) -> None:
    whole = fixture_slices("h100-80gb-mig-disabled-static-resourceslices.json")[0]
    raw[0]["spec"]["devices"].append(whole["spec"]["devices"][0])


def _not_node_local(raw: list[dict[str, Any]]) -> None:
    del raw[0]["spec"]["nodeName"]
    raw[0]["spec"]["allNodes"] = True


def _pool_of_another_name(raw: list[dict[str, Any]]) -> None:
    raw[0]["spec"]["pool"]["name"] = "elsewhere"


def _interleaved(raw: list[dict[str, Any]]) -> None:
    other = copy.deepcopy(raw[0]["spec"]["devices"][1])
    other["name"] = other["name"].replace("gpu-0", "gpu-1", 1)
    raw[0]["spec"]["devices"].insert(1, other)


def _static_overlap(raw: list[dict[str, Any]]) -> None:
    """A 1g.10gb instance at memory slice 0, inside the 2g.20gb instance at 0: two instances
    NVML cannot both have, which the allocator would give to two claims."""
    devices = raw[0]["spec"]["devices"]
    inside = copy.deepcopy(next(d for d in devices if d["name"] == "gpu-0-mig-1g10gb-19-2"))
    inside["name"] = "gpu-0-mig-1g10gb-19-0"
    del inside["capacity"]["memorySlice2"]
    inside["capacity"]["memorySlice0"] = {"value": "1"}
    devices.append(inside)


UNKNOWN_SLICES = [
    (_static_overlap, "gpu-0-mig-1g10gb-19-0 overlaps gpu-0-mig-2g20gb-14-0 (memory slice 0)"),
    (_static_capacity_off, "has memorySlice capacities 5,6,7; its placement covers 4,5,6,7"),
    (_static_whole_and_mig, "published whole and as MIG devices, without counters"),
    (_not_node_local, "not node-local"),
    (_pool_of_another_name, "pool 'elsewhere' is not named after its node"),
    (_interleaved, "devices of GPU 0 are not listed together"),
]


@pytest.mark.parametrize(
    ("change", "reason"), UNKNOWN_SLICES, ids=lambda v: getattr(v, "__name__", "")
)
def test_a_static_slice_of_a_shape_not_known_makes_the_node_unknown(
    change: Callable[[list[dict[str, Any]]], None], reason: str
) -> None:
    raw = fixture_slices("h100-80gb-staticmig-3g2g1g1g-resourceslices.json")
    change(raw)
    pool = _pool(raw)
    assert pool.state is PoolState.UNKNOWN and reason in pool.reason


def test_a_gpu_product_the_catalog_lacks_makes_the_node_unknown() -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    for device in raw[1]["spec"]["devices"]:
        _other_product(device)
    reason = _pool(raw).reason
    assert reason == "GPU 0: product 'NVIDIA B999' (NVIDIA-B999) not in migslice catalog"


def test_a_counter_set_of_another_size_or_missing_makes_the_node_unknown() -> None:
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    del raw[0]["spec"]["sharedCounters"][0]["counters"]["memory-slice-7"]
    assert "counts memory slices 0,1,2,3,4,5,6; A100-80GB has 8" in _pool(raw).reason
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    raw[0]["spec"]["sharedCounters"][0]["name"] = "gpu-9-counter-set"
    assert "consumes counter set gpu-0-counter-set, not published" in _pool(raw).reason


def test_two_gpus_consuming_one_counter_set_make_the_node_unknown() -> None:
    """The allocator counts a counter set once, whichever GPU's devices consume it: read as
    each GPU's own, GPU 1 seemed free while GPU 0's instances used up the set they share."""
    raw = fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")
    for device in raw[2]["spec"]["devices"]:
        device["consumesCounters"][0]["counterSet"] = "gpu-0-counter-set"
    pool = _pool(raw)
    assert pool.state is PoolState.UNKNOWN
    assert pool.reason == "GPUs 0 and 1 consume one counter set, gpu-0-counter-set"


@pytest.mark.parametrize(
    "garbage", [None, 7, "x", [], {"name": 3}, {"name": "gpu-0", "attributes": 1}]
)
def test_a_device_that_is_no_device_never_raises(garbage: Any) -> None:
    raw = fixture_slices("h100-80gb-mig-disabled-static-resourceslices.json")[0]
    raw["spec"]["devices"] = [garbage]
    facts = slice_facts_from_raw(raw)
    assert facts is not None and facts.problem
    assert read_pool("n", [facts]).state is PoolState.UNKNOWN


@pytest.mark.parametrize(
    "spec", [{"driver": "gpu.nvidia.com", "devices": "x"}, {"driver": "gpu.nvidia.com", "pool": 1}]
)
def test_a_slice_that_is_no_slice_never_raises(spec: Any) -> None:
    facts = slice_facts_from_raw({"metadata": {"name": "s"}, "spec": spec})
    assert facts is not None and facts.problem
    assert slice_facts_from_raw({"spec": None}) is None


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, the value itself first."""
    found = [here]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*here, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += _paths(inner, (*here, index))
    return found


@st.composite
def hostile_slices(draw: st.DrawFn) -> list[Any]:
    """A fixture's slices with one to three places replaced by any JSON value or removed."""
    raw: list[Any] = fixture_slices(draw(st.sampled_from(SLICE_FIXTURES)))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(raw)[1:]))
        *parents, last = path
        holder: Any = raw
        for step in parents:
            holder = holder[step]
        if isinstance(holder, dict) and draw(st.booleans()):
            del holder[last]
        else:
            holder[last] = draw(json_values)
    return raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=hostile_slices())
def test_slices_damaged_anywhere_never_raise_and_a_pool_not_ready_says_why(raw: list[Any]) -> None:
    facts = [slice_facts_from_raw(s) for s in raw if isinstance(s, dict)]
    kept = [f for f in facts if f is not None]
    for node in {f.node_name for f in kept} | {"n"}:
        pool = read_pool(node, [f for f in kept if f.node_name == node])
        assert (pool.state is PoolState.READY) == (pool.reason == ""), pool


# -- claims, classes and the pods that use them ----------------------------------------------------


def _classes() -> dict[str, Any]:
    found = (device_class_facts_from_raw(raw) for raw in migslice_classes())
    return {c.name: c for c in found if c is not None}


def test_the_allocated_claim_fixture_reads_its_device_and_its_pod() -> None:
    claim = claim_facts_from_raw(fixture("resourceclaim-allocated-dynamicmig-a100.yaml"))
    assert claim is not None and claim.allocated
    assert claim.key == "team-a/trainer-0-mig-k7w2q"
    assert claim.devices_in("gpu-node-a100-0") == ("gpu-0-mig-1g10gb-19-0",)
    assert claim.reserved_for == ("team-a/trainer-0",) and claim.owner == "team-a/trainer-0"
    asks = gpu_asks(claim, _classes())
    assert [(a.kind, a.profile, a.count) for a in asks.asks] == [(DeviceKind.MIG, "1g.10gb", 1)]


@st.composite
def hostile_claims(draw: st.DrawFn) -> Any:
    raw: Any = fixture(
        draw(
            st.sampled_from(
                [
                    "resourceclaim-allocated-dynamicmig-a100.yaml",
                    "resourceclaim-extended-resource-special.yaml",
                ]
            )
        )
    )
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(raw)[1:]))
        *parents, last = path
        holder: Any = raw
        for step in parents:
            holder = holder[step]
        holder[last] = draw(json_values)
    return raw


@settings(max_examples=300, deadline=None)
@given(raw=hostile_claims())
def test_claims_damaged_anywhere_never_raise(raw: Any) -> None:
    claim = claim_facts_from_raw(raw)
    if claim is not None:
        asks = gpu_asks(claim, _classes())
        assert all(a.count >= 0 for a in asks.asks)
        claim.devices_in("gpu-node-a100-0")


def test_the_extended_resource_claim_is_marked_and_read_through_its_class() -> None:
    claim = claim_facts_from_raw(fixture("resourceclaim-extended-resource-special.yaml"))
    assert claim is not None and claim.extended_resource
    example = device_class_facts_from_raw(fixture("deviceclass-extres-mig-1g.10gb-example.yaml"))
    assert example is not None and example.extended_resource == "nvidia.com/mig-1g.10gb"
    asks = gpu_asks(claim, {example.name: example})
    assert [(a.profile, a.count) for a in asks.asks] == [("1g.10gb", 1)]


def test_migslice_classes_select_one_profile_and_serve_its_resource() -> None:
    facts = device_class_facts_from_raw(fixture("deviceclass-migslice-mig-1g.10gb.me.yaml"))
    assert facts is not None
    assert facts.selection.profile == "1g.10gb+me" and facts.selection.device_type == "mig"
    assert facts.extended_resource == "nvidia.com/mig-1g.10gb.me"
    assert facts.name == "migslice-mig-1g.10gb.me"


@pytest.mark.parametrize(
    ("request_", "unread"),
    [
        (
            {"name": "r", "firstAvailable": [{"name": "a", "deviceClassName": "mig.nvidia.com"}]},
            "firstAvailable",
        ),
        (
            {
                "name": "r",
                "exactly": {"deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
            },
            "allocationMode All",
        ),
        (
            {"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com", "adminAccess": True}},
            "adminAccess",
        ),
        ({"name": "r", "exactly": {"deviceClassName": "nope"}}, "DeviceClass 'nope' not known"),
        (
            {"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com"}},
            "device type mig without one MIG profile",
        ),
        (
            {
                "name": "r",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "selectors": [
                        {
                            "cel": {
                                "expression": f"device.attributes['{DRIVER}'].profile != '7g.80gb'"
                            }
                        }
                    ],
                },
            },
            "profile != '7g.80gb'",
        ),
    ],
    ids=["first-available", "all", "admin", "class", "no-profile", "negation"],
)
def test_requests_migslice_cannot_read_are_named(request_: dict[str, Any], unread: str) -> None:
    claim = claim_facts_from_raw(make_claim("c", requests=[request_]))
    assert claim is not None
    asks = gpu_asks(claim, _classes())
    assert asks.asks == () and len(asks.unread) == 1 and unread in asks.unread[0]


def test_requests_of_other_drivers_ask_nothing_of_gpus() -> None:
    nic = {
        "metadata": {"name": "nic.example.com"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
    }
    found = device_class_facts_from_raw(nic)
    assert found is not None
    claim = claim_facts_from_raw(make_claim("c", device_class="nic.example.com", profile=None))
    assert claim is not None and gpu_asks(claim, {found.name: found}) == GpuAsks()


def test_a_whole_gpu_request_through_nvidias_gpu_class() -> None:
    claim = claim_facts_from_raw(
        make_claim("c", device_class="gpu.nvidia.com", profile=None, count=2)
    )
    assert claim is not None
    asks = gpu_asks(claim, _classes())
    assert [(a.kind, a.profile, a.count) for a in asks.asks] == [(DeviceKind.GPU, None, 2)]


def test_a_pods_claims_come_from_its_spec_and_status() -> None:
    pod = fixture("pod-with-resourceclaim-template.yaml")
    assert pod_claims(pod).keys == ("team-a/trainer-0-mig-k7w2q",)
    extended = fixture("pod-extended-resource-status.yaml")
    assert pod_claims(extended).keys == ("team-a/infer-0-extended-resources-p2x9s",)
    waiting = make_claim_pod("p", {}, templates={"mig": None})
    assert pod_claims(waiting).waiting == ("mig",) and pod_claims(waiting).keys == ()
    named = make_claim_pod("p", {"gpu": "shared-claim"})
    assert pod_claims(named).keys == ("team-a/shared-claim",)


def test_a_bound_pod_with_only_claims_is_kept_with_them() -> None:
    facts = pod_facts_from_raw(fixture("pod-with-resourceclaim-template.yaml"))
    assert facts is not None and facts.requests == ()
    assert facts.claims == ("team-a/trainer-0-mig-k7w2q",)
    assert facts.holding_node == "gpu-node-a100-0"


def test_dynamicmig_slices_whose_counters_were_dropped_name_the_feature_gate() -> None:
    """kube-apiserver drops sharedCounters and consumesCounters while the feature gate
    DRAPartitionableDevices is off (alpha before 1.36; it can be turned off in 1.37): a
    DynamicMIG node's slices are then every placement with nothing to say they overlap.
    Unknown, and said why (measured at --emulated-version=1.35), not 'has memorySlice
    capacities none; its placement covers 0'."""
    raw = fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    del raw[0]["spec"]["sharedCounters"]
    for piece in raw[1:]:
        for device in piece["spec"]["devices"]:
            device.pop("consumesCounters", None)
    pool = _pool(raw)
    assert pool.state is PoolState.UNKNOWN
    assert "neither memorySlice capacities nor counters" in pool.reason
    assert "feature gate DRAPartitionableDevices" in pool.reason
