"""Prometheus metrics of one extender app (its own registry: no process-global state)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from extender.state import ExtenderState

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class ExtenderMetrics:
    def __init__(self, state: ExtenderState) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "migslice_extender_requests",
            "Extender calls by verb and outcome (ok, error: answered with Error).",
            ("verb", "outcome"),
            registry=self.registry,
        )
        self.duration = Histogram(
            "migslice_extender_request_duration_seconds",
            "Time to answer an extender call, body read to body written.",
            ("verb",),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.filtered = Counter(
            "migslice_extender_filter_nodes",
            "Nodes judged by filter, by result (fits, failed, unresolvable).",
            ("result",),
            registry=self.registry,
        )
        self.registry.register(_CacheCollector(state))


class _CacheCollector(Collector):
    def __init__(self, state: ExtenderState) -> None:
        self._state = state

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        index = self._state.index
        nodes = GaugeMetricFamily("migslice_extender_cached_nodes", "Nodes in the cache.")
        nodes.add_metric((), index.node_count)
        pods = GaugeMetricFamily(
            "migslice_extender_cached_pods", "Pods holding GPU resources in the cache."
        )
        pods.add_metric((), index.pod_count)
        synced = GaugeMetricFamily(
            "migslice_extender_cache_synced", "1 once a cache has listed.", labels=("cache",)
        )
        staleness = GaugeMetricFamily(
            "migslice_extender_cache_staleness_seconds",
            "Seconds since a cache last heard from the API server (-1: never).",
            labels=("cache",),
        )
        relists = CounterMetricFamily(
            "migslice_extender_cache_relists_gone",
            "Re-lists after 410 Gone.",
            labels=("cache",),
        )
        errors = CounterMetricFamily(
            "migslice_extender_cache_errors",
            "List/watch errors (each backed off).",
            labels=("cache",),
        )
        for cache in self._state.caches:
            synced.add_metric((cache.name,), 1.0 if cache.synced else 0.0)
            age = cache.staleness_s()
            staleness.add_metric((cache.name,), -1.0 if age is None else age)
            stats = getattr(cache, "stats", None)
            if stats is not None:
                relists.add_metric((cache.name,), stats.relists_gone)
                errors.add_metric((cache.name,), stats.errors)
        yield from (nodes, pods, synced, staleness, relists, errors)
