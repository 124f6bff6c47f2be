"""Filter verdicts and scores kept per pod demand, until an event touches the node.

Pods that ask for the same thing (same GPU units, same product constraint) get the same
verdict and the same score on a node until that node changes. :class:`DecisionCache` keeps,
per such demand, a table ``node name -> verdict`` and ``node name -> score``; a request
answers the names it has seen before by one dictionary lookup each and judges only the rest
(with :func:`check_node` and :func:`score_node`, the reference path, so the answers are the
same by construction). The owner of the node values calls :meth:`DecisionCache.forget` with
the name of every node whose value changed (``None``: all), after the change.

No lock on the request path. :meth:`forget` advances an epoch before it drops entries; a
request reads the entries of the names it was sent (walking the names or the table, whichever
is smaller) and keeps the read when no epoch passed during it, and
what it judges itself is kept only if no epoch passed since the read (an answer judged on a
node value that changed meanwhile is never kept).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from migslice.scheduling.decide import (
    FilterResult,
    Outcome,
    Verdict,
    best_fit_rank,
    best_fits,
    check_node,
    score_node,
)
from migslice.scheduling.demand import DemandUnit, PodDemand
from migslice.scheduling.prepared import PreparedNode

R = TypeVar("R")
V = TypeVar("V")
DemandKey = tuple[tuple[DemandUnit, ...], frozenset[str] | None, str, str]
MAX_DEMANDS = 64
"""Distinct demands kept (GPU units x product constraints; a cluster has a few dozen at most),
each up to a verdict and a score per node (about 1.5 MB at 5,000 nodes); the oldest goes
first."""


NO_FIT = -1
"""``points`` of a name kept as failed or unresolvable (a score is 0 or more)."""


def demand_key(demand: PodDemand) -> DemandKey:
    """What a verdict or score depends on besides the node: not the pod's name."""
    return (demand.units, demand.products, demand.error, demand.wait)


@dataclass(slots=True)
class _Table(Generic[R]):
    """One demand's answers: the names that fit, the others with their reasons, the scores
    (as the cache's owner renders them), and the best-fit ranks (:func:`best_fit_rank`). ``points``
    also marks every name that does not fit (:data:`NO_FIT`), so that a best-fit call whose
    names are all known reads one table once."""

    fits: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    scores: dict[str, R] = field(default_factory=dict)
    points: dict[str, int] = field(default_factory=dict)

    def drop(self, name: str) -> None:
        self.fits.discard(name)
        self.failed.pop(name, None)
        self.unresolvable.pop(name, None)
        self.scores.pop(name, None)
        self.points.pop(name, None)

    def keep(self, name: str, verdict: Verdict) -> None:
        if verdict.outcome is Outcome.FITS:
            self.fits.add(name)
            return
        if verdict.outcome is Outcome.FAILED:
            self.failed[name] = verdict.reason
        else:
            self.unresolvable[name] = verdict.reason
        self.points[name] = NO_FIT


