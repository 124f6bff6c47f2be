"""The inventory: raw Nodes and Pods to GPUs, layouts and allocations."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex, GpuState, LayoutSource, NodeState, resolve_node
from migslice.inventory.picking import (
    Occupancy,
    Pick,
    best_free_instance,
    gpu_unit_score,
    held_slices,
)
from migslice.mig import Placed
from migslice.mig.migparted import parse_mig_parted
from migslice.objects import (
    AgentGpu,
    AgentInstance,
    AgentReport,
    LayoutAnnotationError,
    gpu_requests,
    node_facts_from_raw,
    parse_layout_annotation,
    pod_facts_from_raw,
    product_constraint,
    render_layout_annotation,
)
from migslice.quantity import QuantityError, parse_count

BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


@pytest.mark.parametrize(
    ("value", "expected"),
    [(2, 2), ("2", 2), ("1k", 1000), ("2e0", 2), ("1Ki", 1024), ("0", 0), ("+3", 3)],
    ids=["int", "string", "decimal-si", "exponent", "binary-si", "zero", "plus-sign"],
)
def test_whole_counts_parse_in_every_canonical_form(value: object, expected: int) -> None:
    assert parse_count(value, "x") == expected


@pytest.mark.parametrize("value", ["0.5", "500m", "abc", -1, True, None, "1.5", ""], ids=str)
def test_a_quantity_that_is_not_a_whole_count_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(QuantityError, match=r"limits\[nvidia.com/mig-1g.10gb\]"):
        parse_count(value, "limits[nvidia.com/mig-1g.10gb]")


def test_pod_requests_follow_the_kubernetes_rule_for_init_and_sidecar_containers() -> None:
    pod = make_pod("p", profile="1g.10gb", count=1)
    pod["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "3"}}},
        {
            "name": "sidecar",
            "restartPolicy": "Always",
            "resources": {"limits": {"nvidia.com/mig-2g.20gb": "1"}},
        },
    ]
    pod["spec"]["containers"].append(
        {"name": "second", "resources": {"requests": {"nvidia.com/mig-1g.10gb": "1"}}}
    )
    assert gpu_requests(pod) == (("nvidia.com/mig-1g.10gb", 3), ("nvidia.com/mig-2g.20gb", 1))


def test_pods_that_hold_nothing_are_not_kept() -> None:
    assert pod_facts_from_raw(make_pod("pending", profile="1g.10gb")) is None
    done = make_pod("done", profile="1g.10gb", node_name="n1", phase="Succeeded")
    assert pod_facts_from_raw(done) is None
    assert pod_facts_from_raw(make_pod("cpu", node_name="n1", phase="Running")) is None


def test_a_nominated_pod_counts_as_assumed_on_its_node() -> None:
    pod = pod_facts_from_raw(make_pod("p", profile="3g.40gb", nominated_node_name="n7"))
    assert pod is not None
    assert pod.holding_node == "n7"
    assert pod.is_assumed


def test_product_constraint_comes_from_node_selector_and_required_affinity() -> None:
    by_selector = make_pod("a", node_selector={"nvidia.com/gpu.product": "NVIDIA-A30"})
    assert product_constraint(by_selector) == frozenset({"NVIDIA-A30"})
    by_affinity = make_pod("b", affinity_products=["NVIDIA-A30", "NVIDIA-H100-80GB-HBM3"])
    assert product_constraint(by_affinity) == frozenset({"NVIDIA-A30", "NVIDIA-H100-80GB-HBM3"})
    assert product_constraint(make_pod("c")) is None


def test_node_facts_keep_only_gpu_allocatable_and_the_labels_decisions_read() -> None:
    facts = node_facts_from_raw(
        make_node("n1", mig=BALANCED, config="all-balanced", config_state="success")
    )
    assert facts.allocatable == (
        ("nvidia.com/mig-1g.10gb", 2),
        ("nvidia.com/mig-2g.20gb", 1),
        ("nvidia.com/mig-3g.40gb", 1),
    )
    assert (facts.product, facts.gpu_count, facts.mig_strategy) == (
        "NVIDIA-A100-SXM4-80GB",
        8,
        "mixed",
    )
    assert (facts.mig_config, facts.mig_config_state, facts.mig_capable) == (
        "all-balanced",
        "success",
        True,
    )


def test_a_malformed_allocatable_is_reported_not_fatal() -> None:
    raw = make_node("n1", mig={"1g.10gb": 7})
    raw["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "lots"
    facts = node_facts_from_raw(raw)
    assert facts.allocatable == ()
    assert "lots" in facts.problems[0]


def report(busy: bool = False) -> AgentReport:
    return AgentReport(
        product="NVIDIA-A100-SXM4-80GB",
        pci_device_id=0x20B2,
        gpus=(
            AgentGpu(
                0,
                True,
                (
                    AgentInstance("3g.40gb", 4, 4, busy, "MIG-a"),
                    AgentInstance("2g.20gb", 0, 2, False),
                    AgentInstance("1g.10gb", 2, 1, False),
                    AgentInstance("1g.10gb", 3, 1, False),
                ),
                "GPU-0",
            ),
        ),
    )


def test_the_layout_annotation_round_trips() -> None:
    text = render_layout_annotation(report(busy=True))
    assert parse_layout_annotation(text) == report(busy=True)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON"),
        ('{"version": "v2", "product": "x", "gpus": []}', "version is 'v2'"),
        ('{"version": "v1", "product": "x", "gpus": [{"index": "0"}]}', r"gpus\[0\].index"),
        (
            '{"version": "v1", "product": "x", "gpus": [{"index": 0, "migEnabled": true,'
            ' "instances": [{"profile": "1g.10gb", "start": 0}]}]}',
            r"instances\[0\].size",
        ),
        # Before, these crashed status, why and plan (TypeError: 'int' object is not iterable)
        (
            '{"version": "v1", "product": "x", "gpus": [{"index": 0, "migEnabled": true,'
            ' "instances": 5}]}',
            r"gpus\[0\].instances=5; expected list",
        ),
        ('{"version": "v1", "product": "x", "gpus": [], "profiles": true}', "profiles=True"),
        # Before, these were read as they stood: a GPU -1 or 10**30 for the planner to carve
        ('{"version": "v1", "product": "x", "gpus": [{"index": -1}]}', r"index=-1; expected 0"),
        (
            '{"version": "v1", "product": "x", "gpus": [{"index": 1000000000000}]}',
            r"gpus\[0\].index=1000000000000",
        ),
        ('{"version": "v1", "product": "x", "pciDeviceId": "-0x1", "gpus": []}', "32-bit"),
        ('{"version": "v1", "product": "x", "pciDeviceId": "0x1ffffffff", "gpus": []}', "32-bit"),
    ],
    ids=[
        "not-json",
        "other-version",
        "bad-index",
        "missing-size",
        "instances-int",
        "profiles",
        "negative-index",
        "huge-index",
        "negative-pci-id",
        "pci-id-past-32-bits",
    ],
)
def test_a_bad_layout_annotation_says_which_field(text: str, message: str) -> None:
    with pytest.raises(LayoutAnnotationError, match=message):
        parse_layout_annotation(text)


def test_the_agent_annotation_is_the_exact_source_when_it_agrees_with_allocatable() -> None:
    raw = make_node(
        "n1", gpu_count=1, mig=BALANCED, layout_annotation=render_layout_annotation(report(True))
    )
    state = resolve_node(node_facts_from_raw(raw), ())
    assert state.source is LayoutSource.AGENT
    assert [p.profile for p in state.gpus[0].instances] == [
        "2g.20gb",
        "1g.10gb",
        "1g.10gb",
        "3g.40gb",
    ]
    assert state.gpus[0].held == (False, False, False, True)


def test_an_agent_annotation_that_disagrees_with_allocatable_falls_back_with_a_note() -> None:
    raw = make_node(
        "n1",
        gpu_count=1,
        mig={"1g.10gb": 7},
        config="all-1g.10gb",
        layout_annotation=render_layout_annotation(report()),
    )
    state = resolve_node(node_facts_from_raw(raw), ())
    assert state.source is LayoutSource.MIG_PARTED
    assert "allocatable shows 7 x 1g.10gb" in state.notes[0]


MIG_PARTED = """
version: v1
mig-configs:
  team-mix:
    - device-filter: ["0x20B210DE"]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [2, 3]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  overlapping:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  on-and-off:
    - devices: all
      mig-enabled: true
      mig-devices: {"3g.40gb": 2}
    - devices: [0]
      mig-enabled: false
