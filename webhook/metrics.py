"""Prometheus metrics of one webhook app, on the app's own registry (no global state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from migslice.admission.ledger import Damage
from migslice.admission.status import quota_dimensions
from migslice.serving.certificate_metric import CertificateExpiry

if TYPE_CHECKING:
    from webhook.gate import GateStats
    from webhook.state import ClusterState

# Up to past webhook.timeoutSeconds (5 s by default; at most 30): an answer slower than the
# last finite bucket reads as that bucket in histogram_quantile.
LATENCY_BUCKETS_S: tuple[float, ...] = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1)
LATENCY_BUCKETS_S += (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """Requests by endpoint and outcome, denials by reason, latency by endpoint, the quota
    charges of pods admitted but not yet seen, and ledgers fenced; with :meth:`follow`, also
    readiness, the caches' blindness, every tenant's usage and quota, and the serving
    certificate's expiry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "migslice_webhook_requests",
            "Admission requests handled, by endpoint and outcome "
            "(allowed, patched, denied, unavailable, malformed, error, unauthenticated).",
            ("endpoint", "outcome"),
            registry=self.registry,
        )
        self.denials = Counter(
            "migslice_webhook_denials",
            "Admission denials by endpoint and reason (quota, unknown-size, no-policy, ...).",
            ("endpoint", "reason"),
            registry=self.registry,
        )
        self.latency = Histogram(
            "migslice_webhook_request_duration_seconds",
            "Time to answer an admission request, by endpoint.",
            ("endpoint",),
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )

        self.ledger_fences = Counter(
            "migslice_webhook_ledger_fences",
            "Quota ledgers this replica found lost or changed and fenced, by what happened "
            "(lost, corrupt, foreign, stale, replaced); the tenant's GPU pods are refused for "
            "the hold (docs/policy.md).",
            ("damage",),
            registry=self.registry,
        )
        # Every kind at 0 from the start: a first fence then shows as an increase (an alert's
        # increase() never sees a series that begins at 1).
        for damage in Damage:
            self.ledger_fences.labels(damage.name.lower())
        self.pending_charges = Gauge(
            "migslice_webhook_quota_pending_charges",
            "Quota ledger charges of admitted pods this replica's pod cache has not seen yet.",
            registry=self.registry,
        )

    def follow_gate(self, stats: GateStats) -> None:
        """Export the gate reconciler's leadership and admissions (in-cluster only)."""
        leader = Gauge(
            "migslice_webhook_gate_leader",
            "1 while this process holds the admission gate's Lease (it admits gated pods).",
            registry=self.registry,
        )
        leader.set_function(lambda: 1.0 if stats.is_leader else 0.0)
        self.registry.register(_GateAdmitted(stats))

    def follow(
        self,
        state: ClusterState,
        *,
        max_blind_s: float,
        tls_cert: str | None,
        tls_key: str | None = None,
    ) -> None:
        """Export what ``state`` says at each scrape (see the class docstring)."""
        self.registry.register(_StateCollector(state, max_blind_s))
        self.registry.register(CertificateExpiry(tls_cert, tls_key))

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


class _GateAdmitted(Collector):
    """The gated pods this process admitted: a counter (it only grows, and restarts at 0 with
    the process), so that ``rate()`` and ``increase()`` read it across restarts."""

    def __init__(self, stats: GateStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "migslice_webhook_gate_admitted",
            "Gated pods this process admitted and un-gated since it started.",
            value=self._stats.admitted,
        )


class _StateCollector(Collector):
    """Readiness, blindness and tenants' usage against quota, read at each scrape."""

    def __init__(self, state: ClusterState, max_blind_s: float) -> None:
        self._state = state
        self._max_blind_s = max_blind_s

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state
        ready = GaugeMetricFamily(
            "migslice_webhook_ready",
            "1 while every cache has listed and follows the API server (/readyz answers 200).",
        )
        ready.add_metric((), 0.0 if state.blindness(self._max_blind_s) else 1.0)
        blind = GaugeMetricFamily(
            "migslice_webhook_cache_blind_seconds",
            "Seconds a cache has not followed the API server (0: connected; -1: never listed).",
            labels=("cache",),
        )
        for cache in state.caches:
            blind_s = cache.blind_s()
            blind.add_metric((cache.name,), -1.0 if blind_s is None else blind_s)
        usage = GaugeMetricFamily(
            "migslice_webhook_tenant_usage",
            "What a tenant's pods and admitted charges hold, by quota dimension (instances, "
            "computeSlices, memorySlices, profiles.<profile>), as quota counts it.",
            labels=("tenant", "dimension"),
        )
        quota = GaugeMetricFamily(
            "migslice_webhook_tenant_quota",
            "A tenant's limit per quota dimension (spec.quota; only dimensions it limits).",
            labels=("tenant", "dimension"),
        )
        for policy in state.policies():
            for dimension in quota_dimensions(policy, state.tenant_usage(policy.name)):
                usage.add_metric((policy.name, dimension.dimension), dimension.used)
                if dimension.limit is not None:
                    quota.add_metric((policy.name, dimension.dimension), dimension.limit)
        gated = GaugeMetricFamily(
            "migslice_webhook_gated_pods",
            "Pods this replica's cache holds behind the admission gate (migslice.io/admission):"
            " created in fail-open namespaces while the webhook was unavailable, not admitted.",
        )
        gated.add_metric((), float(len(state.gated_pods())))
        yield from (ready, blind, usage, quota, gated)
