"""Carve mode in the simulator: the controller's carve branch plans instances next to running
ones, the node agent's stand-in carries them out after the carve time, and no instance a pod
holds is ever destroyed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import place
from migslice.names import MODE_CARVE
from migslice.objects.carve_handshake import CarveGpu, CarveRequest, Doomed, Slot
from migslice.repartition import carved_gpus
from migslice.sim import (
    GPU_MODEL,
    Arrival,
    ChurnConfig,
    Lifetimes,
    SaturationConfig,
    SimPod,
    Workload,
    make_policy,
    run_arrivals,
    run_saturation,
    run_sequence,
    synthetic_workload,
)
from migslice.sim.carving import carve_node, carve_reshape
from migslice.sim.cluster import DisruptionError, SimCluster
from migslice.sim.ours import Migslice, MigslicePlacer, demand_for
from migslice.sim.placement import LayoutChange, Placer

CONFIG = ChurnConfig(
    nodes=1,
    gpus_per_node=1,
    lifetimes=Lifetimes(median_s=10.0, p90_s=100.0),
    duration_lifetimes=40.0,
    warmup_lifetimes=0.0,
    patience_s=300.0,
    t_carve_s=5.0,
    keep_log=True,
)


def test_a_pod_gets_an_instance_carved_beside_a_running_one() -> None:
    arrivals = (
        Arrival(0.0, SimPod("a", "4g.40gb"), 1000.0),
        Arrival(40.0, SimPod("b", "3g.40gb"), 100.0),
    )
    policy = make_policy("M-carve", GPU_MODEL, synthetic_workload().pods, gpus=1)
    result = run_arrivals(arrivals, policy, CONFIG)
    placed = {p.pod: p for p in result.placements}
    # a: pending from 0, counts at 10 s (carve mode's min pending), carved in the 15 s
    # round, usable 5 s later
    assert placed["a"].time_s == 20.0
    # b: counts at 50 s; the node carved for a is left alone 60 s after the 30 s round saw
    # the agent's success, so the 90 s round carves, and b runs from 95 s on the same GPU
    assert placed["b"].time_s == 95.0
    assert placed["b"].gpus == placed["a"].gpus == (0,)
    assert result.disrupted_pods == 0 and result.repartitions == 2
    assert result.repartition_waits.count == 2
    # before its carve was planned, a waited 15 s (min pending, then the round), b 50 s
    # (min pending, then the cooldown)
    assert (result.repartition_leads.p50_s, result.repartition_leads.p99_s) == (15.0, 50.0)
    assert result.repartition_waits.p99_s == 55.0


def test_a_carve_planned_for_a_pod_waits_as_long_as_the_carve_time() -> None:
    arrivals = (Arrival(0.0, SimPod("a", "2g.20gb"), 100.0),)
    policy = make_policy("M-carve", GPU_MODEL, synthetic_workload().pods, gpus=1)
    for t_carve in (2.0, 30.0):
        result = run_arrivals(arrivals, policy, replace(CONFIG, t_carve_s=t_carve))
        [placement] = result.placements
        assert placement.time_s == 15.0 + t_carve


@pytest.mark.parametrize("policy_id", ["B6", "B9"])
def test_a_per_pod_carver_charges_the_carve_time_and_counts_its_instances(policy_id: str) -> None:
    arrivals = (
        Arrival(0.0, SimPod("a", "2g.20gb"), 100.0),
        Arrival(10.0, SimPod("b", "3g.40gb"), 50.0),
    )
    policy = make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus=1)
    result = run_arrivals(arrivals, policy, replace(CONFIG, t_carve_s=7.0))
    assert [p.time_s for p in result.placements] == [0.0, 10.0]
    # each pod waits the carve time; both instances are created and destroyed in the run,
    # and no node is blocked for it
    assert result.waits.p99_s == 7.0
    assert (result.instance_creates, result.instance_destroys) == (2, 2)
    assert result.blocked_node_s == 0.0


@pytest.mark.parametrize("policy_id", ["B6", "B8", "B9"])
def test_a_pod_waiting_under_a_per_pod_carver_is_placed_when_room_frees(policy_id: str) -> None:
    arrivals = (
        Arrival(0.0, SimPod("a", "7g.80gb"), 50.0),
        Arrival(10.0, SimPod("b", "3g.40gb"), 50.0),
    )
    policy = make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus=1)
    result = run_arrivals(arrivals, policy, replace(CONFIG, t_carve_s=7.0))
    # b waits for a to end (a starts at 7 s, ends at 57 s), then its own carve
    assert [(p.pod, p.time_s) for p in result.placements] == [("a", 0.0), ("b", 57.0)]


def test_carve_mode_counts_the_instances_its_carves_create_and_the_node_time_they_block() -> None:
    arrivals = (Arrival(0.0, SimPod("a", "2g.20gb"), 100.0),)
    policy = make_policy("M-carve", GPU_MODEL, synthetic_workload().pods, gpus=1)
    result = run_arrivals(arrivals, policy, replace(CONFIG, t_carve_s=4.0))
    assert result.instance_creates >= 1
    assert result.blocked_node_s == 4.0 * result.repartitions


def test_the_node_agent_stand_in_never_destroys_an_instance_a_pod_holds() -> None:
    held = place(GPU_MODEL, "3g.40gb", 4)
    cluster = SimCluster(GPU_MODEL, 1, ((held,),), gpus_per_node=1)
    node = cluster.nodes[0]
    cluster.hold_instance(node, node.gpus[0], 0, pod="running")
    request = CarveRequest(
        "plan", (CarveGpu(0, destroy=(Doomed(4, "3g.40gb"),), create=(Slot(4, "4g.40gb"),)),)
    )
    with pytest.raises(DisruptionError):
        carve_node(cluster, node, request)


def test_mode_a_carves_the_free_part_of_a_gpu_in_use_where_mig_manager_mode_cannot() -> None:
    arrivals = [SimPod("a", "4g.40gb"), SimPod("b", "3g.40gb")]
    tiny = SaturationConfig(nodes=1, gpus_per_node=1, check_layouts=True)
    pods = synthetic_workload().pods
    carve = run_sequence(arrivals, make_policy("M-carve", GPU_MODEL, pods, gpus=1), tiny)
    idle_only = run_sequence(arrivals, make_policy("migslice", GPU_MODEL, pods, gpus=1), tiny)
    assert (carve.placed_pods, carve.failed_pods) == (2, 0)
    assert (idle_only.placed_pods, idle_only.failed_pods) == (1, 1)


def test_mode_a_carves_a_3g_apart_while_small_pods_can_fill_beside_it() -> None:
    # Two 2g pods and a 3g share GPU 0; the held 2g pods cover the 4 memory slices the 3g
    # leaves (the stranding rule is on), so the next 3g opens GPU 2 instead of pairing with
    # the 3g on GPU 1, and each 4g finds the start it needs beside a 3g.
    names = ["2g.20gb", "2g.20gb", "3g.40gb", "3g.40gb", "4g.40gb", "4g.40gb"]
    arrivals = [SimPod(f"p{i}", p) for i, p in enumerate(names)]
    tiny = SaturationConfig(nodes=1, gpus_per_node=3, check_layouts=True)
    result = run_sequence(
        arrivals, make_policy("M-carve", GPU_MODEL, synthetic_workload().pods, gpus=3), tiny
    )
    assert (result.placed_pods, result.failed_pods) == (6, 0)


def test_mode_a_carves_a_2g_where_a_3g_and_a_second_2g_still_fit_while_3g_pods_are_held() -> None:
    # Two 3g fill GPU 0's memory and turn the full-compute rule on (no 4g held). On GPU 1
    # a 2g at 4 would keep the 4g placement, but the next 3g could then take only start 0
    # and the second 2g no start at all: 2g@0, 3g@4 and 2g@2 use all 7 compute slices.
    names = ["3g.40gb", "3g.40gb", "2g.20gb", "3g.40gb", "2g.20gb"]
    arrivals = [SimPod(f"p{i}", p) for i, p in enumerate(names)]
    tiny = SaturationConfig(nodes=1, gpus_per_node=2, check_layouts=True)
    result = run_sequence(
        arrivals, make_policy("M-carve", GPU_MODEL, synthetic_workload().pods, gpus=2), tiny
    )
    assert (result.placed_pods, result.failed_pods) == (5, 0)


class EveryNodeCarver(MigslicePlacer):
    """Carve mode with the carve planner asked about every node for each pod (the plain
    call, what mode A did before it kept each node's cost)."""

    def reshape(self, pods: Sequence[SimPod]) -> tuple[LayoutChange, ...]:
        self.reshaped, changes = carve_reshape(self.cluster, demand_for(pods[0]))
        return changes


@dataclass(frozen=True)
class EveryNodeCarve(Migslice):
    def start(self, cluster: SimCluster, seed: int) -> Placer:
        cluster.agent_reports = True
        return EveryNodeCarver(cluster, self.settings, carve=True)


@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 10_000), nodes=st.integers(2, 4), mapping=st.sampled_from([0, 1]))
def test_carving_node_by_node_decides_as_the_planner_asked_about_every_node(
    seed: int, nodes: int, mapping: int
) -> None:
    config = SaturationConfig(nodes=nodes, gpus_per_node=2, check_layouts=True)
    workload = synthetic_workload() if mapping else _small_heavy_workload()
    fast = run_saturation(workload, Migslice("c", mode=MODE_CARVE), seed, config=config)
    full = run_saturation(workload, EveryNodeCarve("c", mode=MODE_CARVE), seed, config=config)
    assert fast == full
    assert fast.placed_pods > 0


