"""Scheduling: filter and score one pod over candidate nodes (pure).

``prepare_node`` turns an inventory NodeState into the per-node values a request reads
(free counts, reasons, per-profile fragmentation scores); ``filter_nodes`` and ``score_nodes``
answer for one pod, and ``best_fit_nodes`` keeps only the nodes it fits best. The score is
defined in :mod:`migslice.scheduling.fragmentation`.
"""

from migslice.scheduling.decide import (
    FilterResult,
    Outcome,
    Verdict,
    best_fit_nodes,
    best_fit_rank,
    best_fits,
    check_node,
    filter_nodes,
    score_node,
    score_nodes,
)
from migslice.scheduling.decisions import DecisionCache
from migslice.scheduling.demand import DemandReader, DemandUnit, PodDemand, UnitKind, demand_of
from migslice.scheduling.fragmentation import MAX_SCORE, MIN_SCORE, score_units
from migslice.scheduling.prepared import PreparedNode, prepare_node

__all__ = [
    "MAX_SCORE",
    "MIN_SCORE",
    "DecisionCache",
    "DemandReader",
    "DemandUnit",
    "FilterResult",
    "Outcome",
    "PodDemand",
    "PreparedNode",
    "UnitKind",
    "Verdict",
    "best_fit_nodes",
    "best_fit_rank",
    "best_fits",
    "check_node",
    "demand_of",
    "filter_nodes",
    "prepare_node",
    "score_node",
    "score_nodes",
    "score_units",
]
