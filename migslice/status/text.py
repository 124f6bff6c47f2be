"""Plain-text pieces status and why print: durations, wrapped lines, columns, GPU bars."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from migslice.mig.render import render_slots, slots_cell
from migslice.status.pools import GpuView, SlotView

WIDTH = 80
"""The terminal the default output fits (every line at most this many characters)."""


def duration(seconds: float | None) -> str:
    """``45s``, ``3m10s``, ``2h5m``, ``3d4h``; ``-`` for None."""
    if seconds is None:
        return "-"
    total = int(max(0.0, seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"


def wrapped(text: str, indent: str, width: int | None) -> list[str]:
    """``text`` after ``indent``, wrapped at ``width`` (None: one line), continuation lines
    indented two more."""
    if width is None:
        return [indent + text]
    if len(indent) + len(text) <= width and text.isprintable() and text.strip(" ") == text:
        return [indent + text]  # what textwrap gives a line that fits, without its work
    return textwrap.wrap(
        text,
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "  ",
        break_long_words=True,
        break_on_hyphens=False,
    ) or [indent]


def columns(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows padded into columns under upper-case headers (``kubectl get``'s style)."""
    cells = [[h.upper() for h in headers], *[list(r) for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def slot_label(slot: SlotView, *, short: bool) -> str:
    """An instance's text in a bar: its profile (``3g`` and its media suffix when
    ``short``), ``*`` when a pod or a ResourceClaim holds it, ``!`` when the node agent sees it
    busy without a pod."""
    return _label(slot.profile, slot.pod is not None or slot.claim is not None, slot.busy, short)


def _label(profile: str, held: bool, busy: bool, short: bool) -> str:
    name = profile
    if short and "." in name:
        head, _, rest = name.partition(".")
        suffix = rest[rest.index("+") :] if "+" in rest else ""
        name = head + suffix
    if held:
        return name + "*"
    return name + "!" if busy else name


def bar_cells(gpus: Sequence[GpuView], budget: int) -> tuple[int, bool]:
    """One cell width (and whether labels are short) for the bars of ``gpus`` (one model), so
    that they line up and fit in ``budget`` characters."""
    # The labels of a pool's thousands of instances come in a few kinds: each judged once.
    kinds = {
        (s.start, s.size, s.profile, s.pod is not None or s.claim is not None, s.busy)
        for g in gpus
        for s in g.slots
    }
    for short in (False, True):
        spans = [
            (start, size, _label(p, held, busy, short)) for start, size, p, held, busy in kinds
        ]
        cell = slots_cell(spans, 3)
        slices = max((g.memory_slices for g in gpus), default=1)
        if slices * cell + slices + 1 <= budget or short:
            return cell, short
    raise AssertionError("unreachable")


def gpu_bar(
    gpu: GpuView,
    cell: int,
    *,
    short: bool,
    drawn: dict[tuple[object, ...], str] | None = None,
) -> str:
    """The GPU's bar; ``drawn`` remembers bars already drawn (a pool's GPUs share a few)."""
    spans = tuple((s.start, s.size, slot_label(s, short=short)) for s in gpu.slots)
    if drawn is None:
        return render_slots(gpu.memory_slices, spans, cell)
    key = (gpu.memory_slices, cell, spans)
    bar = drawn.get(key)
    if bar is None:
        bar = drawn[key] = render_slots(gpu.memory_slices, spans, cell)
    return bar
