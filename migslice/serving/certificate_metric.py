"""The serving certificate's expiry as a Prometheus gauge, for every server (webhook and
extender): ``migslice_tls_certificate_expiry_timestamp_seconds``, the ``notAfter`` of the
certificate in ``--tls-cert`` (its first, the leaf), read again when the file changes (the
server reloads renewed certificates without a restart, so the metric follows them)."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator

from cryptography import x509
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAME = "migslice_tls_certificate_expiry_timestamp_seconds"


class CertificateExpiry(Collector):
    """The gauge for the file at ``path`` (None: plain HTTP, no sample). A change the server
    cannot load (with ``key_path``: a certificate that does not match its key, a file that
    is not PEM, files gone) keeps the value of the certificate it still serves
    (:class:`migslice.serving.tls.ReloadingSSLContext` keeps it too)."""

    def __init__(self, path: str | None, key_path: str | None = None) -> None:
        self._path = path
        self._key_path = key_path
        self._seen: tuple[int, ...] | None = None
        self._not_after: float | None = None

    def not_after(self) -> float | None:
        if self._path is None:
            return None
        try:
            stamp: tuple[int, ...] = ()
            for path in (self._path, self._key_path):
                if path is not None:  # the key too: a renewal may write it after the cert
                    info = os.stat(path)
                    stamp += (info.st_mtime_ns, info.st_size)
        except OSError:
            return self._not_after  # the server keeps what it loaded: the value stays
        if stamp != self._seen:
            self._seen = stamp
            if self._loadable():
                self._not_after = _read_not_after(self._path)
            # else: the server keeps serving the certificate it loaded before
            # (migslice.serving.tls.ReloadingSSLContext), and so does the metric
        return self._not_after

    def _loadable(self) -> bool:
        """Whether the server could load the files now (the certificate and its key)."""
        if self._path is None or self._key_path is None:
            return True
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(self._path, self._key_path)
        except (ssl.SSLError, OSError):
            return False
        return True

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
