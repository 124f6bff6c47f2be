"""The simulator's policies and mode A runs: legal layouts, no disruption, determinism, and
the indexes and shortcuts that make it fast choosing exactly what a full scan would."""

from __future__ import annotations

import copy
import dataclasses
import functools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import Placed
from migslice.scheduling import score_nodes
from migslice.sim import (
    GPU_MODEL,
    POLICY_IDS,
    Policy,
    SaturationConfig,
    SimPod,
    Workload,
    make_policy,
    run_saturation,
    run_sequence,
    sample_arrivals,
    synthetic_workload,
)
from migslice.sim.cluster import DisruptionError, SimCluster, SimNode, build_node_state
from migslice.sim.index import Rank, RankIndex
from migslice.sim.ours import (
    PLAN_SETTINGS,
    Migslice,
    MigslicePlacer,
    demand_for,
    extender_choice,
    planned_reshape,
)
from migslice.sim.placement import (
    LayoutChange,
    Placer,
    Reshaper,
    apply_changes,
    best_fit_choice,
    static_layout,
)
from migslice.sim.static import ALL_BALANCED, STOCK_CONFIGS, stock_mixed_layouts

TINY = SaturationConfig(nodes=1, gpus_per_node=2, check_layouts=True)
SMALL = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)

pods = st.lists(
    st.one_of(
        st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")).map(
            lambda p: SimPod(p, p)
        ),
        st.integers(2, 2).map(lambda k: SimPod("multi", "7g.80gb", k)),
    ),
    max_size=8,
).map(lambda ps: [SimPod(f"pod-{i}", p.profile, p.count) for i, p in enumerate(ps)])


@functools.cache
def policy(policy_id: str, gpus: int = 4) -> Policy:
    return make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus=gpus)


@pytest.mark.parametrize("policy_id", POLICY_IDS)
@settings(max_examples=10, deadline=None)
@given(arrivals=pods)
def test_every_layout_stays_legal_and_no_placed_pod_is_disrupted(
    policy_id: str, arrivals: list[SimPod]
) -> None:
    # SMALL checks every GPU with is_legal after each arrival (run_sequence raises otherwise)
    result = run_sequence(arrivals, policy(policy_id), SMALL)
    assert result.disrupted_pods == 0
    assert result.placed_pods + result.failed_pods == len(arrivals)


@pytest.mark.parametrize("policy_id", ["migslice", "M-carve", "B6", "B8"])
@settings(max_examples=15, deadline=None)
@given(arrivals=pods, leaving=st.lists(st.integers(0, 7), max_size=8))
def test_the_node_states_handed_out_are_those_built_afresh_after_every_change(
    policy_id: str, arrivals: list[SimPod], leaving: list[int]
) -> None:
    # The cluster keeps each GPU's state (and the agent's report of it) until it changes the
    # GPU; a change it forgot to announce would hand the core a stale node.
    cluster = SimCluster(GPU_MODEL, 2, ((),), gpus_per_node=2, agent_reports=True)
    placer = policy(policy_id).start(cluster, 0)
    checked = 0

    def same_as_afresh(node: SimNode) -> None:
        nonlocal checked
        afresh = copy.deepcopy(node)
        for gpu in afresh.gpus:
            gpu.forget()
        expected = build_node_state(GPU_MODEL, afresh, agent=cluster.agent_reports)
        assert cluster.node_state(node) == expected
        checked += 1

    cluster.listeners.append(same_as_afresh)  # after every change the cluster announces
    for k, pod in enumerate(arrivals):
        if placer.place(pod) is None and isinstance(placer, Reshaper):
            if apply_changes(cluster, placer.reshape([pod])):
                placer.place(pod)
        if k in leaving and cluster.assignments:
            cluster.release(next(iter(cluster.assignments)))
    assert checked >= len(cluster.assignments)


