"""Settings of the webhook service: one typed value, validated here, built by ``command``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from migslice.admission import AdmissionSettings
from migslice.console import CommandError
from migslice.serving import ServerOptions

# The largest AdmissionReview kube-apiserver sends: a pod CREATE at its 3 MiB request limit made
# of many small fields arrives as 7.9 MiB (managedFields repeat every field name; measured by
# bench/request_sizes.py against a real kube-apiserver).
MAX_BODY_BYTES = 10 << 20
DEFAULT_PORT = 9443
# Namespaces whose pods are admitted unchanged, whatever the webhook configuration sends: the
# GPU Operator's own pods (validators, device plugin) and the control plane's.
DEFAULT_EXCLUDED_NAMESPACES = frozenset(
    ("gpu-operator", "kube-system", "kube-public", "kube-node-lease", "migslice-system")
)


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    """``cluster_file``: serve a fixed cluster (YAML stream) instead of watching the API server
    (through ``kubeconfig``, default in-cluster). ``reservation_ttl_s``: how long an admitted
    pod's charge is held until the pod shows up in the cache. ``status_interval_s``: how often
    TenantPolicy.status is refreshed in-cluster (0: never written)."""

    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    max_body_bytes: int = MAX_BODY_BYTES
    reservation_ttl_s: float = 30.0
    status_interval_s: float = 10.0
    exclude_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
    cluster_file: Path | None = None
    kubeconfig: str | None = None
    server: ServerOptions = field(default_factory=lambda: ServerOptions(port=DEFAULT_PORT))
    log_level: str = "info"

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise CommandError(f"max body {self.max_body_bytes} bytes: must be at least 1")
        for flag, value in (
            ("--reservation-ttl-s", self.reservation_ttl_s),
            ("--status-interval-s", self.status_interval_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise CommandError(f"{flag} {value}: must be a finite number >= 0")
        if self.cluster_file is not None and self.kubeconfig is not None:
            raise CommandError("--cluster-file and --kubeconfig exclude each other")
