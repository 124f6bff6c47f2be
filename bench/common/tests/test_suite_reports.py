"""Every suite keeps one current report: ``report.json``, the ``report.md`` rendered from it and
the ``report.png`` its sections draw (matplotlib: the ``bench`` extra, which ``make bench-test``
installs)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from bench.common.report import BENCH, Suite

SUITES = ("dra", "latency", "packing", "plane", "serving")


def suite(name: str) -> Suite:
    found: Suite = importlib.import_module(f"bench.{name}.suite").SUITE
    return found


def test_every_suite_folder_is_listed_here() -> None:
    folders = {p.parent.name for p in BENCH.glob("*/suite.py")}
    assert folders == set(SUITES)


@pytest.mark.parametrize("name", SUITES)
def test_the_committed_report_is_the_render_of_its_json(name: str) -> None:
    found = suite(name)
    report = found.load()
    assert report, f"bench/{name}/report.json is missing or empty"
    assert (found.folder / "report.md").read_text() == found.render(report)


@pytest.mark.parametrize("name", SUITES)
def test_each_suite_draws_its_plot_from_its_json(name: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    found = suite(name)
    assert any(s.plot for s in found.sections), f"bench/{name}: no section draws a plot"
    assert (found.folder / "report.png").is_file()
    drawn = tmp_path / "report.png"
    message = found.draw(found.load(), drawn)
    assert drawn.is_file() and drawn.stat().st_size > 10_000, message
