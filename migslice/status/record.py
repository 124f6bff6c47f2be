"""The repartition controller's durable record, as status and why show it: which nodes a plan
or a carve is changing and in which state (planned, applying, or how it ended), which are
quarantined, cooling down after a re-partition, or backed off after a failure."""

from __future__ import annotations

from dataclasses import dataclass

from migslice import names
from migslice.repartition import ControllerSettings, RepartitionRecord
from migslice.repartition.modes import mode_of
from migslice.status.cluster import Cluster

PLANNED = "planned"
APPLYING = "applying"


@dataclass(frozen=True, slots=True)
class StepView:
    """One node of the plan or the carve in progress. ``state``: ``planned`` (written, not
    applied), ``applying`` (labelled or asked, not answered), else its outcome."""

    mode: str
    plan_id: str
    node: str
    state: str
    since_s: float
    serves: tuple[str, ...]
    config: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HeldNode:
    """A node the controller leaves alone: ``why`` is ``quarantined``, ``cooldown`` or
    ``backoff``; ``until_s`` None for a quarantine (held until released)."""

    node: str
    why: str
    since_s: float | None
    until_s: float | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RecordView:
    where: str
    problem: str
    steps: tuple[StepView, ...]
    held: tuple[HeldNode, ...]

    def steps_serving(self, pod: str) -> tuple[StepView, ...]:
        return tuple(s for s in self.steps if pod in s.serves)

    def held_of(self, node: str) -> tuple[HeldNode, ...]:
        return tuple(h for h in self.held if h.node == node)


def record_view(cluster: Cluster, settings: ControllerSettings) -> RecordView:
    """The record as of ``cluster.settings.now_s`` (expired cooldowns and backoffs left out).
    A node cools down as long as its own path's cooldown, as the controller's settings say:
    ``settings.carve.cooldown_s`` (``--repartition-carve-cooldown-s``) for a carve-mode node,
    ``settings.plan.cooldown_s`` (``--repartition-cooldown-s``) for the others."""
    namespace, name = cluster.settings.mig_config_map
    where = f"ConfigMap {namespace}/{name}, annotation {names.RECORD_ANNOTATION}"
    file = cluster.mig_file
    record = file.record
    if record is None:
        return RecordView(where, file.problem or "unreadable", (), ())
    problem = file.problem  # missing, or its mig-parted config unreadable (which stops it too)
    return RecordView(
        where,
        problem,
        _steps(record),
        _held(record, _cooldowns(cluster, record, settings), cluster.settings.now_s),
    )


def _steps(record: RepartitionRecord) -> tuple[StepView, ...]:
    found: list[StepView] = []
    plan = record.plan
    if plan is not None:
        for step in plan.nodes:
            if step.is_open:
                state = PLANNED if step.applied_at is None else APPLYING
            else:
                state = str(step.outcome)
            since = step.applied_at if step.applied_at is not None else plan.created_at
            found.append(
                StepView(
                    names.MODE_MIG_MANAGER,
                    plan.plan_id,
                    step.node,
                    state,
                    since,
                    step.serves,
                    step.config_name,
                    step.detail,
                )
            )
    carve = record.carve
    if carve is not None:
        for carved in carve.nodes:
            if carved.outcome == "":
                state = PLANNED if carve.applied_at is None else APPLYING
            else:
                state = str(carved.outcome)
            since = carve.applied_at if carve.applied_at is not None else carve.created_at
            found.append(
                StepView(
                    names.MODE_CARVE,
                    carve.plan_id,
                    carved.node,
                    state,
                    since,
                    carved.serves,
                    detail=carved.detail,
                )
            )
    return tuple(found)


def _cooldowns(
    cluster: Cluster, record: RepartitionRecord, settings: ControllerSettings
) -> dict[str, float]:
    """node -> the cooldown of the path that re-shapes it: its mode label, else the
    controller's default mode (a node no longer there, or of no mode: the default's)."""
    default = settings.carve.default_mode
    cooldowns: dict[str, float] = {}
    for node, _ in record.finished:
        prepared = cluster.nodes.get(node)
        mode = default if prepared is None else mode_of(prepared.state.facts, default)
        carve = (mode if isinstance(mode, str) else default) == names.MODE_CARVE
        cooldowns[node] = settings.carve.cooldown_s if carve else settings.plan.cooldown_s
    return cooldowns


def _held(
    record: RepartitionRecord, cooldowns: dict[str, float], now_s: float
) -> tuple[HeldNode, ...]:
    held = [HeldNode(q.node, "quarantined", q.since, None, q.detail) for q in record.quarantine]
    held += [
        HeldNode(n, "cooldown", at, at + cooldowns[n])
        for n, at in record.finished
        if at + cooldowns[n] > now_s
    ]
    held += [HeldNode(n, "backoff", None, until) for n, until in record.backoff if until > now_s]
    return tuple(sorted(held, key=lambda h: (h.node, h.why)))
