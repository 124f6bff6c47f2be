"""B8, HAMi v2.10's MIG mode: its own test's placements (``mig_topology_test.go``
``TestSelectMigPlacementUsesBalancedPacking`` at v2.10.0), the profile chosen by memory, the
least used GPU first (spread) and the most used node (binpack)."""

from __future__ import annotations

from migslice.mig import CATALOG, Placed
from migslice.sim import GPU_MODEL, SaturationConfig, SimPod, make_policy, run_sequence
from migslice.sim.cluster import SimCluster, SimGpu, SimNode
from migslice.sim.hami import (
    ALLOWLIST,
    HamiMig,
    core,
    fit,
    gpu_count,
    memory_mb,
    select_candidate,
)


def test_hamis_own_sequence_on_an_a100_40gb() -> None:
    model = CATALOG.get("A100-40GB")
    layout: list[Placed] = []
    starts = []
    for profile in ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]:
        placed = select_candidate(model, layout, memory_mb(model, profile), allowlist=[profile])
        assert placed is not None and placed.profile == profile
        starts.append(placed.start)
        layout.append(placed)
    assert starts == [4, 0, 3, 2]


def test_the_profile_is_the_smallest_by_memory_then_slices() -> None:
    # 3g.40gb and 4g.40gb have the same memory (40,192 MB): a 40 GB request gets a 3g,
    # from the highest start, with 4g allowed or not; without 4g in the allowlist (the
    # chart's) a 40 GB request that finds no 3g gets the next larger profile, a 7g
    both = ["3g.40gb", "4g.40gb"]
    for allowlist in (both, ALLOWLIST):
        placed = select_candidate(GPU_MODEL, [], 40192, allowlist=allowlist)
        assert placed is not None and (placed.profile, placed.start) == ("3g.40gb", 4)
    small = [Placed(0, "1g.10gb", 1)]
    placed = select_candidate(GPU_MODEL, [Placed(4, "3g.40gb", 4)], 40192)
    assert placed is not None and (placed.profile, placed.start) == ("3g.40gb", 0)
    assert select_candidate(GPU_MODEL, [*small, Placed(4, "3g.40gb", 4)], 40192) is None
    assert "4g.40gb" not in ALLOWLIST
    # 2g.20gb and the others from the lowest start, 1g from the highest
    two = select_candidate(GPU_MODEL, [], memory_mb(GPU_MODEL, "2g.20gb"))
    one = select_candidate(GPU_MODEL, [], memory_mb(GPU_MODEL, "1g.10gb"))
    assert two is not None and (two.profile, two.start) == ("2g.20gb", 0)
    assert one is not None and (one.profile, one.start) == ("1g.10gb", 6)


def test_cores_are_the_profiles_sms_in_percent_rounded_up() -> None:
    assert [core(GPU_MODEL, p) for p in ("1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb")] == [
        15,
        29,
        43,
        100,
    ]


def test_the_least_used_gpu_is_tried_first_ties_to_the_highest_index() -> None:
    gpus = [SimGpu(0, True), SimGpu(1, True, [Placed(6, "1g.10gb", 1)], ["x"]), SimGpu(2, True)]
    [(index, placed)] = fit(GPU_MODEL, gpus, ("1g.10gb", 1))
    assert (index, placed.start) == (2, 6)
    assert gpu_count(GPU_MODEL) == 7


def test_eight_small_pods_fill_one_gpus_1g_placements_from_the_top() -> None:
    gpu = SimGpu(0, True)
    starts = []
    for n in range(8):
        found = fit(GPU_MODEL, [gpu], ("1g.10gb", 1))
        if not found:
            break
        gpu.instances.append(found[0][1])
        gpu.holders.append(f"p{n}")
        starts.append(found[0][1].start)
    assert starts == [6, 5, 4, 3, 2, 1, 0]


def test_a_multi_gpu_pod_takes_one_7g_per_gpu() -> None:
    gpus = [SimGpu(i, True) for i in range(3)]
    assert [i for i, _ in fit(GPU_MODEL, gpus, ("7g.80gb", 2))] == [2, 1]
    assert fit(GPU_MODEL, gpus, ("7g.80gb", 4)) == []


def test_the_most_used_node_wins() -> None:
    cluster = SimCluster(GPU_MODEL, 3, [()], gpus_per_node=2)
    placer = HamiMig().start(cluster, 0)
    first = placer.place(SimPod("a", "1g.10gb"))
    second = placer.place(SimPod("b", "2g.20gb"))
    assert first is not None and second is not None
    assert second.node == first.node
    # spread inside the node: the second pod on the other GPU
    assert {u[0] for u in first.units} != {u[0] for u in second.units}


def test_b8_runs_in_mode_a_and_never_leaves_an_illegal_layout() -> None:
    pods = [SimPod(f"p{i}", p) for i, p in enumerate(["1g.10gb", "4g.40gb", "2g.20gb"] * 8)]
    config = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)
    policy = make_policy("B8", GPU_MODEL, pods, gpus=4)
    assert isinstance(policy, HamiMig)
    result = run_sequence(pods, policy, config)
    assert result.placed_pods > 0 and result.disrupted_pods == 0


A100 = CATALOG.get("A100-80GB")


def _placed(profile: str, start: int) -> Placed:
    return Placed(start, profile, A100.profile(profile).memory_slices)


def test_hamis_reported_placement_capacity_example() -> None:
    """``TestCustomFilterUsesReportedPlacementCapacity`` (v2.10.0): with three 2g in use, a
    2g does not fit and a 1g takes the last placement, start 6."""
    used = [_placed("2g.20gb", 0), _placed("2g.20gb", 2), _placed("2g.20gb", 4)]
    assert select_candidate(A100, used, memory_mb(A100, "2g.20gb")) is None
    assert select_candidate(A100, used, memory_mb(A100, "1g.10gb")) == _placed("1g.10gb", 6)


