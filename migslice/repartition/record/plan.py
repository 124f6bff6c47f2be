"""The MIG Manager part of the plan record: the plan in progress (key ``plan``) and the
quarantined nodes (key ``quarantine``)::

    "plan": {"id": "3f2a…", "createdAt": "2025-05-01T10:00:00Z", "appliedAt": null,
             "nodes": [{"node": "gpu-a", "config": "migslice-gpu-a-1a2b3c4d",
                        "previousConfig": "all-1g.10gb", "gpus": [0],
                        "serves": ["team-a/train"], "entries": [<mig-parted entry>],
                        "outcome": "", "detail": ""}]},
    "quarantine": {"gpu-d": {"since": "2025-05-01T10:10:00Z",
                             "config": "migslice-gpu-d-9f8e7d6c", "detail": "state pending …"}}

A node's ``writtenAt`` is when its config was written into the mig-parted file, with the plan
(the label waits for MIG Manager's mounted copy of the file: ``config_propagation_s``), and
its ``appliedAt`` when its label was set (nodes may join a plan while it is applied; a record
without it takes the plan's). ``quarantine``: nodes MIG Manager left short of
``success`` past the deadline (``migslice.repartition.migmanager.quarantine``).

``restores`` (absent when empty): roll backs of a failed or timed-out node's label not yet
seen on the node, ``{"gpu-a": {"config": "all-1g.10gb", "replaces": "migslice-gpu-a-…"}}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.mig.migparted import MigPartedEntry, MigPartedError, entry_json, parse_entries
from migslice.objects.times import format_time
from migslice.repartition.record.wire import (
    OPEN,
    NodeOutcome,
    RecordError,
    parse_outcome,
    parse_time,
)


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
    written_at: float | None = None
    """When its config was written into the mig-parted file (None: planned by a controller
    that wrote it with the label; it is written, then labelled after the wait)."""

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
class Restore:
    """A roll back asked for and not yet seen on the node: its ``nvidia.com/mig.config`` set
    back to ``config_name`` from the failed plan's ``replaces`` (tried again, by whichever
    replica leads, while the label still names ``replaces``)."""

    node: str
    config_name: str
    replaces: str


def restores_json(restores: tuple[Restore, ...]) -> dict[str, Any]:
    return {r.node: {"config": r.config_name, "replaces": r.replaces} for r in restores}


def parse_restores(raw: object) -> tuple[Restore, ...]:
    """The roll backs still due; absent (a record of an earlier version): none."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise RecordError("restores: expected a map of node to {config, replaces}")
    found: list[Restore] = []
    for node, entry in sorted(raw.items()):
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("config"), str)
            or not isinstance(entry.get("replaces"), str)
        ):
            raise RecordError(f"restores.{node}: expected an object with config and replaces")
        found.append(Restore(str(node), entry["config"], entry["replaces"]))
    return tuple(found)


def plan_json(active: ActivePlan) -> dict[str, Any]:
    return {
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
                "writtenAt": None if step.written_at is None else format_time(step.written_at),
            }
            for step in active.nodes
        ],
    }


def quarantine_json(quarantine: tuple[Quarantined, ...]) -> dict[str, Any]:
    return {
        q.node: {"since": format_time(q.since), "config": q.config_name, "detail": q.detail}
        for q in quarantine
    }


def parse_quarantine(raw: object) -> tuple[Quarantined, ...]:
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


def parse_plan(raw: object) -> ActivePlan | None:
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
        outcome = parse_outcome(item, where)
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
                outcome=outcome,
                detail=str(item.get("detail") or ""),
                applied_at=_node_applied_at(item, where, plan_applied),
                written_at=(
                    None
                    if item.get("writtenAt") is None
                    else parse_time(item["writtenAt"], f"{where}.writtenAt")
                ),
            )
        )
    return ActivePlan(
        plan_id=str(raw.get("id") or ""),
        created_at=parse_time(raw.get("createdAt"), "plan.createdAt"),
        applied_at=plan_applied,
        nodes=tuple(steps),
    )


def _entries_from_json(raw: object, where: str) -> tuple[MigPartedEntry, ...]:
    try:
        return parse_entries(raw, where)
    except MigPartedError as error:
        raise RecordError(str(error)) from None


def _node_applied_at(
    item: Mapping[str, Any], where: str, plan_applied: float | None
) -> float | None:
    if "appliedAt" not in item:  # written before nodes could join an applied plan
        return plan_applied
    value = item["appliedAt"]
    return None if value is None else parse_time(value, f"{where}.appliedAt")
