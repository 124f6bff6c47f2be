"""The repartition controller's durable record as one document: the MIG Manager plan and the
quarantine (:mod:`~migslice.repartition.record.plan`), the carve plan
(:mod:`~migslice.repartition.record.carve_plan`), and the cooldowns and backoffs both share.

The record is JSON in the annotation ``migslice.io/repartition`` of the mig-parted ConfigMap,
so that a plan's configs and the record that says they are being applied change in one
write. Times are RFC 3339 UTC strings on the wire and seconds since the epoch in values.

    {"version": "v1",
     "plan": {…},
     "finished": {"gpu-b": "2025-05-01T09:50:00Z"},
     "backoff": {"gpu-c": "2025-05-01T10:30:00Z"},
     "quarantine": {…},
     "restores": {…},
     "served": {…},
     "carve": {…}}

A top-level key this release does not know (a newer one wrote it) is kept as it was and
written back after the known ones (``unknown``), as Kubernetes clients keep the fields they do
not understand: a ``helm rollback`` to this release and forward again loses none of the newer
release's state. Keys nested in the known ones (a plan's, a quarantine entry's) are not kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.names import RECORD_ANNOTATION
from migslice.objects.json import decode, version_not_read
from migslice.objects.times import format_time
from migslice.repartition.record.carve_plan import ActiveCarve, carve_json, parse_carve
from migslice.repartition.record.plan import (
    ActivePlan,
    Quarantined,
    Restore,
    parse_plan,
    parse_quarantine,
    parse_restores,
    plan_json,
    quarantine_json,
    restores_json,
)
from migslice.repartition.record.served import Served, parse_served, served_json
from migslice.repartition.record.wire import RecordError, parse_time

RECORD_VERSION = "v1"
_KNOWN_KEYS = frozenset(
    {"version", "plan", "finished", "backoff", "quarantine", "restores", "served", "carve"}
)


@dataclass(frozen=True, slots=True)
class RepartitionRecord:
    """``finished``: node -> when its last re-partition succeeded (cooldown);
    ``backoff``: node -> until when it is left alone after a failure; ``quarantine``: nodes
    left alone until MIG Manager reports success or an admin releases them; ``restores``:
    roll backs of a node's label not yet seen on the node; ``served``: the pods a node's
    recent success served, to be touched (:mod:`~migslice.repartition.record.served`);
    ``carve``: the carve plan in progress, beside the MIG Manager one; ``unknown``: the
    top-level keys a newer release wrote that this one does not know, each with its value as
    compact JSON text, in the order read, to be written back unchanged (a record derived with
    ``replace`` keeps them)."""

    plan: ActivePlan | None = None
    finished: tuple[tuple[str, float], ...] = ()
    backoff: tuple[tuple[str, float], ...] = ()
    quarantine: tuple[Quarantined, ...] = ()
    carve: ActiveCarve | None = None
    restores: tuple[Restore, ...] = ()
    served: tuple[Served, ...] = ()
    unknown: tuple[tuple[str, str], ...] = ()

    def with_plan(self, plan: ActivePlan | None) -> RepartitionRecord:
        # every field but the plan, by hand: dataclasses.replace is twice as slow, and the
        # simulator asks the controller for a decision per pod
        return RepartitionRecord(
            plan,
            self.finished,
            self.backoff,
            self.quarantine,
            self.carve,
            self.restores,
            self.served,
            self.unknown,
        )


def render_record(record: RepartitionRecord) -> str:
    document: dict[str, Any] = {
        "version": RECORD_VERSION,
        "plan": None if record.plan is None else plan_json(record.plan),
        "finished": {node: format_time(at) for node, at in record.finished},
        "backoff": {node: format_time(until) for node, until in record.backoff},
        "quarantine": quarantine_json(record.quarantine),
    }
    if record.restores:  # absent when none: records stay as earlier versions wrote them
        document["restores"] = restores_json(record.restores)
    if record.served:  # the same
        document["served"] = served_json(record.served)
    if record.carve is not None:
        document["carve"] = carve_json(record.carve)
    for key, value in record.unknown:  # a newer release's keys, as it wrote them
        document.setdefault(key, json.loads(value))
    return json.dumps(document, separators=(",", ":"), sort_keys=False)


def parse_record(text: str | None) -> RepartitionRecord:
    """The record in an annotation's text; an absent annotation is an empty record."""
    if not text:
        return RepartitionRecord()
    try:
        document = decode(text)
    except ValueError as error:
        raise RecordError(f"annotation {RECORD_ANNOTATION} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise RecordError(
            f"annotation {RECORD_ANNOTATION}: expected an object with version {RECORD_VERSION}"
        )
    if document.get("version") != RECORD_VERSION:
        found = version_not_read(document.get("version"), RECORD_VERSION)
        # not to be removed: it may hold a plan the release that wrote it has under way
        raise RecordError(
            f"annotation {RECORD_ANNOTATION} {found}",
            fix="leave it for the release that wrote it",
        )
    return RepartitionRecord(
        plan=parse_plan(document.get("plan")),
        finished=_times(document.get("finished"), "finished"),
        backoff=_times(document.get("backoff"), "backoff"),
        quarantine=parse_quarantine(document.get("quarantine")),
        carve=parse_carve(document.get("carve")),
        restores=parse_restores(document.get("restores")),
        served=parse_served(document.get("served")),
        unknown=tuple(
            (key, _compact(value)) for key, value in document.items() if key not in _KNOWN_KEYS
        ),
    )


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def _times(raw: object, where: str) -> tuple[tuple[str, float], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a map of node to time")
    return tuple(sorted((str(k), parse_time(v, f"{where}.{k}")) for k, v in raw.items()))
