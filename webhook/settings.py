"""Settings of the webhook service: one typed value, validated here, built by ``command``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from migslice.admission import AdmissionSettings
from migslice.console import CommandError
from migslice.kube.lease import default_renew_deadline_s
from migslice.names import GATE_LEASE_NAME, SYSTEM_NAMESPACE
from migslice.serving import ServerOptions

# The largest AdmissionReview kube-apiserver sends: a pod CREATE at its 3 MiB request limit made
# of many small fields arrives as 7.9 MiB (managedFields repeat every field name; measured by
# bench/serving/request_sizes.py against a real kube-apiserver).
MAX_BODY_BYTES = 10 << 20
DEFAULT_PORT = 9443
# Namespaces whose pods are admitted unchanged, whatever the webhook configuration sends: the
# GPU Operator's own pods (validators, device plugin) and the control plane's.
DEFAULT_EXCLUDED_NAMESPACES = frozenset(
    ("gpu-operator", "kube-system", "kube-public", "kube-node-lease", "migslice-system")
)


@dataclass(frozen=True, slots=True)
class GateSettings:
    """The gate reconciler (``webhook.gate``): ``interval_s``, how often its leader looks at
    pods behind the admission gate (0: no reconciler, where no namespace is fail-open);
    ``batch``, pods admitted per round at most; ``lease``, ``namespace/name`` of its Lease,
    held ``lease_s``; a leader not renewed within ``renew_deadline_s`` (None: two thirds of
    the lease) stops leading."""

    interval_s: float = 2.0
    batch: int = 20
    lease: str = f"{SYSTEM_NAMESPACE}/{GATE_LEASE_NAME}"
    lease_s: float = 15.0
    renew_deadline_s: float | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.interval_s) or self.interval_s < 0:
            raise CommandError(f"--gate-interval-s {self.interval_s}: must be a number >= 0")
        if self.batch < 1:
            raise CommandError(f"--gate-batch {self.batch}: must be at least 1")
        namespace, slash, name = self.lease.partition("/")
        if not (namespace and slash and name) or "/" in name:
            raise CommandError(f"--gate-lease {self.lease!r}: must be NAMESPACE/NAME")
        if not math.isfinite(self.lease_s) or self.lease_s < max(2 * self.interval_s, 1.0):
            raise CommandError(
                f"--gate-lease-s {self.lease_s:g} must be at least twice --gate-interval-s "
                f"{self.interval_s:g} (the Lease is renewed once a round)"
            )
        renew = self.renew_deadline_s
        if renew is not None and (not math.isfinite(renew) or renew <= 0):
            raise CommandError(f"--gate-renew-deadline-s {renew}: must be a finite number > 0")
        if renew is not None and renew >= self.lease_s:
            raise CommandError(
                f"--gate-renew-deadline-s {renew:g} must be shorter than --gate-lease-s "
                f"{self.lease_s:g} (a leader stops leading once it has not renewed for this "
                "long, before another replica may take the Lease); lower it or raise the lease"
            )
        if renew is not None and self.interval_s >= renew:
            raise CommandError(
                f"--gate-interval-s {self.interval_s:g} must be shorter than "
                f"--gate-renew-deadline-s {renew:g} (the Lease is renewed once a round: a "
                "leader that waits longer stops leading between rounds); raise the deadline or "
                "lower the interval"
            )

    @property
    def is_on(self) -> bool:
        return self.interval_s > 0

    @property
    def lease_renew_deadline_s(self) -> float:
        """``renew_deadline_s``, or two thirds of the lease when it is not given."""
        if self.renew_deadline_s is None:
            return default_renew_deadline_s(self.lease_s)
        return self.renew_deadline_s

    @property
    def lease_namespace(self) -> str:
        return self.lease.partition("/")[0]

    @property
    def lease_name(self) -> str:
        return self.lease.partition("/")[2]


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """``cluster_file``: serve a fixed cluster (YAML stream) instead of watching the API server
    (through ``kubeconfig``, default in-cluster). ``quota_hold_s``: how long an admission's
    charge stays in its tenant's ledger before a pod never created may be released (longer
    than kube-apiserver takes to answer a create: 34 s). ``max_blind_s``: how long a cache may
    not follow the API server before admission answers 503 and readiness fails.
    ``ledger_namespace``: where the quota ledgers (ConfigMaps) live. ``status_interval_s``:
    how often TenantPolicy.status is refreshed in-cluster (0: never written). ``gate``: the
    gate reconciler, in-cluster only."""

    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    max_body_bytes: int = MAX_BODY_BYTES
    quota_hold_s: float = 45.0
    max_blind_s: float = 5.0
    ledger_namespace: str = SYSTEM_NAMESPACE
    status_interval_s: float = 10.0
    gate: GateSettings = field(default_factory=GateSettings)
    exclude_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
    cluster_file: Path | None = None
    kubeconfig: str | None = None
    server: ServerOptions = field(default_factory=lambda: ServerOptions(port=DEFAULT_PORT))
    log_level: str = "info"
    log_format: str = "text"

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise CommandError(f"max body {self.max_body_bytes} bytes: must be at least 1")
        for flag, value in (
            ("--quota-hold-s", self.quota_hold_s),
            ("--max-blind-s", self.max_blind_s),
            ("--status-interval-s", self.status_interval_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise CommandError(f"{flag} {value}: must be a finite number >= 0")
        if self.cluster_file is not None and self.kubeconfig is not None:
            raise CommandError("--cluster-file and --kubeconfig exclude each other")
        if self.cluster_file is not None and self.server.workers > 1:
            raise CommandError(
                f"--cluster-file with --workers {self.server.workers}: each worker would keep a "
                "quota ledger of its own and admit up to the quota by itself; serve a cluster "
                "file with --workers 1, or a cluster (--kubeconfig), whose ledgers every worker "
                "shares"
            )