class DecisionCache(Generic[R]):
    """Per-demand verdicts and scores over the nodes ``lookup`` knows (see the module doc).

    ``render(name, score)`` is what :meth:`score` answers per name, kept as rendered (the
    extender keeps the wire's ``{"Host": ..., "Score": ...}`` objects, so an answer is a list
    of kept objects)."""

    def __init__(
        self, lookup: Callable[[str], PreparedNode | None], render: Callable[[str, int], R]
    ) -> None:
        self._lookup = lookup
        self._render = render
        self._tables: dict[DemandKey, _Table[R]] = {}
        self._epoch = 0
        self._create = threading.Lock()

    def forget(self, name: str | None) -> None:
        """Drop what is kept about node ``name`` (``None``: every node); call it after the
        node's value changed."""
        self._epoch += 1
        if name is None:
            self._tables = {}
            return
        for table in list(self._tables.values()):
            table.drop(name)

    def filter(self, demand: PodDemand, names: Iterable[str]) -> FilterResult:
        """The same partition as :func:`filter_nodes` over ``(name, lookup(name))``."""
        distinct = dict.fromkeys(names)
        while True:  # one consistent read: no node changed while it was taken
            epoch = self._epoch
            table = self._table(demand)
            fits = _asked_set(table.fits, distinct)
            failed = _asked(table.failed, distinct)
            unresolvable = _asked(table.unresolvable, distinct)
            if self._epoch == epoch:
                break
        missing = distinct.keys() - fits - failed.keys() - unresolvable.keys()
        if missing:
            for name, verdict in self._judge(table, demand, missing, epoch).items():
                _partition(name, verdict, fits, failed, unresolvable)
        return FilterResult(
            tuple([name for name in distinct if name in fits]), failed, unresolvable
        )

    def score(self, demand: PodDemand, names: Iterable[str]) -> list[R]:
        """``render(name, score)`` for each distinct name in input order, with the scores of
        :func:`score_nodes` over ``(name, lookup(name))``."""
        distinct = dict.fromkeys(names)
        render = self._render
        known = self._kept_or_scored(
            demand, _rendered, distinct, lambda name, node: render(name, score_node(demand, node))
        )
        return [known[name] for name in distinct]

    def best_fit(self, demand: PodDemand, names: Iterable[str]) -> FilterResult:
        """The same answer as :func:`best_fit_nodes` over ``(name, lookup(name))``: the
        partition of :meth:`filter` with ``fits`` narrowed to the highest score."""
        distinct = dict.fromkeys(names)
        answered = self._best_fit_known(demand, distinct)
        if answered is not None:
            return answered
        result = self.filter(demand, distinct)
        if len(result.fits) <= 1:
            return result
        known = self._kept_or_scored(
            demand, _points, dict.fromkeys(result.fits), lambda _, node: best_fit_rank(demand, node)
        )
        scores = [known[name] for name in result.fits]
        return FilterResult(best_fits(result.fits, scores), result.failed, result.unresolvable)

    def _best_fit_known(self, demand: PodDemand, distinct: dict[str, None]) -> FilterResult | None:
        """The best-fit answer from one read of the kept points when every name is kept there
        (scored if it fits, :data:`NO_FIT` if not); else None."""
        if not distinct:
            return None
        while True:  # one consistent read: no node changed while it was taken
            epoch = self._epoch
            table = self._table(demand)
            known = _asked(table.points, distinct)
            if len(known) < len(distinct):
                return None
            top = max(known.values())
            failed: dict[str, str] = {}
            unresolvable: dict[str, str] = {}
            if min(known.values()) < 0:  # some do not fit: their reasons
                missed = {name: None for name, points in known.items() if points < 0}
                failed = _asked(table.failed, missed)
                unresolvable = _asked(table.unresolvable, missed)
            if self._epoch == epoch:
                break
        best = tuple([name for name in distinct if known[name] == top]) if top >= 0 else ()
        return FilterResult(best, failed, unresolvable)

    def _kept_or_scored(
        self,
        demand: PodDemand,
        kept_in: Callable[[_Table[R]], dict[str, V]],
        distinct: dict[str, None],
        judge: Callable[[str, PreparedNode | None], V],
    ) -> dict[str, V]:
        """The values kept in the demand's table (``kept_in`` picks which) for ``distinct``,
        the missing ones judged now and kept unless a node changed meanwhile."""
        while True:  # one consistent read: no node changed while it was taken
            epoch = self._epoch
            kept = kept_in(self._table(demand))
            known = _asked(kept, distinct)
            if self._epoch == epoch:
                break
        missing = distinct.keys() - known.keys()
        if missing:
            for name in missing:
                node = self._lookup(name)
                known[name] = value = judge(name, node)
                if node is not None:
                    kept[name] = value
            if self._epoch != epoch:  # a node changed meanwhile: keep nothing judged on it
                for name in missing:
                    kept.pop(name, None)
        return known

    def _judge(
        self, table: _Table[R], demand: PodDemand, names: Iterable[str], epoch: int
    ) -> dict[str, Verdict]:
        """Judge ``names`` now; keep the verdicts of the nodes that exist (unless a node
        changed after ``epoch``, when the copy was taken)."""
        found: dict[str, Verdict] = {}
        for name in names:
            node = self._lookup(name)
            found[name] = verdict = check_node(demand, node)
            if node is not None:
                table.keep(name, verdict)
        if self._epoch != epoch:  # a node changed meanwhile: keep nothing judged on it
            for name in found:
                table.drop(name)
        return found

    def _table(self, demand: PodDemand) -> _Table[R]:
        key = demand_key(demand)
        table = self._tables.get(key)
        if table is None:
            with self._create:
                tables = self._tables
                table = tables.get(key)
                if table is None:
                    while len(tables) >= MAX_DEMANDS:
                        tables.pop(next(iter(tables)))
                    table = tables[key] = _Table()
        return table


# Reading the kept entries of the names a call asks about walks whichever is smaller, the
# names or the table (each walk a C-level comprehension over a consistent copy or over the
# names, one lookup each): a call of 100 names on a 5,000-node table costs 100 lookups, not a
# copy of 5,000 entries, and a call of 3,000 names on a table of a few failures copies those.


def _rendered(table: _Table[R]) -> dict[str, R]:
    return table.scores


def _points(table: _Table[R]) -> dict[str, int]:
    return table.points


def _asked_set(kept: set[str], asked: dict[str, None]) -> set[str]:
    if len(kept) <= len(asked):
        return {name for name in set(kept) if name in asked}
    return {name for name in asked if name in kept}


def _asked(kept: dict[str, V], asked: dict[str, None]) -> dict[str, V]:
    if len(kept) <= len(asked):
        return {name: value for name, value in dict(kept).items() if name in asked}
    return {name: value for name in asked if (value := kept.get(name)) is not None}


def _partition(
    name: str,
    verdict: Verdict,
    fits: set[str],
    failed: dict[str, str],
    unresolvable: dict[str, str],
) -> None:
    if verdict.outcome is Outcome.FITS:
        fits.add(name)
    elif verdict.outcome is Outcome.FAILED:
        failed[name] = verdict.reason
    else:
        unresolvable[name] = verdict.reason
