"""Which path re-shapes a node's GPUs: MIG Manager (idle GPUs, whole-GPU configs) or carve
mode (the node agent creates and destroys single instances next to running ones).

A node's mode is its label ``migslice.io/repartition-mode`` (``carve`` or ``mig-manager``),
else the controller's default. The two paths never act on one node: the MIG Manager planner
leaves carve-mode nodes alone (and never labels them ``nvidia.com/mig.config``), the carve
planner leaves MIG Manager nodes alone (and never writes ``migslice.io/carve`` on them).
"""

from __future__ import annotations

from migslice.names import MODE_MIG_MANAGER, REPARTITION_MODE_LABEL, REPARTITION_MODES
from migslice.objects.nodes import NodeFacts
from migslice.whynot import WhyNot


def mode_of(facts: NodeFacts, default: str = MODE_MIG_MANAGER) -> str | WhyNot:
    """The node's mode, or why it has none (a label with another value: neither path acts)."""
    label = facts.repartition_mode
    if label is None:
        return default
    if label in REPARTITION_MODES:
        return label
    return WhyNot(
        "bad-mode",
        f"label {REPARTITION_MODE_LABEL}={label!r}; expected one of "
        f"{', '.join(REPARTITION_MODES)} (or no label for the controller's default)",
    )
