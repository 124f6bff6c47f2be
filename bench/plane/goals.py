"""The goals of ``make bench-plane``, computed per run from the run's own rounds.

**Added scheduling latency per pod** of an extender, in a round: ``1/pods_per_s`` with that
extender minus ``1/pods_per_s`` of the same round's run without any extender, in ms per pod.
kube-scheduler's scheduling cycle is serial, so what an extender costs each pod shows as a
longer time per pod; the Python null extender (``bench/plane/nulls.py``: migslice's own server
answering without deciding) measures what the protocol itself costs, in the same run.

A run's figure for a goal is the median over its rounds; the spread shown is the rounds' least
and greatest. The goals:

* migslice's added latency per pod <= 1.3 x the Python null extender's (same run);
* GPU pods/s with migslice >= 1.5 x the stock default scheduler configuration's;
* the extender worker's CPU per pod <= 5 ms; each worker (webhook, extender) <= 300 MB;
  each cache sync <= 30 s; no node over-bound in any run.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MIB_300_MB = 286.1  # 300 MB in MiB
ADDED_FACTOR = 1.3
STOCK_FACTOR = 1.5
BOUND_RUNS = ("extender", "no_extender", "stock", "extender_weighted")


@dataclass(frozen=True)
class Goal:
    name: str
    unit: str
    larger_is_better: bool


@dataclass(frozen=True)
class Figure:
    """A run's value for a goal, the bound it is held to, and the rounds' spread."""

    value: float | None
    bound: float | None
    low: float | None = None
    high: float | None = None
    bound_note: str = ""


def is_met(goal: Goal, figure: Figure) -> bool | None:
    """Whether ``figure`` meets ``goal`` (None: the value or its bound was not measured)."""
    if figure.value is None or figure.bound is None:
        return None
    if goal.larger_is_better:
        return figure.value >= figure.bound - 1e-9
    return figure.value <= figure.bound + 1e-9


GOALS = (
    Goal("migslice's added scheduling latency per pod", "ms", False),
    Goal("GPU pods/s with migslice / stock default configuration", "x", True),
    Goal("extender worker CPU per pod (its calls and its watch)", "ms", False),
    Goal("webhook worker RSS (300 MB)", "MiB", False),
    Goal("extender worker RSS (300 MB)", "MiB", False),
    Goal("webhook cache sync", "s", False),
    Goal("extender cache sync", "s", False),
    Goal("over-bound nodes (all runs)", "", False),
)


def rounds_of(report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The run's rounds (a run from before rounds: its one set of runs)."""
    throughput = report.get("throughput", {})
    rounds = throughput.get("rounds")
    return list(rounds) if rounds else [throughput]


def added_ms(one: Mapping[str, Any], key: str) -> float | None:
    """The added scheduling latency per pod of run ``key`` in round ``one``, ms per pod."""
    bare, run = one.get("no_extender"), one.get(key)
    if not isinstance(bare, Mapping) or not isinstance(run, Mapping):
        return None
    with_it, without = run.get("pods_per_s"), bare.get("pods_per_s")
    if not with_it or not without:
        return None
    return round(1000.0 / with_it - 1000.0 / without, 2)


def over_stock(one: Mapping[str, Any]) -> float | None:
    """GPU pods/s with migslice over the stock configuration's, in round ``one``."""
    ours, stock = one.get("extender"), one.get("stock")
    if not isinstance(ours, Mapping) or not isinstance(stock, Mapping):
        return None
    if not ours.get("pods_per_s") or not stock.get("pods_per_s"):
        return None
    return round(ours["pods_per_s"] / stock["pods_per_s"], 2)


