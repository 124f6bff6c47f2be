"""Means with 95 % confidence intervals over seeds, and a pool of at most two workers.

The interval is Student's t over the seeds (the runs of one configuration differ only in
their seed): mean +- t(0.975, n - 1) x s / sqrt(n). Seeds are few (5-10), so t, not 1.96.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import os
import statistics
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
)  # fmt: skip
"""t(0.975, df) for df = 1..20; 1.96 beyond."""

MAX_JOBS = 2
"""The development machine has two shared cores: never more than two processes."""
GC_THRESHOLD = 20_000
"""The youngest generation's collection threshold while the pool runs (Python's default is
700). A simulation allocates millions of small objects and makes next to no cycles, so the
default collects every few hundred allocations, and each older collection walks the whole
cluster and every cache: 5-20 % of a run's CPU, against 1-4 % here."""


def t975(df: int) -> float:
    return T975[df - 1] if 1 <= df <= len(T975) else 1.96


def ci(values: Sequence[float]) -> dict[str, float]:
    """Mean, 95 % half-width (0 for one value), min and max."""
    mean = statistics.fmean(values)
    half = 0.0
    if len(values) > 1:
        half = t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return {"mean": mean, "ci": half, "min": min(values), "max": max(values), "n": len(values)}


def fmt(summary: dict[str, float] | None, scale: float = 100.0, digits: int = 1) -> str:
    """``mean ± half-width`` (just the mean when the seeds agree)."""
    if summary is None:
        return "—"
    mean, half = summary["mean"] * scale, summary["ci"] * scale
    if round(half, digits) == 0:
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


Task = TypeVar("Task")


def run_pool(
    work: Callable[[Task], dict[str, Any]], tasks: Iterable[Task], jobs: int
) -> Iterator[dict[str, Any]]:
    """Results of ``work`` over ``tasks`` as they finish, in ``min(jobs, 2)`` processes
    (fork: workers inherit what the parent loaded)."""
    jobs = max(1, min(jobs, MAX_JOBS, os.cpu_count() or 1))
    tasks = list(tasks)
    # What the parent loaded (traces, workloads) lives as long as the run: frozen, no
    # collection walks it again, in the parent or in the workers forked from it.
    gc.collect()
    gc.freeze()
    thresholds = gc.get_threshold()
    gc.set_threshold(GC_THRESHOLD, *thresholds[1:])
    try:
        if jobs == 1:
            yield from map(work, tasks)
            return
        context = multiprocessing.get_context("fork")
        with context.Pool(jobs, maxtasksperchild=50) as pool:
            yield from pool.imap_unordered(work, tasks)
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
