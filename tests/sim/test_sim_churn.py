"""Mode B (churn): arrivals and departures, the pending queue, and re-partitions decided as in
production (migslice's controller rounds, nos's batching windows) and applied by a MIG
Manager stand-in that keeps the whole node off-limits while it works."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.settings import RepartitionSettings
from migslice.repartition import ControllerSettings
from migslice.sim import (
    GPU_MODEL,
    Arrival,
    ChurnConfig,
    ChurnResult,
    Lifetimes,
    Policy,
    SimPod,
    make_policy,
    run_arrivals,
    run_churn,
    sample_churn,
    synthetic_workload,
)
from migslice.sim.cluster import Assignment, SimCluster
from migslice.sim.placement import static_layout
from migslice.sim.static import StaticBestFit

SHORT = Lifetimes(median_s=10.0, p90_s=100.0)
"""Lifetimes scaled down for tests (mean about 50 s)."""


def config(nodes: int = 1, gpus: int = 1, **changes: float) -> ChurnConfig:
    base = ChurnConfig(
        nodes=nodes,
        gpus_per_node=gpus,
        lifetimes=SHORT,
        duration_lifetimes=40.0,
        warmup_lifetimes=0.0,
        patience_s=100.0,
        t_reconf_s=15.0,
        keep_log=True,
        # times below count from the label; production labels 90 s after writing the config
        controller=ControllerSettings(config_propagation_s=0.0),
    )
    return replace(base, **changes)


@functools.cache
def policy(policy_id: str, gpus: int = 2) -> Policy:
    return make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus=gpus)


def one_7g() -> Policy:
    return StaticBestFit("static 7g", (static_layout(GPU_MODEL, ("7g.80gb",)),))


def arrive(name: str, profile: str, at_s: float, lifetime_s: float, count: int = 1) -> Arrival:
    return Arrival(at_s, SimPod(name, profile, count), lifetime_s)


def placed_at(result: ChurnResult, pod: str) -> float:
    [placement] = [p for p in result.placements if p.pod == pod]
    return placement.time_s


def test_the_controller_runs_with_the_extenders_production_settings() -> None:
    production = RepartitionSettings()
    ours = ChurnConfig()
    assert ours.interval_s == production.interval_s
    assert ours.controller.plan.min_pending_s == production.min_pending_s
    assert ours.controller.plan.cooldown_s == production.cooldown_s
    assert ours.controller.plan.max_nodes_in_flight == production.max_nodes_in_flight
    assert ours.controller.deadline_s == production.deadline_s
    assert ours.controller.backoff_s == production.backoff_s


def test_lifetimes_follow_the_trace_median_and_p90() -> None:
    lifetimes = Lifetimes()
    assert math.exp(lifetimes.mu) == pytest.approx(236.0)
    assert math.exp(lifetimes.mu + 1.2815515655 * lifetimes.sigma) == pytest.approx(4012.0)
    assert lifetimes.mean_s == pytest.approx(2718, abs=1)


def test_the_arrival_rate_offers_the_target_share_of_compute_slices() -> None:
    workload = synthetic_workload()
    cfg = config(nodes=2, gpus=8, prefill=False)
    capacity = 7 * 16
    arrivals = sample_churn(workload, capacity, cfg, seed=3)
    offered = sum(a.pod.compute_slices * a.lifetime_s for a in arrivals) / cfg.duration_s
    # heavy-tailed lifetimes: only roughly the target, but the right order
    assert 0.5 * 0.95 * capacity < offered < 2 * 0.95 * capacity
    assert len({a.pod.name for a in arrivals}) == len(arrivals)
    assert [a.time_s for a in arrivals] == sorted(a.time_s for a in arrivals)


@pytest.mark.parametrize("policy_id", ["migslice", "B5"])
def test_the_same_seed_gives_the_same_result(policy_id: str) -> None:
    workload = synthetic_workload()
    cfg = config(nodes=1, gpus=4, duration_lifetimes=6.0, warmup_lifetimes=1.0)
    first = run_churn(workload, policy(policy_id, 4), 7, config=cfg)
    again = run_churn(workload, policy(policy_id, 4), 7, config=cfg)
    other = run_churn(workload, policy(policy_id, 4), 8, config=cfg)
    assert first == again
    assert first.arrived_pods > 0
    assert other != first


def test_releasing_a_pod_frees_its_instances() -> None:
    cluster = SimCluster(GPU_MODEL, 1, (static_layout(GPU_MODEL, ("3g.40gb", "3g.40gb")),))
    node = cluster.nodes[0]
    gpu = node.gpus[0]
    cluster.hold_instance(node, gpu, 1, pod="pod-a")
    cluster.record(Assignment("pod-a", node.name, ((0, gpu.instances[1]),)))
    released = cluster.release("pod-a")
    assert released.pod == "pod-a"
    assert gpu.holders == [None, None]
    assert cluster.assignments == {}


def test_a_waiting_pod_gets_the_instance_its_predecessor_frees_on_departure() -> None:
    arrivals = (arrive("a", "7g.80gb", 0.0, 40.0), arrive("b", "7g.80gb", 10.0, 20.0))
    result = run_arrivals(arrivals, one_7g(), config())
    assert placed_at(result, "a") == 0.0
    assert placed_at(result, "b") == 40.0
    assert result.placed_pods == 2
    assert result.waits.p99_s == 30.0


def test_a_pod_that_waits_past_its_patience_gives_up() -> None:
    arrivals = (arrive("a", "7g.80gb", 0.0, 500.0), arrive("b", "7g.80gb", 10.0, 20.0))
    result = run_arrivals(arrivals, one_7g(), config())
    assert result.placed_pods == 1
    assert result.abandoned_pods == 1
    assert result.acceptance == 0.5


def test_a_pod_running_at_the_start_is_placed_first_and_not_measured() -> None:
    arrivals = (
        arrive("a", "7g.80gb", 0.0, 500.0),
        Arrival(0.0, SimPod("b", "7g.80gb"), 20.0, patient=True),
    )
    result = run_arrivals(arrivals, one_7g(), config(warmup_lifetimes=1.0))
    assert placed_at(result, "b") == 0.0
    assert placed_at(result, "a") == 20.0
    assert result.arrived_pods == 0


def test_migslice_re_partitions_after_min_pending_at_the_next_round_and_t_reconf() -> None:
    # arrives at 0; counts at 30 s (min pending); the 30 s round starts and applies the plan;
    # MIG Manager takes 15 s; the node takes the pod when it reports success
    result = run_arrivals((arrive("a", "2g.20gb", 0.0, 60.0),), policy("migslice", 1), config())
    assert placed_at(result, "a") == 45.0
    [reconfiguration] = result.reconfigurations
    assert (reconfiguration.decided_s, reconfiguration.usable_s) == (30.0, 45.0)
    assert result.repartition_waits.count == 1


def test_migslice_labels_the_node_once_mig_manager_can_have_read_its_config() -> None:
    """Production's controller: the config is written in the 30 s round, the label 90 s
    later (the round at 120 s), and MIG Manager's 15 s follow."""
    production = config(controller=ControllerSettings(), patience_s=300.0)
    result = run_arrivals((arrive("a", "2g.20gb", 0.0, 200.0),), policy("migslice", 1), production)
    assert placed_at(result, "a") == 135.0
    [reconfiguration] = result.reconfigurations
    assert (reconfiguration.decided_s, reconfiguration.usable_s) == (120.0, 135.0)


