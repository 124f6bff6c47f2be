"""``python -m extender ...`` is ``migslice extender ...``."""

from __future__ import annotations

import sys

from migslice.cli import main

if __name__ == "__main__":
    sys.exit(main(["extender", *sys.argv[1:]]))
