"""B5 (nos's partitioner) and B6 (FGD for MIG) do what their sources do."""

from __future__ import annotations

from collections import Counter

import pytest

from migslice.mig import Layout, place
from migslice.sim import GPU_MODEL, SimPod
from migslice.sim.cluster import SimCluster
from migslice.sim.fgd import FgdForMig, FgdPlacer, typical_shapes
from migslice.sim.nos import NOS_A100_80GB, NosLike, NosPlacer, realize
from migslice.sim.placement import apply_changes, static_layout
from migslice.sim.static import StaticBestFit, stock_mixed_layouts

SEVEN = static_layout(GPU_MODEL, ["7g.80gb"])


def counts(layout: Layout) -> dict[str, int]:
    return dict(Counter(p.profile for p in layout))


def nos(nodes: int = 1, gpus: int = 1, tie: str = "table", seed: int = 0) -> NosPlacer:
    policy = NosLike(tie=tie)
    cluster = SimCluster(GPU_MODEL, nodes, policy.initial_layouts(GPU_MODEL), gpus_per_node=gpus)
    placer = policy.start(cluster, seed)
    assert isinstance(placer, NosPlacer)
    return placer


def test_nos_starts_every_gpu_with_the_geometry_of_fewest_profiles_one_7g() -> None:
    assert NosLike().initial_layouts(GPU_MODEL) == (SEVEN,)


def test_every_nos_geometry_is_a_legal_layout() -> None:
    assert len(NOS_A100_80GB) == 12
    for geometry in NOS_A100_80GB:
        layout = realize(GPU_MODEL, (), geometry)
        assert layout is not None and counts(layout) == dict(geometry)


def test_nos_re_shapes_the_free_part_of_a_gpu_in_use() -> None:
    placer = nos(tie="table")
    cluster, node = placer.cluster, placer.cluster.nodes[0]
    apply_changes(cluster, placer.reshape([SimPod("a", "3g.40gb")]))
    assert counts(tuple(node.gpus[0].instances)) == {"3g.40gb": 2}  # first table row with 3g
    assert placer.place(SimPod("a", "3g.40gb")) is not None
    changes = placer.reshape([SimPod("b", "1g.10gb")])
    apply_changes(cluster, changes)
    gpu = node.gpus[0]
    assert counts(tuple(gpu.instances)) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    assert gpu.holders.count("a#0") == 0 and "a" in gpu.holders  # a keeps its instance


def test_nos_breaks_ties_at_random_with_the_seed() -> None:
    seen = set()
    for seed in range(12):
        placer = nos(tie="random", seed=seed)
        apply_changes(placer.cluster, placer.reshape([SimPod("a", "1g.10gb")]))
        seen.add(tuple(sorted(counts(tuple(placer.cluster.nodes[0].gpus[0].instances)).items())))
    assert len(seen) > 2  # every geometry with a 1g provides the one lacking instance


@pytest.mark.parametrize(("tie", "instances"), [("most", 7), ("fewest", 3)])
def test_the_tie_break_variants_pick_by_instance_count(tie: str, instances: int) -> None:
    placer = nos(tie=tie)
    apply_changes(placer.cluster, placer.reshape([SimPod("a", "1g.10gb")]))
    assert len(placer.cluster.nodes[0].gpus[0].instances) == instances


def test_nos_counts_lacking_slices_against_the_whole_cluster() -> None:
    # two free 7g instances on two nodes: a 2 x 7g pod lacks nothing cluster-wide, so nos
    # plans nothing for it, although no node can take it
    placer = nos(nodes=2, gpus=1)
    assert placer.place(SimPod("a", "7g.80gb", 2)) is None
    assert placer.reshape([SimPod("a", "7g.80gb", 2)]) == ()


def test_nos_plans_a_batch_smallest_profile_first_on_nodes_in_name_order() -> None:
    placer = nos(nodes=2, gpus=1, tie="table")
    cluster = placer.cluster
    placer.place(SimPod("busy", "7g.80gb"))
    batch = [SimPod("big", "3g.40gb"), SimPod("small", "1g.10gb")]
    changes = placer.reshape(batch)
    assert {c.node.name for c in changes} == {"node-0001"}
    [change] = changes
    # the first table row providing both lacking instances; the pods added smallest first
    assert counts(change.new) == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    assert placer.served == {1: ["small", "big"]}
    apply_changes(cluster, changes)
    assert placer.place(batch[0]) is not None and placer.place(batch[1]) is not None


def test_realize_keeps_the_held_instances_in_place() -> None:
    held = (place(GPU_MODEL, "3g.40gb", 4),)
    layout = realize(GPU_MODEL, held, (("1g.10gb", 3), ("3g.40gb", 1)))
    assert layout is not None and held[0] in layout
    assert realize(GPU_MODEL, (place(GPU_MODEL, "1g.10gb", 3),), (("4g.40gb", 1),)) is None


def test_fgd_takes_the_shapes_that_make_up_95_percent_of_the_pods() -> None:
    pods = (
        [SimPod("a", "1g.10gb")] * 90 + [SimPod("b", "7g.80gb")] * 8 + [SimPod("c", "2g.20gb")] * 2
    )
    shapes = dict(typical_shapes(pods))
    assert set(shapes) == {("1g.10gb", 1), ("7g.80gb", 1)}
    assert shapes[("1g.10gb", 1)] == pytest.approx(90 / 98)


def test_fgd_creates_an_instance_where_fragmentation_grows_least_and_destroys_it_after() -> None:
    shapes = (("7g.80gb", 1), 0.5), (("1g.10gb", 1), 0.5)
    policy = FgdForMig(shapes)
    cluster = SimCluster(GPU_MODEL, 1, policy.initial_layouts(GPU_MODEL), gpus_per_node=2)
    placer = policy.start(cluster, 0)
    assert isinstance(placer, FgdPlacer)
    first = placer.place(SimPod("a", "1g.10gb"))
    second = placer.place(SimPod("b", "1g.10gb"))
    assert first is not None and second is not None
    # the second 1g goes beside the first: breaking the other GPU would strand a 7g
    assert first.units[0][0] == second.units[0][0]
    placer.depart("a")
    placer.depart("b")
    assert all(not gpu.instances for gpu in cluster.nodes[0].gpus)


def test_b4_puts_each_pod_where_the_fewest_compute_slices_stay_free() -> None:
    # one GPU per node, node-000n on stock config n (from 0): all-1g.10gb, all-1g.20gb, all-2g.20gb,
    # all-3g.40gb, all-4g.40gb, all-7g.80gb, all-balanced (1g + 1g + 2g + 3g)
    policy = StaticBestFit("B4", stock_mixed_layouts(GPU_MODEL, gpus_per_node=1))
    cluster = SimCluster(GPU_MODEL, 7, policy.initial_layouts(GPU_MODEL), gpus_per_node=1)
    placer = policy.start(cluster, 0)
    chosen = [placer.place(SimPod(f"p{i}", "3g.40gb")) for i in range(4)]
    # all-3g keeps 3 then 0 slices free, all-balanced 4: the all-3g GPU twice, then balanced
    assert [a.node if a else None for a in chosen] == [
        "node-0003",
        "node-0003",
        "node-0006",
        None,
    ]
    two = placer.place(SimPod("q", "2g.20gb"))
    # all-2g.20gb would keep 4 free; the balanced GPU, now holding a 3g, keeps 2
    assert two is not None and two.node == "node-0006"