def test_nos_re_partitions_when_its_batch_closes_after_ten_idle_seconds() -> None:
    result = run_arrivals((arrive("a", "2g.20gb", 0.0, 60.0),), policy("B5", 1), config())
    assert placed_at(result, "a") == 25.0  # batch closes at 10 s, the agent takes 15 s
    assert result.repartition_waits.count == 1


def test_migslice_re_partitions_one_node_at_a_time_and_not_again_within_the_cooldown() -> None:
    arrivals = tuple(arrive(f"p{i}", "4g.40gb", 0.0, 2000.0) for i in range(3))
    cfg = config(nodes=3, t_reconf_s=60.0, patience_s=1000.0)
    result = run_arrivals(arrivals, policy("migslice", 3), cfg)
    starts = sorted((r.decided_s, r.node) for r in result.reconfigurations)
    # each in the round that observes the previous node's success (rounds every 15 s)
    assert [s for s, _ in starts] == [30.0, 90.0, 150.0]
    assert len({n for _, n in starts}) == 3


def test_migslice_leaves_a_node_alone_for_the_cooldown_after_re_partitioning_it() -> None:
    arrivals = (arrive("a", "4g.40gb", 0.0, 2000.0), arrive("b", "7g.80gb", 100.0, 50.0))
    cfg = config(nodes=1, gpus=2)
    result = run_arrivals(arrivals, policy("migslice", 2), cfg)
    times = sorted(r.decided_s for r in result.reconfigurations)
    assert times[0] == 30.0
    # the 7g pod needs the other GPU of the same node: not before the 600 s cooldown
    assert all(t == 30.0 or t >= 30.0 + 15.0 + 600.0 for t in times)
    assert result.abandoned_pods == 1


churn_arrivals = st.lists(
    st.tuples(
        st.floats(0.0, 400.0),
        st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
        st.floats(1.0, 300.0),
        st.sampled_from((1, 1, 1, 2)),
    ),
    max_size=12,
).map(
    lambda rows: tuple(
        arrive(f"pod-{i}", profile, at, life, count if profile == "7g.80gb" else 1)
        for i, (at, profile, life, count) in enumerate(sorted(rows))
    )
)


@pytest.mark.parametrize("policy_id", ["migslice", "M-carve", "B5", "B3"])
@settings(max_examples=12, deadline=None)
@given(arrivals=churn_arrivals)
def test_no_pod_is_disrupted_and_no_node_takes_a_pod_while_it_is_re_partitioned(
    policy_id: str, arrivals: tuple[Arrival, ...]
) -> None:
    result = run_arrivals(arrivals, policy(policy_id, 4), config(nodes=2, gpus=2, t_reconf_s=30))
    assert result.disrupted_pods == 0
    assert result.placed_pods + result.abandoned_pods == result.arrived_pods
    assert sum(c.arrived for c in result.classes) == result.arrived_pods
    assert sum(c.placed for c in result.classes) == result.placed_pods
    for change in result.reconfigurations:
        for placement in result.placements:
            if placement.node == change.node:
                assert not change.decided_s <= placement.time_s < change.usable_s


def test_acceptance_is_counted_by_pods_and_by_demanded_slices_per_class() -> None:
    arrivals = (
        arrive("small", "1g.10gb", 0.0, 1000.0),
        arrive("big", "7g.80gb", 1.0, 10.0),
    )
    result = run_arrivals(arrivals, one_7g(), config())
    assert result.acceptance == 0.5
    assert result.slice_acceptance == pytest.approx(7 / 8)
    by_name = {c.name: c for c in result.classes}
    assert by_name["7g.80gb"].acceptance == 1.0
    assert by_name["1g.10gb"].placed == 0  # a 1g pod never fits a static 7g GPU
