"""The repartition controller's durable record: the plan in progress, cooldowns and backoffs.

The record is JSON in the annotation ``migslice.io/repartition`` of the mig-parted ConfigMap,
so that a plan's configs and the record that says they are being applied change in one
write. Times are RFC 3339 UTC strings on the wire and seconds since the epoch in values.

    {"version": "v1",
     "plan": {"id": "3f2a…", "createdAt": "2025-05-01T10:00:00Z", "appliedAt": null,
              "nodes": [{"node": "gpu-a", "config": "migslice-gpu-a-1a2b3c4d",
                         "previousConfig": "all-1g.10gb", "gpus": [0],
                         "serves": ["team-a/train"], "entries": [<mig-parted entry>],
                         "outcome": "", "detail": ""}]},
     "finished": {"gpu-b": "2025-05-01T09:50:00Z"},
     "backoff": {"gpu-c": "2025-05-01T10:30:00Z"},
     "quarantine": {"gpu-d": {"since": "2025-05-01T10:10:00Z",
                              "config": "migslice-gpu-d-9f8e7d6c", "detail": "state pending …"}}}

A node's ``appliedAt`` is when its label was set (nodes may join a plan while it is applied;
a record without it takes the plan's). ``quarantine``: nodes MIG Manager left short of
``success`` past the deadline (``migslice.repartition.quarantine``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from migslice.errors import InvalidInputError
from migslice.mig.migparted import MigPartedEntry, MigPartedError, entry_json, parse_entries
from migslice.names import RECORD_ANNOTATION
from migslice.objects.times import format_time, parse_epoch_s

if TYPE_CHECKING:  # carve_record reads this module's outcomes and times
    from migslice.repartition.carve_record import ActiveCarve

RECORD_VERSION = "v1"


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
    """A record annotation that cannot be read; the message says where."""


@dataclass(frozen=True, slots=True)
class NodeStep:
    """One node of a plan: the config it gets, what it had, and how it ended (``outcome``)."""

    node: str
    config_name: str
    previous_config: str | None
    gpus: tuple[int, ...]
    serves: tuple[str, ...]
    entries: tuple[MigPartedEntry, ...]
    outcome: NodeOutcome = NodeOutcome.OPEN
    detail: str = ""
    applied_at: float | None = None
    """When the node was labelled; None while it is only planned."""

    @property
    def is_open(self) -> bool:
        return self.outcome == OPEN


@dataclass(frozen=True, slots=True)
class ActivePlan:
    """A plan written before it is applied; ``applied_at`` is None until it is."""

    plan_id: str
    created_at: float
    applied_at: float | None
    nodes: tuple[NodeStep, ...]

    @property
    def open_nodes(self) -> tuple[NodeStep, ...]:
        return tuple(step for step in self.nodes if step.is_open)


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A node MIG Manager left short of ``success`` past the deadline: since when, the config
    it was given, and what was seen."""

    node: str
    since: float
    config_name: str
    detail: str


@dataclass(frozen=True, slots=True)
class RepartitionRecord:
    """``finished``: node -> when its last re-partition succeeded (cooldown);
    ``backoff``: node -> until when it is left alone after a failure; ``quarantine``: nodes
    left alone until MIG Manager reports success or an admin releases them; ``carve``: the
    carve plan in progress (:mod:`migslice.repartition.carve_record`), beside the MIG Manager
    one."""

    plan: ActivePlan | None = None
    finished: tuple[tuple[str, float], ...] = ()
    backoff: tuple[tuple[str, float], ...] = ()
    quarantine: tuple[Quarantined, ...] = ()
    carve: ActiveCarve | None = None

    def with_plan(self, plan: ActivePlan | None) -> RepartitionRecord:
        return replace(self, plan=plan)


def parse_time(text: object, where: str) -> float:
    if not isinstance(text, str):
        raise RecordError(f"{where}: expected an RFC 3339 time, got {text!r}")
    epoch_s = parse_epoch_s(text)
    if epoch_s is None:
        raise RecordError(f"{where}: {text!r} is not an RFC 3339 UTC time")
    return epoch_s


def _entries_from_json(raw: object, where: str) -> tuple[MigPartedEntry, ...]:
    try:
        return parse_entries(raw, where)
    except MigPartedError as error:
        raise RecordError(str(error)) from None


