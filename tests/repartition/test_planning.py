"""Re-partition planning: table tests and properties over random clusters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod
from migslice.inventory import NodeState, resolve_node
from migslice.mig import CATALOG, Placed, enumerate_maximal_layouts, is_legal, place
from migslice.objects import (
    AgentGpu,
    AgentInstance,
    AgentReport,
    node_facts_from_raw,
    pod_facts_from_raw,
    render_layout_annotation,
)
from migslice.repartition import (
    PendingPod,
    PlanSettings,
    RepartitionPlan,
    config_name,
    plan,
)
from migslice.scheduling.demand import demand_of
from tests.work import lines_run

MODEL = CATALOG.get("A100-80GB")
PRODUCT = "NVIDIA-A100-SXM4-80GB"


def node_state(
    name: str,
    layouts: Sequence[Sequence[Placed]],
    busy: Sequence[Sequence[bool]] | None = None,
    bound: Sequence[str] = (),
    config_state: str | None = None,
    product: str = PRODUCT,
    unseen: Sequence[str] = (),
    labels: Mapping[str, str] | None = None,
) -> NodeState:
    """A node whose agent reports ``layouts``; pods hold the busy instances, and ``unseen``
    profiles more, whose processes the agent does not see (a pod pulling its image)."""
    busy = busy or [[False] * len(layout) for layout in layouts]
    report = AgentReport(
        product=product,
        gpus=tuple(
            AgentGpu(
                i,
                True,
                tuple(
                    AgentInstance(p.profile, p.start, p.size, b)
                    for p, b in zip(layout, flags, strict=True)
                ),
            )
            for i, (layout, flags) in enumerate(zip(layouts, busy, strict=True))
        ),
    )
    counts = Counter(p.profile for layout in layouts for p in layout)
    raw = make_node(
        name,
        gpu_count=len(layouts),
        product=product,
        mig=dict(counts),
        config_state=config_state,
        layout_annotation=render_layout_annotation(report),
        extra_labels=labels,
    )
    held = [
        p.profile
        for layout, flags in zip(layouts, busy, strict=True)
        for p, b in zip(layout, flags, strict=True)
        if b
    ] + list(unseen)
    pods = [
        pod_facts_from_raw(make_pod(f"{name}-held-{i}", profile=profile, node_name=name))
        for i, profile in enumerate(held)
    ]
    return resolve_node(node_facts_from_raw(raw), [p for p in pods if p is not None])


def pending(name: str, profile: str, waited_s: float = 120.0, count: int = 1) -> PendingPod:
    return PendingPod(
        demand_of(
            make_pod(name.split("/")[1], namespace=name.split("/")[0], profile=profile, count=count)
        ),
        waited_s,
    )


def all_1g() -> list[Placed]:
    return [place(MODEL, "1g.10gb", i) for i in range(7)]


def test_an_idle_gpu_is_reshaped_for_a_waiting_pod_and_the_rest_for_the_observed_demand() -> None:
    # 1g pods fill another GPU: the space the 3g pod leaves goes to 1g slices.
    busy = [[True] * 7]
    nodes = [node_state("a", [all_1g()]), node_state("b", [all_1g()], busy=busy)]
    result = plan(nodes, [pending("team/train", "3g.40gb")])
    (change,) = result.changes
    assert change.node == "a"
    assert change.serves == ("team/train",)
    (gpu,) = change.gpus
    assert Counter(p.profile for p in gpu.new) == {"3g.40gb": 1, "1g.10gb": 4}
    assert is_legal(MODEL, gpu.new)
    assert change.config_name == config_name("a", change.gpus)
    assert change.entries[0].devices == (0,)
    assert dict(change.entries[0].mig_devices) == {"1g.10gb": 4, "3g.40gb": 1}


def test_free_slices_already_offered_are_not_carved_again() -> None:
    # 1g pods run on another GPU, but it still has free 1g slices: 1g is not lacking.
    busy = [[i < 5 for i in range(7)]]
    nodes = [node_state("a", [all_1g()]), node_state("b", [all_1g()], busy=busy)]
    (gpu,) = plan(nodes, [pending("t/train", "3g.40gb")]).changes[0].gpus
    assert Counter(p.profile for p in gpu.new) == {"3g.40gb": 2}


def test_with_only_3g_demand_in_sight_the_rest_of_the_gpu_is_a_3g_too() -> None:
    result = plan([node_state("a", [all_1g()])], [pending("team/train", "3g.40gb")])
    (change,) = result.changes
    (gpu,) = change.gpus
    assert Counter(p.profile for p in gpu.new) == {"3g.40gb": 2}


def test_under_the_stranding_rule_a_3g_gets_a_layout_that_uses_all_7_compute_slices() -> None:
    # Only 3g demand in sight makes 3g+3g the most valuable layout, but it fills the memory
    # and leaves a compute slice unused; while the rule is on (small pods held can fill the
    # 4 memory slices a 3g leaves), the layout that uses every compute slice wins.
    pod = [pending("team/train", "3g.40gb")]
    guarded = plan([node_state("a", [all_1g()])], pod, settings=PlanSettings(strand_guard=True))
    assert _compute_of(guarded) == 7
    # The rule is read from what the pods hold: two 2g.20gb and a 3g.40gb held (fill 4
    # compute slices, need 4 memory slices) turn it on; one 2g.20gb less leaves it off, and
    # the held mix (3g worth more than 2g) then picks 3g+3g.
    twos = [place(MODEL, "2g.20gb", 0), place(MODEL, "2g.20gb", 2)]
    held = [*twos, place(MODEL, "3g.40gb", 4)]
    on = node_state("b", [held], busy=[[True] * 3])
    assert _compute_of(plan([node_state("a", [all_1g()]), on], pod)) == 7
    off = node_state("b", [held], busy=[[False, True, True]])
    assert _compute_of(plan([node_state("a", [all_1g()]), off], pod)) == 6


def _compute_of(result: RepartitionPlan) -> int:
    """The compute slices of the one GPU a plan re-shapes."""
    (change,) = result.changes
    (gpu,) = change.gpus
    return sum(MODEL.profile(p.profile).compute_slices for p in gpu.new)


def test_an_expected_mix_overrides_the_observed_demand() -> None:
    settings = PlanSettings(expected_mix=(("nvidia.com/mig-2g.20gb", 1.0),))
    result = plan([node_state("a", [all_1g()])], [pending("t/p", "3g.40gb")], settings=settings)
    (gpu,) = result.changes[0].gpus
    assert Counter(p.profile for p in gpu.new) == {"3g.40gb": 1, "2g.20gb": 2}


def test_the_node_with_the_fewest_idle_gpus_that_suffice_is_carved_first() -> None:
    nodes = [
        node_state("many", [all_1g(), all_1g(), all_1g()]),
        node_state("few", [all_1g(), all_1g()], busy=[[False] * 7, [True] + [False] * 6]),
    ]
    result = plan(nodes, [pending("t/p", "3g.40gb")])
    assert [c.node for c in result.changes] == ["few"]


def test_a_gpu_with_a_busy_instance_is_never_reshaped() -> None:
    busy = [[i == 3 for i in range(7)]]
    nodes = [node_state("a", [all_1g()], busy=busy, bound=["x"])]
    result = plan(nodes, [pending("team/train", "3g.40gb")])
    assert result.is_empty
    assert result.unserved == (("team/train", "no idle GPU can take it"),)


def test_young_demand_and_servable_demand_wait() -> None:
    nodes = [node_state("a", [all_1g()])]
    result = plan(nodes, [pending("t/new", "3g.40gb", waited_s=5), pending("t/small", "1g.10gb")])
    assert result.is_empty
    assert dict(result.unserved) == {
        "t/new": "pending 5s < 30s",
        "t/small": "a free instance exists; left to the scheduler",
    }


def test_nodes_in_transition_or_cooldown_are_left_alone_and_said_so() -> None:
    nodes = [
        node_state("a", [all_1g()], config_state="pending"),
        node_state("b", [all_1g()]),
    ]
    result = plan(nodes, [pending("t/p", "3g.40gb")], cooldowns={"b": 30.0})
    assert result.is_empty
    assert dict(result.skipped_nodes) == {
        "a": "MIG Manager is applying a config (state pending)",
        "b": "changed 30s ago (cooldown 600s)",
    }


def test_a_node_mig_manager_does_not_run_on_is_left_alone_and_said_so() -> None:
    # The GPU Operator's MIG Manager DaemonSet (and NVIDIA's example one) selects nodes with
    # nvidia.com/gpu.deploy.mig-manager=true: a node labelled otherwise has none, so its
    # config label would never be applied and the state=pending ours sets would keep pods
    # off it for good.
    off = {"nvidia.com/gpu.deploy.mig-manager": "false"}
    paused = {"nvidia.com/gpu.deploy.mig-manager": "paused-for-driver-upgrade"}
    nodes = [
        node_state("a", [all_1g()], labels=off),
        node_state("b", [all_1g()], labels=paused),
    ]
    result = plan(nodes, [pending("t/p", "3g.40gb")])
    assert result.is_empty
    assert dict(result.skipped_nodes) == {
        "a": "no MIG Manager runs on the node (label nvidia.com/gpu.deploy.mig-manager=false)",
        "b": "no MIG Manager runs on the node (label "
        "nvidia.com/gpu.deploy.mig-manager=paused-for-driver-upgrade)",
    }
    on = {"nvidia.com/gpu.deploy.mig-manager": "true"}
    (change,) = plan([node_state("c", [all_1g()], labels=on)], [pending("t/p", "3g.40gb")]).changes
    assert change.node == "c"


def test_a_config_named_as_the_nodes_label_already_is_named_anew() -> None:
    # MIG Manager applies a config when the node's nvidia.com/mig.config label changes value:
    # a node whose layout left the config its label names (carved meanwhile, its mode label
    # set to carve and back) and that the planner shapes as that config again would be
    # labelled with the same value, never applied, and sit at our state=pending until
    # quarantined.
    first = plan([node_state("a", [all_1g()])], [pending("t/p", "3g.40gb")]).changes[0]
    label = {"nvidia.com/mig.config": first.config_name}
    again = plan([node_state("a", [all_1g()], labels=label)], [pending("t/p", "3g.40gb")])
    (change,) = again.changes
    assert change.gpus == first.gpus and change.entries == first.entries
    assert change.previous_config == first.config_name
    assert change.config_name != first.config_name
    assert change.config_name.startswith("migslice-a-")


def test_at_most_max_nodes_in_flight_change_at_once() -> None:
    nodes = [node_state(n, [all_1g()]) for n in ("a", "b", "c")]
    demand = [pending(f"t/p{i}", "4g.40gb") for i in range(3)]
    result = plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=2))
    assert [c.node for c in result.changes] == ["a", "b"]
    assert dict(result.unserved)["t/p2"] == "re-partition budget in use"


def test_a_pod_the_budget_holds_back_in_one_pool_goes_to_a_node_of_another() -> None:
    """The A100 pool's budget is spent after a1, so a2 and a3 are held back for the second
    pod, which goes to the H100 node; the third finds every pool spent."""
    nodes = [node_state(n, [all_1g()]) for n in ("a1", "a2", "a3")]
    nodes.append(node_state("b1", [all_1g()], product="NVIDIA-H100-80GB-HBM3"))
    demand = [pending(f"t/p{i}", "4g.40gb") for i in range(3)]
    result = plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=1))
    assert [(c.node, c.serves) for c in result.changes] == [("a1", ("t/p0",)), ("b1", ("t/p1",))]
    assert dict(result.unserved) == {"t/p2": "re-partition budget in use"}


def test_a_plan_works_in_proportion_to_the_nodes_not_to_nodes_times_pods() -> None:
    """The planner walked every idle GPU of the cluster for each node it tried, for each pod:
    one decision took 12.5 s at 1,000 nodes and 50 pods (bench/latency plan_scale)."""
    demand = [pending(f"t/p{i}", "4g.40gb") for i in range(20)]

    def work(count: int) -> int:
        nodes = [node_state(f"n{n:04d}", [all_1g()]) for n in range(count)]
        return lines_run(lambda: plan(nodes, demand, settings=PlanSettings()))

    small, large = work(40), work(160)
    assert large < 2 * small, (small, large)  # 4x the nodes: 1.1x the work (it was 6.2x)


def test_pods_share_a_node_already_in_the_plan() -> None:
    nodes = [node_state(n, [all_1g(), all_1g()]) for n in ("a", "b")]
    demand = [pending("t/p1", "3g.40gb"), pending("t/p2", "3g.40gb"), pending("t/p3", "2g.20gb")]
    result = plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=2))
    (change,) = result.changes
    assert sorted(change.serves) == ["t/p1", "t/p2", "t/p3"]


# -- properties over random clusters ---------------------------------------------------------

LAYOUTS = enumerate_maximal_layouts(MODEL, ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"])
PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[NodeState], list[PendingPod], dict[str, list[list[bool]]]]:
    nodes: list[NodeState] = []
    busy_by_node: dict[str, list[list[bool]]] = {}
    for n in range(draw(st.integers(1, 3))):
        layouts = [list(draw(st.sampled_from(LAYOUTS))) for _ in range(draw(st.integers(1, 3)))]
        busy = [[draw(st.booleans()) and draw(st.booleans()) for _ in layout] for layout in layouts]
        name = f"n{n}"
        busy_by_node[name] = busy
        nodes.append(node_state(name, layouts, busy=busy))
    demand = [
        pending(f"t/p{i}", draw(st.sampled_from(PROFILES))) for i in range(draw(st.integers(0, 6)))
    ]
    return nodes, demand, busy_by_node


def apply(
    nodes: Sequence[NodeState], result: RepartitionPlan, busy: Mapping[str, list[list[bool]]]
) -> list[NodeState]:
    """The cluster after MIG Manager applied the plan (instance busy flags kept where unchanged)."""
    changed = {c.node: {g.index: g.new for g in c.gpus} for c in result.changes}
    after = []
    for node in nodes:
        layouts, flags = [], []
        for gpu in node.gpus:
            new = changed.get(node.name, {}).get(gpu.index)
            if new is None:
                layouts.append(list(gpu.instances))
                flags.append(list(busy[node.name][gpu.index]))
            else:
                layouts.append(list(new))
                flags.append([False] * len(new))
        after.append(node_state(node.name, layouts, busy=flags))
    return after


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_plans_are_legal_spare_busy_gpus_and_serve_what_they_claim(case: tuple) -> None:
    nodes, demand, busy = case
    result = plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=2))
    assert len(result.changes) <= 2
    by_name = {n.name: n for n in nodes}
    for change in result.changes:
        node = by_name[change.node]
        for gpu_change in change.gpus:
            assert is_legal(MODEL, gpu_change.new)
            assert not any(busy[change.node][gpu_change.index]), "a busy GPU was re-partitioned"
            assert tuple(node.gpus[gpu_change.index].instances) == gpu_change.old
    after = apply(nodes, result, busy)
    served = {pod for change in result.changes for pod in change.serves}
    assert served.isdisjoint(pod for pod, _ in result.unserved)
    by_key = {p.demand.key: p for p in demand}
    for change in result.changes:
        node = next(n for n in after if n.name == change.node)
        needed: Counter[str] = Counter()
        for key in change.serves:
            for unit in by_key[key].demand.units:
                needed[unit.resource] += unit.count
        for resource, count in needed.items():
            assert node.free_of(resource) >= count


@settings(max_examples=40, deadline=None)
@given(clusters())
def test_planning_the_result_again_changes_nothing_it_just_changed(case: tuple) -> None:
    nodes, demand, busy = case
    first = plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=3))
    after = apply(nodes, first, busy)
    cooldowns = {c.node: 0.0 for c in first.changes}
    again = plan(after, demand, cooldowns=cooldowns, settings=PlanSettings(max_nodes_in_flight=3))
    assert {c.node for c in again.changes}.isdisjoint(cooldowns)
    served = {pod for change in first.changes for pod in change.serves}
    assert served.isdisjoint(pod for change in again.changes for pod in change.serves)
    assert plan(nodes, demand, settings=PlanSettings(max_nodes_in_flight=3)) == first


def test_a_gpu_that_may_hold_a_bound_pods_instance_is_never_re_partitioned() -> None:
    """The device plugin picks a pod's device among the node's free ones: while the agent
    does not see the pod's process, its 1g.10gb may be on either GPU. The plan re-shaped GPU 1
    on a guess that it was on GPU 0, and mig-parted destroys an instance without processes:
    the pod's device was gone when its container started."""
    pending = PendingPod(demand_of(make_pod("want", profile="3g.40gb")), 120.0)
    idle = [[False] * 7, [False] * 7]
    held_not_seen = node_state("gpu-a", [all_1g(), all_1g()], busy=idle, unseen=["1g.10gb"])
    unseen = plan([held_not_seen], [pending])
    assert not unseen.changes
    ((node, why),) = unseen.skipped_nodes
    assert node == "gpu-a" and "instances the agent does not see in use" in why, why
    first_busy = [[True] + [False] * 6, [False] * 7]
    seen = plan([node_state("gpu-a", [all_1g(), all_1g()], busy=first_busy)], [pending])
    assert [[g.index for g in c.gpus] for c in seen.changes] == [[1]]


