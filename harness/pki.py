"""The control plane's keys and certificates (``cryptography``, P-256, valid 7 days)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client as k8s

from harness.process import ControlPlaneError

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
ADMIN_USER = "migslice-e2e-admin"


def _write_key(path: Path, key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


_NO_USAGE = dict(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=False,
    crl_sign=False,
    encipher_only=False,
    decipher_only=False,
)


def _validity(days: int = 7) -> tuple[dt.datetime, dt.datetime]:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    return now, now + dt.timedelta(days=days)


def make_ca(common_name: str, days: int = 7) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed P-256 CA valid for ``days`` (a week)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start, end = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                **{**_NO_USAGE, "digital_signature": True, "key_cert_sign": True, "crl_sign": True}
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_cert(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    *,
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A P-256 leaf certificate (``usage``: SERVER_AUTH or CLIENT_AUTH) signed by the CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    start, end = _validity()
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(**{**_NO_USAGE, "digital_signature": True}), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, b.sign(ca_key, hashes.SHA256())


def _cn(common_name: str, *organizations: str) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


class PKI:
    """Keys and certificates of the control plane, as PEM files in ``dir``.

    * ``ca``: signs the apiserver's serving cert and the admin client cert (= --client-ca-file)
    * ``front-proxy-ca`` / ``front-proxy-client``: the requestheader (aggregation) identity, so
      that kube-scheduler's delegated authentication finds a complete
      ``kube-system/extension-apiserver-authentication`` ConfigMap
    * ``sa.key`` / ``sa.pub``: service-account token signing key pair
    """

    def __init__(self, dir: Path) -> None:
        self.dir = dir
        self.ca_cert = dir / "ca.crt"
        self.ca_key = dir / "ca.key"
        self.serving_cert = dir / "apiserver.crt"
        self.serving_key = dir / "apiserver.key"
        self.admin_cert = dir / "admin.crt"
        self.admin_key = dir / "admin.key"
        self.front_proxy_ca_cert = dir / "front-proxy-ca.crt"
        self.front_proxy_client_cert = dir / "front-proxy-client.crt"
        self.front_proxy_client_key = dir / "front-proxy-client.key"
        self.sa_key = dir / "sa.key"
        self.sa_pub = dir / "sa.pub"
        self._ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] | None = None

    def generate(self) -> PKI:
        self.dir.mkdir(parents=True, exist_ok=True)
        ca_key, ca = self._ca = make_ca("migslice-e2e-ca")
        _write_key(self.ca_key, ca_key)
        _write_cert(self.ca_cert, ca)

        service_ip = ipaddress.IPv4Network(SERVICE_CLUSTER_IP_RANGE)[1]  # the kubernetes Service
        key, cert = issue_cert(
            ca_key,
            ca,
            _cn("kube-apiserver"),
            ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", str(service_ip)],
        )
        _write_key(self.serving_key, key)
        _write_cert(self.serving_cert, cert)

        # O=system:masters: the apiserver's built-in superuser group (no RBAC objects needed).
        key, cert = issue_cert(
            ca_key, ca, _cn(ADMIN_USER, "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH
        )
        _write_key(self.admin_key, key)
        _write_cert(self.admin_cert, cert)

        fp_key, fp_ca = make_ca("migslice-e2e-front-proxy-ca")
        _write_cert(self.front_proxy_ca_cert, fp_ca)
        key, cert = issue_cert(
            fp_key, fp_ca, _cn("front-proxy-client"), ExtendedKeyUsageOID.CLIENT_AUTH
        )
        _write_key(self.front_proxy_client_key, key)
        _write_cert(self.front_proxy_client_cert, cert)

        sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        _write_key(self.sa_key, sa_key)
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return self

    def issue_serving_cert(
        self,
        name: str,
        *,
        dns_names: Sequence[str] = ("localhost",),
        ip_addresses: Sequence[str] = ("127.0.0.1",),
    ) -> tuple[Path, Path]:
        """A serving cert signed by the control plane's CA, e.g. for a local webhook server.

        Writes ``<dir>/<name>.crt`` and ``<name>.key``; returns their paths. The CA bundle to
        put in a webhook configuration's ``caBundle`` is ``ca_cert`` (base64 of its bytes).
        """
        if self._ca is None:
            raise ControlPlaneError("PKI.generate() first")
        ca_key, ca = self._ca
        key, cert = issue_cert(
            ca_key,
            ca,
            _cn(dns_names[0] if dns_names else name),
            ExtendedKeyUsageOID.SERVER_AUTH,
            dns_names=dns_names,
            ip_addresses=ip_addresses,
        )
        crt_path, key_path = self.dir / f"{name}.crt", self.dir / f"{name}.key"
        _write_key(key_path, key)
        _write_cert(crt_path, cert)
        return crt_path, key_path

    def kubeconfig(self, server: str) -> dict[str, Any]:
        """A kubeconfig for ``server`` that authenticates as the admin (``system:masters``)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": server, "certificate-authority": str(self.ca_cert)},
                }
            ],
            "users": [
                {
                    "name": ADMIN_USER,
                    "user": {
                        "client-certificate": str(self.admin_cert),
                        "client-key": str(self.admin_key),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_USER}}],
            "current-context": "e2e",
        }

    def admin_ssl_context(self) -> ssl.SSLContext:
        """TLS as the admin client, trusting the control plane's CA."""
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        ctx.load_cert_chain(str(self.admin_cert), str(self.admin_key))
        return ctx

    def admin_configuration(self, server: str) -> k8s.Configuration:
        """A kubernetes client configuration for ``server`` as the admin."""
        cfg = k8s.Configuration(host=server)
        cfg.ssl_ca_cert = str(self.ca_cert)
        cfg.cert_file = str(self.admin_cert)
        cfg.key_file = str(self.admin_key)
        cfg.verify_ssl = True
        return cfg
