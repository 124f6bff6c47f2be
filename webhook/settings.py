"""Settings of the webhook app."""

from __future__ import annotations

from dataclasses import dataclass, field

from migslice.admission import AdmissionSettings

MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    max_body_bytes: int = MAX_BODY_BYTES
    reservation_ttl_s: float = 30.0
    status_interval_s: float = 10.0  # TenantPolicy.status writes (in-cluster only); 0: none
