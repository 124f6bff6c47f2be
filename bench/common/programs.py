"""What the lab's programs share around their ``main``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TypeVar

from harness.process import ControlPlaneError
from migslice.console import CommandError

Argv = TypeVar("Argv", bound=Sequence[str] | None)


def said_in_one_line(name: str, program: Callable[[Argv], int], argv: Argv) -> int:
    """``program(argv)``; a missing input (the traces, the control plane's binaries) is one
    line on stderr naming what to pass, and exit status 1, not a traceback."""
    try:
        return program(argv)
    except (CommandError, ControlPlaneError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
