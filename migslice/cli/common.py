"""Shared helpers of the command line: errors, output formats, tables."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


class CommandError(Exception):
    """An error the user can fix; printed as one line, exit status 1."""


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain table in the style of ``kubectl get``: upper-case headers, padded columns."""
    cells = [[str(h).upper() for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = [
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)
