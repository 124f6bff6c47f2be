"""The simulator's policies and mode A runs: legal layouts, no disruption, determinism."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.scheduling import score_nodes
from migslice.sim import (
    GPU_MODEL,
    POLICY_IDS,
    Policy,
    SaturationConfig,
    SimPod,
    make_policy,
    run_saturation,
    run_sequence,
    sample_arrivals,
    synthetic_workload,
)
from migslice.sim.cluster import DisruptionError, SimCluster
from migslice.sim.policies import (
    ALL_BALANCED,
    Migslice,
    demand_for,
    extender_choice,
    static_layout,
)

TINY = SaturationConfig(nodes=1, gpus_per_node=2, check_layouts=True)
SMALL = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)
REPARTITIONING = ("B5", "migslice", "migslice-packed", "migslice-proposed")

pods = st.lists(
    st.one_of(
        st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")).map(
            lambda p: SimPod(p, p)
        ),
        st.integers(2, 2).map(lambda k: SimPod("multi", "7g.80gb", k)),
    ),
    max_size=8,
).map(lambda ps: [SimPod(f"pod-{i}", p.profile, p.count) for i, p in enumerate(ps)])


def policy(policy_id: str, gpus: int = 4) -> Policy:
    return make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus)


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


def test_re_partitioning_a_gpu_a_pod_holds_part_of_is_refused() -> None:
    cluster = SimCluster(GPU_MODEL, 1, ((),), gpus_per_node=1)
    node = cluster.nodes[0]
    cluster.repartition(node, 0, static_layout(GPU_MODEL, ALL_BALANCED))
    cluster.hold_instance(node, node.gpus[0], 0, "busy")
    with pytest.raises(DisruptionError, match="busy"):
        cluster.repartition(node, 0, static_layout(GPU_MODEL, ["7g.80gb"]))
    assert node.gpus[0].holders[0] == "busy"


@pytest.mark.parametrize("policy_id", ["B4", "B5", "migslice", "migslice-proposed"])
def test_the_same_seed_gives_the_same_result(policy_id: str) -> None:
    config = SaturationConfig(nodes=1)
    first = run_saturation(synthetic_workload(), policy(policy_id, 8), 7, config)
    again = run_saturation(synthetic_workload(), policy(policy_id, 8), 7, config)
    assert first == again


def test_different_seeds_draw_different_arrivals() -> None:
    workload = synthetic_workload()
    assert sample_arrivals(workload, 56, 130, 1) != sample_arrivals(workload, 56, 130, 2)


def test_arrivals_stop_once_demand_reaches_the_target_load() -> None:
    arrivals = sample_arrivals(synthetic_workload(), 560, 130, 3)
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
    fixed = run_sequence(arrivals, policy("B4"), config)
    ours = run_sequence(arrivals, Migslice(), config)
    assert fixed.placed_pods == 2  # only the 2g and the 1g fit all-balanced GPUs
    assert ours.placed_pods == 3  # 4g and 7g on re-partitioned GPUs, the 1g beside the 4g
    assert ours.points[-1].slice_allocation > fixed.points[-1].slice_allocation
    assert ours.gpus_repartitioned == 2
    assert ours.disrupted_pods == 0


def test_migslice_places_on_the_node_the_extender_scores_highest() -> None:
    cluster = SimCluster(GPU_MODEL, 3, policy("B2").initial_layouts(GPU_MODEL), gpus_per_node=2)
    cluster.hold_instance(cluster.nodes[1], cluster.nodes[1].gpus[0], 0, "existing")
    demand = demand_for(SimPod("new", "1g.10gb"))
    scores = score_nodes(demand, [(n.name, cluster.prepared(n)) for n in cluster.nodes])
    best = max(scores, key=lambda item: item[1])
    chosen = extender_choice(cluster, demand)
    assert chosen is not None and chosen.name == best[0] == "node-0001"


def test_the_whole_gpu_baseline_holds_whole_gpus_on_one_node() -> None:
    arrivals = [SimPod("a", "1g.10gb"), SimPod("b", "7g.80gb", 2), SimPod("c", "7g.80gb", 2)]
    result = run_sequence(arrivals, policy("B0"), TINY)
    assert (result.placed_pods, result.failed_pods) == (1, 2)
    assert result.points[-1].slice_allocation == 0.5  # the 1g pod holds one of two GPUs
    assert result.points[-1].demand_allocation == 1 / 14
