"""Certificate verification as kube-apiserver and kube-scheduler (Go's crypto/x509) do it: the
chain to the bundle, validity, the DNS or IP name, CA issuers, serverAuth, and no web PKI
extras (a leaf without an authority key identifier is fine)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from migslice.doctor.tls import CertificateTextError, load_pem_chain, serving_problem
from migslice.serving.certs import write_tls_bundle

NOW = datetime.datetime(2026, 6, 1, tzinfo=datetime.UTC)
Issued = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]
NAME = "migslice-webhook.migslice-system.svc"


def name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def issue(
    subject: str,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None = None,
    *,
    ca: bool = False,
    sans: tuple[x509.GeneralName, ...] = (x509.DNSName(NAME),),
    usages: tuple[x509.ObjectIdentifier, ...] | None = None,
    days: tuple[int, int] = (-1, 30),
) -> Issued:
    """A certificate (self-signed without ``issuer``), with only the extensions asked for."""
    key = ec.generate_private_key(ec.SECP256R1())
    issuer_name, issuer_key = issuer if issuer is not None else (name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW + datetime.timedelta(days=days[0]))
        .not_valid_after(NOW + datetime.timedelta(days=days[1]))
    )
    if ca:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    elif sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), False)
    if usages is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), False)
    return builder.sign(issuer_key, hashes.SHA256()), key


@pytest.fixture
def root() -> Issued:
    return issue("root", ca=True)


def test_a_certificate_of_migslice_certs_verifies_for_the_service_name(tmp_path: Path) -> None:
    bundle = write_tls_bundle(tmp_path, "migslice-webhook", "migslice-system", [], [], 365)
    chain = load_pem_chain(Path(bundle.cert).read_bytes(), "tls.crt")
    roots = load_pem_chain(Path(bundle.ca_cert).read_bytes(), "ca.crt")
    now = chain[0].not_valid_before_utc + datetime.timedelta(days=1)
    assert serving_problem(chain, roots, NAME, now) == ""
    assert "no matching subjectAltName" in serving_problem(
        chain, roots, "migslice-extender.migslice-system.svc", now
    )


def test_a_leaf_without_key_identifiers_verifies_as_go_would(root: Issued) -> None:
    cert, key = root
    leaf, _ = issue("leaf", (cert.subject, key))
    assert serving_problem([leaf], [cert], NAME, NOW) == ""


def test_an_intermediate_sent_with_the_leaf_completes_the_chain(root: Issued) -> None:
    cert, key = root
    middle, middle_key = issue("intermediate", (cert.subject, key), ca=True)
    leaf, _ = issue("leaf", (middle.subject, middle_key))
    assert serving_problem([leaf, middle], [cert], NAME, NOW) == ""
    assert "does not hold" in serving_problem([leaf], [cert], NAME, NOW)


def test_an_ip_address_name_is_checked_against_ip_sans(root: Issued) -> None:
    cert, key = root
    ip = ipaddress.ip_address("127.0.0.1")
    leaf, _ = issue("leaf", (cert.subject, key), sans=(x509.IPAddress(ip),))
    assert serving_problem([leaf], [cert], "127.0.0.1", NOW) == ""
    assert "no matching subjectAltName" in serving_problem([leaf], [cert], "127.0.0.2", NOW)


@pytest.mark.parametrize(
    ("case", "said"),
    [
        (
            "other-ca",
            "was issued by CN=root, which the CA bundle does not hold (it holds CN=other)",
        ),
        ("same-name", "is in the CA bundle with another key (a CA made anew?)"),
        ("expired", "the certificate expired on 2026-05-31"),
        ("not-yet", "the certificate is valid only from 2026-06-03"),
        ("no-san", "has no subjectAltName"),
        ("client-only", "extendedKeyUsage does not allow serverAuth"),
        ("issuer-not-ca", "CA certificate has no basicConstraints"),
    ],
)
def test_what_a_client_would_refuse_is_said(root: Issued, case: str, said: str) -> None:
    cert, key = root
    roots = [cert]
    kw: dict[str, object] = {}
    if case == "expired":
        kw["days"] = (-30, -1)
    elif case == "not-yet":
        kw["days"] = (2, 30)
    elif case == "no-san":
        kw["sans"] = ()
    elif case == "client-only":
        kw["usages"] = (ExtendedKeyUsageOID.CLIENT_AUTH,)
    issuer = (cert.subject, key)
    if case == "issuer-not-ca":
        plain, plain_key = issue("plain", (cert.subject, key))
        issuer = (plain.subject, plain_key)
        roots = [plain]
    leaf, _ = issue("leaf", issuer, **kw)  # type: ignore[arg-type]
    if case == "other-ca":
        roots = [issue("other", ca=True)[0]]
    elif case == "same-name":
        roots = [issue("root", ca=True)[0]]
    assert said in serving_problem([leaf], roots, NAME, NOW)


def test_text_without_a_certificate_is_one_line() -> None:
    with pytest.raises(CertificateTextError, match=r"^caBundle holds no readable PEM"):
        load_pem_chain(b"hello", "caBundle")