def test_re_partitioning_a_gpu_a_pod_holds_part_of_is_refused() -> None:
    cluster = SimCluster(GPU_MODEL, 1, ((),), gpus_per_node=1)
    node = cluster.nodes[0]
    cluster.repartition(node, 0, static_layout(GPU_MODEL, ALL_BALANCED))
    cluster.hold_instance(node, node.gpus[0], 0, pod="busy")
    with pytest.raises(DisruptionError, match="busy"):
        cluster.repartition(node, 0, static_layout(GPU_MODEL, ["7g.80gb"]))
    assert node.gpus[0].holders[0] == "busy"


def test_the_free_part_of_a_gpu_in_use_can_be_re_shaped_around_the_held_instance() -> None:
    cluster = SimCluster(GPU_MODEL, 1, (static_layout(GPU_MODEL, ALL_BALANCED),), gpus_per_node=1)
    node, gpu = cluster.nodes[0], cluster.nodes[0].gpus[0]
    three = next(k for k, p in enumerate(gpu.instances) if p.profile == "3g.40gb")
    cluster.hold_instance(node, gpu, three, pod="busy")
    kept = gpu.instances[three]
    new = tuple(sorted([kept, *static_layout(GPU_MODEL, ["3g.40gb"])]))
    assert new[0] != kept  # the other 3g slot
    assert cluster.repartition(node, 0, new)
    assert gpu.holders[gpu.instances.index(kept)] == "busy"
    position = gpu.instances.index(new[0])
    cluster.destroy_instance(node, gpu, position)
    with pytest.raises(DisruptionError):
        cluster.destroy_instance(node, gpu, gpu.instances.index(kept))


@pytest.mark.parametrize(
    "placed",
    [
        Placed(4, "2g.20gb", 2),  # overlaps the 2g
        Placed(0, "3g.40gb", 4),  # overlaps the 4g
        Placed(6, "2g.20gb", 2),  # 8 compute slices of 7
        Placed(6, "1g.10gb", 2),  # the wrong size
        Placed(7, "1g.10gb", 1),  # not a start of 1g.10gb
        Placed(6, "9g.99gb", 1),  # no such profile
    ],
)
def test_an_instance_that_does_not_fit_is_refused_and_the_gpu_is_unchanged(
    placed: Placed,
) -> None:
    cluster = SimCluster(GPU_MODEL, 1, (static_layout(GPU_MODEL, ["4g.40gb"]),), gpus_per_node=1)
    node, gpu = cluster.nodes[0], cluster.nodes[0].gpus[0]
    cluster.create_instance(node, gpu, Placed(4, "2g.20gb", 2))
    before = (list(gpu.instances), list(gpu.holders), node.version)
    with pytest.raises(ValueError, match="does not fit"):
        cluster.create_instance(node, gpu, placed)
    assert (gpu.instances, gpu.holders, node.version) == before
    position = cluster.create_instance(node, gpu, Placed(6, "1g.10gb", 1))
    assert gpu.instances[position] == Placed(6, "1g.10gb", 1)


def test_a_pod_name_placed_twice_is_refused() -> None:
    cluster = SimCluster(GPU_MODEL, 1, (static_layout(GPU_MODEL, ["7g.80gb"]),), gpus_per_node=2)
    placer = policy("B4").start(cluster, 0)
    placer.place(SimPod("same", "7g.80gb"))
    with pytest.raises(ValueError, match="pod names must be unique"):
        placer.place(SimPod("same", "7g.80gb"))


def test_drawn_pods_get_names_of_their_own_so_the_disruption_check_sees_every_pod() -> None:
    workload = synthetic_workload()
    arrivals = sample_arrivals(workload, 56, 130, seed=3)
    assert len({p.name for p in arrivals}) == len(arrivals)
    config = SaturationConfig(nodes=1)
    result = run_saturation(workload, policy("migslice", 8), 3, config=config)
    assert result.placed_pods > len({p.profile for p in workload.pods})


@pytest.mark.parametrize("policy_id", ["B4", "B5", "B6", "migslice"])
def test_the_same_seed_gives_the_same_result(policy_id: str) -> None:
    config = SaturationConfig(nodes=1)
    first = run_saturation(synthetic_workload(), policy(policy_id, 8), 7, config=config)
    again = run_saturation(synthetic_workload(), policy(policy_id, 8), 7, config=config)
    assert first == again