def _small_heavy_workload() -> Workload:
    """Mostly 1g and 2g pods with a few 4g and 7g: many carves on GPUs in use."""
    profiles = ["1g.10gb"] * 6 + ["2g.20gb"] * 3 + ["4g.40gb", "7g.80gb"]
    pods = [SimPod(f"p{i}", p) for i, p in enumerate(profiles)]
    return Workload("small-heavy", tuple(pods))


class CheckedCarver(MigslicePlacer):
    """Carve mode that, before each carve, holds the GPUs the chooser keeps GPU by GPU equal
    to the planner's own :func:`carved_gpus` of every node's state."""

    def reshape(self, pods: Sequence[SimPod]) -> tuple[LayoutChange, ...]:
        for node in self.cluster.nodes:
            assert self.carver.carved(node) == carved_gpus(self.cluster.node_state(node))
        return super().reshape(pods)


@dataclass(frozen=True)
class CheckedCarve(Migslice):
    def start(self, cluster: SimCluster, seed: int) -> Placer:
        cluster.agent_reports = True
        return CheckedCarver(cluster, self.settings, carve=True)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), mapping=st.sampled_from([0, 1]))
def test_the_gpus_carving_keeps_gpu_by_gpu_are_the_planners_own(seed: int, mapping: int) -> None:
    config = SaturationConfig(nodes=3, gpus_per_node=2, check_layouts=True)
    workload = synthetic_workload() if mapping else _small_heavy_workload()
    checked = run_saturation(workload, CheckedCarve("c", mode=MODE_CARVE), seed, config=config)
    plain = run_saturation(workload, Migslice("c", mode=MODE_CARVE), seed, config=config)
    assert checked == plain and checked.placed_pods > 0
