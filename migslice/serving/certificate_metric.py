"""The serving certificate's expiry as a Prometheus gauge, for every server (webhook and
extender): ``migslice_tls_certificate_expiry_timestamp_seconds``, the ``notAfter`` of the
certificate in ``--tls-cert`` (its first, the leaf), read again when the file changes (the
server reloads renewed certificates without a restart, so the metric follows them)."""

from __future__ import annotations

import os
from collections.abc import Iterator

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAME = "migslice_tls_certificate_expiry_timestamp_seconds"


class CertificateExpiry(Collector):
    """The gauge for the file at ``path`` (None: plain HTTP, no sample); a file that cannot
    be read or parsed gives no sample either (the alert on the metric's absence says so)."""

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._seen: tuple[float, int] | None = None
        self._not_after: float | None = None

    def not_after(self) -> float | None:
        if self._path is None:
            return None
        try:
            info = os.stat(self._path)
        except OSError:
            return None
        stamp = (info.st_mtime, info.st_size)
        if stamp != self._seen:
            self._seen = stamp
            self._not_after = _read_not_after(self._path)
        return self._not_after

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            NAME,
            "notAfter of the serving certificate (--tls-cert), seconds since the epoch.",
        )
        value = self.not_after()
        if value is not None:
            family.add_metric((), value)
        yield family


def _read_not_after(path: str) -> float | None:
    try:
        with open(path, "rb") as handle:
            certificate = x509.load_pem_x509_certificate(handle.read())
    except (OSError, ValueError):
        return None
    return certificate.not_valid_after_utc.timestamp()
