"""Filter and score one pod over candidate nodes."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice.mig.catalog import strip_product_suffix
from migslice.scheduling import reasons
from migslice.scheduling.demand import DemandUnit, PodDemand, UnitKind
from migslice.scheduling.dra_placement import dra_demand_score, dra_units_fit
from migslice.scheduling.fragmentation import MIN_SCORE, score_units
from migslice.scheduling.prepared import PreparedNode


class Outcome(enum.Enum):
    FITS = "fits"
    FAILED = "failed"
    UNRESOLVABLE = "unresolvable"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reason: str = ""


FITS = Verdict(Outcome.FITS)
UNKNOWN = Verdict(Outcome.UNRESOLVABLE, reasons.UNKNOWN_NODE)
"""Unresolvable: a node migslice cannot vouch for is none that evicting a pod would free
(failed nodes are kube-scheduler's preemption candidates)."""


@dataclass(frozen=True, slots=True)
class FilterResult:
    """A partition of the candidate names: ``fits`` in input order, the rest with reasons.

    ``failed`` nodes are full for now (preemption may help); ``unresolvable`` ones cannot
    serve the pod whatever is evicted.
    """

    fits: tuple[str, ...]
    failed: Mapping[str, str]
    unresolvable: Mapping[str, str]


def check_node(demand: PodDemand, node: PreparedNode | None) -> Verdict:
    """Can ``node`` take the pod now, and if not, why (see :mod:`reasons`)."""
    if node is None:
        return UNKNOWN
    if demand.error:
        return Verdict(Outcome.UNRESOLVABLE, reasons.bad_pod(demand.error))
    if demand.wait:
        return Verdict(Outcome.FAILED, demand.wait)
    if not demand.units:
        return FITS
    if node.blocked is not None:
        return Verdict(Outcome.UNRESOLVABLE, node.blocked)
    if node.not_ready is not None:
        return Verdict(Outcome.FAILED, node.not_ready)
    if demand.products is not None and node.product not in demand.products:
        return Verdict(Outcome.UNRESOLVABLE, reasons.product_excluded(node.product or "none"))
    failed: Verdict | None = None
    for unit in demand.units:
        verdict = _check_unit(unit, node)
        if verdict.outcome is Outcome.UNRESOLVABLE:
            return verdict
        if verdict.outcome is Outcome.FAILED and failed is None:
            failed = verdict
    dra = node.state.dra
    if failed is None and dra is not None and (not demand.is_single_unit or dra.pool.tainted):
        # Counts are per resource and know no taints; on a DRA node the units must also fit
        # together, one after the other where the allocator's first fit puts each (a
        # DynamicMIG GPU's placements overlap), on devices no taint keeps it off.
        if not dra_units_fit(node.state, demand.units):
            if dra.pool.tainted and dra_units_fit(node.state, demand.units, taints=False):
                return Verdict(Outcome.FAILED, reasons.DEVICES_TAINTED)
            if dra.pool.steered and dra_units_fit(node.state, demand.units, steer=False):
                return Verdict(Outcome.FAILED, reasons.DEVICES_STEERED)
            first = demand.units[0]
            reason = (
                reasons.ALL_WHOLE_GPUS_IN_USE
                if first.profile is None
                else reasons.all_in_use(first.profile)
            )
            return Verdict(Outcome.FAILED, reason)
    return failed or FITS


def _check_unit(unit: DemandUnit, node: PreparedNode) -> Verdict:
    resource, count = unit.resource, unit.count
    if unit.claim and node.claim_reason is not None:
        return Verdict(Outcome.UNRESOLVABLE, node.claim_reason)
    if unit.kind is UnitKind.WHOLE_GPU:
        if node.product is not None and node.product != strip_product_suffix(node.product):
            # GFD's single strategy (nvidia.com/gpu is a MIG slice), MIG without a strategy,
            # or time-sliced/MPS replicas: whatever nvidia.com/gpu is there, it is no whole GPU.
            return Verdict(Outcome.UNRESOLVABLE, reasons.not_whole(node.product))
        total = node.allocatable.get(resource, 0)
        if total == 0:
            reason = reasons.NO_WHOLE_GPU if node.model_key else reasons.NO_GPU
            return Verdict(Outcome.UNRESOLVABLE, reason)
        if total < count:
            return Verdict(Outcome.UNRESOLVABLE, reasons.too_few_whole_gpus(count))
        if node.free.get(resource, 0) < count:
            return Verdict(Outcome.FAILED, reasons.ALL_WHOLE_GPUS_IN_USE)
        return FITS
    if unit.profile is None:
        return Verdict(Outcome.UNRESOLVABLE, reasons.unknown_resource(resource))
    if node.mig_reason is not None:
        return Verdict(Outcome.UNRESOLVABLE, node.mig_reason)
    if node.offered is not None and resource not in node.offered:
        model = node.model_key or node.product or "GPU"
        return Verdict(Outcome.UNRESOLVABLE, reasons.profile_not_offered(model, unit.profile))
    if resource in node.shared:
        return Verdict(Outcome.UNRESOLVABLE, reasons.shared_mig(resource))
    total = node.allocatable.get(resource, 0)
    if total < count and node.labelled.get(resource, 0) >= count:
        return Verdict(Outcome.FAILED, reasons.NOT_ADVERTISED)
    if total == 0:
        return Verdict(Outcome.UNRESOLVABLE, reasons.not_in_layout(unit.profile))
    if total < count:
        return Verdict(Outcome.UNRESOLVABLE, reasons.too_few_in_layout(unit.profile, count))
    if node.free.get(resource, 0) < count:
        return Verdict(Outcome.FAILED, reasons.all_in_use(unit.profile))
    return FITS


def _one_unit_fits(unit: DemandUnit, demand: PodDemand, node: PreparedNode) -> bool:
    """The hot path for a pod asking for one unit: it fits exactly when :func:`check_node`
    would say so, by a few lookups (a free unit implies one in allocatable, and a node whose
    MIG is off has no free MIG unit). A property test holds the two equal. A DRA node with
    tainted devices takes :func:`check_node`'s way: its counts know no taints."""
    dra = node.state.dra
    return (
        (dra is None or not dra.pool.tainted)
        and node.blocked is None
        and node.not_ready is None
        and (not unit.claim or node.claim_reason is None)
        and (demand.products is None or node.product in demand.products)
        and (
            unit.kind is not UnitKind.MIG
            or (
                unit.profile is not None and (node.offered is None or unit.resource in node.offered)
            )
        )
        and node.free.get(unit.resource, 0) >= 1
    )


def filter_nodes(
    demand: PodDemand, candidates: Sequence[tuple[str, PreparedNode | None]]
) -> FilterResult:
    """Partition ``candidates`` (name, prepared node or None if unknown) for the pod.

    Every name lands in exactly one of the three parts; a name given twice is judged once.
    """
    fits: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    seen: set[str] = set()
    unit = demand.units[0] if demand.is_single_unit and not (demand.error or demand.wait) else None
    for name, node in candidates:
        if name in seen:
            continue
        seen.add(name)
        if unit is not None and node is not None and _one_unit_fits(unit, demand, node):
            fits.append(name)
            continue
        verdict = check_node(demand, node)
        if verdict.outcome is Outcome.FITS:
            fits.append(name)
        elif verdict.outcome is Outcome.FAILED:
            failed[name] = verdict.reason
        else:
            unresolvable[name] = verdict.reason
    return FilterResult(tuple(fits), failed, unresolvable)


def score_node(demand: PodDemand, node: PreparedNode | None) -> int:
    """The pod's fragmentation score on ``node``, 0..10 (0: the node cannot take it)."""
    if node is None or not demand.units or demand.error or demand.wait:
        return MIN_SCORE
    if demand.is_single_unit:
        unit = demand.units[0]
        if not _one_unit_fits(unit, demand, node):
            return MIN_SCORE
        return node.unit_scores.get(unit.resource, MIN_SCORE)
    if check_node(demand, node).outcome is not Outcome.FITS:
        return MIN_SCORE
    if node.state.dra is not None:
        return dra_demand_score(node.state, demand.units, strand_guard=node.strand_guard)
    return score_units(node.state, tuple((u.resource, u.count) for u in demand.units))


def score_nodes(
    demand: PodDemand, candidates: Sequence[tuple[str, PreparedNode | None]]
) -> tuple[tuple[str, int], ...]:
    """(name, score) for each distinct candidate, in input order."""
    scored: dict[str, int] = {}
    for name, node in candidates:
        if name not in scored:
            scored[name] = score_node(demand, node)
    return tuple(scored.items())


RANK_SPAN = 10_000
"""Held memory slices a best-fit rank can tell apart on one node (8 GPUs hold at most 64)."""


def best_fit_rank(demand: PodDemand, node: PreparedNode | None) -> int:
    """The best-fit filter's rank of a node: its score first (:func:`score_node`), then, among
    nodes of equal score, the memory slices already held there, so the fullest node takes the
    pod and others drain whole for large and multi-GPU pods (kube-scheduler's own scores, left
    to choose among equals, spread pods: NodeResourcesFit's default is LeastAllocated). 0: the
    node cannot take the pod."""
    score = score_node(demand, node)
    if score <= MIN_SCORE or node is None:
        return MIN_SCORE
    return score * RANK_SPAN + min(node.held_slices, RANK_SPAN - 1)


def best_fits(fits: Sequence[str], scores: Sequence[int]) -> tuple[str, ...]:
    """The names of ``fits`` whose score or rank (``scores``, in the same order) is the
    highest, in input order: the nodes a pod fits best."""
    if len(fits) <= 1:
        return tuple(fits)
    top = max(scores)
    return tuple([name for name, score in zip(fits, scores, strict=True) if score == top])


def best_fit_nodes(
    demand: PodDemand, candidates: Sequence[tuple[str, PreparedNode | None]]
) -> FilterResult:
    """:func:`filter_nodes` with ``fits`` narrowed to the nodes of the highest
    :func:`best_fit_rank` (the highest score, then the fullest): the best-fit filter, after
    which scoring by this score cannot change kube-scheduler's choice (every node left has the
    same), so its own scores pick among nodes equal in both. Nodes narrowed away are in no
    part: they fit, only not best."""
    result = filter_nodes(demand, candidates)
    if len(result.fits) <= 1:
        return result
    nodes = dict(candidates)
    scores = [best_fit_rank(demand, nodes[name]) for name in result.fits]
    return FilterResult(best_fits(result.fits, scores), result.failed, result.unresolvable)
