"""Timestamps as Kubernetes writes them: RFC 3339 in UTC with second precision
(``2025-05-01T12:00:00Z``, ``metav1.Time``). Times inside migslice are epoch seconds or aware
datetimes; this is the one place that formats and reads the wire form."""

from __future__ import annotations

import datetime
from collections.abc import Mapping

RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def format_time(when: float | datetime.datetime) -> str:
    """``when`` (epoch seconds, or an aware datetime) as ``2025-05-01T12:00:00Z``."""
    if isinstance(when, datetime.datetime):
        if when.tzinfo is None:
            raise ValueError("a datetime to format must be timezone-aware")
        stamp = when.astimezone(datetime.UTC)
    else:
        stamp = datetime.datetime.fromtimestamp(when, datetime.UTC)
    return stamp.strftime(RFC3339)


def format_micro_time(epoch_s: float) -> str:
    """``metav1.MicroTime`` (Lease ``renewTime``): ``2025-05-01T12:00:00.123456Z``."""
    stamp = datetime.datetime.fromtimestamp(epoch_s, datetime.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: object) -> datetime.datetime | None:
    """The aware UTC datetime of an RFC 3339 second-precision stamp; None if it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, RFC3339).replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def parse_epoch_s(text: object) -> float | None:
    """Epoch seconds of an RFC 3339 stamp; None if it is not one."""
    stamp = parse_time(text)
    return None if stamp is None else stamp.timestamp()


def parse_micro_epoch_s(text: object) -> float | None:
    """Epoch seconds of a ``metav1.MicroTime`` (``2025-05-01T12:00:00.123456Z``, a Lease's
    ``renewTime``) or of a second-precision stamp; None if it is neither."""
    if not isinstance(text, str):
        return None
    for layout in ("%Y-%m-%dT%H:%M:%S.%fZ", RFC3339):
        try:
            stamp = datetime.datetime.strptime(text, layout).replace(tzinfo=datetime.UTC)
        except ValueError:
            continue
        return stamp.timestamp()
    return None


def condition_time(
    raw: object, kind: str, field: str, *, status: str = "True"
) -> datetime.datetime | None:
    """``status.conditions[type=kind].<field>`` of a Pod or Node (``lastTransitionTime``,
    ``lastHeartbeatTime``) while that condition's status is ``status``; None otherwise, or
    when the stamp cannot be read."""
    found = raw.get("status") if isinstance(raw, Mapping) else None
    conditions = found.get("conditions") if isinstance(found, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return parse_time(condition.get(field)) if condition.get("status") == status else None
    return None
