"""The plane suite's report (``bench.common.report``): the cluster benchmark's runs, and
``migslice status`` at the same scale."""

from __future__ import annotations

from bench.common.report import Section, Suite

SUITE = Suite(
    name="plane",
    title="Plane: what does migslice cost a real control plane at scale?",
    intro=(
        "`make bench-plane` (also `make bench-cluster`): a real etcd, kube-apiserver and "
        "kube-scheduler with thousands of real-shaped GPU nodes and bound pods, migslice's "
        "webhook and extender in-cluster; pods/s with and without the extender, with the "
        "stock default scheduler, with the Go and Python null extenders; memory, sync, cache "
        "lag under churn; and `migslice status` on a cluster of that size. The goals and how "
        "to read them: `bench/plane/README.md`."
    ),
    sections=(
        Section("cluster", "bench.plane.report:render", "bench.plane.report:plot"),
        Section("status_scale", "bench.plane.status_scale:markdown"),
    ),
)
