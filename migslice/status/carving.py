"""What status and why say of a node whose carve handshake cannot be read (pure): the
repartition controller's request ``migslice.io/carve`` or the node agent's journal
``migslice.io/carve-state`` (:mod:`migslice.objects.carve_handshake`). The extender counts an
unreadable annotation as none (:attr:`~migslice.objects.nodes.NodeFacts.is_carving`), as the
agent acts on it; what a carve under way there changed is unknown all the same, and the admin
is told what to do."""

from __future__ import annotations

from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION
from migslice.objects.nodes import NodeFacts


def carve_unknown(facts: NodeFacts) -> str:
    """Why the node's carve state is unknown, and what to do; "" when its annotations are
    absent or read."""
    said = []
    journal = facts.unread_carve_state()
    if journal:
        said.append(
            f"{journal}. The node agent cannot tell what a carve under way had changed: it "
            f"resumes the carve {CARVE_ANNOTATION} asks, else publishes NVML's layout as it is; "
            f"fix the journal, or remove it (kubectl annotate node {facts.name} "
            f"{CARVE_STATE_ANNOTATION}-)"
        )
    request = facts.unread_carve_request()
    if request:
        said.append(
            f"{request}. The node agent carves nothing it cannot read, and rolls back a carve "
            "it has open; unless a repartition controller of another release is at work, "
            f"remove it (kubectl annotate node {facts.name} {CARVE_ANNOTATION}-)"
        )
    return " ".join(said)
