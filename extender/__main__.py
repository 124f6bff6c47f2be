"""``python -m extender ...`` is ``migslice extender ...``."""

from __future__ import annotations

import sys

from extender.command import COMMAND

if __name__ == "__main__":
    raise SystemExit(COMMAND.main(sys.argv[1:], prog="python -m extender"))
