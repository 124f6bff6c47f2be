"""``python -m agent ...`` is ``migslice agent ...``."""

from __future__ import annotations

import sys

from agent.command import AGENT

if __name__ == "__main__":
    raise SystemExit(AGENT.main(sys.argv[1:], prog="python -m agent"))
