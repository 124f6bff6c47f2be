"""Only the callers a service was told about may call it: with --client-ca-file the webhook
answers admission reviews, and the extender its verbs, only to a client certificate that CA
signed (and, with --client-name, that names an allowed client); probes need none.

Measured before: two unauthenticated POSTs to /mutate for a tenant with a quota of 2 held its
quota for the hold (45 s), so the tenant's real create was denied."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.serving.certs import TlsBundle, write_client_cert, write_tls_bundle
from migslice.serving.process import ServerProcess

NAMESPACE = "migslice-system"


def start(
    command: str, directory: Path, documents: list[dict[str, Any]], *extra: str
) -> tuple[ServerProcess, TlsBundle]:
    service = f"migslice-{command}"
    bundle = write_tls_bundle(directory / service, service, NAMESPACE)
    cluster = directory / f"{command}-cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(documents))
    args = ["--cluster-file", str(cluster), "--client-ca-file", str(bundle.ca_cert), *extra]
    server = ServerProcess(
        command, args, bundle, directory / f"{command}.log", f"{service}.{NAMESPACE}.svc"
    )
    return server, bundle


@contextmanager
def caller(server: ServerProcess, cert: tuple[Path, Path] | None) -> Iterator[ServerProcess]:
    """A client of the running ``server`` presenting ``cert`` (or none)."""
    client = ServerProcess(
        server.command, [], server.bundle, server.log_path, server.server_name,
        port=server.port, client_cert=cert,
    )  # fmt: skip
    try:
        yield client
    finally:
        client.stop()  # closes its connection; it started no process


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    node = {"apiVersion": "v1", "kind": "Node", **make_node("gpu-1", mig={"1g.10gb": 7})}
    policy = make_policy(quota={"instances": 2})
    server, bundle = start(
        "webhook", tmp_path_factory.mktemp("webhook"), [policy, node],
        "--client-name", "kube-apiserver",
    )  # fmt: skip
    server.client_cert = write_client_cert(bundle, "kube-apiserver")
    server.start(timeout_s=60)
    yield server
    server.stop()


def review(uid: str) -> dict[str, Any]:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    return make_review(pod, uid=uid)


def test_a_caller_without_a_client_certificate_is_refused_and_holds_no_quota(
    webhook: ServerProcess,
) -> None:
    with caller(webhook, None) as forged:
        for i in range(3):
            status, answer = forged.request("POST", "/mutate", review(f"forged-{i}"))
            assert status == 403
            assert "signed by the service's --client-ca-file" in answer["error"]
        metrics = forged.request("GET", "/metrics")[1]
    status, answer = webhook.request("POST", "/mutate", review("real-1"))
    assert status == 200 and answer["response"]["allowed"], answer
    status, answer = webhook.request("POST", "/mutate", review("real-2"))
    assert status == 200 and answer["response"]["allowed"], answer
    assert 'migslice_webhook_requests_total{endpoint="mutate",outcome="unauthenticated"} 3.0' in (
        metrics
    )


def test_a_certificate_of_the_ca_that_names_another_client_is_refused(
    webhook: ServerProcess,
) -> None:
    other = write_client_cert(webhook.bundle, "someone-else")
    with caller(webhook, other) as client:
        status, answer = client.request("POST", "/mutate", review("other-1"))
    assert status == 403
    assert (  # each name once, though the certificate's CN and its SAN both carry it
        "certificate names someone-else are not among the allowed --client-name kube-apiserver"
        in answer["error"]
    )


def test_a_certificate_of_another_ca_fails_the_handshake(
    webhook: ServerProcess, tmp_path: Path
) -> None:
    stranger = write_tls_bundle(tmp_path / "other-ca", "x", "y")
    cert = write_client_cert(stranger, "kube-apiserver")
    # Under TLS 1.3 the client learns of the server's alert at its first read: an alert, a
    # reset or an EOF, depending on timing; never an answer.
    with caller(webhook, cert) as client, pytest.raises(OSError, match="failed"):
        client.request("POST", "/mutate", review("stranger-1"))


def test_probes_and_scrapers_need_no_client_certificate(webhook: ServerProcess) -> None:
    with caller(webhook, None) as anonymous:
        assert anonymous.request("GET", "/readyz")[0] == 200
        assert anonymous.request("GET", "/healthz")[0] == 200
        assert anonymous.request("GET", "/metrics")[0] == 200


FORMS_OF_A_VERB = (
    ("post", "/filter"),
    ("Post", "/prioritize"),
    ("POST", "//filter"),
    ("POST", "///filter-best-fit"),
)
"""Requests that are a verb's call by another spelling: measured before, each was answered
to a caller without a client certificate (the check was only on the exact spelling)."""


def test_the_extender_answers_its_verbs_only_to_the_scheduler(tmp_path: Path) -> None:
    node = {"apiVersion": "v1", "kind": "Node", **make_node("gpu-1", mig={"1g.10gb": 7})}
    server, bundle = start("extender", tmp_path, [node], "--client-name", "migslice-scheduler")
    server.client_cert = write_client_cert(bundle, "migslice-scheduler")
    server.start(timeout_s=60)
    try:
        args = {"Pod": make_created_pod(limits={"nvidia.com/mig-1g.10gb": "1"}),
                "NodeNames": ["gpu-1"]}  # fmt: skip
        with caller(server, None) as scheduler:
            status, answer = scheduler.request("POST", "/filter", args)
            assert status == 403 and "client certificate" in answer["Error"]
            # Flask upper-cases a method and merges a path's slashes: these reach a verb too
            for method, path in FORMS_OF_A_VERB:
                status, answer = scheduler.request(method, path, args)
                assert status == 403 and "client certificate" in answer["Error"], (method, path)
        status, answer = server.request("POST", "/filter", args)
        assert status == 200 and answer["NodeNames"] == ["gpu-1"], answer
        for method, path in FORMS_OF_A_VERB:
            assert server.request(method, path, args)[0] == 200, (method, path)
    finally:
        server.stop()


def test_client_names_without_a_client_ca_are_refused_in_one_line(tmp_path: Path) -> None:
    from migslice.cli import main

    bundle = write_tls_bundle(tmp_path, "migslice-webhook", NAMESPACE)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    code = main([
        "webhook", "--cluster-file", str(cluster), "--tls-cert", str(bundle.cert),
        "--tls-key", str(bundle.key), "--client-name", "kube-apiserver",
    ])  # fmt: skip
    assert code == 1


def test_the_client_certificate_is_for_client_authentication_only(tmp_path: Path) -> None:
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    bundle = write_tls_bundle(tmp_path, "migslice-webhook", NAMESPACE)
    cert_path, key_path = write_client_cert(bundle, "kube-apiserver")
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert oct(key_path.stat().st_mode & 0o777) == "0o600"
    context = ssl.create_default_context(cafile=str(bundle.ca_cert))
    context.load_cert_chain(str(cert_path), str(key_path))  # a usable pair