def spread(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """(median, least, greatest) of the known values."""
    known = [v for v in values if v is not None]
    if not known:
        return None, None, None
    return round(statistics.median(known), 2), min(known), max(known)


def worker_rss(report: Mapping[str, Any], command: str) -> float | None:
    """The larger of the worker's RSS after sync and at the end."""
    figures = [
        report.get(when, {}).get(f"{command} worker", {}).get("rss_mib")
        for when in ("memory_after_sync", "memory_end")
    ]
    known = [f for f in figures if f is not None]
    return max(known) if known else None


def over_bound(report: Mapping[str, Any]) -> float | None:
    """Nodes given more pods than they had free instances, over every run of the extender or
    none (a null extender ignores MIG geometry: its binds are not counted)."""
    throughput = report.get("throughput", {})
    runs = [throughput[k] for k in BOUND_RUNS if throughput.get(k)]
    for later in throughput.get("rounds", [])[1:]:  # the first round's runs are those above
        runs += [later[k] for k in ("extender", "no_extender", "stock") if later.get(k)]
    for pair in throughput.get("percentages", {}).values():
        runs += [pair[k] for k in ("extender", "no_extender") if pair.get(k)]
    return float(sum(r.get("over_bound_nodes", 0) for r in runs)) if runs else None


def figures(report: Mapping[str, Any]) -> list[Figure]:
    """The run's :class:`Figure` for each of :data:`GOALS`, in order."""
    rounds = rounds_of(report)
    ours = spread([added_ms(one, "extender") for one in rounds])
    null = spread([added_ms(one, "floor_python") for one in rounds])
    stock = spread([over_stock(one) for one in rounds])
    cpu = spread(
        [
            one["extender"].get("extender_worker_cpu_ms_per_pod")
            for one in rounds
            if isinstance(one.get("extender"), Mapping)
        ]
    )
    sync = report.get("sync_s", {})
    added_bound = None if null[0] is None else round(ADDED_FACTOR * null[0], 2)
    note = "" if null[0] is None else f" (the Python null's {null[0]:.2f} ms x {ADDED_FACTOR:g})"
    return [
        Figure(ours[0], added_bound, ours[1], ours[2], note),
        Figure(stock[0], STOCK_FACTOR, stock[1], stock[2]),
        Figure(cpu[0], 5.0, cpu[1], cpu[2]),
        Figure(worker_rss(report, "webhook"), MIB_300_MB),
        Figure(worker_rss(report, "extender"), MIB_300_MB),
        Figure(sync.get("webhook"), 30.0),
        Figure(sync.get("extender"), 30.0),
        Figure(over_bound(report), 0.0),
    ]


def null_added(report: Mapping[str, Any]) -> tuple[float | None, float | None, float | None]:
    """The Python null extender's added latency per pod: (median, least, greatest)."""
    return spread([added_ms(one, "floor_python") for one in rounds_of(report)])


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def shown(goal: Goal, figure: Figure) -> tuple[str, str, str]:
    """(bound, measured, verdict) cells of a goal's row."""
    unit = f" {goal.unit}".rstrip()
    bound = "-"
    if figure.bound is not None:
        bound = f"{'>=' if goal.larger_is_better else '<='} {_fmt(figure.bound)}{unit}"
    bound += figure.bound_note
    if figure.value is None:
        return bound, "-", "not measured"
    measured = f"{_fmt(figure.value)}{unit}"
    if figure.low is not None and figure.high is not None and figure.low != figure.high:
        measured += f" (rounds {_fmt(figure.low)} to {_fmt(figure.high)})"
    met = is_met(goal, figure)
    if met is None:
        return bound, measured, "no bound measured"
    if met:
        return bound, measured, "met"
    assert figure.bound is not None
    return bound, measured, f"missed by {abs(figure.value - figure.bound):.2f}{unit}"


def _with_spread(
    median: float | None, low: float | None, high: float | None, unit: str = ""
) -> str:
    if median is None:
        return "-"
    if low is None or high is None or low == high:
        return f"{_fmt(median)}{unit}"
    return f"{_fmt(median)}{unit} ({_fmt(low)} to {_fmt(high)})"


def render_goals(report: Mapping[str, Any]) -> list[str]:
    lines = [
        "Goals (medians over the run's rounds; added latency per pod: 1/pods/s with the "
        "extender minus 1/pods/s without any, in the same round):",
        "",
        "| goal | bound | measured | met |",
        "|---|---|---|---|",
    ]
    for goal, figure in zip(GOALS, figures(report), strict=True):
        bound, measured, verdict = shown(goal, figure)
        lines.append(f"| {goal.name} | {bound} | {measured} | {verdict} |")
    return [*lines, ""]


def render_summary(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One row per run: the two scheduling goals with their spread, the workers and syncs."""
    lines = [
        "| run | code | migslice added ms/pod | Python null added ms/pod | Go null added ms/pod "
        "| added: met | pods/s over stock | worker RSS MiB webhook / extender "
        "| sync s webhook / extender |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, report in runs.items():
        rounds = rounds_of(report)
        found = figures(report)
        cells = []
        for key in ("extender", "floor_python", "floor_go"):
            cells.append(_with_spread(*spread([added_ms(one, key) for one in rounds])))
        verdict = {True: "yes", False: "no", None: "-"}[is_met(GOALS[0], found[0])]
        ratio = spread([over_stock(one) for one in rounds])
        sync = report.get("sync_s", {})
        lines.append(
            f"| {label} | {report.get('code', '?')} | {' | '.join(cells)} | {verdict} "
            f"| {_with_spread(*ratio, unit='x')} "
            f"| {_fmt(worker_rss(report, 'webhook'))} / {_fmt(worker_rss(report, 'extender'))} "
            f"| {_fmt(sync.get('webhook'))} / {_fmt(sync.get('extender'))} |"
        )
    return [*lines, ""]
