"""M-dra, migslice on DynamicMIG nodes: inside a node it takes the device the product's steer
prefers (:func:`migslice.scheduling.dra_steer.steer_of` over NVIDIA's slices), whatever the
node holds; across nodes, the extender's score (the fullest GPU in use first)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.inventory import ClusterIndex
from migslice.mig import CATALOG, Placed
from migslice.mig.stranding import NO_MIX
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import PreparedNode, prepare_node
from migslice.scheduling.dra_placement import STRANDING_SCORE
from migslice.scheduling.dra_steer import steer_of
from migslice.sim import (
    GPU_MODEL,
    Arrival,
    ChurnConfig,
    SaturationConfig,
    SimPod,
    make_policy,
    run_arrivals,
    run_sequence,
)
from migslice.sim.cluster import SimCluster, SimGpu
from migslice.sim.dra_steered import DraSteered, DraSteeredPlacer, steered_devices
from tests.dra_objects import fixture_slices, make_claim, make_dra_node, migslice_classes

NODE = "gpu-node-a100-8"
EIGHT_GPUS = "a100-80gb-dynamicmig-8gpu-resourceslices.json"
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def _product_preferred(
    held: Sequence[str], strand_guard: bool = False
) -> tuple[dict[str, str], dict[tuple[int, str, int], str]]:
    """The steer's preferred device per profile with the devices ``held``, and every device's
    name by (GPU, profile, start)."""
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    claims = [make_claim(f"c{i}", allocated=[(NODE, d)]) for i, d in enumerate(held)]
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(NODE),),
            resource_slices=tuple(fixture_slices(EIGHT_GPUS)),
            resource_claims=tuple(claims),
            device_classes=tuple(migslice_classes()),
        )
    )
    state = index.state_of(NODE)
    assert state is not None and state.dra is not None and state.dra.use is not None
    pool = state.dra.pool
    names = {
        (g, d.profile, d.start): d.name(gpu.minor)
        for g, gpu in enumerate(pool.gpus)
        for d in gpu.devices
        if d.profile is not None
    }
    return dict(steer_of(pool, state.dra.use, strand_guard=strand_guard).preferred), names


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=14), st.booleans())
def test_inside_a_node_it_takes_the_device_the_steer_prefers(
    arrivals: list[str], guard: bool
) -> None:
    model = CATALOG.get("A100-80GB")
    gpus = [SimGpu(i, True) for i in range(8)]
    held: list[str] = []
    for profile in arrivals:
        preferred, names = _product_preferred(held, guard)
        for other in PROFILES:
            _, chosen = steered_devices(model, gpus, (other, 1), strand_guard=guard)
            if other in preferred:
                ((g, placed),) = chosen
                assert names[(g, other, placed.start)] == preferred[other], (held, other)
        _, chosen = steered_devices(model, gpus, (profile, 1), strand_guard=guard)
        if not chosen:
            continue
        ((g, placed),) = chosen
        gpus[g].instances.append(placed)
        gpus[g].holders.append(f"p{len(held)}")
        held.append(names[(g, profile, placed.start)])


def test_small_claims_keep_the_4g_and_7g_placements_that_first_fit_ends() -> None:
    gpus = [SimGpu(i, True) for i in range(2)]
    for _ in range(2):
        _, ((g, placed),) = steered_devices(GPU_MODEL, gpus, ("1g.10gb", 1))
        gpus[g].instances.append(placed)
        gpus[g].holders.append("small")
    assert [p.start for p in gpus[0].instances] == [6, 4]
    _, ((g, four),) = steered_devices(GPU_MODEL, gpus, ("4g.40gb", 1))
    assert (g, four.start) == (0, 0)
    gpus[0].instances.append(four)
    _, ((g, seven),) = steered_devices(GPU_MODEL, gpus, ("7g.80gb", 1))
    assert (g, seven.start) == (1, 0)


def test_a_node_in_use_is_filled_before_an_idle_one_and_instances_end_with_their_pods() -> None:
    for seed in range(5):
        cluster = SimCluster(GPU_MODEL, 3, [()], gpus_per_node=2)
        placer = DraSteered().start(cluster, seed)
        first = placer.place(SimPod("a", "1g.10gb"))
        second = placer.place(SimPod("b", "2g.20gb"))
        assert first is not None and second is not None
        assert first.node == second.node
        node = cluster.by_name[first.node]
        assert sorted((p.profile, p.start) for p in node.gpus[0].instances) == [
            ("1g.10gb", 6),
            ("2g.20gb", 4),
        ]
        placer.depart("a")
        assert [p.start for p in node.gpus[0].instances] == [4]


def test_with_the_stranding_rule_a_3g_opens_an_idle_gpu_and_scores_1_where_it_cannot() -> None:
    three = GPU_MODEL.profile("3g.40gb")
    gpus = [SimGpu(i, True) for i in range(2)]
    gpus[0].instances.append(Placed(4, "3g.40gb", three.memory_slices))
    gpus[0].holders.append("a")
    score, ((g, placed),) = steered_devices(GPU_MODEL, gpus, ("3g.40gb", 1))
    assert (score, g, placed.start) == (10, 0, 0)
    score, ((g, placed),) = steered_devices(GPU_MODEL, gpus, ("3g.40gb", 1), strand_guard=True)
    assert (score, g, placed.start) == (3, 1, 4)
    score, ((g, placed),) = steered_devices(GPU_MODEL, gpus[:1], ("3g.40gb", 1), strand_guard=True)
    assert (score, g, placed.start) == (STRANDING_SCORE, 0, 0)


def test_the_stranding_rule_follows_the_held_mix_through_arrivals_and_departures() -> None:
    cluster = SimCluster(GPU_MODEL, 2, [()], gpus_per_node=2)
    placer = DraSteered().start(cluster, 0)
    assert isinstance(placer, DraSteeredPlacer)
    assert placer.place(SimPod("three", "3g.40gb")) is not None
    assert placer.mix.need == 4 and not placer.strand_guard
    for name, profile in (("s0", "1g.10gb"), ("s1", "1g.10gb")):
        assert placer.place(SimPod(name, profile)) is not None
    assert placer.mix.fill == 2 and not placer.strand_guard
    assert placer.place(SimPod("m", "2g.20gb")) is not None
    assert placer.mix.fill == 4 and placer.strand_guard
    placer.depart("s0")  # 3 of 4 is below nine tenths: off
    assert not placer.strand_guard
    for name in ("s1", "m", "three"):
        placer.depart(name)
    assert placer.mix == NO_MIX


def test_m_dra_runs_in_mode_a_and_never_leaves_an_illegal_layout() -> None:
    pods = [SimPod(f"p{i}", p) for i, p in enumerate(["1g.10gb", "3g.40gb", "7g.80gb"] * 8)]
    config = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)
    result = run_sequence(pods, make_policy("M-dra", GPU_MODEL, pods, gpus=4), config)
    assert result.placed_pods > 0 and result.disrupted_pods == 0


def test_with_the_reserve_a_small_pod_goes_beside_others_or_waits_and_a_large_one_does_not() -> (
    None
):
    cluster = SimCluster(GPU_MODEL, 2, [()], gpus_per_node=1)
    placer = DraSteered(large_reserve=True).start(cluster, 0)
    assert isinstance(placer, DraSteeredPlacer)
    # nothing large arrived: a small pod may take an idle GPU
    first = placer.place(SimPod("s0", "4g.40gb"))
    assert first is not None and first.node == "node-0000"
    assert (placer.idle, placer.free) == (1, 1 + 3 / 7)
    # a 7g arrives and takes the idle GPU: large pods are never held back
    assert placer.place(SimPod("big", "7g.80gb")) is not None
    placer.depart("big")
    # the share is 7 of 11 compute slices; a 2g goes beside the 4g, not on the idle GPU
    beside = placer.place(SimPod("s1", "2g.20gb"))
    assert beside is not None and beside.node == "node-0000"
    # node-0000 full but for 1g slices: a 2g would break the idle GPU the reserve keeps
    assert placer.place(SimPod("s2", "2g.20gb")) is None
    # without the reserve, it takes it
    plain = DraSteered().start(SimCluster(GPU_MODEL, 2, [()], gpus_per_node=1), 0)
    for name, profile in (("s0", "4g.40gb"), ("s1", "2g.20gb")):
        assert plain.place(SimPod(name, profile)) is not None
    taken = plain.place(SimPod("s2", "2g.20gb"))
    assert taken is not None and taken.node == "node-0001"


def test_a_pod_held_back_by_the_reserve_takes_the_idle_gpu_once_it_has_waited_max_hold() -> None:
    # mode B, 2 nodes x 1 A100: a 4g and a 2g fill node-0000 but for 1g slices, a 7g came and
    # went, so the reserve keeps node-0001 whole; a second 2g arriving at 20 s is held back
    arrivals = [
        Arrival(0.0, SimPod("s0", "4g.40gb"), 1000.0),
        Arrival(1.0, SimPod("big", "7g.80gb"), 1.0),
        Arrival(10.0, SimPod("s1", "2g.20gb"), 1000.0),
        Arrival(20.0, SimPod("s2", "2g.20gb"), 1000.0),
    ]
    config = ChurnConfig(nodes=2, gpus_per_node=1, patience_s=100.0, keep_log=True)

    def placed(max_hold_s: float) -> dict[str, tuple[float, str]]:
        policy = DraSteered(large_reserve=True, max_hold_s=max_hold_s)
        result = run_arrivals(arrivals, policy, config)
        return {p.pod: (p.time_s, p.node) for p in result.placements}

    held = placed(30.0)
    assert held["s1"] == (10.0, "node-0000")
    assert held["s2"] == (50.0, "node-0001")  # 30 s after it arrived, on the idle GPU
    # held longer than its patience: it gives up, and the GPU stays whole
    assert "s2" not in placed(1000.0)


def test_with_3g_pods_held_a_2g_leaves_room_for_a_3g_and_a_second_2g() -> None:
    # Two 3g fill GPU 0's memory (no 1g/2g held: the stranding rule is off) and turn the
    # full-compute rule on. On GPU 1, 2g@4 would keep the 4g placement, but then the 3g takes
    # 3g@0 and the second 2g has no start left (the A100's are 0, 2 and 4): 2g@0, 3g@4 and
    # 2g@2 use all 7 compute slices.
    arrivals = [
        SimPod("a", "3g.40gb"),
        SimPod("b", "3g.40gb"),
        SimPod("c", "2g.20gb"),
        SimPod("d", "3g.40gb"),
        SimPod("e", "2g.20gb"),
    ]
    tiny = SaturationConfig(nodes=1, gpus_per_node=2, check_layouts=True)
    policy = make_policy("M-dra", GPU_MODEL, arrivals, gpus=2)
    result = run_sequence(arrivals, policy, tiny)
    assert (result.placed_pods, result.failed_pods) == (5, 0)