def render_record(record: RepartitionRecord) -> str:
    plan: dict[str, Any] | None = None
    if record.plan is not None:
        active = record.plan
        plan = {
            "id": active.plan_id,
            "createdAt": format_time(active.created_at),
            "appliedAt": None if active.applied_at is None else format_time(active.applied_at),
            "nodes": [
                {
                    "node": step.node,
                    "config": step.config_name,
                    "previousConfig": step.previous_config,
                    "gpus": list(step.gpus),
                    "serves": list(step.serves),
                    "entries": [entry_json(e) for e in step.entries],
                    "outcome": step.outcome,
                    "detail": step.detail,
                    "appliedAt": None if step.applied_at is None else format_time(step.applied_at),
                }
                for step in active.nodes
            ],
        }
    document = {
        "version": RECORD_VERSION,
        "plan": plan,
        "finished": {node: format_time(at) for node, at in record.finished},
        "backoff": {node: format_time(until) for node, until in record.backoff},
        "quarantine": {
            q.node: {"since": format_time(q.since), "config": q.config_name, "detail": q.detail}
            for q in record.quarantine
        },
    }
    if record.carve is not None:
        from migslice.repartition.carve_record import carve_json

        document["carve"] = carve_json(record.carve)
    return json.dumps(document, separators=(",", ":"), sort_keys=False)


def parse_record(text: str | None) -> RepartitionRecord:
    """The record in an annotation's text; an absent annotation is an empty record."""
    if not text:
        return RepartitionRecord()
    try:
        document = json.loads(text)
    except ValueError as error:
        raise RecordError(f"annotation {RECORD_ANNOTATION} is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
        raise RecordError(
            f"annotation {RECORD_ANNOTATION}: expected an object with version {RECORD_VERSION}"
        )
    from migslice.repartition.carve_record import parse_carve

    plan = _parse_plan(document.get("plan"))
    return RepartitionRecord(
        plan=plan,
        finished=_times(document.get("finished"), "finished"),
        backoff=_times(document.get("backoff"), "backoff"),
        quarantine=_quarantine(document.get("quarantine")),
        carve=parse_carve(document.get("carve")),
    )


def _times(raw: object, where: str) -> tuple[tuple[str, float], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a map of node to time")
    return tuple(sorted((str(k), parse_time(v, f"{where}.{k}")) for k, v in raw.items()))


def _quarantine(raw: object) -> tuple[Quarantined, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise RecordError("quarantine: expected a map of node to {since, config, detail}")
    found: list[Quarantined] = []
    for node, entry in sorted(raw.items()):
        where = f"quarantine.{node}"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("config"), str):
            raise RecordError(f"{where}: expected an object with since, config and detail")
        since = parse_time(entry.get("since"), f"{where}.since")
        found.append(Quarantined(str(node), since, entry["config"], str(entry.get("detail") or "")))
    return tuple(found)


def _parse_plan(raw: object) -> ActivePlan | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise RecordError("plan: expected an object")
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, list):
        raise RecordError("plan.nodes: expected a list")
    applied = raw.get("appliedAt")
    plan_applied = None if applied is None else parse_time(applied, "plan.appliedAt")
    steps: list[NodeStep] = []
    for position, item in enumerate(nodes_raw):
        where = f"plan.nodes[{position}]"
        if not isinstance(item, Mapping):
            raise RecordError(f"{where}: expected an object")
        node, config = item.get("node"), item.get("config")
        if not isinstance(node, str) or not isinstance(config, str):
            raise RecordError(f"{where}: node and config must be strings")
        previous = item.get("previousConfig")
        outcome = item.get("outcome", OPEN)
        if outcome not in OUTCOMES:
            raise RecordError(f"{where}.outcome: {outcome!r} is not one of {sorted(OUTCOMES)}")
        gpus = item.get("gpus") or []
        serves = item.get("serves") or []
        if not all(isinstance(g, int) for g in gpus) or not all(isinstance(s, str) for s in serves):
            raise RecordError(f"{where}: gpus must be indices and serves pod keys")
        steps.append(
            NodeStep(
                node=node,
                config_name=config,
                previous_config=previous if isinstance(previous, str) else None,
                gpus=tuple(gpus),
                serves=tuple(serves),
                entries=_entries_from_json(item.get("entries"), f"{where}.entries"),
                outcome=NodeOutcome(outcome),
                detail=str(item.get("detail") or ""),
                applied_at=_node_applied_at(item, where, plan_applied),
            )
        )
    return ActivePlan(
        plan_id=str(raw.get("id") or ""),
        created_at=parse_time(raw.get("createdAt"), "plan.createdAt"),
        applied_at=plan_applied,
        nodes=tuple(steps),
    )


def _node_applied_at(
    item: Mapping[str, Any], where: str, plan_applied: float | None
) -> float | None:
    if "appliedAt" not in item:  # written before nodes could join an applied plan
        return plan_applied
    value = item["appliedAt"]
    return None if value is None else parse_time(value, f"{where}.appliedAt")
