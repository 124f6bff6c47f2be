"""Mode B (churn): arrivals and departures, the pending queue, re-partitioning time."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
from migslice.sim.policies import StaticBestFit, static_layout

SHORT = Lifetimes(median_s=10.0, p90_s=100.0)
"""Lifetimes scaled down for tests (mean about 50 s)."""


def config(nodes: int = 1, gpus: int = 1, **changes: float) -> ChurnConfig:
    base = ChurnConfig(
        nodes=nodes,
        gpus_per_node=gpus,
        lifetimes=SHORT,
        duration_lifetimes=20.0,
        warmup_lifetimes=0.0,
        patience_s=100.0,
        keep_log=True,
    )
    return replace(base, **changes)


def policy(policy_id: str, gpus: int = 2) -> Policy:
    return make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus)


def one_7g() -> Policy:
    return StaticBestFit("static 7g", (static_layout(GPU_MODEL, ("7g.80gb",)),))


def arrive(name: str, profile: str, at_s: float, lifetime_s: float, count: int = 1) -> Arrival:
    return Arrival(at_s, SimPod(name, profile, count), lifetime_s)


def placed_at(result: ChurnResult, pod: str) -> float:
    [placement] = [p for p in result.placements if p.pod == pod]
    return placement.time_s


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


def test_the_same_seed_gives_the_same_result() -> None:
    workload = synthetic_workload()
    cfg = config(nodes=1, gpus=4, duration_lifetimes=6.0, warmup_lifetimes=1.0)
    first = run_churn(workload, policy("migslice", 4), seed=7, config=cfg)
    again = run_churn(workload, policy("migslice", 4), seed=7, config=cfg)
    other = run_churn(workload, policy("migslice", 4), seed=8, config=cfg)
    assert first == again
    assert first.arrived_pods > 0
    assert other != first


def test_releasing_a_pod_frees_its_instances() -> None:
    cluster = SimCluster(GPU_MODEL, 1, (static_layout(GPU_MODEL, ("3g.40gb", "3g.40gb")),))
    node = cluster.nodes[0]
    gpu = node.gpus[0]
    cluster.hold_instance(node, gpu, 1, "pod-a")
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


def test_a_pod_running_at_the_start_waits_as_long_as_it_takes_and_is_not_measured() -> None:
    arrivals = (
        arrive("a", "7g.80gb", 0.0, 500.0),
        Arrival(0.0, SimPod("b", "7g.80gb"), 20.0, patient=True),
    )
    result = run_arrivals(arrivals, one_7g(), config(warmup_lifetimes=1.0))
    assert placed_at(result, "b") == 500.0
    assert result.arrived_pods == 0
    assert result.mean_pending == 0.0


@pytest.mark.parametrize("policy_id", ["migslice", "B5"])
def test_a_pod_that_needs_a_re_partition_is_placed_after_t_reconf(policy_id: str) -> None:
    result = run_arrivals((arrive("a", "2g.20gb", 0.0, 60.0),), policy(policy_id, 1), config())
    assert result.acceptance == 1.0
    assert result.repartition_waits.count == 1
    assert result.repartition_delays.p99_s == 15.0
    assert result.waits.p50_s >= 15.0
    assert placed_at(result, "a") == 15.0
    [reconfiguration] = result.reconfigurations
    assert (reconfiguration.decided_s, reconfiguration.usable_s) == (0.0, 15.0)


def test_a_pod_that_can_claim_an_in_flight_re_partition_does_not_ask_for_another() -> None:
    arrivals = (arrive("a", "1g.10gb", 0.0, 60.0), arrive("b", "1g.10gb", 5.0, 60.0))
    result = run_arrivals(arrivals, policy("B5", 2), config(gpus=2))
    assert len(result.reconfigurations) == 1
    assert placed_at(result, "a") == placed_at(result, "b") == 15.0


churn_arrivals = st.lists(
    st.tuples(
        st.floats(0.0, 400.0),
        st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")),
        st.floats(1.0, 300.0),
        st.sampled_from((1, 1, 1, 2)),
    ),
    max_size=14,
).map(
    lambda rows: tuple(
        arrive(f"pod-{i}", profile, at, life, count if profile == "7g.80gb" else 1)
        for i, (at, profile, life, count) in enumerate(sorted(rows))
    )
)


@pytest.mark.parametrize("policy_id", ["migslice", "B5", "B3"])
@settings(max_examples=15, deadline=None)
@given(arrivals=churn_arrivals)
def test_no_placed_pod_is_disrupted_and_no_gpu_is_used_while_it_is_re_partitioned(
    policy_id: str, arrivals: tuple[Arrival, ...]
) -> None:
    result = run_arrivals(arrivals, policy(policy_id, 4), config(nodes=2, gpus=2, t_reconf_s=30))
    assert result.disrupted_pods == 0
    assert result.placed_pods + result.abandoned_pods == result.arrived_pods
    for change in result.reconfigurations:
        for placement in result.placements:
            if placement.node == change.node and change.gpu in placement.gpus:
                assert not change.decided_s <= placement.time_s < change.usable_s
