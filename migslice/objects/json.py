"""JSON as it comes off the wire, typed without ``Any``: readers narrow each value they use."""

from __future__ import annotations

from collections.abc import Mapping

JsonObject = Mapping[str, object]
"""A decoded JSON object (an API object, a section of one)."""


def mapping(value: object) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def text(value: object) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def items(value: object) -> list[object]:
    """``value`` if it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []
