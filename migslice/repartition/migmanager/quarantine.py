"""Quarantine: a node MIG Manager leaves short of ``success`` past the deadline stops only itself.

When a node of an applied plan is still not at ``success`` after ``deadline_s``, the node's
plan step ends ``timeout`` (``migslice.repartition.decide``) and the node is quarantined:

* it leaves the in-flight budget (its state label may stay ``pending`` for ever, and the
  planner no longer counts it), and no plan touches it;
* the record keeps it (:class:`~migslice.repartition.record.Quarantined`), the Node gets the
  label ``migslice.io/repartition-quarantine=timeout`` and an annotation of the same name
  with what happened as JSON (:func:`quarantine_note`), and a Warning Event is recorded.

It ends (:func:`review`, first in every round) when MIG Manager reports ``success`` (on any
config), when the node is gone, or when an admin removes the label (the annotation, still
there, says the label was set, so a missing label is the admin's word, not a write that never
happened). A label and annotation that are both missing (the controller stopped between the
record write and the node's) are written again. Marks the record does not hold are the node's
word when the record was lost (the ConfigMap deleted or created again): a node still short of
``success`` with the label and a readable annotation is quarantined again from them, with a
Warning; other such marks (a release whose node write failed) are removed.

    kubectl get nodes -l migslice.io/repartition-quarantine
    kubectl label node gpu-7 migslice.io/repartition-quarantine-     # release it by hand
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from migslice.inventory import NodeState
from migslice.names import MIG_STATE_SUCCESS, QUARANTINE_LABEL, QUARANTINE_TIMEOUT
from migslice.objects.json import decode
from migslice.objects.times import format_time, parse_epoch_s
from migslice.repartition.actions import NodeEvent, QuarantineMark
from migslice.repartition.record import Quarantined, RepartitionRecord

REASON_QUARANTINED = "MigRepartitionQuarantined"
REASON_RELEASED = "MigRepartitionQuarantineReleased"


@dataclass(frozen=True, slots=True)
class QuarantineChange:
    """What the quarantine needs this round: the record without the released nodes, the
    Events, and the marks to set or remove."""

    record: RepartitionRecord
    reason: str
    events: tuple[NodeEvent, ...]
    marks: tuple[QuarantineMark, ...]


def quarantine_note(entry: Quarantined) -> str:
    """The annotation: machine-readable for ``migslice doctor`` and anyone with ``kubectl``."""
    return json.dumps(
        {
            "reason": QUARANTINE_TIMEOUT,
            "since": format_time(entry.since),
            "config": entry.config_name,
            "detail": entry.detail,
            "release": f"kubectl label node {entry.node} {QUARANTINE_LABEL}-",
        },
        separators=(",", ":"),
    )


def quarantine_message(entry: Quarantined, then: str) -> str:
    """The Warning Event's message."""
    return (
        f"mig-parted config {entry.config_name}: {entry.detail}; {then}; quarantined: no "
        f"re-partition touches the node until MIG Manager reports success or an admin removes "
        f"label {QUARANTINE_LABEL}"
    )


def review(record: RepartitionRecord, states: Mapping[str, NodeState]) -> QuarantineChange | None:
    """Release the quarantined nodes MIG Manager or an admin cleared (or that are gone), write
    the marks again where the Node lacks both, and remove marks the record does not hold (a
    release whose node write failed); None when nothing is to do."""
    released: dict[str, str] = {}
    marks: list[QuarantineMark] = []
    for entry in record.quarantine:
        why = _released_because(entry, states.get(entry.node))
        if why:
            released[entry.node] = why
        elif states[entry.node].facts.quarantine_label is None:
            marks.append(QuarantineMark(entry.node, quarantine_note(entry)))
    held = {q.node for q in record.quarantine}
    stray = sorted(
        name
        for name, state in states.items()
        if name not in held
        and (state.facts.quarantine_label is not None or state.facts.quarantine_note is not None)
    )
    if not record.quarantine and not stray:
        return None  # nothing held, no marks: the common case, each round
    adopted = [q for q in (_from_marks(name, states[name]) for name in stray) if q is not None]
    stray = [name for name in stray if name not in {q.node for q in adopted}]
    marks += [QuarantineMark(node, None) for node in [*released, *stray] if node in states]
    if not released and not marks and not adopted:
        return None
    events = tuple(
        NodeEvent(node, REASON_RELEASED, f"quarantine released: {why}")
        for node, why in released.items()
        if node in states
    ) + tuple(
        NodeEvent(
            q.node,
            REASON_QUARANTINED,
            f"quarantine kept from the node's label and annotation (the repartition record had "
            f"lost it): mig-parted config {q.config_name}, since {format_time(q.since)}; "
            f"release it with: kubectl label node {q.node} {QUARANTINE_LABEL}-",
            warning=True,
        )
        for q in adopted
    )
    reason = "; ".join(
        [f"{node} released ({why})" for node, why in released.items()]
        + [f"{m.node} quarantine marked again" for m in marks if m.note is not None]
        + [f"{q.node}: quarantine kept from its marks (the record had lost it)" for q in adopted]
        + [f"{node}: quarantine mark without a record entry removed" for node in stray]
    )
    kept = tuple(q for q in record.quarantine if q.node not in released) + tuple(adopted)
    return QuarantineChange(replace(record, quarantine=kept), reason, events, tuple(marks))


def _from_marks(name: str, state: NodeState) -> Quarantined | None:
    """The quarantine a node's own marks describe when the record lacks it: the label set, the
    annotation readable, and MIG Manager still short of ``success``; else None."""
    facts = state.facts
    if facts.quarantine_label is None or facts.mig_config_state == MIG_STATE_SUCCESS:
        return None
    try:
        note = decode(facts.quarantine_note or "")
    except ValueError:
        return None
    if not isinstance(note, dict):
        return None
    since = parse_epoch_s(note.get("since"))
    if since is None:
        return None
    return Quarantined(
        name, since, str(note.get("config") or facts.mig_config or ""), str(note.get("detail"))
    )


def _released_because(entry: Quarantined, state: NodeState | None) -> str:
    if state is None:
        return "the node is gone"
    facts = state.facts
    if facts.mig_config_state == MIG_STATE_SUCCESS:
        return f"MIG Manager reports success on config {facts.mig_config}"
    if facts.quarantine_label is None and facts.quarantine_note is not None:
        return f"an admin removed label {QUARANTINE_LABEL}"
    return ""


def held_reasons(quarantine: Sequence[Quarantined]) -> dict[str, str]:
    """Why the planner leaves each quarantined node alone."""
    return {
        q.node: f"quarantined since {format_time(q.since)} (label {QUARANTINE_LABEL})"
        for q in quarantine
    }