def test_a_node_known_by_counts_whose_agent_reports_a_gpu_with_mig_off_is_not_planned() -> None:
    """While the device plugin restarts, allocatable shows no GPU resource at all, so the
    agent's layout disagrees with it and the node is known by counts: nvidia.com/gpu says
    nothing of the GPU whose MIG is off, but the agent does. A config for GPU 0 would turn
    its MIG mode on (mig-parted resetting the node's GPUs)."""
    report = AgentReport(
        product=PRODUCT,
        gpus=(
            AgentGpu(0, False, ()),
            AgentGpu(
                1, True, tuple(AgentInstance(p.profile, p.start, p.size, False) for p in all_1g())
            ),
        ),
    )
    raw = make_node(
        "gpu-d", gpu_count=2, mig={}, layout_annotation=render_layout_annotation(report)
    )
    state = resolve_node(node_facts_from_raw(raw), [])
    result = plan([state], [pending("t/want", "3g.40gb")])
    assert not result.changes
    ((node, why),) = result.skipped_nodes
    assert node == "gpu-d" and "some GPU has MIG off" in why, why


def test_a_node_known_by_counts_with_a_gpu_whose_mig_is_off_is_not_planned() -> None:
    """Which GPU has MIG off is not known: a config for it would change its MIG mode, and
    mig-parted resets every GPU of the node to do that."""
    raw = make_node(
        "gpu-c",
        gpu_count=2,
        mig={"1g.10gb": 7},
        whole_gpus=1,
        config="someone-elses-config",
        config_state="success",
    )
    state = resolve_node(node_facts_from_raw(raw), [])
    pending = PendingPod(demand_of(make_pod("want", profile="3g.40gb")), 120.0)
    result = plan([state], [pending])
    assert not result.changes
    ((node, why),) = result.skipped_nodes
    assert node == "gpu-c" and "some GPU has MIG off" in why, why
