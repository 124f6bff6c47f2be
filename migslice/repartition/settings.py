"""The repartition controller's settings, as values: the MIG Manager planner's
(:class:`PlanSettings`), the carve planner's (:class:`CarveSettings`), and the state machine's
deadline and backoff around both (:class:`ControllerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from migslice.inventory import NodeState
from migslice.names import MODE_MIG_MANAGER


@dataclass(frozen=True, slots=True)
class PlanSettings:
    """``expected_mix``: resource name -> weight of expected demand (empty: observed demand)."""

    min_pending_s: float = 30.0
    cooldown_s: float = 600.0
    max_nodes_in_flight: int = 1
    expected_mix: tuple[tuple[str, float], ...] = ()
    strand_guard: bool | None = None
    """The stranding rule (:func:`migslice.mig.stranding.strand_guard`) when the caller knows
    it; None: read from the nodes planned over (:func:`migslice.repartition.shapes.held_mix`)."""
    budget_per_pool: bool = True
    """``max_nodes_in_flight`` per GPU product (True) or for the whole cluster (False)."""

    def pool_of(self, node: NodeState) -> str:
        return (node.facts.product or "") if self.budget_per_pool else ""


CARVE_MIN_PENDING_S = 10.0
"""Carve mode's own wait before a pod counts: a carve never disturbs a running instance, so
the guard only has to outlast kube-scheduler's own retry of a pod it just failed (its
backoff tops out at 10 s), not the MIG Manager path's 30 s (that path re-configures whole
GPUs and restarts the device plugin). Chosen by ``bench/packing/carve.py``
(bench/packing/README.md)."""


@dataclass(frozen=True, slots=True)
class CarveSettings:
    """``min_pending_s``: a pod must be unschedulable this long before a carve counts it;
    ``cooldown_s``: a node carved this recently is left alone; ``max_nodes_in_flight``:
    nodes carving at once; ``default_mode``: the mode of nodes without the mode label."""

    min_pending_s: float = CARVE_MIN_PENDING_S
    cooldown_s: float = 60.0
    max_nodes_in_flight: int = 4
    default_mode: str = MODE_MIG_MANAGER


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """``deadline_s``: how long a node may take to reach ``success``; ``backoff_s``: how long
    a node that failed is left alone. Rate limits and hysteresis are the planner's."""

    plan: PlanSettings = field(default_factory=PlanSettings)
    deadline_s: float = 600.0
    backoff_s: float = 1800.0
    config_propagation_s: float = 90.0
    """How long after writing a config into the mig-parted ConfigMap the node is labelled: MIG
    Manager reads the file the kubelet projects from it (refreshed on the pod's periodic sync,
    about a minute) and only when the label changes, so a label set before the file arrives
    fails (``failed``, never retried)."""
    carve: CarveSettings = field(default_factory=CarveSettings)
