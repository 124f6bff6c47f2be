"""The latency suite's report: one section per program (``bench.common.report``)."""

from __future__ import annotations

from bench.common.report import Section, Suite

SUITE = Suite(
    name="latency",
    title="Latency: what does one admission and one scheduling call cost, and what memory?",
    intro=(
        "The webhook's and the extender's answers measured alone, as kube-apiserver and "
        "kube-scheduler call them (`make bench-latency`): webhook latency from a cluster file "
        "and against kube-apiserver with the quota ledger write, admission against the number "
        "of TenantPolicies, the repartition controller's decision against the cluster's size, "
        "the extender's filter and prioritize over HTTPS and its CPU in process, the workers' "
        "memory and cache sync on a large cluster, and one call's floor and its own Python. "
        "What each answers and how to read it: `bench/latency/README.md`."
    ),
    sections=(
        Section(
            "webhook_latency",
            "bench.latency.webhook_latency:markdown",
            "bench.latency.webhook_latency:plot",
        ),
        Section(
            "webhook_latency_api",
            "bench.latency.webhook_latency:markdown",
            "bench.latency.webhook_latency:plot",
        ),
        Section("policy_scale", "bench.latency.policy_scale:markdown"),
        Section("plan_scale", "bench.latency.plan_scale:markdown"),
        Section(
            "extender_latency",
            "bench.latency.extender_latency:markdown",
            "bench.latency.extender_latency:plot",
        ),
        Section("extender_cpu", "bench.latency.extender_cpu:markdown"),
        Section("sync_memory", "bench.latency.sync_memory:markdown"),
        Section("call_floor", "bench.latency.call_floor:render"),
        Section("call_cpu", "bench.latency.call_cpu:render"),
    ),
)
