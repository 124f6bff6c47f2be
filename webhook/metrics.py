"""Prometheus metrics of one webhook app, on the app's own registry (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class Metrics:
    """Requests by endpoint and outcome, denials by reason, latency by endpoint, the quota
    charges of pods admitted but not yet seen, and ledgers fenced."""

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
        self.pending_charges = Gauge(
            "migslice_webhook_quota_pending_charges",
            "Quota ledger charges of admitted pods this replica's pod cache has not seen yet.",
            registry=self.registry,
        )

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))