"""


def test_the_mig_parted_config_the_label_names_gives_per_gpu_layouts() -> None:
    raw = make_node(
        "n1",
        gpu_count=4,
        mig={"3g.40gb": 4, "1g.10gb": 14},
        config="team-mix",
        config_state="success",
    )
    state = resolve_node(node_facts_from_raw(raw), (), parse_mig_parted(MIG_PARTED))
    assert state.source is LayoutSource.MIG_PARTED
    assert [len(g.instances) for g in state.gpus] == [2, 2, 7, 7]


@pytest.mark.parametrize(
    ("config", "state_label", "note"),
    [
        ("on-and-off", "success", "selected by entries 0 (MIG on) and 1 (MIG off)"),
        ("team-mix", "pending", "not applied (state pending)"),
        ("missing", "success", "'missing' not found"),
    ],
    ids=["ambiguous", "not-applied", "unknown-name"],
)
def test_an_ambiguous_mig_parted_config_falls_back_to_counts_with_the_reason(
    config: str, state_label: str, note: str
) -> None:
    raw = make_node(
        "n1",
        gpu_count=4,
        mig={"3g.40gb": 4, "1g.10gb": 14},
        config=config,
        config_state=state_label,
    )
    state = resolve_node(node_facts_from_raw(raw), (), parse_mig_parted(MIG_PARTED))
    assert state.source is LayoutSource.COUNTS
    assert note in state.notes[0]


def test_entries_that_select_one_gpu_twice_leave_it_as_the_last_one_says() -> None:
    # mig-parted applies every entry that selects a GPU, in order: GPU 0 ends with 7 x 1g.10gb.
    raw = make_node(
        "n1",
        gpu_count=4,
        mig={"3g.40gb": 6, "1g.10gb": 7},
        config="overlapping",
        config_state="success",
    )
    state = resolve_node(node_facts_from_raw(raw), (), parse_mig_parted(MIG_PARTED))
    assert state.source is LayoutSource.MIG_PARTED
    assert [len(g.instances) for g in state.gpus] == [7, 2, 2, 2]


@pytest.mark.parametrize(
    ("config", "allocatable"),
    [
        ("all-balanced", BALANCED),
        ("all-1g.10gb", {"1g.10gb": 7}),
        ("all-3g.40gb", {"3g.40gb": 2}),
        ("all-7g.80gb", {"7g.80gb": 1}),
        ("all-1g.10gb.me", {"1g.10gb+me": 1}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_mig_manager_built_in_config_names_are_understood(
    config: str, allocatable: dict[str, int]
) -> None:
    raw = make_node("n1", gpu_count=1, mig=allocatable, config=config)
    assert resolve_node(node_facts_from_raw(raw), ()).source is LayoutSource.MIG_PARTED


def test_held_instances_are_assigned_best_fit_gpus_in_use_first() -> None:
    raw = make_node("n1", gpu_count=2, mig={"1g.10gb": 14}, config="all-1g.10gb")
    pods = [
        pod_facts_from_raw(make_pod(f"p{i}", profile="1g.10gb", node_name="n1", phase="Running"))
        for i in range(3)
    ]
    state = resolve_node(node_facts_from_raw(raw), [p for p in pods if p])
    assert [sum(g.held) for g in state.gpus] == [3, 0]
    assert state.free_of("nvidia.com/mig-1g.10gb") == 11


def summary(state: NodeState | None) -> object:
    assert state is not None
    return (state.free, state.allocated, [g.held for g in state.gpus])


def test_incremental_updates_give_the_same_state_as_a_rebuild() -> None:
    nodes = [
        node_facts_from_raw(make_node(f"n{i}", gpu_count=1, mig=BALANCED, config="all-balanced"))
        for i in range(3)
    ]
    raw_pods = [
        make_pod("a", profile="1g.10gb", node_name="n0", phase="Running"),
        make_pod("b", profile="3g.40gb", node_name="n1", phase="Running"),
        make_pod("c", profile="1g.10gb", nominated_node_name="n2"),
    ]
    pods = [p for p in map(pod_facts_from_raw, raw_pods) if p]
    incremental: ClusterIndex[NodeState] = ClusterIndex(lambda s: s)
    incremental.replace_nodes(nodes)
    for pod in pods:
        incremental.upsert_pod(pod)
    moved = pod_facts_from_raw(make_pod("c", profile="1g.10gb", node_name="n0", phase="Running"))
    assert moved is not None
    incremental.upsert_pod(moved)
    incremental.delete_pod("team-a/b")
    rebuilt: ClusterIndex[NodeState] = ClusterIndex(lambda s: s)
    rebuilt.replace_nodes(nodes)
    rebuilt.replace_pods([pods[0], moved])
    for name in ("n0", "n1", "n2"):
        assert summary(incremental.get(name)) == summary(rebuilt.get(name))
    assert incremental.get("n0") is not None
    assert summary(incremental.get("n0"))[0][0] == ("nvidia.com/mig-1g.10gb", 0)  # type: ignore[index]


def test_refresh_derives_known_nodes_again_under_the_derive_functions_own_inputs() -> None:
    """The extender's stranding rule is an input of its derive function, not of the index:
    a refresh drops the named nodes' values (listeners hear each), and the next read derives
    them under the current rule."""
    rule = {"on": False}
    index: ClusterIndex[tuple[str, bool]] = ClusterIndex(lambda s: (s.facts.name, rule["on"]))
    index.replace_nodes(
        [node_facts_from_raw(make_node(f"n{i}", gpu_count=1, mig=BALANCED)) for i in range(2)]
    )
    assert index.derive_pending() == 2
    heard: list[str | None] = []
    index.subscribe(heard.append)
    rule["on"] = True
    assert index.get("n0") == ("n0", False)  # kept until refreshed
    assert index.refresh(["n0", "gone"]) == ("n0",)
    assert heard == ["n0"]
    assert index.derive(["n0"]) == 1
    assert index.get("n0") == ("n0", True) and index.get("n1") == ("n1", False)


def test_the_index_keeps_a_nodes_layout_while_only_its_pods_change() -> None:
    """A bind re-derives its node from the layout kept for the same facts and configs (the
    agent report is not read again); new facts or new configs read it afresh."""
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state)
    raw = make_node(
        "n1", gpu_count=1, mig=BALANCED, layout_annotation=render_layout_annotation(report())
    )
    index.replace_nodes([node_facts_from_raw(raw)])
    before = index.get("n1")
    assert before is not None and before.source is LayoutSource.AGENT
    bound = pod_facts_from_raw(make_pod("p", profile="1g.10gb", node_name="n1"))
    assert bound is not None
    index.upsert_pod(bound)
    after = index.get("n1")
    assert after is not None
    assert after.gpus[0].instances is before.gpus[0].instances  # the kept layout
    assert after == resolve_node(after.facts, [bound])  # and the same state as from scratch
    assert after.allocated_of("nvidia.com/mig-1g.10gb") == 1
    index.upsert_node(node_facts_from_raw(raw))  # new facts, equal content: read afresh
    fresh = index.get("n1")
    assert fresh is not None and fresh.gpus[0].instances is not before.gpus[0].instances
    assert fresh == after
    disagreeing = make_node(
        "n1", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb",
        layout_annotation=render_layout_annotation(report()),
    )  # fmt: skip
    index.upsert_node(node_facts_from_raw(disagreeing))
    changed = index.get("n1")
    assert changed is not None and changed.source is LayoutSource.MIG_PARTED
    index.set_mig_configs(parse_mig_parted(MIG_PARTED))
    assert index.get("n1") == resolve_node(changed.facts, [bound], parse_mig_parted(MIG_PARTED))


# -- the pick: one ranking, checked against every candidate --------------------------------


@st.composite
def occupancies(draw: st.DrawFn) -> tuple[list[Occupancy], str]:
    """A node's GPUs, each with instances of a few profiles packed from slice 0, some held."""
    gpus: list[Occupancy] = []
    for index in range(draw(st.integers(0, 6))):
        instances: list[Placed] = []
        start = 0
        for profile, size in draw(st.lists(st.sampled_from(SIZES), max_size=8)):
            if start + size > 8:
                break
            instances.append(Placed(start, profile, size))
            start += size
        held = draw(st.lists(st.booleans(), min_size=len(instances), max_size=len(instances)))
        gpus.append(Occupancy(index * 2, tuple(instances), held, draw(st.booleans())))
    return gpus, draw(st.sampled_from([profile for profile, _ in SIZES]))


