"""What the simulator keeps between changes (per GPU version, per node version, the rank
indexes' change log) gives what working it out afresh gives, after any placements,
departures and re-partitions: a cache gone stale would fail here."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.mig import place
from migslice.repartition import held_mix
from migslice.sim import GPU_MODEL, SimPod, make_policy, synthetic_workload
from migslice.sim.cluster import SimCluster, SimGpu, SimNode
from migslice.sim.dra_first_fit import DraFirstFitPlacer, first_fit_devices
from migslice.sim.dra_steered import DraSteeredPlacer, steered_devices
from migslice.sim.hami import HamiPlacer, fit
from migslice.sim.index import Rank, RankIndex
from migslice.sim.nos import NosGpu, NosPlacer
from migslice.sim.ours import DemandMix, MigslicePlacer, demand_for
from migslice.sim.placement import (
    LayoutChange,
    Placer,
    Reshaper,
    apply_changes,
    best_fit_choice,
    first_fit_picks,
    first_fit_rank,
)
from migslice.sim.static import stock_mixed_layouts

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
KINDS = [(p, 1) for p in PROFILES] + [("1g.10gb", 2), ("3g.40gb", 2), ("7g.80gb", 2)]

pods = st.lists(
    st.sampled_from(KINDS).map(lambda kind: SimPod(kind[0], kind[0], kind[1])),
    max_size=14,
).map(lambda ps: [SimPod(f"pod-{i}", p.profile, p.count) for i, p in enumerate(ps)])
leaving = st.lists(st.integers(0, 13), max_size=8)


def _run(placer: Placer, cluster: SimCluster, arrivals: list[SimPod], out: list[int]) -> None:
    """Place ``arrivals`` (re-partitioning where the placer can) and let the pods at
    positions ``out`` leave, oldest first."""
    for k, pod in enumerate(arrivals):
        if placer.place(pod) is None and isinstance(placer, Reshaper):
            if apply_changes(cluster, placer.reshape([pod])):
                placer.place(pod)
        if k in out and cluster.assignments:
            placer.depart(next(iter(cluster.assignments)))


def _policy_placer(policy_id: str, cluster_nodes: int = 2) -> tuple[SimCluster, Placer]:
    policy = make_policy(policy_id, GPU_MODEL, synthetic_workload().pods, gpus=2 * cluster_nodes)
    cluster = SimCluster(
        GPU_MODEL, cluster_nodes, policy.initial_layouts(GPU_MODEL), gpus_per_node=2
    )
    return cluster, policy.start(cluster, 0)


@pytest.mark.parametrize("keep", [1, 3, None])
@settings(max_examples=25, deadline=None)
@given(arrivals=pods, out=leaving, asked=st.lists(st.sampled_from(KINDS), max_size=14))
def test_the_rank_index_holds_every_nodes_rank_now_however_few_changes_it_keeps(
    keep: int | None, arrivals: list[SimPod], out: list[int], asked: list[tuple[str, int]]
) -> None:
    # an index asked about a few kinds now and then, its change log cut short (keep=1: it
    # drops half the log at every second change), against every node ranked afresh
    cluster, placer = _policy_placer("B3", 3)

    def rank(node: SimNode, kind: tuple[str, int]) -> Rank | None:
        choice = best_fit_choice(GPU_MODEL, node, kind)
        return None if choice is None else choice[0]

    index = RankIndex(cluster, rank, keep=keep)
    for k, pod in enumerate(arrivals):
        placer.place(pod)
        if k in out and cluster.assignments:
            placer.depart(next(iter(cluster.assignments)))
        if k < len(asked):
            kind = asked[k]
            afresh = sorted(r for n in cluster.nodes if (r := rank(n, kind)) is not None)
            assert index.entries(kind) == afresh
    for kind in KINDS:
        afresh = sorted(r for n in cluster.nodes if (r := rank(n, kind)) is not None)
        assert index.entries(kind) == afresh


def test_changing_the_cluster_while_its_nodes_are_iterated_in_order_raises() -> None:
    cluster = SimCluster(GPU_MODEL, 2, stock_mixed_layouts(GPU_MODEL, 2), gpus_per_node=2)
    index = RankIndex(cluster, first_fit_rank)
    nodes = index.ordered(("1g.10gb", 1))
    node = next(nodes)
    [(gpu, position)] = first_fit_picks(node, ("1g.10gb", 1))
    cluster.hold_instance(node, gpu, position, pod="p")
    with pytest.raises(RuntimeError):
        next(nodes)


@pytest.mark.parametrize("policy_id", ["B3", "B5", "B8", "B9", "B9-least-allocated", "M-dra"])
@settings(max_examples=15, deadline=None)
@given(arrivals=pods, out=leaving)
def test_what_a_placer_keeps_per_gpu_is_what_the_gpu_gives_afresh(
    policy_id: str, arrivals: list[SimPod], out: list[int]
) -> None:
    cluster, placer = _policy_placer(policy_id)
    checked = 0

    def same_as_afresh(node: SimNode) -> None:
        nonlocal checked
        afresh = copy.copy(node)  # the same GPUs built again, with nothing kept on them (a
        # deep copy would carry the kept values, and forget() would be checked against itself)
        afresh.gpus = [
            SimGpu(**{f.name: copy.deepcopy(getattr(g, f.name)) for f in fields(g) if f.compare})
            for g in node.gpus
        ]
        for gpu, fresh in zip(node.gpus, afresh.gpus, strict=True):
            assert gpu.counts() == fresh.counts()
            assert gpu.sorted_layout() == tuple(sorted(fresh.instances))
            if isinstance(placer, NosPlacer):
                assert placer.nos_gpu(node, gpu) == NosGpu.of(fresh)
        for kind in KINDS:
            assert first_fit_rank(node, kind) == (
                None if node.is_blocked or not first_fit_picks(afresh, kind) else (node.position,)
            )
            if isinstance(placer, DraFirstFitPlacer):
                plain = first_fit_devices(GPU_MODEL, afresh.gpus, kind)
                assert first_fit_devices(GPU_MODEL, node.gpus, kind, placer.free_of) == plain
                assert placer.rank(node, kind) == (
                    (node.position,) if plain and not node.is_blocked else None
                )
            if isinstance(placer, NosPlacer):
                reaches = any(
                    any(
                        h is None and p.profile == kind[0]
                        for p, h in zip(g.instances, g.holders, strict=True)
                    )
                    or placer.rules.can_provide(g.held_layout(), kind[0])
                    for g in afresh.gpus
                )
                assert placer.reachable_rank(node, kind) == ((node.position,) if reaches else None)
            if isinstance(placer, HamiPlacer):
                assert placer._fit(node, kind) == fit(GPU_MODEL, afresh.gpus, kind)
            if isinstance(placer, DraSteeredPlacer):
                assert steered_devices(GPU_MODEL, node.gpus, kind, kept=True) == (
                    steered_devices(GPU_MODEL, afresh.gpus, kind)
                )
        checked += 1

    cluster.listeners.append(same_as_afresh)  # after every change the cluster announces
    if isinstance(placer, NosPlacer):  # a plan works on copies of the GPUs kept: none changes
        plan = placer.reshape

        def reshape_and_check(pending: list[SimPod]) -> tuple[LayoutChange, ...]:
            changes = plan(pending)
            free: Counter[str] = Counter()
            for node in cluster.nodes:
                for gpu in node.gpus:
                    assert placer.nos_gpu(node, gpu) == NosGpu.of(gpu)
                    pairs = zip(gpu.instances, gpu.holders, strict=True)
                    free.update(p.profile for p, h in pairs if h is None)
            assert +placer.available() == free  # kept per node, summed as nodes change
            return changes

        placer.reshape = reshape_and_check  # type: ignore[method-assign]
    _run(placer, cluster, arrivals, out)
    assert checked >= len(cluster.assignments)


@settings(max_examples=25, deadline=None)
@given(arrivals=pods, out=leaving, asked=st.sampled_from(KINDS))
def test_the_demand_and_held_mixes_kept_per_gpu_are_what_every_node_gives_afresh(
    arrivals: list[SimPod], out: list[int], asked: tuple[str, int]
) -> None:
    # migslice's placer keeps, GPU by GPU until the GPU changes, the planner's demand mix
    # and the stranding rule's held mix; each asked now and then, against both worked out
    # from every node as it is now (the held mix as the controller reads it from the nodes)
    cluster, placer = _policy_placer("migslice", 3)
    assert isinstance(placer, MigslicePlacer)
    pending = [demand_for(SimPod("asked", *asked))]
    checked = 0

    def same_as_afresh(node: SimNode) -> None:
        nonlocal checked
        checked += 1
        if checked % 3:  # parts left dirty over several changes, as between re-partitions
            return
        kept = placer.mix.weights(pending)
        assert kept == pytest.approx(DemandMix(cluster).weights(pending), rel=1e-12)
        assert placer.held._now() == held_mix([cluster.node_state(n) for n in cluster.nodes])

    cluster.listeners.append(same_as_afresh)
    _run(placer, cluster, arrivals, out)
    assert checked >= len(cluster.assignments)


def test_a_layout_found_legal_once_leaves_an_illegal_one_of_the_same_profiles_refused() -> None:
    cluster = SimCluster(GPU_MODEL, 1, [()], gpus_per_node=2)
    [node] = cluster.nodes
    legal = (place(GPU_MODEL, "3g.40gb", 0), place(GPU_MODEL, "3g.40gb", 4))
    assert cluster.repartition(node, 0, legal)
    assert cluster.repartition(node, 1, legal)  # known legal: taken again
    overlapping = (place(GPU_MODEL, "3g.40gb", 0), place(GPU_MODEL, "3g.40gb", 2))
    with pytest.raises(ValueError, match="illegal layout"):
        cluster.repartition(node, 1, overlapping)
    assert tuple(node.gpus[1].instances) == legal
