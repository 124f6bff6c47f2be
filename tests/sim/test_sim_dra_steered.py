"""M-dra, migslice on DynamicMIG nodes: inside a node it takes the device the product's steer
prefers (:func:`migslice.scheduling.dra_steer.steer_of` over NVIDIA's slices), whatever the
node holds; across nodes, the extender's score (the fullest GPU in use first)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.inventory import ClusterIndex
from migslice.mig import CATALOG
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import PreparedNode, prepare_node
from migslice.scheduling.dra_steer import steer_of
from migslice.sim import GPU_MODEL, SaturationConfig, SimPod, make_policy, run_sequence
from migslice.sim.cluster import SimCluster, SimGpu
from migslice.sim.dra_steered import DraSteered, steered_devices
from tests.dra_objects import fixture_slices, make_claim, make_dra_node, migslice_classes

NODE = "gpu-node-a100-8"
EIGHT_GPUS = "a100-80gb-dynamicmig-8gpu-resourceslices.json"
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


def _product_preferred(
    held: Sequence[str],
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
    return dict(steer_of(pool, state.dra.use).preferred), names


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=14))
def test_inside_a_node_it_takes_the_device_the_steer_prefers(arrivals: list[str]) -> None:
    model = CATALOG.get("A100-80GB")
    gpus = [SimGpu(i, True) for i in range(8)]
    held: list[str] = []
    for profile in arrivals:
        preferred, names = _product_preferred(held)
        for other in PROFILES:
            _, chosen = steered_devices(model, gpus, (other, 1))
            if other in preferred:
                ((g, placed),) = chosen
                assert names[(g, other, placed.start)] == preferred[other], (held, other)
        _, chosen = steered_devices(model, gpus, (profile, 1))
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


def test_m_dra_runs_in_mode_a_and_never_leaves_an_illegal_layout() -> None:
    pods = [SimPod(f"p{i}", p) for i, p in enumerate(["1g.10gb", "3g.40gb", "7g.80gb"] * 8)]
    config = SaturationConfig(nodes=2, gpus_per_node=2, check_layouts=True)
    result = run_sequence(pods, make_policy("M-dra", GPU_MODEL, pods, gpus=4), config)
    assert result.placed_pods > 0 and result.disrupted_pods == 0
