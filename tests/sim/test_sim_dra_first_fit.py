"""B9, DRA DynamicMIG first fit: inside a node it takes the devices the real allocator took
(``tests/fixtures/dra/allocator-first-fit.json``, written by kube-scheduler's own allocator
over NVIDIA's slices), the node is the first feasible one from kube-scheduler's rotating
start, and a pod's instances exist only while it runs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from migslice.mig import CATALOG
from migslice.sim import GPU_MODEL, SaturationConfig, SimPod, make_policy, run_sequence
from migslice.sim.cluster import SimCluster, SimGpu
from migslice.sim.dra_first_fit import DraFirstFit, first_fit_devices
from tests.paths import FIXTURES

CASES = [
    case
    for case in json.loads((FIXTURES / "dra" / "allocator-first-fit.json").read_text())
    if "dynamicmig" in case["slices"]
    and all("&" not in p and p != "gpu" for p, _ in case["claims"])
]


def _device(name: str | None) -> tuple[int, str, int] | None:
    """(gpu, profile as in the name, start) of ``gpu-<minor>-mig-<profile>-<id>-<start>``."""
    if name is None:
        return None
    parts = name.split("-")
    return int(parts[1]), "".join(parts[3:-2]), int(parts[-1])


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['slices'][:-20]}-{len(c['claims'])}")
def test_first_fit_takes_the_device_the_real_allocator_took(case: dict[str, Any]) -> None:
    model = CATALOG.get("A100-80GB" if case["slices"].startswith("a100") else "H100-80GB")
    gpus = 8 if "8gpu" in case["slices"] else 1
    held = [SimGpu(i, True) for i in range(gpus)]
    for step, (profile, device) in enumerate(case["claims"]):
        found = first_fit_devices(model, held, (profile, 1))
        got = None
        if found:
            index, placed = found[0]
            got = (index, placed.profile.replace(".", "").replace("+", ""), placed.start)
            held[index].instances.append(placed)
            held[index].holders.append(f"c{step}")
        assert got == _device(device), f"claim {step}: {profile}"


def test_a_claim_for_several_devices_takes_the_first_that_fit_one_after_the_other() -> None:
    gpus = [SimGpu(i, True) for i in range(3)]
    units = first_fit_devices(GPU_MODEL, gpus, ("7g.80gb", 2))
    assert [(i, p.start) for i, p in units] == [(0, 0), (1, 0)]
    assert first_fit_devices(GPU_MODEL, gpus, ("7g.80gb", 4)) == []


def _cluster(nodes: int) -> SimCluster:
    return SimCluster(GPU_MODEL, nodes, [()], gpus_per_node=2)


def test_the_first_small_pod_blocks_the_first_gpus_7g_and_4g() -> None:
    cluster = _cluster(1)
    placer = DraFirstFit().start(cluster, 0)
    assert placer.place(SimPod("a", "1g.10gb")) is not None
    assert [p.start for p in cluster.nodes[0].gpus[0].instances] == [0]
    placed = placer.place(SimPod("b", "4g.40gb"))
    assert placed is not None and placed.units[0][0] == 1


def test_nodes_are_taken_from_the_rotating_start_and_instances_go_with_their_pod() -> None:
    cluster = _cluster(3)
    placer = DraFirstFit().start(cluster, 0)
    first = placer.place(SimPod("a", "1g.10gb"))
    second = placer.place(SimPod("b", "1g.10gb"))
    assert first is not None and second is not None
    # under 100 nodes every node is checked, so the start stays and the first node wins
    assert first.node == second.node == cluster.nodes[0].name
    placer.depart("a")
    assert [p.start for p in cluster.nodes[0].gpus[0].instances] == [1]


def test_past_100_nodes_the_start_moves_on_by_the_nodes_processed() -> None:
    cluster = SimCluster(GPU_MODEL, 400, [()], gpus_per_node=1)
    placer = DraFirstFit().start(cluster, 0)
    names = []
    for i in range(3):
        placed = placer.place(SimPod(f"p{i}", "7g.80gb"))
        assert placed is not None
        names.append(placed.node)
    # 400 nodes: numFeasibleNodesToFind = 400 x (50 - 400 // 125) % = 188
    assert names == [cluster.nodes[0].name, cluster.nodes[188].name, cluster.nodes[376].name]


def test_b9_runs_in_mode_a_and_never_leaves_an_illegal_layout() -> None:
    pods = [SimPod(f"p{i}", p) for i, p in enumerate(["1g.10gb", "3g.40gb", "2g.20gb"] * 8)]
    config = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)
    policy = make_policy("B9", GPU_MODEL, pods, gpus=4)
    assert isinstance(policy, DraFirstFit)
    result = run_sequence(pods, policy, config)
    assert result.placed_pods > 0 and result.disrupted_pods == 0


def test_least_allocated_takes_the_node_holding_the_fewest_pods_first_found_on_ties() -> None:
    cluster = _cluster(3)
    placer = make_policy("B9-least-allocated", GPU_MODEL, [], gpus=6).start(cluster, 0)
    nodes = []
    for i in range(4):
        placed = placer.place(SimPod(f"p{i}", "1g.10gb"))
        assert placed is not None
        nodes.append(placed.node)
    names = [n.name for n in cluster.nodes]
    assert nodes == [names[0], names[1], names[2], names[0]]
    # inside the node, still first fit: the second pod on node 0 takes start 1
    assert [p.start for p in cluster.nodes[0].gpus[0].instances] == [0, 1]


def _least_allocated_score(pods: int, cpu_m: int = 64_000, memory: int = 512 << 30) -> int:
    """kube-scheduler v1.37.2's NodeResourcesFit score (default strategy LeastAllocated, cpu
    and memory weight 1) of a node holding ``pods`` pods that ask nothing: each counts the
    non-zero defaults, 100m and 200 MB (``resource_allocation.go`` 204,
    ``util/pod_resources.go`` 29-31), ``((allocatable - requested) * 100) / allocatable`` per
    resource (``least_allocated.go`` 52-60), averaged (45)."""
    cpu = (cpu_m - 100 * pods) * 100 // cpu_m
    mem = (memory - (200 << 20) * pods) * 100 // memory
    return (cpu + mem) // 2


@pytest.mark.xfail(
    strict=True,
    reason="B9's default node choice ignores NodeResourcesFit's LeastAllocated score "
    "(B9-least-allocated is the sensitivity variant); a departure, not fixed here",
)
def test_kube_schedulers_default_score_prefers_the_node_holding_fewer_pods() -> None:
    """Default plugins score with NodeResourcesFit (``default_plugins.go`` 43) and its
    LeastAllocated strategy reads the pods' non-zero requests, so on identical nodes a node
    that already holds a pod scores 99 and an empty one 100 (any allocatable): the second
    pod goes to another node. B9's docstring says every feasible node scores the same."""
    assert _least_allocated_score(1) < _least_allocated_score(0)
    cluster = _cluster(3)
    placer = DraFirstFit().start(cluster, 0)
    first = placer.place(SimPod("a", "1g.10gb"))
    second = placer.place(SimPod("b", "1g.10gb"))
    assert first is not None and second is not None
    assert second.node != first.node
