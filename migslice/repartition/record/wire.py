"""What both parts of the plan record share: how a node of a plan ends (its outcome, as the
record writes it), times read back from RFC 3339, and the error that says where a record is
wrong."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from migslice.errors import InvalidInputError
from migslice.names import RECORD_ANNOTATION
from migslice.objects.times import parse_epoch_s


class NodeOutcome(enum.StrEnum):
    """How one node of a plan ended (``OPEN`` while it has not)."""

    OPEN = ""
    SUCCESS = "success"
    FAILED = "failed"
    TIMEOUT = "timeout"
    ABORTED = "aborted"
    SUPERSEDED = "superseded"


OPEN = NodeOutcome.OPEN
SUCCESS = NodeOutcome.SUCCESS
FAILED = NodeOutcome.FAILED
TIMEOUT = NodeOutcome.TIMEOUT
ABORTED = NodeOutcome.ABORTED
SUPERSEDED = NodeOutcome.SUPERSEDED
OUTCOMES = frozenset(NodeOutcome)


class RecordError(InvalidInputError):
    """A record annotation that cannot be read; the message says where, ``fix`` what to do
    (default: fix or remove the annotation)."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix or f"fix or remove {RECORD_ANNOTATION}"


def parse_time(text: object, where: str) -> float:
    if not isinstance(text, str):
        raise RecordError(f"{where}: expected an RFC 3339 time, got {text!r}")
    epoch_s = parse_epoch_s(text)
    if epoch_s is None:
        raise RecordError(f"{where}: {text!r} is not an RFC 3339 UTC time")
    return epoch_s


def parse_outcome(item: Mapping[str, object], where: str) -> NodeOutcome:
    """The ``outcome`` of a node's entry (absent: open); RecordError names the values."""
    outcome = item.get("outcome", OPEN)
    if outcome not in OUTCOMES:
        raise RecordError(f"{where}.outcome: {outcome!r} is not one of {sorted(OUTCOMES)}")
    return NodeOutcome(str(outcome))
