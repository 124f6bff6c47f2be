"""Does a serving certificate verify against a CA bundle, for a DNS name, now?

The question kube-apiserver asks of a webhook (``caBundle``, ``<service>.<namespace>.svc``)
and kube-scheduler of its extender (``tlsConfig.caData``/``caFile``, ``serverName``), answered
the way Go's ``crypto/x509`` answers it: a chain from the leaf to a certificate of the bundle,
each signature, each validity period, a DNS subject alternative name matching the name (the
common name is never used), issuers that are CAs, and an extended key usage, when present,
that allows serving. The chain is built and checked by ``cryptography``'s verifier; its web
PKI extension rules (authority key identifiers, key usages) are relaxed to what Go requires,
since the certificates of ``migslice certs``, cert-manager or a cluster's own CA need not
follow the web PKI's profile.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import (
    Criticality,
    ExtensionPolicy,
    PolicyBuilder,
    Store,
    VerificationError,
)


class CertificateTextError(ValueError):
    """Bytes that hold no PEM certificate."""


def load_pem_chain(data: bytes, what: str) -> list[x509.Certificate]:
    """The certificates of a PEM bundle (leaf first for a chain); CertificateTextError."""
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError as error:
        raise CertificateTextError(f"{what} holds no readable PEM certificate ({error})") from None
    return chain


def describe(cert: x509.Certificate) -> str:
    """``CN=x (issuer CN=y, valid until 2026-05-01)``."""
    return (
        f"{cert.subject.rfc4514_string() or '(empty subject)'} "
        f"(issuer {cert.issuer.rfc4514_string()}, valid until {cert.not_valid_after_utc:%Y-%m-%d})"
    )


def _is_ca(_policy: object, _cert: x509.Certificate, value: x509.BasicConstraints | None) -> None:
    if value is None or not value.ca:
        raise ValueError("an issuing certificate is not a CA (basicConstraints CA:FALSE)")


def _serves(_policy: object, _cert: x509.Certificate, value: x509.ExtendedKeyUsage | None) -> None:
    if value is None:
        return
    allowed = {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
    if not allowed & set(value):
        raise ValueError("extendedKeyUsage does not allow serverAuth")


def _policy_builder(roots: Sequence[x509.Certificate], now: datetime.datetime) -> PolicyBuilder:
    ca_policy = ExtensionPolicy.permit_all().require_present(
        x509.BasicConstraints, Criticality.AGNOSTIC, _is_ca
    )
    ee_policy = (
        ExtensionPolicy.permit_all()
        .require_present(x509.SubjectAlternativeName, Criticality.AGNOSTIC, None)
        .may_be_present(x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _serves)
    )
    return (
        PolicyBuilder()
        .store(Store(list(roots)))
        .time(now)
        .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
    )


def serving_problem(
    chain: Sequence[x509.Certificate],
    roots: Sequence[x509.Certificate],
    server_name: str,
    now: datetime.datetime,
) -> str:
    """Why a client trusting ``roots`` would refuse ``chain`` (leaf first, then intermediates)
    served as ``server_name`` (a DNS name, or an IP address a URL names); "" when it would
    accept it."""
    if not chain:
        return "no certificate"
    if not roots:
        return "the CA bundle holds no certificate"
    leaf = chain[0]
    if leaf.not_valid_after_utc < now:
        return f"the certificate expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    if leaf.not_valid_before_utc > now:
        return f"the certificate is valid only from {leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    issuers = {c.subject for c in (*roots, *chain[1:])}
    if leaf.issuer not in issuers:
        held = ", ".join(sorted({r.subject.rfc4514_string() for r in roots}))
        return (
            f"the certificate was issued by {leaf.issuer.rfc4514_string()}, which the CA "
            f"bundle does not hold (it holds {held})"
        )
    subject: x509.DNSName | x509.IPAddress
    try:
        subject = x509.IPAddress(ipaddress.ip_address(server_name))
    except ValueError:
        subject = x509.DNSName(server_name)
    verifier = _policy_builder(roots, now).build_server_verifier(subject)
    try:
        verifier.verify(leaf, list(chain[1:]))
    except VerificationError as error:
        reason = _short(str(error))
        if "signature does not match" in reason:
            return (
                f"the certificate's issuer {leaf.issuer.rfc4514_string()} is in the CA bundle "
                "with another key (a CA made anew?): the signature does not verify"
            )
        return f"it does not verify for {server_name}: {reason}"
    return ""


def _short(message: str) -> str:
    """cryptography's message without the repr of the certificate it was processing."""
    message = message.removeprefix("validation failed: ")
    cut = message.find(" (encountered processing")
    return message[:cut] if cut > 0 else message


def _clients(_policy: object, _cert: x509.Certificate, value: x509.ExtendedKeyUsage | None) -> None:
    if value is None:
        return
    allowed = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
    if not allowed & set(value):
        raise ValueError("extendedKeyUsage does not allow clientAuth")


def names_of(cert: x509.Certificate) -> tuple[str, ...]:
    """The names a migslice server reads off a client certificate: the subject's common
    names, then the DNS subject alternative names."""
    found = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return tuple(dict.fromkeys(found))
    return tuple(dict.fromkeys((*found, *sans.get_values_for_type(x509.DNSName))))


def client_problem(
    chain: Sequence[x509.Certificate],
    roots: Sequence[x509.Certificate],
    names: Sequence[str],
    now: datetime.datetime,
) -> str:
    """Why a server with ``--client-ca-file`` (``roots``) and ``--client-name`` (``names``;
    empty: any) would refuse ``chain`` (leaf first) as a client certificate; "" if not."""
    if not chain:
        return "no certificate"
    if not roots:
        return "the client CA file holds no certificate"
    leaf = chain[0]
    if leaf.not_valid_after_utc < now:
        return f"the certificate expired on {leaf.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
    ca_policy = ExtensionPolicy.permit_all().require_present(
        x509.BasicConstraints, Criticality.AGNOSTIC, _is_ca
    )
    ee_policy = ExtensionPolicy.permit_all().may_be_present(
        x509.ExtendedKeyUsage, Criticality.AGNOSTIC, _clients
    )
    verifier = (
        PolicyBuilder()
        .store(Store(list(roots)))
        .time(now)
        .extension_policies(ca_policy=ca_policy, ee_policy=ee_policy)
        .build_client_verifier()
    )
    try:
        verifier.verify(leaf, list(chain[1:]))
    except VerificationError as error:
        issuer = leaf.issuer.rfc4514_string()
        return f"it does not verify against the client CA (issuer {issuer}): {_short(str(error))}"
    carried = names_of(leaf)
    if names and not set(names) & set(carried):
        return f"it names {', '.join(carried) or 'nothing'}, not {', '.join(names)} (--client-name)"
    return ""
