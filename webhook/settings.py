"""Settings of the webhook app."""

from __future__ import annotations

from dataclasses import dataclass, field

from migslice.admission import AdmissionSettings

# The largest AdmissionReview kube-apiserver sends: a pod CREATE at its 3 MiB request limit made
# of many small fields arrives as 7.9 MiB (managedFields repeat every field name; measured by
# bench/request_sizes.py against a real kube-apiserver).
MAX_BODY_BYTES = 10 << 20


@dataclass(frozen=True, slots=True)
class WebhookSettings:
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)
    max_body_bytes: int = MAX_BODY_BYTES
    reservation_ttl_s: float = 30.0
    status_interval_s: float = 10.0  # TenantPolicy.status writes (in-cluster only); 0: none
