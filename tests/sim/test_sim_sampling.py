"""kube-scheduler's node sampling in the simulator (migslice.sim.sampling), against cases
worked by hand from v1.34's pkg/scheduler/schedule_one.go: ``numFeasibleNodesToFind``
(under 100 nodes every node; percentage 0 = ``50 - nodes/125``, floor 5 %; at least 100
nodes), ``findNodesThatPassFilters`` (the filters run from ``nextStartNodeIndex`` round the
node list and stop at that many feasible nodes, which are what ``findNodesThatPassExtenders``
sends the extender) and ``findNodesThatFitPod`` (the start index advances by the nodes
processed, modulo the node count)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from migslice.sim.cluster import SimCluster
from migslice.sim.ours import Migslice, MigslicePlacer, extender_choice
from migslice.sim.placement import static_layout
from migslice.sim.sampling import (
    best_in_window,
    first_found,
    num_feasible_nodes_to_find,
    search,
    span,
)
from migslice.sim.static import stock_mixed_layouts
from migslice.sim.trace import GPU_MODEL, SimPod


@pytest.mark.parametrize(
    ("percentage", "nodes", "expected"),
    [
        (100, 50, 50),  # under minFeasibleNodesToFind: every node, whatever the setting
        (10, 99, 99),
        (100, 776, 776),
        (0, 776, 341),  # 50 - 776/125 = 44 %; 776 * 44 / 100 = 341
        (0, 5000, 500),  # 50 - 40 = 10 %
        (0, 6000, 300),  # 50 - 48 = 2 %, raised to minFeasibleNodesPercentageToFind 5 %
        (10, 776, 100),  # 77, raised to minFeasibleNodesToFind
        (30, 5000, 1500),
        (1, 5000, 100),
    ],
)
def test_num_feasible_nodes_to_find(percentage: int, nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(percentage, nodes) == expected


def test_percentage_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="percentageOfNodesToScore 101"):
        num_feasible_nodes_to_find(101, 500)


def test_search_stops_at_enough_feasible_nodes_and_advances_the_start() -> None:
    feasible = [1, 3, 4, 7, 8]
    window = search(feasible, 5, 10, 2)  # nodes 5, 6 fail; 7, 8 pass: 4 processed
    assert (window.sample, window.processed, window.next_start) == ((7, 8), 4, 9)
    window = search(feasible, 9, 10, 2)  # round the list: 9, 0 fail, 1 passes, 2 fails, 3
    assert (window.sample, window.processed, window.next_start) == ((1, 3), 5, 4)
    assert span(feasible, 5, 10, 2) == 4 and span(feasible, 9, 10, 2) == 5


def test_fewer_feasible_nodes_than_wanted_processes_every_node() -> None:
    window = search([1, 3, 4, 7, 8], 5, 10, 5)
    assert (window.sample, window.processed, window.next_start) == ((7, 8, 1, 3, 4), 10, 5)
    assert span([], 5, 10, 5) == 10


@given(st.sets(st.integers(0, 29), min_size=1).map(sorted), st.integers(0, 29), st.integers(1, 30))
def test_the_first_node_found_is_the_samples_first(
    feasible: list[int], start: int, to_find: int
) -> None:
    window = search(feasible, start, 30, to_find)
    assert first_found(feasible, start, 30, to_find) == (window.sample[0], window.next_start)


def test_best_in_window_keeps_the_best_rank_inside_the_window() -> None:
    entries: list[tuple[int | float, ...]] = [(-9, 2), (-9, 6), (-5, 0), (-5, 7)]
    assert best_in_window(entries, 3, 4, 10) == 6  # positions 3..6
    assert best_in_window(entries, 7, 5, 10) == 0  # 7, 8, 9, 0, 1: score 5, lowest position
    assert best_in_window(entries, 5, 10, 10) == 2  # every node: the global best
    assert best_in_window(entries, 8, 2, 10) is None  # 8, 9


def test_placer_sends_a_sample_and_rotates_the_start_index() -> None:
    layout = static_layout(GPU_MODEL, ["1g.10gb"] * 7)
    cluster = SimCluster(GPU_MODEL, 120, [layout], gpus_per_node=1)
    placer = MigslicePlacer(cluster, Migslice().settings, percentage_of_nodes_to_score=1)
    assert placer.to_find == 100
    first = placer.place(SimPod("a", "1g.10gb"))
    assert first is not None and first.node == cluster.nodes[0].name
    assert (placer.start_index, placer.sampling.names, placer.sampling.processed) == (100, 100, 100)
    second = placer.place(SimPod("b", "1g.10gb"))  # nodes 100..119 and 0..79
    assert second is not None
    assert cluster.by_name[second.node].position in (*range(100, 120), *range(80))
    assert placer.start_index == 80 and placer.sampling.left_pending == 0


def test_every_node_scored_at_100_is_the_extender_scan() -> None:
    layout = static_layout(GPU_MODEL, ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])
    cluster = SimCluster(GPU_MODEL, 130, [layout, None], gpus_per_node=2)
    placer = MigslicePlacer(cluster, Migslice().settings)
    for n, profile in enumerate(["1g.10gb", "2g.20gb", "3g.40gb"] * 40):
        pod = SimPod(f"p{n}", profile)
        expected = extender_choice(cluster, placer.demand((profile, 1)))
        placed = placer.place(pod)
        assert (placed.node if placed else None) == (expected.name if expected else None)


def test_partitioned_ahead_starts_every_gpu_with_b4s_stock_geometry() -> None:
    assert Migslice().initial_layouts(GPU_MODEL) == ((),)  # unpartitioned: carved on demand
    ahead = Migslice(partitioned_ahead=True).initial_layouts(GPU_MODEL)
    assert ahead == stock_mixed_layouts(GPU_MODEL)
    assert all(layout for layout in ahead)  # every GPU has instances from the start
