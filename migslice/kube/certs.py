"""Serving certificates kept in the cluster (``migslice certs --secret``).

A TLS Secret (``tls.crt``, ``tls.key``, ``ca.crt``) holds a Service's serving certificate; it
is kept while it still serves the Service's names for long enough, so running the command
again (every ``helm upgrade``) changes nothing. The CA is put into ``caBundle`` of the webhooks
that call the Service, in the Mutating- and ValidatingWebhookConfiguration of one name.

A client-certificate Secret (same keys: the client's certificate, its key, and the CA that
issued it, the server's) holds the certificate a caller presents to a server run with
``--client-ca-file`` (``--client NAME --client-secret SECRET``): kept while the server's CA
issued it for that name for long enough (:func:`client_problem`).
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migslice.kube.transport import ApiError, RawObject

RENEW_BEFORE = datetime.timedelta(days=30)
WEBHOOK_CONFIGURATIONS = (
    ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
)
_ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
_JSON_PATCH = "application/json-patch+json"


class CertsApi(Protocol):
    """What this module needs of the API server (KubernetesTransport has it)."""

    def get_json(self, path: str, query: Any) -> RawObject: ...
    def post_json(self, path: str, body: Any) -> RawObject: ...
    def put_json(self, path: str, body: Any) -> RawObject: ...
    def patch_json(self, path: str, patch: Any, content_type: str = ...) -> RawObject: ...


class CertsError(Exception):
    """A Secret or webhook configuration that cannot be read or written; one line."""


@dataclass(frozen=True, slots=True)
class PemBundle:
    """A serving certificate, its key and the CA that signed it, as PEM."""

    ca_cert: bytes
    cert: bytes
    key: bytes


def bundle_problem(
    bundle: PemBundle,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: datetime.datetime,
    renew_before: datetime.timedelta = RENEW_BEFORE,
) -> str:
    """Why ``bundle`` should not serve these names any more; "" when it may."""
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_cert)
        cert = x509.load_pem_x509_certificate(bundle.cert)
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except ValueError as error:
        return f"unreadable PEM ({error})"
    if cert.issuer != ca.subject:
        return "the certificate was not issued by ca.crt"
    ca_key = ca.public_key()
    try:
        if not isinstance(ca_key, ec.EllipticCurvePublicKey):
            return "ca.crt has no EC key (not made by migslice certs)"
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the certificate's signature does not verify against ca.crt"
    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        return "tls.key does not belong to tls.crt"
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "the certificate has no subject alternative names"
    missing = [n for n in dns_names if n not in sans.get_values_for_type(x509.DNSName)]
    have_ips = {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    missing += [a for a in ip_addresses if str(ipaddress.ip_address(a)) not in have_ips]
    if missing:
        return f"the certificate lacks {', '.join(missing)}"
    ends = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    if ends - now < renew_before:
        return f"it expires {ends:%Y-%m-%d}, in less than {renew_before.days} days"
    return ""


def client_problem(
    client: PemBundle,
    server_ca: bytes,
    name: str,
    now: datetime.datetime,
    renew_before: datetime.timedelta = RENEW_BEFORE,
) -> str:
    """Why ``client`` (a client-certificate Secret's bundle) should not be presented to a
    server trusting ``server_ca`` as ``name`` any more; "" when it may."""
    if client.ca_cert != server_ca:
        return "its ca.crt is not the server's CA"
    try:
        ca = x509.load_pem_x509_certificate(server_ca)
        cert = x509.load_pem_x509_certificate(client.cert)
        key = serialization.load_pem_private_key(client.key, password=None)
    except ValueError as error:
        return f"unreadable PEM ({error})"
    try:
        if cert.issuer != ca.subject or not isinstance(ca.public_key(), ec.EllipticCurvePublicKey):
            return "the certificate was not issued by the server's CA"
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return "the certificate's signature does not verify against the server's CA"
    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        return "tls.key does not belong to tls.crt"
    if name not in _names_of(cert):
        return f"the certificate does not name {name}"
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = None
    if usages is not None and ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return "the certificate is not for client authentication"
    ends = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    if ends - now < renew_before:
        return f"it expires {ends:%Y-%m-%d}, in less than {renew_before.days} days"
    return ""


def _names_of(cert: x509.Certificate) -> set[str]:
    """The subject common names and DNS SANs (the names the servers compare)."""
    found = {str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)}
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return found
    return found | set(sans.get_values_for_type(x509.DNSName))


def _public_der(key: Any) -> bytes:
    der: bytes = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def valid_until(bundle: PemBundle) -> datetime.datetime:
    cert = x509.load_pem_x509_certificate(bundle.cert)
    ca = x509.load_pem_x509_certificate(bundle.ca_cert)
    return min(cert.not_valid_after_utc, ca.not_valid_after_utc)


def _secret_path(namespace: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{namespace}/secrets"
    return f"{path}/{name}" if name else path


def read_tls_secret(api: CertsApi, namespace: str, name: str) -> RawObject | None:
    """The Secret, or None when it does not exist."""
    try:
        return api.get_json(_secret_path(namespace, name), {})
    except ApiError as error:
        if error.status == 404:
            return None
        raise CertsError(f"Secret {namespace}/{name}: {error}") from None


def bundle_of(raw_secret: RawObject) -> PemBundle | None:
    """The PEM bundle in a TLS Secret; None when a key is missing."""
    data = raw_secret.get("data") or {}
    try:
        return PemBundle(
            ca_cert=base64.b64decode(data["ca.crt"]),
            cert=base64.b64decode(data["tls.crt"]),
            key=base64.b64decode(data["tls.key"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def write_tls_secret(
    api: CertsApi, namespace: str, name: str, bundle: PemBundle, existing: RawObject | None
) -> RawObject:
    """Create the Secret, or replace ``existing`` (409 Conflict if it changed meanwhile)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "migslice"},
        },
        "data": {
            "tls.crt": base64.b64encode(bundle.cert).decode(),
            "tls.key": base64.b64encode(bundle.key).decode(),
            "ca.crt": base64.b64encode(bundle.ca_cert).decode(),
        },
    }
    if existing is None:
        return api.post_json(_secret_path(namespace), body)
    metadata = existing.get("metadata") or {}
    body["metadata"]["resourceVersion"] = metadata.get("resourceVersion", "")
    body["metadata"]["labels"] = {**(metadata.get("labels") or {}), **body["metadata"]["labels"]}
    if metadata.get("annotations"):
        body["metadata"]["annotations"] = metadata["annotations"]
    return api.put_json(_secret_path(namespace, name), body)


