"""JSON as it comes off the wire, typed without ``Any``: readers narrow each value they use."""

from __future__ import annotations

import json
from collections.abc import Mapping

JsonObject = Mapping[str, object]
"""A decoded JSON object (an API object, a section of one)."""


def decode(text: str | bytes) -> object:
    """The JSON value of ``text`` (an annotation's, a ConfigMap key's); ValueError, as for text
    that is no JSON, when it nests too deep to decode. ``json.loads`` raises RecursionError
    there, which no reader catches: ``[`` a thousand times (2 KB, well inside an annotation's
    256 KiB) ended ``migslice status``, ``why`` and ``plan`` with a traceback."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(
            "it nests too deep to decode (past Python's recursion limit); no migslice "
            "annotation nests more than a few levels"
        ) from None


def mapping(value: object) -> JsonObject:
    """``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def text(value: object) -> str | None:
    """``value`` if it is a string, else None."""
    return value if isinstance(value, str) else None


def items(value: object) -> list[object]:
    """``value`` if it is a JSON array, else an empty list."""
    return value if isinstance(value, list) else []


def version_not_read(found: object, reads: str) -> str:
    """The clause that says a versioned document's ``version`` is not one this release reads
    (``reads``: the versions it does read, ``v1`` or ``v2 or v1``): the version found, and what
    writes one (another release of migslice, mid-upgrade or after a rollback)."""
    if not isinstance(found, str) or not found:
        return f"has no version (found {found!r}); this migslice reads {reads}"
    return (
        f"has version {found!r}; this migslice reads {reads} (another release of migslice "
        "wrote it: finish the helm upgrade or rollback so that every component runs one release)"
    )
