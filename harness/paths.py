"""Where the harness finds the repository and the e2e folder (binaries, runs, fixtures)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
E2E_DIR = REPO / "e2e"