def inject_ca_bundle(
    api: CertsApi, configuration: str, service: str, namespace: str, ca_cert: bytes
) -> list[str]:
    """Put ``ca_cert`` into caBundle of every webhook calling ``namespace/service`` in the
    Mutating- and ValidatingWebhookConfiguration ``configuration``; one line per configuration
    found. CertsError when neither exists or none of their webhooks calls the Service."""
    ca_bundle = base64.b64encode(ca_cert).decode()
    said: list[str] = []
    found = 0
    for kind, resource in WEBHOOK_CONFIGURATIONS:
        path = f"{_ADMISSION_API}/{resource}/{configuration}"
        try:
            raw = api.get_json(path, {})
        except ApiError as error:
            if error.status == 404:
                continue
            raise CertsError(f"{kind} {configuration}: {error}") from None
        ops: list[dict[str, Any]] = []
        calling = 0
        for index, hook in enumerate(raw.get("webhooks") or ()):
            client = hook.get("clientConfig") or {}
            target = client.get("service") or {}
            if (target.get("name"), target.get("namespace")) != (service, namespace):
                continue
            calling += 1
            if client.get("caBundle") == ca_bundle:
                continue
            ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook["name"]})
            ops.append(
                {
                    "op": "add",
                    "path": f"/webhooks/{index}/clientConfig/caBundle",
                    "value": ca_bundle,
                }
            )
        if not calling:
            said.append(f"{kind} {configuration}: no webhook calls {namespace}/{service}")
            continue
        found += 1
        if ops:
            try:
                api.patch_json(path, ops, content_type=_JSON_PATCH)
            except ApiError as error:
                raise CertsError(f"{kind} {configuration}: {error}") from None
            said.append(f"{kind} {configuration}: caBundle set on {len(ops) // 2} webhook(s)")
        else:
            said.append(f"{kind} {configuration}: caBundle already current")
    if not found:
        raise CertsError(
            f"no MutatingWebhookConfiguration or ValidatingWebhookConfiguration {configuration} "
            f"with a webhook calling {namespace}/{service} (yet); apply them first"
        )
    return said
