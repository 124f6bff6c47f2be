"""The certificate-expiry gauge follows the certificate the server serves: a renewal the server
cannot load (a certificate that does not match its key, a file that is not PEM, files gone)
keeps the served certificate's ``notAfter``, and a key written after its certificate is read
when it lands (the alert on expiry would otherwise read a certificate nobody serves)."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from harness.pki import make_ca
from migslice.serving.certificate_metric import CertificateExpiry
from migslice.serving.tls import ReloadingSSLContext


def _pair(days: int) -> tuple[bytes, bytes, float]:
    """A certificate valid for ``days`` and its key, as PEM, and its notAfter."""
    key, cert = make_ca("migslice-webhook", days=days)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key_pem,
        cert.not_valid_after_utc.timestamp(),
    )


def _write(path: Path, data: bytes, tick: int) -> None:
    path.write_bytes(data)
    os.utime(path, ns=(tick * 10**9, tick * 10**9))  # a new stamp however fast the writes


def _served_not_after(context: ReloadingSSLContext, cert: Path) -> float:
    context.get()  # the server reloads on a new connection
    return x509.load_pem_x509_certificate(cert.read_bytes()).not_valid_after_utc.timestamp()


def test_the_gauge_reads_what_the_server_serves(tmp_path: Path) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    old_cert, old_key, old_end = _pair(3)
    new_cert, new_key, new_end = _pair(365)
    _write(cert, old_cert, 1)
    _write(key, old_key, 1)
    served = ReloadingSSLContext(str(cert), str(key))
    gauge = CertificateExpiry(str(cert), str(key))
    assert _served_not_after(served, cert) == old_end
    assert gauge.not_after() == old_end

    _write(cert, new_cert, 2)  # the renewal's certificate lands before its key
    served.get()  # cannot load the pair: keeps the old certificate
    assert gauge.not_after() == old_end

    _write(key, new_key, 3)  # and then its key: now both agree
    assert _served_not_after(served, cert) == new_end
    assert gauge.not_after() == new_end

    _write(cert, b"not a certificate\n", 4)
    assert gauge.not_after() == new_end
    cert.unlink()
    assert gauge.not_after() == new_end


def test_plain_http_and_a_missing_first_file_give_no_sample(tmp_path: Path) -> None:
    assert CertificateExpiry(None).not_after() is None
    missing = str(tmp_path / "tls.crt")
    assert CertificateExpiry(missing, str(tmp_path / "tls.key")).not_after() is None
