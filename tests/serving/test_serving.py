"""gunicorn + TLS over real sockets: trust, SNI, and certificate reload without a restart."""

from __future__ import annotations

import gc
import socket
import ssl
import subprocess
import sys
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from migslice.serving import ServerOptions
from migslice.serving.certs import make_ca, write_tls_bundle
from migslice.serving.worker import freeze_what_is_loaded

SERVICE, NAMESPACE = "migslice-webhook", "migslice-system"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"

APP = """
import sys
from flask import Flask
from migslice.serving import ServerOptions, serve

def make_app():
    app = Flask("probe")
    app.add_url_rule("/healthz", "healthz", lambda: "ok")
    return app

serve(make_app, ServerOptions(host="127.0.0.1", port=int(sys.argv[1]), tls_cert=sys.argv[2],
      tls_key=sys.argv[3], threads=2))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def handshake(port: int, cafile: Path | None = None, cadata: bytes | None = None) -> bytes:
    """Connect with SNI = the Service DNS name; return the peer certificate (DER)."""
    context = ssl.create_default_context(
        cafile=str(cafile) if cafile else None, cadata=cadata.decode() if cadata else None
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls:
            request = f"GET /healthz HTTP/1.1\r\nHost: {SERVER_NAME}\r\nConnection: close\r\n\r\n"
            tls.sendall(request.encode())
            reply = tls.recv(4096)
            assert reply.startswith(b"HTTP/1.1 200"), reply
            peer = tls.getpeercert(binary_form=True)
            assert peer is not None
            return peer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    bundle = write_tls_bundle(tmp_path, SERVICE, NAMESPACE)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", APP, str(port), str(bundle.cert), str(bundle.key)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                handshake(port, bundle.ca_cert)
                break
            except (OSError, AssertionError):
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.1)
        yield port, tmp_path
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_client_that_trusts_our_ca_and_sends_the_service_name_gets_through(
    server: tuple[int, Path],
) -> None:
    port, directory = server
    peer = x509.load_der_x509_certificate(handshake(port, directory / "ca.crt"))
    names = peer.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert SERVER_NAME in names.get_values_for_type(x509.DNSName)


def test_a_small_answer_comes_whole_in_one_tls_record(server: tuple[int, Path]) -> None:
    """The head, then the body in a record of its own, made the client read (and kube-scheduler's
    Go client wake) twice for every extender answer."""
    port, directory = server
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname=SERVER_NAME) as tls:
            tls.sendall(f"GET /healthz HTTP/1.1\r\nHost: {SERVER_NAME}\r\n\r\n".encode())
            first = tls.recv(65536)  # OpenSSL returns one record's plaintext at most
    assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"\r\n\r\nok"), first


def test_a_client_that_trusts_another_ca_is_refused(server: tuple[int, Path]) -> None:
    port, _ = server
    other_ca, _ = make_ca("someone-else")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(port, cadata=other_ca)


def test_a_renewed_certificate_is_served_without_a_restart(server: tuple[int, Path]) -> None:
    port, directory = server
    before = handshake(port, directory / "ca.crt")
    write_tls_bundle(directory, SERVICE, NAMESPACE)
    after = handshake(port, directory / "ca.crt")
    assert before != after
    renewed = x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())
    assert after == renewed.public_bytes(Encoding.DER)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (ServerOptions(), "TLS needs both --tls-cert and --tls-key"),
        (ServerOptions(tls_cert="a", tls_key="b", insecure_http=True), "exclude each other"),
        (
            ServerOptions(tls_cert="/nonexistent/tls.crt", tls_key="/nonexistent/tls.key"),
            "no such file",
        ),
    ],
)
def test_server_options_without_usable_tls_say_how_to_fix_it(
    options: ServerOptions, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        options.check()


def test_a_worker_moves_what_it_loaded_to_the_permanent_generation_and_still_collects() -> None:
    gc.unfreeze()
    try:
        frozen = freeze_what_is_loaded()
        assert frozen > 10_000 and gc.get_freeze_count() == frozen  # modules and their code
        node = _Node()  # a reference cycle made after the freeze
        probe = weakref.ref(node)
        del node
        gc.collect()
        assert probe() is None  # is collected as before
    finally:
        gc.unfreeze()


class _Node:
    def __init__(self) -> None:
        self.me = self
