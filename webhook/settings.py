"""Settings of the webhook app."""

from __future__ import annotations

from dataclasses import dataclass, field

from migslice.admission import AdmissionSettings

MAX_BODY_BYTES = 1 << 20
# Namespaces whose pods are admitted unchanged, whatever the webhook configuration sends: the
# GPU Operator's own pods (validators, device plugin) and the control plane's.
DEFAULT_EXCLUDED_NAMESPACES = frozenset(
    ("gpu-operator", "kube-system", "kube-public", "kube-node-lease", "migslice-system")
)


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    max_body_bytes: int = MAX_BODY_BYTES
    reservation_ttl_s: float = 30.0
    status_interval_s: float = 10.0  # TenantPolicy.status writes (in-cluster only); 0: none
    exclude_namespaces: frozenset[str] = DEFAULT_EXCLUDED_NAMESPACES