def test_hamis_queued_allocations_on_one_gpu_example() -> None:
    """``TestCustomFilterIgnoresQueuedAllocationsForOtherGPUs``: two 1g on a GPU with one 1g
    placement left do not both fit there; with a second GPU they do."""
    busy = SimGpu(0, True)
    busy.instances.extend([_placed("2g.20gb", 0), _placed("2g.20gb", 2), _placed("2g.20gb", 4)])
    busy.holders.extend(["a", "b", "c"])
    assert fit(A100, [busy], ("1g.10gb", 2)) == []
    assert len(fit(A100, [busy, SimGpu(1, True)], ("1g.10gb", 2))) == 2


def test_a_pod_of_several_instances_tries_the_same_gpu_again() -> None:
    """``device.go`` (v2.10.0, MIG mode ``i++``): the next instance is tried on the same GPU,
    1g placements from the highest start."""
    got = fit(A100, [SimGpu(0, True), SimGpu(1, True)], ("1g.10gb", 3))
    assert [index for index, _ in got] == [1, 1, 1]
    assert [placed.start for _, placed in got] == [6, 5, 4]


def test_the_node_score_is_hamis_default_score_before_the_pod() -> None:
    """``node_policy.go`` ``ComputeDefaultScore``: used/count + cores/total + memory/total,
    over the node's GPUs, weights 1."""
    from migslice.sim.hami import node_score

    cluster = SimCluster(A100, 1, [()], gpus_per_node=2)
    node = cluster.nodes[0]
    node.gpus[0].instances.append(_placed("3g.40gb", 4))
    node.gpus[0].holders.append("p")
    expected = 1 / 14 + 43 / 200 + 40192 / (2 * 81920)
    assert abs(node_score(A100, node) - expected) < 1e-12


def _hold(cluster: SimCluster, node: SimNode, placed: Placed) -> None:
    gpu = node.gpus[0]
    cluster.hold_instance(node, gpu, cluster.create_instance(node, gpu, placed), pod="earlier")


def test_hami_sees_only_kube_schedulers_window_of_nodes() -> None:
    """HAMi's chart sets no ``percentageOfNodesToScore`` (``charts/hami/templates/scheduler/
    configmap.yaml`` at v2.10.0) and its resources are ``ignoredByScheduler``: kube-scheduler
    v1.37.2 passes only ``numFeasibleNodesToFind`` nodes from ``nextStartNodeIndex`` to the
    extender (``schedule_one.go`` 695-700, 787, 866-891), and HAMi's ``Filter`` scores those
    alone (``scheduler.go`` 1095). With 200 nodes the window is 100: a used node at position
    150 is not offered to the first pod, which goes to an (empty) node of positions 0-99; the
    next window (100-199) holds it, and binpack takes it."""
    cluster = SimCluster(A100, 200, [()], gpus_per_node=1)
    busy = cluster.nodes[150]
    _hold(cluster, busy, _placed("3g.40gb", 4))
    placer = HamiMig(percentage_of_nodes_to_score=0).start(cluster, 0)
    first = placer.place(SimPod("a", "1g.10gb"))
    assert first is not None and cluster.by_name[first.node].position < 100
    second = placer.place(SimPod("b", "1g.10gb"))
    assert second is not None and second.node == busy.name
    # every node offered (the headline's B8, as migslice's row sees every node): the most
    # used node at once
    cluster = SimCluster(A100, 200, [()], gpus_per_node=1)
    _hold(cluster, cluster.nodes[150], _placed("3g.40gb", 4))
    everyone = HamiMig().start(cluster, 0)  # the headline's: every node offered
    got = everyone.place(SimPod("a", "1g.10gb"))
    assert got is not None and got.node == cluster.nodes[150].name


def test_a_pod_no_node_of_its_window_fits_is_tried_in_the_next_window() -> None:
    """The pod fails the cycle (HAMi's ``Filter`` answers no node) and kube-scheduler tries it
    again from the advanced start: in mode A it is placed if any node fits."""
    cluster = SimCluster(A100, 200, [()], gpus_per_node=1)
    for node in cluster.nodes[:100]:
        _hold(cluster, node, _placed("1g.10gb", 6))
    placer = HamiMig(percentage_of_nodes_to_score=0).start(cluster, 0)
    got = placer.place(SimPod("a", "7g.80gb"))
    assert got is not None and cluster.by_name[got.node].position >= 100


def test_a_1g_20gb_pod_asks_nvmls_19968_mb_and_gets_a_2g_20gb() -> None:
    """NVML sizes A100-80GB's 1g.20gb at 19,968 MB, as 2g.20gb (the project's own DRA fixture,
    tests/fixtures/dra/generator-main.go.txt 55-56, and a100-80gb-dynamicmig-1gpu-
    resourceslices.json: ``gpu-0-mig-1g20gb-15-*`` capacity memory 19968Mi). A pod of profile
    p asks p's NVML memory (the module docstring), so a 1g.20gb pod (workload mapping M3) is
    given the smallest allowed profile of at least 19,968 MB: 2g.20gb (``selectMigCandidate``,
    ``device.go`` 621-639), not a 3g.40gb from the name's 20,480."""
    assert memory_mb(A100, "1g.20gb") == memory_mb(A100, "2g.20gb") == 19968
    placed = select_candidate(A100, [], memory_mb(A100, "1g.20gb"))
    assert placed is not None and placed.profile == "2g.20gb"
