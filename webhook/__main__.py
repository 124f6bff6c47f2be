"""``python -m webhook ...`` is ``migslice webhook ...``."""

from __future__ import annotations

import sys

from webhook.command import COMMAND

if __name__ == "__main__":
    raise SystemExit(COMMAND.main(sys.argv[1:], prog="python -m webhook"))
