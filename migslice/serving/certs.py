"""A small CA, serving certificates for the webhook and the extender, and client certificates
for their callers (``migslice certs``).

kube-apiserver calls a webhook at ``https://<service>.<namespace>.svc`` and checks the serving
certificate against the configuration's ``caBundle``, by its DNS SANs (never the CN). A client
certificate signed by the same CA (``--client kube-apiserver``) lets the webhook tell
kube-apiserver from any other caller (``--client-ca-file``, ``migslice.serving.clients``).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names a Service is reached by inside the cluster, most specific last."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def make_ca(
    common_name: str = "migslice-ca", days: int = 3650, now: datetime.datetime | None = None
) -> tuple[bytes, bytes]:
    """A self-signed CA: (certificate PEM, private key PEM)."""
    now = now or _now()
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def make_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    days: int = 365,
    now: datetime.datetime | None = None,
) -> tuple[bytes, bytes]:
    """A serving certificate signed by the CA, with the given SANs: (cert PEM, key PEM)."""
    if not dns_names and not ip_addresses:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    now = now or _now()
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC private key made by `migslice certs`")
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in ip_addresses]
    subject = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, dns_names[-1] if dns_names else ip_addresses[0])]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def make_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    days: int = 365,
    now: datetime.datetime | None = None,
) -> tuple[bytes, bytes]:
    """A client certificate signed by the CA, named ``common_name`` (subject CN and DNS SAN),
    for TLS client authentication only: (cert PEM, key PEM)."""
    if not common_name:
        raise ValueError("a client certificate needs a name")
    now = now or _now()
    ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key must be an EC private key made by `migslice certs`")
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(common_name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM), _key_pem(key)


def write_client_cert(bundle: TlsBundle, common_name: str, days: int = 365) -> tuple[Path, Path]:
    """Issue a client certificate from the bundle's CA into ``<name>.crt`` and ``<name>.key``
    beside it (key mode 0600); their paths."""
    cert, key = make_client_cert(
        bundle.ca_cert.read_bytes(), bundle.ca_key.read_bytes(), common_name, days
    )
    cert_path = bundle.ca_cert.with_name(f"{common_name}.crt")
    key_path = bundle.ca_cert.with_name(f"{common_name}.key")
    _write(key_path, key, 0o600)
    _write(cert_path, cert, 0o644)
    return cert_path, key_path


@dataclass(frozen=True, slots=True)
class TlsBundle:
    """Paths of the files ``migslice certs`` writes."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path


def write_tls_bundle(
    out_dir: Path | str,
    service: str,
    namespace: str,
    extra_dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    days: int = 365,
) -> TlsBundle:
    """Make (or reuse) a CA in ``out_dir`` and issue a serving certificate for the Service.

    An existing ``ca.crt``/``ca.key`` pair is reused so that renewing the serving certificate
    keeps every ``caBundle`` valid. Keys are written with mode 0600.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bundle = TlsBundle(out / "ca.crt", out / "ca.key", out / "tls.crt", out / "tls.key")
    if bundle.ca_cert.is_file() and bundle.ca_key.is_file():
        ca_cert, ca_key = bundle.ca_cert.read_bytes(), bundle.ca_key.read_bytes()
    else:
        ca_cert, ca_key = make_ca(f"migslice-ca-{service}.{namespace}")
        _write(bundle.ca_key, ca_key, 0o600)
        _write(bundle.ca_cert, ca_cert, 0o644)
    names = (*service_dns_names(service, namespace), *extra_dns_names)
    cert, key = make_serving_cert(ca_cert, ca_key, names, ip_addresses, days)
    # Key first, then certificate: a reader that sees the new certificate sees its key too.
    _write(bundle.key, key, 0o600)
    _write(bundle.cert, cert, 0o644)
    return bundle


def _write(path: Path, data: bytes, mode: int) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    # Made owner-only, and given its mode before a byte is written: a key written with the
    # umask's mode and narrowed after could be opened meanwhile by another user, who keeps
    # that descriptor.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        os.fchmod(file.fileno(), mode)
        file.write(data)
    temporary.replace(path)
