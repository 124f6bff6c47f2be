"""Placement indexes: per pod kind, the nodes ordered by a policy's rank, kept up to date
incrementally so that choosing a node costs O(log N) instead of a scan of every node.

A policy ranks a node for a pod kind (profile and instance count) with a tuple that ends with
the node's position (unique, so ties break to the lowest index as a scan would), or None when
the node cannot take that kind; the rank reads the node's state and its position, nothing else
of the node (so nodes in the same state rank alike but for the position: where every node
started alike, the ones not changed since are ranked once). The index keeps, per kind, the
sorted ranks of the nodes that can; when the cluster announces that a node changed, the
change is logged once for every kind and the node's rank for a kind is recomputed at that
kind's next query (a node that changes several times between two queries of a kind is ranked
once for it, and a kind asked for rarely is not ranked at every change). Choosing the first
entry is then exactly what a scan of every node in index order with the same rank would
choose.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from migslice.sim.cluster import SimCluster, SimGpu, SimNode

T = TypeVar("T")

Kind = tuple[str, int]
"""A pod kind: (profile, instance count)."""
Rank = tuple[int | float, ...]
RankFn = Callable[[SimNode, Kind], Rank | None]


class RankIndex:
    """Nodes per kind in rank order (see the module docstring)."""

    def __init__(self, cluster: SimCluster, rank: RankFn, *, keep: int | None = None) -> None:
        """``keep``: changes kept at most (default: 4 per node, plus 4,096)."""
        self._cluster = cluster
        self._rank = rank
        self._sorted: dict[Kind, list[Rank]] = {}
        self._current: dict[Kind, list[Rank | None]] = {}
        self._changes: list[int] = []
        """The positions of the nodes changed, in order, the first being change number
        :attr:`_base`: a change costs one append however many kinds there are, and each kind
        reads the changes it has not seen."""
        self._base = 0
        self._keep = 4 * len(cluster.nodes) + 4096 if keep is None else keep
        """Changes kept at most: the older half is then dropped, the positions a kind has not
        seen of it moved to the kind's :attr:`_backlog` (a set: at most every node once)."""
        self._seen: dict[Kind, int] = {}
        """Per kind, the number of the first change its ranks have not taken in."""
        self._backlog: dict[Kind, set[int]] = {}
        cluster.listeners.append(self._changed)

    def _changed(self, node: SimNode) -> None:
        changes = self._changes
        changes.append(node.position)
        if len(changes) > self._keep:
            cut = self._base + len(changes) // 2
            for kind, seen in self._seen.items():
                if seen < cut:
                    self._backlog.setdefault(kind, set()).update(
                        changes[seen - self._base : cut - self._base]
                    )
                    self._seen[kind] = cut
            del changes[: cut - self._base]
            self._base = cut

    def _refresh(self, kind: Kind) -> None:
        seen, end = self._seen[kind], self._base + len(self._changes)
        backlog = self._backlog.pop(kind, None)
        if seen == end and not backlog:
            return
        dirty = set(self._changes[seen - self._base :])
        if backlog:
            dirty |= backlog
        self._seen[kind] = end
        nodes = self._cluster.nodes
        ranks, entries = self._current[kind], self._sorted[kind]
        for position in sorted(dirty):
            old, new = ranks[position], self._rank(nodes[position], kind)
            if old == new:
                continue
            if old is not None:
                del entries[bisect.bisect_left(entries, old)]
            if new is not None:
                bisect.insort(entries, new)
            ranks[position] = new

    def _entries(self, kind: Kind) -> list[Rank]:
        entries = self._sorted.get(kind)
        if entries is None:
            ranks = self._rank_all(kind)
            self._current[kind] = ranks
            entries = sorted(r for r in ranks if r is not None)
            self._sorted[kind] = entries
            self._seen[kind] = self._base + len(self._changes)
        else:
            self._refresh(kind)
        return entries

    def _rank_all(self, kind: Kind) -> list[Rank | None]:
        """Every node's rank for ``kind``. Where the cluster's nodes started alike
        (:attr:`SimCluster.alike`), those that have not changed since rank alike but for their
        position, the rank's last element: the first is ranked, the others take its rank."""
        cluster = self._cluster
        ranks: list[Rank | None] = []
        unchanged: Rank | None = None
        asked = False
        for node in cluster.nodes:
            if not (cluster.alike and node.version == 0):
                ranks.append(self._rank(node, kind))
            elif not asked:
                unchanged, asked = self._rank(node, kind), True
                ranks.append(unchanged)
            else:
                ranks.append(None if unchanged is None else (*unchanged[:-1], node.position))
        return ranks

    def reset(self) -> None:
        """Rank every node again at the next query (the rank function itself changed)."""
        self._sorted.clear()
        self._current.clear()
        self._seen.clear()
        self._backlog.clear()
        self._changes.clear()
        self._base = 0

    def entries(self, kind: Kind) -> list[Rank]:
        """The ranks of the nodes that can take ``kind``, ascending (do not modify)."""
        return self._entries(kind)

    def best(self, kind: Kind) -> SimNode | None:
        """The node with the lowest rank for ``kind``, or None if no node can take it."""
        entries = self._entries(kind)
        return self._cluster.nodes[int(entries[0][-1])] if entries else None

    def ordered(self, kind: Kind) -> Iterator[SimNode]:
        """Nodes that can take ``kind`` in rank order. The ranks are read as they are, not
        copied (the callers look at a few of hundreds): changing the cluster while iterating
        raises."""
        cluster = self._cluster
        changes = cluster.changes
        for rank in self._entries(kind):
            yield cluster.nodes[int(rank[-1])]
            if cluster.changes != changes:
                raise RuntimeError("the cluster changed while its nodes were iterated in order")


class PerNode(Generic[T]):
    """``compute(node)`` kept per node until the node changes (its ``version``)."""

    def __init__(self, compute: Callable[[SimNode], T]) -> None:
        self._compute = compute
        self._kept: dict[int, tuple[int, T]] = {}

    def __call__(self, node: SimNode) -> T:
        kept = self._kept.get(node.position)
        if kept is None or kept[0] != node.version:
            kept = (node.version, self._compute(node))
            self._kept[node.position] = kept
        return kept[1]


class PerGpu(Generic[T]):
    """``compute(node, gpu)`` kept per GPU until the GPU changes (its ``version``): a node's
    change recomputes only the GPUs it touched."""

    def __init__(self, compute: Callable[[SimNode, SimGpu], T]) -> None:
        self._compute = compute
        self._kept: dict[int, tuple[int, T]] = {}

    def __call__(self, node: SimNode, gpu: SimGpu) -> T:
        key = id(gpu)  # a GPU lives as long as its cluster, and this cache is one run's
        kept = self._kept.get(key)
        if kept is None or kept[0] != gpu.version:
            kept = (gpu.version, self._compute(node, gpu))
            self._kept[key] = kept
        return kept[1]
