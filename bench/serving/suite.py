"""The serving suite's report: one section per program (``bench.common.report``)."""

from __future__ import annotations

from bench.common.report import Section, Suite

SUITE = Suite(
    name="serving",
    title="Serving: do the servers hold under hostile or heavy load?",
    intro=(
        "migslice's HTTPS servers (`migslice/serving/`) under stalled and slow clients "
        "(`slow_clients`, part of `make bench-serving`), against other Python stacks "
        "(`serving_stacks`), and the largest legitimate requests they must take "
        "(`request_sizes`). What each answers and how to read it: `bench/serving/README.md`."
    ),
    sections=(
        Section(
            "slow_clients", "bench.serving.slow_report:markdown", "bench.serving.slow_report:plot"
        ),
        Section("serving_stacks", "bench.serving.serving_stacks:markdown"),
        Section("request_sizes", "bench.serving.request_sizes:markdown"),
    ),
)
