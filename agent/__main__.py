"""``python -m agent ...`` is ``migslice agent ...``."""

from __future__ import annotations

import sys

from migslice.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["agent", *sys.argv[1:]]))
