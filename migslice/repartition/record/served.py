"""The pods a finished re-partition served, still to be touched (key ``served`` of the
record)::

    "served": {"gpu-a": {"config": "migslice-gpu-a-1a2b3c4d", "at": "2025-05-01T10:03:00Z",
                         "pods": ["team-a/train"]}}

Written with the ``success`` that closes a node (MIG Manager's or a carve's), in the same
record write, so whichever replica leads next touches the pods (``migslice.io/repartitioned``)
once its cache shows the node in ``config``: the mig-parted config the node reached, or
``carve:<plan id>`` for a carve. A leader change between the success and the touch no longer
leaves the pods to kube-scheduler's own retry (up to five minutes). An entry lasts
:data:`TOUCH_WINDOW_S` from ``at``; a record without the key (an earlier version's) has
nothing to touch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.objects.times import format_time
from migslice.repartition.record.wire import RecordError, parse_time

CARVE_MARK = "carve:"
"""Prefix of a served entry's ``config`` (and of the touch annotation's value) for a carve
plan's success: ``carve:<plan id>``, not a mig-parted config."""

TOUCH_WINDOW_S = 600.0
"""How long after a success its pods may still be touched (the extender's cache may lag the
success; kube-scheduler flushes its unschedulable pods itself after five minutes)."""


@dataclass(frozen=True, slots=True)
class Served:
    """The pods ``node``'s success at ``at`` served, touched once the cache shows ``config``."""

    node: str
    config: str
    at: float
    pods: tuple[str, ...]


def served_json(served: tuple[Served, ...]) -> dict[str, Any]:
    return {
        s.node: {"config": s.config, "at": format_time(s.at), "pods": list(s.pods)} for s in served
    }


def parse_served(raw: object) -> tuple[Served, ...]:
    """The served entries; absent (a record of an earlier version): none."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise RecordError("served: expected a map of node to {config, at, pods}")
    found: list[Served] = []
    for node, entry in sorted(raw.items()):
        where = f"served.{node}"
        pods = entry.get("pods") if isinstance(entry, Mapping) else None
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("config"), str)
            or not isinstance(pods, list)
            or not all(isinstance(p, str) for p in pods)
        ):
            raise RecordError(f"{where}: expected an object with config, at and pods")
        at = parse_time(entry.get("at"), f"{where}.at")
        found.append(Served(str(node), entry["config"], at, tuple(pods)))
    return tuple(found)


def still_served(served: tuple[Served, ...], now: float) -> tuple[Served, ...]:
    """The entries whose pods may still be touched at ``now``."""
    return tuple(s for s in served if now - s.at < TOUCH_WINDOW_S)


def with_served(
    served: tuple[Served, ...], node: str, config: str, at: float, pods: tuple[str, ...]
) -> tuple[Served, ...]:
    """``served`` with ``node``'s entry replaced by this success (none when it served no pod)."""
    kept = [s for s in served if s.node != node]
    if pods:
        kept.append(Served(node, config, at, pods))
    return tuple(sorted(kept, key=lambda s: s.node))
