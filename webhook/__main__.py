"""``python -m webhook ...`` is ``migslice webhook ...``."""

from __future__ import annotations

import sys

from migslice.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["webhook", *sys.argv[1:]]))
