"""The carve part of the plan record: the carve plan in progress (key ``carve``).

It sits beside the MIG Manager plan, in the same annotation of the same ConfigMap, so both
paths share one durable record, one write and one set of cooldowns and backoffs::

    "carve": {"id": "5be0c2d1a9f3", "createdAt": "...", "appliedAt": "...",
              "nodes": [{"node": "gpu-a", "serves": ["team-a/train"],
                         "gpus": [<the gpus of migslice.io/carve>],
                         "outcome": "", "detail": ""}]}

``appliedAt`` is null until the controller has re-checked the nodes and asked their agents
(annotation ``migslice.io/carve``); ``outcome`` is ``""`` while a node is open, then
``success``, ``failed``, ``timeout`` or ``aborted``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from migslice.objects.carve_handshake import (
    CarveAnnotationError,
    CarveGpu,
    CarveRequest,
    gpus_json,
    parse_gpus,
)
from migslice.objects.times import format_time
from migslice.repartition.record.wire import (
    OPEN,
    NodeOutcome,
    RecordError,
    parse_outcome,
    parse_time,
)


@dataclass(frozen=True, slots=True)
class CarveStep:
    """One node of a carve plan: per GPU what to destroy and create, the pods it serves."""

    node: str
    gpus: tuple[CarveGpu, ...]
    serves: tuple[str, ...]
    outcome: NodeOutcome = NodeOutcome.OPEN
    detail: str = ""

    @property
    def is_open(self) -> bool:
        return self.outcome == OPEN

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        return tuple(gpu.index for gpu in self.gpus)

    def request(self, plan_id: str, *, resume: bool = False) -> CarveRequest:
        """The ``migslice.io/carve`` annotation for the node (``resume``: asked again after
        the agent's journal was lost with NVML showing part of the plan)."""
        return CarveRequest(plan_id, self.gpus, resume)


@dataclass(frozen=True, slots=True)
class ActiveCarve:
    plan_id: str
    created_at: float
    applied_at: float | None
    nodes: tuple[CarveStep, ...]

    @property
    def open_nodes(self) -> tuple[CarveStep, ...]:
        return tuple(step for step in self.nodes if step.is_open)

    @property
    def serves(self) -> frozenset[str]:
        return frozenset(pod for step in self.open_nodes for pod in step.serves)


def carve_json(active: ActiveCarve) -> dict[str, object]:
    return {
        "id": active.plan_id,
        "createdAt": format_time(active.created_at),
        "appliedAt": None if active.applied_at is None else format_time(active.applied_at),
        "nodes": [
            {
                "node": step.node,
                "serves": list(step.serves),
                "gpus": gpus_json(step.gpus),
                "outcome": str(step.outcome),
                "detail": step.detail,
            }
            for step in active.nodes
        ],
    }


def parse_carve(raw: object) -> ActiveCarve | None:
    """The carve plan of a record, None when there is none; RecordError says what is wrong."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or not isinstance(raw.get("nodes"), list):
        raise RecordError("carve: expected an object with a list of nodes")
    steps = []
    for position, item in enumerate(raw["nodes"]):
        where = f"carve.nodes[{position}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("node"), str):
            raise RecordError(f"{where}: expected an object with a node name")
        outcome = parse_outcome(item, where)
        serves = item.get("serves") or []
        if not isinstance(serves, list) or not all(isinstance(s, str) for s in serves):
            raise RecordError(f"{where}.serves: expected pod keys")
        steps.append(
            CarveStep(
                node=str(item["node"]),
                gpus=_parse_gpus(item.get("gpus") or [], where),
                serves=tuple(serves),
                outcome=outcome,
                detail=str(item.get("detail") or ""),
            )
        )
    applied = raw.get("appliedAt")
    return ActiveCarve(
        plan_id=str(raw.get("id") or ""),
        created_at=parse_time(raw.get("createdAt"), "carve.createdAt"),
        applied_at=None if applied is None else parse_time(applied, "carve.appliedAt"),
        nodes=tuple(steps),
    )


def _parse_gpus(raw: object, where: str) -> tuple[CarveGpu, ...]:
    try:
        return parse_gpus(raw, where)
    except CarveAnnotationError as error:
        raise RecordError(str(error)) from None
