"""``bench.common.report``: a program's run rewrites its own section of its suite's report and
renders the Markdown again from every section."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.common.report import Section, Suite, demote, dump


def titled(data: dict[str, Any]) -> str:
    return f"# {data['title']}\n\n## detail\n\nvalue {data['value']}\n"


SUITE = Suite(
    name="example",
    title="Example suite",
    intro="What it answers.",
    sections=(
        Section("first", f"{__name__}:titled"),
        Section("second", f"{__name__}:titled"),
    ),
)


def test_a_run_rewrites_only_its_section_and_the_markdown_shows_every_section(
    tmp_path: Path,
) -> None:
    SUITE.write("second", {"title": "Second", "value": 2}, tmp_path)
    SUITE.write("first", {"title": "First", "value": 1}, tmp_path)
    SUITE.write("second", {"title": "Second", "value": 3}, tmp_path)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {
        "first": {"title": "First", "value": 1},
        "second": {"title": "Second", "value": 3},
    }
    assert list(report) == ["first", "second"]  # the suite's order, not the runs'
    text = (tmp_path / "report.md").read_text()
    assert text.startswith("# Example suite\n\nWhat it answers.\n\n## First\n\n### detail\n")
    assert text.index("## First") < text.index("## Second")
    assert "value 3" in text and "value 2" not in text
    assert SUITE.read("first", tmp_path) == {"title": "First", "value": 1}


def test_an_unknown_section_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"no section 'third' \(sections: first, second\)"):
        SUITE.write("third", {}, tmp_path)
    with pytest.raises(KeyError, match="has no section 'first' yet"):
        SUITE.read("first", tmp_path)


def test_each_section_is_one_line_of_the_json_and_headings_in_code_stay() -> None:
    assert dump({"a": {"x": [1, 2]}, "b": 3}) == '{\n"a": {"x":[1,2]},\n"b": 3\n}\n'
    assert (
        demote("# t\n```\n# not a heading\n```\n## s") == "## t\n```\n# not a heading\n```\n### s"
    )