def test_a_drawn_pod_is_its_source_pod_but_for_the_name() -> None:
    workload = Workload(
        "w", (SimPod("a", "3g.40gb", 2, tenant="team-a"), SimPod("b", "1g.10gb", tenant="b"))
    )
    arrivals = sample_arrivals(workload, 56, 130, seed=3)
    by_name = {p.name: p for p in workload.pods}
    for drawn in arrivals:
        source = by_name[drawn.name.partition("#")[0]]
        assert drawn == dataclasses.replace(source, name=drawn.name)


def test_different_seeds_draw_different_arrivals() -> None:
    workload = synthetic_workload()
    assert sample_arrivals(workload, 56, 130, seed=1) != sample_arrivals(workload, 56, 130, seed=2)


def test_arrivals_stop_once_demand_reaches_the_target_load() -> None:
    arrivals = sample_arrivals(synthetic_workload(), 560, 130, seed=3)
    total = sum(p.compute_slices for p in arrivals)
    assert total >= 728 > total - arrivals[-1].compute_slices


def test_migslice_re_partitions_idle_gpus_where_a_fixed_geometry_cannot_serve() -> None:
    arrivals = [
        SimPod("a", "4g.40gb"),
        SimPod("b", "7g.80gb"),
        SimPod("c", "2g.20gb"),
        SimPod("d", "1g.10gb"),
    ]
    config = SaturationConfig(nodes=1, gpus_per_node=2, max_load_pct=130, check_layouts=True)
    balanced = make_policy("B2", GPU_MODEL, [], gpus=2)
    fixed = run_sequence(arrivals, balanced, config)
    ours = run_sequence(arrivals, Migslice(), config)
    assert fixed.placed_pods == 2  # only the 2g and the 1g fit all-balanced GPUs
    assert ours.placed_pods == 3  # 4g and 7g on re-partitioned GPUs, the 1g beside the 4g
    assert ours.points[-1].slice_allocation > fixed.points[-1].slice_allocation
    assert ours.gpus_repartitioned == 2
    assert ours.disrupted_pods == 0


def test_migslice_places_on_the_node_the_extender_scores_highest() -> None:
    balanced = make_policy("B2", GPU_MODEL, [], gpus=6)
    cluster = SimCluster(GPU_MODEL, 3, balanced.initial_layouts(GPU_MODEL), gpus_per_node=2)
    cluster.hold_instance(cluster.nodes[1], cluster.nodes[1].gpus[0], 0, pod="existing")
    demand = demand_for(SimPod("new", "1g.10gb"))
    scores = score_nodes(demand, [(n.name, cluster.prepared(n)) for n in cluster.nodes])
    best = max(scores, key=lambda item: item[1])
    chosen = extender_choice(cluster, demand)
    assert chosen is not None and chosen.name == best[0] == "node-0001"
    placed = Migslice().start(cluster, 0).place(SimPod("new", "1g.10gb"))
    assert placed is not None and placed.node == "node-0001"


def test_the_whole_gpu_baseline_holds_whole_gpus_on_one_node() -> None:
    arrivals = [SimPod("a", "1g.10gb"), SimPod("b", "7g.80gb", 2), SimPod("c", "7g.80gb", 2)]
    result = run_sequence(arrivals, policy("B0"), TINY)
    assert (result.placed_pods, result.failed_pods) == (1, 2)
    assert result.points[-1].slice_allocation == 0.5  # the 1g pod holds one of two GPUs
    assert result.points[-1].demand_allocation == 1 / 14


def test_b4_gives_each_node_one_of_mig_parteds_stock_configs_in_turn() -> None:
    layouts = stock_mixed_layouts(GPU_MODEL)
    assert len(layouts) == 8 * len(STOCK_CONFIGS)
    for n, (_, profiles) in enumerate(STOCK_CONFIGS):
        node = layouts[8 * n : 8 * n + 8]
        assert all(sorted(p.profile for p in gpu) == sorted(profiles) for gpu in node)


