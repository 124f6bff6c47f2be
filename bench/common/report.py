"""One current report per suite: ``bench/<suite>/report.json``, ``report.md``, ``report.png``.

A suite's programs each own a section of ``report.json`` (its key): a run of one program
rewrites its section only, and ``report.md`` is rendered again from every section, in the
suite's order, each by its program's own renderer (headings one level down). ``report.png``
stacks the plots of the sections that draw one. Renderers are named ``module:function`` and
imported when used, so a suite's list of sections imports none of its programs.

    python -m bench.common.report packing      # render report.md and report.png again from
                                               # bench/packing/report.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Section:
    """A program's part of its suite's report: ``markdown`` renders its data (a ``# Title``
    document); ``plot``, where given, draws it into a PNG (``plot(data, path) -> message``)."""

    key: str
    markdown: str
    plot: str = ""


@dataclass(frozen=True)
class Suite:
    name: str
    title: str
    intro: str
    sections: tuple[Section, ...]

    @property
    def folder(self) -> Path:
        return BENCH / self.name

    def section(self, key: str) -> Section:
        for section in self.sections:
            if section.key == key:
                return section
        known = ", ".join(s.key for s in self.sections)
        raise KeyError(f"bench/{self.name}: no section {key!r} (sections: {known})")

    def load(self, out: Path | None = None) -> dict[str, Any]:
        """Every section of ``<out>/report.json`` (default: the suite's folder); {} if none."""
        path = (out or self.folder) / "report.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def read(self, key: str, out: Path | None = None) -> dict[str, Any]:
        """Section ``key`` as the last run left it (KeyError when there is none)."""
        self.section(key)
        found = self.load(out)
        if key not in found:
            raise KeyError(f"bench/{self.name}: report.json has no section {key!r} yet")
        return dict(found[key])

    def write(self, key: str, data: Any, out: Path | None = None) -> Path:
        """Put ``data`` in section ``key`` and render ``report.md`` and ``report.png`` again
        from every section; returns the folder written."""
        self.section(key)
        folder = out or self.folder
        folder.mkdir(parents=True, exist_ok=True)
        report = self.load(folder)
        report[key] = data
        ordered = {s.key: report[s.key] for s in self.sections if s.key in report}
        (folder / "report.json").write_text(dump(ordered))
        self.render_files(ordered, folder)
        print(f"wrote section {key!r} of {folder / 'report.json'} and rendered report.md")
        return folder

    def render(self, report: dict[str, Any]) -> str:
        """``report.md``: the title, the suite's introduction, then each section."""
        parts = [f"# {self.title}", "", self.intro.strip(), ""]
        for section in self.sections:
            if section.key in report:
                text = resolve(section.markdown)(report[section.key])
                parts += [demote(text).rstrip(), ""]
        return "\n".join(parts).rstrip() + "\n"

    def render_files(self, report: dict[str, Any], folder: Path) -> None:
        (folder / "report.md").write_text(self.render(report))
        if any(s.plot for s in self.sections):
            print(self.draw(report, folder / "report.png"))

    def draw(self, report: dict[str, Any], path: Path) -> str:
        plotted = [s for s in self.sections if s.plot and s.key in report]
        if not plotted:
            return "no section of this suite draws a plot"
        with tempfile.TemporaryDirectory() as tmp:
            images = []
            for section in plotted:
                image = Path(tmp) / f"{section.key}.png"
                message = resolve(section.plot)(report[section.key], image)
                if not image.exists():
                    return str(message)
                images.append(image)
            return stack(images, path)


def dump(report: dict[str, Any]) -> str:
    """One section a line, each compact: a run's diff names the sections it changed."""
    lines = [f"{json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}" for k, v in report.items()]
    return "{\n" + ",\n".join(lines) + "\n}\n"


def demote(markdown: str) -> str:
    """Every heading one level down (outside code blocks): a program's ``#`` is a section."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        lines.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(lines)


def resolve(name: str) -> Callable[..., Any]:
    module, _, function = name.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(module), function)
    return found


def stack(images: Sequence[Path], path: Path) -> str:
    """The PNGs one below the other, as wide as the widest (white beside the narrower)."""
    try:
        import matplotlib.image
        import numpy as np
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'); plot skipped"
    arrays = [matplotlib.image.imread(str(image))[:, :, :3] for image in images]
    width = max(a.shape[1] for a in arrays)
    padded = [
        np.pad(a, ((0, 0), (0, width - a.shape[1]), (0, 0)), constant_values=1.0) for a in arrays
    ]
    matplotlib.image.imsave(str(path), np.concatenate(padded, axis=0))
    return f"wrote {path}"


def suite_of(name: str) -> Suite:
    found: Suite = importlib.import_module(f"bench.{name}.suite").SUITE
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="render suites' report.md/.png from report.json")
    parser.add_argument("suites", nargs="+", help="packing, serving, latency, plane")
    parser.add_argument("--out", type=Path, help="the folder of report.json (default: the suite's)")
    args = parser.parse_args(argv)
    for name in args.suites:
        suite = suite_of(name)
        folder = args.out or suite.folder
        suite.render_files(suite.load(folder), folder)
        print(f"rendered {folder / 'report.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
