"""The DRA suite's report (``bench.common.report``): first fit against migslice on the same
arrivals through a real kube-scheduler, and the workers' memory at 1,000 DynamicMIG nodes."""

from __future__ import annotations

from bench.common.report import Section, Suite

SUITE = Suite(
    name="dra",
    title="DRA: does migslice place MIG claims better than kube-scheduler's first fit?",
    intro=(
        "`make bench-dra`: one arrival sequence from the Alibaba GPU trace replayed on a real "
        "kube-apiserver and kube-scheduler over DynamicMIG nodes that a fake NVIDIA DRA driver "
        "publishes, once allocated by kube-scheduler alone (first fit) and once with migslice "
        "(its extender's node score and its steer); the webhook's and extender's memory "
        "with 1,000 DynamicMIG nodes of 8 GPUs, and the steer loop's CPU over them. How to "
        "read it: `bench/dra/README.md`."
    ),
    sections=(
        Section("replay", "bench.dra.replay:markdown", "bench.dra.replay:plot"),
        Section("memory", "bench.dra.memory:markdown"),
        Section("steer_cpu", "bench.dra.steer_cpu:markdown"),
    ),
)