# -- the indexes choose what a scan of every node would ------------------------------------


class Scan:
    """The oracle: every node ranked afresh, the lowest rank wins."""

    def __init__(self, placer: MigslicePlacer) -> None:
        self.placer = placer

    def best(self, kind: tuple[str, int]) -> str | None:
        ranked = [
            (rank, node.name)
            for node in self.placer.cluster.nodes
            if (rank := self.placer.rank(node, kind)) is not None
        ]
        return min(ranked)[1] if ranked else None


@settings(max_examples=20, deadline=None)
@given(arrivals=pods, seed=st.integers(0, 3))
def test_the_rank_index_chooses_what_a_scan_of_every_node_chooses(
    arrivals: list[SimPod], seed: int
) -> None:
    cluster = SimCluster(GPU_MODEL, 3, stock_mixed_layouts(GPU_MODEL, 2), gpus_per_node=2)
    placer = MigslicePlacer(cluster, PLAN_SETTINGS)
    scan = Scan(placer)
    for pod in arrivals:
        kind = (pod.profile, pod.count)
        expected = scan.best(kind)
        chosen = placer.index.best(kind)
        assert (chosen.name if chosen else None) == expected
        scored = extender_choice(cluster, demand_for(pod))
        assert (scored.name if scored else None) == expected
        placer.place(pod)


def test_a_best_fit_rank_is_recomputed_when_the_node_changes() -> None:
    cluster = SimCluster(GPU_MODEL, 2, (static_layout(GPU_MODEL, ALL_BALANCED),), gpus_per_node=1)

    def rank(node: SimNode, kind: tuple[str, int]) -> Rank | None:
        choice = best_fit_choice(GPU_MODEL, node, kind)
        return None if choice is None else choice[0]

    index = RankIndex(cluster, rank)
    first = index.best(("3g.40gb", 1))
    assert first is not None and first.name == "node-0000"
    cluster.hold_instance(first, first.gpus[0], 3, pod="x")
    again = index.best(("3g.40gb", 1))
    assert again is not None and again.name == "node-0001"


def test_a_kind_is_ranked_again_only_when_asked_for_and_sees_every_change() -> None:
    cluster = SimCluster(GPU_MODEL, 2, (static_layout(GPU_MODEL, ALL_BALANCED),), gpus_per_node=1)
    calls: list[tuple[str, tuple[str, int]]] = []

    def rank(node: SimNode, kind: tuple[str, int]) -> Rank | None:
        calls.append((node.name, kind))
        choice = best_fit_choice(GPU_MODEL, node, kind)
        return None if choice is None else choice[0]

    small, large = ("1g.10gb", 1), ("3g.40gb", 1)
    index = RankIndex(cluster, rank)
    assert index.best(large) is not None and index.best(small) is not None
    node = cluster.nodes[0]
    calls.clear()
    # the node changes three times while only the small kind is asked for
    for position in (0, 1, 2):
        cluster.hold_instance(node, node.gpus[0], position, pod=f"p{position}")
        index.best(small)
    assert {kind for _, kind in calls} == {small}
    calls.clear()
    cluster.hold_instance(node, node.gpus[0], 3, pod="big")
    again = index.best(large)
    assert calls == [("node-0000", large)]  # ranked once for every change since its last query
    assert again is not None and again.name == "node-0001"