# 1g three times as often: GPUs of many small instances tie on the score at different fills.
SIZES = (("1g", 1), ("1g", 1), ("1g", 1), ("2g", 2), ("3g", 4), ("7g", 8))


@settings(max_examples=500, deadline=None)
@given(occupancies())
def test_the_pick_is_the_best_ranked_first_free_instance_of_each_gpu(
    drawn: tuple[list[Occupancy], str],
) -> None:
    gpus, profile = drawn
    used = held_slices(gpus, 8)
    candidates = []
    for g, gpu in enumerate(gpus):
        free = [k for k, p in enumerate(gpu.instances) if p.profile == profile and not gpu.held[k]]
        if not free:
            continue
        k = free[0]  # the lowest start on that GPU
        after = used[g] + gpu.instances[k].size
        score = gpu_unit_score(after, gpu.capacity or 8, in_use=used[g] > 0, node_in_use=any(used))
        candidates.append(((score, after, -gpu.index), Pick(g, k, score)))
    expected = max(candidates, key=lambda c: c[0])[1] if candidates else None
    assert best_free_instance(gpus, profile, 8) == expected
    assert best_free_instance(gpus, profile, 8, used) == expected


def test_a_gpu_states_ranked_view_is_its_own_and_a_replaced_state_reads_its_new_fields() -> None:
    instances = (Placed(0, "3g.40gb", 4), Placed(4, "3g.40gb", 4))
    state = GpuState(index=1, mig_enabled=True, instances=instances, held=(True, False))
    occupancy, held = state.ranked()
    assert (occupancy.index, tuple(occupancy.instances), tuple(occupancy.held)) == (
        1,
        instances,
        (True, False),
    )
    assert held == state.held_slices == 4
    both = dataclasses.replace(state, held=(True, True))
    assert both.held_slices == 8
    assert tuple(both.ranked()[0].held) == (True, True)
    assert best_free_instance([both.ranked()[0]], "3g.40gb", 8) is None
    assert best_free_instance([state.ranked()[0]], "3g.40gb", 8) == Pick(0, 1, 10)
    # what was read is no part of the value: equal states stay equal and hash alike
    fresh = GpuState(index=1, mig_enabled=True, instances=instances, held=(True, False))
    assert fresh == state and hash(fresh) == hash(state)
    assert "_kept" not in repr(state)
