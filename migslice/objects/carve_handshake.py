"""The carve handshake on a Node: the controller's request and the node agent's journal.

``migslice.io/carve`` (written by the repartition controller, removed when it closes the step)::

    {"version": "v1", "plan": "9c1e0f4a2b7d",
     "gpus": [{"index": 0,
               "destroy": [{"profile": "1g.10gb", "start": 0, "uuid": "MIG-..."}],
               "create": [{"profile": "3g.40gb", "start": 0}],
               "layout": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}]}

``destroy`` names idle instances by profile, start (memory slice) and MIG device UUID;
``resume`` (present and true only when so) says the controller asks a plan again whose
journal was lost after the agent had begun it (the Node deleted and made again): NVML may hold
part of it, so the agent takes it up as begun and finishes or rolls it back from NVML;
``create`` names new instances by profile and start; ``layout`` is the whole GPU afterwards,
which the agent checks NVML against before it reports success.

``migslice.io/carve-state`` (written by the node agent)::

    {"version": "v1", "plan": "9c1e0f4a2b7d", "state": "pending", "detail": "",
     "at": "2026-06-15T15:01:01Z", "changed": false, "advertised": false,
     "gpus": [... the request's gpus ...]}

``state`` is ``pending`` from before the first NVML change until the outcome, ``rolling-back``
while a failed carve is undone, then ``success`` or ``failed``. The agent writes it with the
request's steps *before* it changes anything (and ``changed: true`` right before its first
NVML change, ``advertised: true`` right before it first restarts the device plugin), so an
agent restarted at any point knows what it was doing even when the request is gone (the
controller gave up): it finishes when the request still names the same plan, and rolls back
otherwise. A journal without ``advertised`` (an earlier agent's) reads as advertised.

GPU indices and starts are at most :data:`MAX_NUMBER` (NVML takes them as C unsigned ints:
a larger one would wrap around to another GPU or placement).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice.errors import InvalidInputError
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION
from migslice.objects.json import decode, version_not_read

CARVE_VERSION = "v1"
MAX_NUMBER = 255
"""The largest GPU index or start a carve annotation may name."""


class CarveAnnotationError(InvalidInputError):
    """A carve annotation that does not follow its schema; the message names the field."""


class CarvePhase(enum.StrEnum):
    PENDING = "pending"
    ROLLING_BACK = "rolling-back"
    SUCCESS = "success"
    FAILED = "failed"

    @property
    def is_open(self) -> bool:
        return self in (CarvePhase.PENDING, CarvePhase.ROLLING_BACK)


@dataclass(frozen=True, slots=True, order=True)
class Slot:
    """An instance by profile and start memory slice (what to create, or a layout entry)."""

    start: int
    profile: str


@dataclass(frozen=True, slots=True, order=True)
class Doomed:
    """An idle instance to destroy: profile, start and its MIG device UUID."""

    start: int
    profile: str
    uuid: str = ""


@dataclass(frozen=True, slots=True)
class CarveGpu:
    index: int
    destroy: tuple[Doomed, ...] = ()
    create: tuple[Slot, ...] = ()
    layout: tuple[Slot, ...] = ()


@dataclass(frozen=True, slots=True)
class CarveRequest:
    """``resume``: asked again after its journal was lost, NVML showing part of the plan."""

    plan_id: str
    gpus: tuple[CarveGpu, ...]
    resume: bool = False


@dataclass(frozen=True, slots=True)
class CarveStatus:
    """``changed``: the agent is about to change, or has changed, NVML for this plan (so a
    roll back must restart the device plugin; a carve refused before that changed nothing).
    ``advertised``: the agent may have restarted the device plugin for this plan, so pods may
    hold the instances it created (before that, no pod can have been given one)."""

    plan_id: str
    phase: CarvePhase
    detail: str = ""
    at: str = ""
    gpus: tuple[CarveGpu, ...] = ()
    changed: bool = False
    advertised: bool = False


def render_carve_request(request: CarveRequest) -> str:
    document: dict[str, object] = {
        "version": CARVE_VERSION,
        "plan": request.plan_id,
        "gpus": gpus_json(request.gpus),
    }
    if request.resume:
        document["resume"] = True
    return json.dumps(document, separators=(",", ":"))


def render_carve_status(status: CarveStatus) -> str:
    document: dict[str, object] = {
        "version": CARVE_VERSION,
        "plan": status.plan_id,
        "state": str(status.phase),
        "detail": status.detail,
        "at": status.at,
        "changed": status.changed,
        "advertised": status.advertised,
        "gpus": gpus_json(status.gpus),
    }
    return json.dumps(document, separators=(",", ":"))


def gpus_json(gpus: Sequence[CarveGpu]) -> list[dict[str, object]]:
    """The ``gpus`` list of the annotations (and of the controller's record)."""
    return [
        {
            "index": gpu.index,
            "destroy": [
                {"profile": d.profile, "start": d.start, "uuid": d.uuid} for d in gpu.destroy
            ],
            "create": [{"profile": s.profile, "start": s.start} for s in gpu.create],
            "layout": [{"profile": s.profile, "start": s.start} for s in gpu.layout],
        }
        for gpu in gpus
    ]


def parse_carve_request(text: str) -> CarveRequest:
    document = _document(text, CARVE_ANNOTATION)
    return CarveRequest(
        _text(document, "plan", CARVE_ANNOTATION),
        parse_gpus(document.get("gpus"), CARVE_ANNOTATION),
        resume=document.get("resume") is True,
    )


def parse_carve_status(text: str) -> CarveStatus:
    where = CARVE_STATE_ANNOTATION
    document = _document(text, where)
    state = document.get("state")
    if state not in {str(p) for p in CarvePhase}:
        raise CarveAnnotationError(
            f"{where}: state={state!r}; expected one of {', '.join(str(p) for p in CarvePhase)}"
        )
    return CarveStatus(
        plan_id=_text(document, "plan", where),
        phase=CarvePhase(str(state)),
        detail=str(document.get("detail") or ""),
        at=str(document.get("at") or ""),
        gpus=parse_gpus(document.get("gpus") or [], where),
        changed=document.get("changed") is True,
        advertised=document.get("advertised") is not False,
    )


def _document(text: str, where: str) -> Mapping[str, object]:
    try:
        document = decode(text)
    except ValueError as error:
        raise CarveAnnotationError(f"{where} is not JSON: {error}") from None
    if not isinstance(document, Mapping):
        raise CarveAnnotationError(f"{where}: expected an object with version {CARVE_VERSION}")
    if document.get("version") != CARVE_VERSION:
        found = version_not_read(document.get("version"), CARVE_VERSION)
        raise CarveAnnotationError(f"{where} {found}")
    return document


def _text(document: Mapping[str, object], key: str, where: str) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value:
        raise CarveAnnotationError(f"{where}: {key}={value!r}; expected a non-empty string")
    return value


def _int(raw: Mapping[str, object], key: str, where: str) -> int:
    value = raw.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_NUMBER:
        raise CarveAnnotationError(
            f"{where}.{key}={value!r}; expected an integer from 0 to {MAX_NUMBER}"
        )
    return value


def _items(raw: Mapping[str, object], key: str, where: str) -> list[Mapping[str, object]]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise CarveAnnotationError(f"{where}.{key}: expected a list of objects")
    return list(value)


def _slot(raw: Mapping[str, object], where: str) -> Slot:
    profile = raw.get("profile")
    if not isinstance(profile, str) or not profile:
        raise CarveAnnotationError(f"{where}.profile={profile!r}; expected a MIG profile name")
    return Slot(_int(raw, "start", where), profile)


def parse_gpus(raw: object, where: str) -> tuple[CarveGpu, ...]:
    """Read a ``gpus`` list; CarveAnnotationError names the field (``where`` prefixes it)."""
    if not isinstance(raw, list) or not all(isinstance(g, Mapping) for g in raw):
        raise CarveAnnotationError(f"{where}: gpus must be a list of objects")
    gpus: list[CarveGpu] = []
    for position, item in enumerate(raw):
        at = f"{where}: gpus[{position}]"
        doomed = []
        for k, entry in enumerate(_items(item, "destroy", at)):
            slot = _slot(entry, f"{at}.destroy[{k}]")
            doomed.append(Doomed(slot.start, slot.profile, str(entry.get("uuid") or "")))
        gpus.append(
            CarveGpu(
                index=_int(item, "index", at),
                destroy=tuple(doomed),
                create=tuple(
                    _slot(e, f"{at}.create[{k}]") for k, e in enumerate(_items(item, "create", at))
                ),
                layout=tuple(
                    sorted(
                        _slot(e, f"{at}.layout[{k}]")
                        for k, e in enumerate(_items(item, "layout", at))
                    )
                ),
            )
        )
    indices = [gpu.index for gpu in gpus]
    if len(set(indices)) != len(indices):
        raise CarveAnnotationError(f"{where}: GPU index repeated in {indices}")
    return tuple(gpus)
