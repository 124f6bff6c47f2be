"""kube-scheduler's node sampling (``percentageOfNodesToScore``), as v1.34's
``pkg/scheduler/schedule_one.go`` does it, for the simulator's migslice placer.

* ``numFeasibleNodesToFind``: under 100 nodes, every node; otherwise ``percentage`` of them
  (0 = adaptive: ``50 - nodes/125``, at least 5 %), and at least 100 nodes.
* ``findNodesThatPassFilters``: kube-scheduler's own filters run on the snapshot's node list
  from ``nextStartNodeIndex`` round the list, and stop once that many nodes passed; only
  those (in the order found) go to the extender's filter (``findNodesThatPassExtenders``)
  and then to scoring, the extender's prioritize included.
* ``findNodesThatFitPod``: ``nextStartNodeIndex`` advances by the nodes processed (those that
  passed plus those that failed a filter), modulo the node count; a pod for which fewer
  nodes than that passed processed every node, so the index stays where it was.

The node list is the snapshot's, which ``nodeTree.list`` builds zone by zone in round robin;
the simulator's nodes have one zone, so the list is node position order. kube-scheduler
filters in parallel (16 workers in chunks) and may process a few more nodes than the
sequential scan modelled here before the search is cancelled; the sample is the same set
up to those in flight.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(percentage: int, num_all_nodes: int) -> int:
    """``numFeasibleNodesToFind``: how many nodes must pass the filters before the search
    stops (``percentage`` 0 is the adaptive default)."""
    if not 0 <= percentage <= 100:
        raise ValueError(f"percentageOfNodesToScore {percentage} is not in 0..100")
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


@dataclass(frozen=True, slots=True)
class Window:
    """One scheduling cycle's search: the nodes that passed kube-scheduler's filters, in the
    order found (what the extender is sent), and how many nodes were processed."""

    sample: tuple[int, ...]
    processed: int
    next_start: int


class Positions(Sequence[int]):
    """The positions of a :class:`RankIndex` whose ranks are ``(position,)`` (a view)."""

    def __init__(self, entries: Sequence[tuple[int | float, ...]]) -> None:
        self._entries = entries

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return [int(e[0]) for e in self._entries[i]]
        return int(self._entries[i][0])


def search(feasible: Sequence[int], start: int, num_all_nodes: int, to_find: int) -> Window:
    """The nodes ``findNodesThatPassFilters`` keeps: ``feasible`` holds the positions (sorted)
    of the nodes that pass kube-scheduler's own filters; the scan starts at ``start``."""
    first = bisect.bisect_left(feasible, start)
    count = len(feasible)
    if count <= to_find:
        return Window((*feasible[first:], *feasible[:first]), num_all_nodes, start)
    sample = (*feasible[first : first + to_find], *feasible[: max(0, first + to_find - count)])
    processed = (sample[-1] - start) % num_all_nodes + 1
    return Window(sample, processed, (start + processed) % num_all_nodes)


def span(feasible: Sequence[int], start: int, num_all_nodes: int, to_find: int) -> int:
    """:func:`search`'s ``processed`` without building the sample: the sample is then the
    feasible nodes among the ``processed`` positions from ``start`` round the list."""
    if len(feasible) <= to_find:
        return num_all_nodes
    first = bisect.bisect_left(feasible, start)
    last = feasible[(first + to_find - 1) % len(feasible)]
    return (last - start) % num_all_nodes + 1


def first_found(
    feasible: Sequence[int], start: int, num_all_nodes: int, to_find: int
) -> tuple[int, int]:
    """:func:`search`'s first node and next start without building the sample."""
    first = bisect.bisect_left(feasible, start)
    position = feasible[first] if first < len(feasible) else feasible[0]
    return position, (start + span(feasible, start, num_all_nodes, to_find)) % num_all_nodes


@dataclass(slots=True)
class SampleTally:
    """What the sampling did over a run: scheduling cycles, nodes processed by kube-
    scheduler's filters, names sent to the extender, and pods the sample left pending while
    a node outside it could take them (kube-scheduler tries them again in a later cycle)."""

    percentage: int
    cycles: int = 0
    calls: int = 0
    """Cycles in which some node passed the filters (kube-scheduler calls no extender
    when none did)."""
    processed: int = 0
    names: int = 0
    left_pending: int = 0


def best_in_window(
    entries: Sequence[tuple[int | float, ...]], start: int, length: int, num_all_nodes: int
) -> int | None:
    """The position of the best-ranked entry whose node lies among the ``length`` positions
    from ``start`` round the list, ties to the lowest position. ``entries`` are ranks in
    ascending order, each ending with the node's position, as a
    :class:`~migslice.sim.index.RankIndex` keeps them with a policy whose rank is
    ``(key, position)``: one bisection per distinct key, not a scan of the window."""
    end = start + length
    i = 0
    while i < len(entries):
        key = entries[i][0]
        hi = bisect.bisect_left(entries, (key, num_all_nodes), i)
        if end > num_all_nodes and entries[i][-1] < end - num_all_nodes:
            return int(entries[i][-1])
        j = bisect.bisect_left(entries, (key, start), i, hi)
        if j < hi and entries[j][-1] < min(end, num_all_nodes):
            return int(entries[j][-1])
        i = hi
    return None
