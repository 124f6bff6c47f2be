"""Grouped bar charts for the suites' ``report.png`` (``Section.plot``): one chart, groups on
the x axis, one bar per series, an optional goal line. matplotlib is the ``bench`` extra and
imported only when a plot is drawn."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

NO_MATPLOTLIB = "matplotlib is not installed (pip install -e '.[bench]'); plot skipped"


def bars(
    path: Path,
    *,
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    goal: tuple[float, str] | None = None,
    log: bool = False,
) -> str:
    """Draw ``series`` (name -> one value per group; None leaves the bar out) into ``path``;
    returns a line saying what was written, or why nothing was."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return NO_MATPLOTLIB
    width = 0.8 / max(1, len(series))
    figure, axis = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) + 3.0), 4.2))
    for n, (name, values) in enumerate(series.items()):
        xs = [
            i + (n - (len(series) - 1) / 2) * width for i, v in enumerate(values) if v is not None
        ]
        ys = [v for v in values if v is not None]
        axis.bar(xs, ys, width=width * 0.95, color=f"C{n}", label=name)
    if goal is not None:
        axis.axhline(goal[0], color="k", linestyle="--", linewidth=1.0, label=goal[1])
    axis.set_xticks(range(len(groups)))
    axis.set_xticklabels(groups, fontsize=8, rotation=20 if len(groups) > 6 else 0)
    axis.set_ylabel(ylabel)
    if log:
        axis.set_yscale("log")
    axis.set_title(title, fontsize=10)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return f"wrote {path}"
