"""Where the tests find the checkout, their fixtures and the public traces beside it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
DOCS = ROOT / "docs"
SHARED_DATA = ROOT.parent / "shared" / "data"
"""``../shared/data`` beside the repository (docs/benchmarks.md says where the traces come from)."""
