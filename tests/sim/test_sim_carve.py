"""Carve mode in the simulator: the controller's carve branch plans instances next to running
ones, the node agent's stand-in carries them out after the carve time, and no instance a pod
holds is ever destroyed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from migslice.mig import place
from migslice.objects.carve_handshake import CarveGpu, CarveRequest, Doomed, Slot
from migslice.sim import (
    GPU_MODEL,
    Arrival,
    ChurnConfig,
    Lifetimes,
    SaturationConfig,
    SimPod,
    make_policy,
    run_arrivals,
    run_sequence,
    synthetic_workload,
)
from migslice.sim.carving import carve_node
from migslice.sim.cluster import DisruptionError, SimCluster

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
