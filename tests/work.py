"""Work counted without a clock: how many lines of Python a call runs (loop iterations
included). Tests of how work grows with a cluster's size compare these counts; they never time
anything."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType


def lines_run(call: Callable[[], object]) -> int:
    """The lines of Python ``call`` runs, in every frame it enters."""
    count = 0

    def trace(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        call()
    finally:
        sys.settrace(previous)
    return count
