"""The packing suite's report: one section per program (``bench.common.report``)."""

from __future__ import annotations

from bench.common.report import Section, Suite

SUITE = Suite(
    name="packing",
    title="Packing: how well does migslice fill the GPUs, against baselines and the optimum?",
    intro=(
        "The simulator's benchmarks (`migslice/sim/`), on the Alibaba GPU traces: saturation "
        "(`packing`, `make bench-packing`), under kube-scheduler's node sampling (`sampling`), "
        "arrivals and departures (`churn`, `make bench-churn`), carve mode (`carve`, "
        "`make bench-carve`), the exact optimum on small clusters (`exact`, `make bench-exact`) "
        "and the simulator's own scale (`scale`, `make bench-scale`). What each answers and how "
        "to read it: `bench/packing/README.md`."
    ),
    sections=(
        Section(
            "packing", "bench.packing.packing_report:markdown", "bench.packing.packing_report:plot"
        ),
        Section("sampling", "bench.packing.packing:sampling_markdown"),
        Section("churn", "bench.packing.churn_report:markdown", "bench.packing.churn_report:plot"),
        Section("carve", "bench.packing.carve:markdown"),
        Section("exact", "bench.packing.exact:markdown"),
        Section("scale", "bench.packing.scale:markdown"),
    ),
)