def test_nodes_unchanged_since_an_alike_start_are_ranked_once_and_keep_their_positions() -> None:
    layout = static_layout(GPU_MODEL, ALL_BALANCED)
    cluster = SimCluster(GPU_MODEL, 4, (layout,), gpus_per_node=1)
    assert cluster.alike
    calls: list[str] = []

    def rank(node: SimNode, kind: tuple[str, int]) -> Rank | None:
        calls.append(node.name)
        choice = best_fit_choice(GPU_MODEL, node, kind)
        return None if choice is None else choice[0]

    node = cluster.nodes[2]
    cluster.hold_instance(node, node.gpus[0], 0, pod="x")
    index = RankIndex(cluster, rank)
    kind = ("3g.40gb", 1)
    entries = list(index.entries(kind))
    # the changed node is ranked on its own, the unchanged ones once for all of them
    assert sorted(calls) == ["node-0000", "node-0002"]
    scanned = sorted(r for n in cluster.nodes if (r := rank(n, kind)) is not None)
    assert entries == scanned  # what ranking every node would give, positions included
    assert int(entries[0][-1]) == 2  # best fit: the node already in use first
    # nodes that started apart are each ranked
    apart = SimCluster(GPU_MODEL, 2, (layout, None), gpus_per_node=1)
    assert not apart.alike
    calls.clear()
    RankIndex(apart, rank).entries(("1g.10gb", 1))
    assert sorted(calls) == ["node-0000", "node-0001"]


@dataclass(frozen=True)
class FullPlanner(Migslice):
    """migslice with the planner asked about every node (the plain controller call)."""

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return FullPlannerPlacer(cluster, self.settings)


class FullPlannerPlacer(MigslicePlacer):
    def reshape(self, pods: list[SimPod]) -> tuple[LayoutChange, ...]:  # type: ignore[override]
        states = [self.cluster.node_state(n) for n in self.cluster.nodes]
        plan = planned_reshape(states, demand_for(pods[0]), PLAN_SETTINGS)
        if plan is None:
            return ()
        return tuple(
            LayoutChange(self.cluster.by_name[c.node], g.index, g.new)
            for c in plan.changes
            for g in c.gpus
        )


@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.just(2))
def test_the_planner_asked_node_by_node_decides_as_when_asked_about_every_node(
    seed: int, nodes: int
) -> None:
    config = SaturationConfig(nodes=nodes, gpus_per_node=2)
    workload = synthetic_workload()
    fast = run_saturation(workload, Migslice(), seed, config=config)
    full = run_saturation(workload, FullPlanner(), seed, config=config)
    assert fast == full


def test_mig_manager_mode_gives_a_3g_a_layout_using_every_compute_slice_under_the_rule() -> None:
    # Three 2g pods fill GPU 0; GPU 1 gets 2g+2g+3g for the first 3g. Once a 3g and more
    # 2g compute than the room beside it are held (the stranding rule on), the next 3g's GPU
    # is re-partitioned to 2g+2g+3g as well rather than 3g+3g (8 of 8 memory slices, 6 of 7
    # compute), and the later 2g pods fill it: all 21 compute slices are placed.
    short = {"1g": "1g.10gb", "2g": "2g.20gb", "3g": "3g.40gb"}
    names = "2g 2g 2g 3g 2g 3g 1g 3g 2g 3g 2g 2g".split()
    arrivals = [SimPod(f"p{i}", short[n]) for i, n in enumerate(names)]
    tiny = SaturationConfig(nodes=1, gpus_per_node=3, check_layouts=True)
    result = run_sequence(arrivals, policy("migslice", 3), tiny)
    assert result.points[-1].slice_allocation == 1.0
    assert (result.placed_pods, result.failed_pods) == (10, 2)


def test_each_size_class_counts_its_pods_and_the_compute_slices_they_asked() -> None:
    # one GPU: the 7g fits, then a 2 x 7g job and a 1g fail; the 7g class places 1 of 1 pods
    # (7 of 7 slices), multi-GPU 0 of 1 (0 of 14), the 1g 0 of 1
    arrivals = [SimPod("a", "7g.80gb"), SimPod("b", "7g.80gb", count=2), SimPod("c", "1g.10gb")]
    tiny = SaturationConfig(nodes=1, gpus_per_node=1, max_load_pct=400, check_layouts=True)
    pods = synthetic_workload().pods
    result = run_sequence(arrivals, make_policy("migslice", GPU_MODEL, pods, gpus=1), tiny)
    last = result.points[-1]
    assert last.classes == (("1g", 1, 0), ("7g", 1, 1), ("multi-GPU", 1, 0))
    assert last.class_slices == (("1g", 1, 0), ("7g", 7, 7), ("multi-GPU", 14, 0))
