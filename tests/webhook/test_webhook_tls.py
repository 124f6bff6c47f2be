"""`migslice webhook` over real sockets: gunicorn with TLS, a /mutate round trip with SNI."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.serving.certs import make_ca, write_tls_bundle

SERVICE, NAMESPACE = "migslice-webhook", "migslice-system"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(port: int, path: str, body: bytes, context: ssl.SSLContext) -> tuple[int, bytes]:
    """POST over TLS to 127.0.0.1 with SNI and Host = the Service DNS name."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    tls = context.wrap_socket(raw, server_hostname=SERVER_NAME)
    connection = http.client.HTTPSConnection(SERVER_NAME, port, context=context, timeout=5)
    connection.sock = tls
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    directory = tmp_path_factory.mktemp("webhook")
    bundle = write_tls_bundle(directory, SERVICE, NAMESPACE)
    cluster = directory / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump_all(
            [make_policy(), {"apiVersion": "v1", "kind": "Node", **make_node("gpu-1")}]
        )
    )
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "migslice.cli",
            "webhook",
            "--cluster-file",
            str(cluster),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--tls-cert",
            str(bundle.cert),
            "--tls-key",
            str(bundle.key),
            "--threads",
            "2",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    context = ssl.create_default_context(cafile=str(bundle.ca_cert))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                post(port, "/mutate", b"{}", context)
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.2)
        yield port, directory
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_client_that_trusts_the_generated_ca_gets_a_patch_over_tls(
    webhook: tuple[int, Path],
) -> None:
    port, directory = webhook
    context = ssl.create_default_context(cafile=str(directory / "ca.crt"))
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    status, body = post(port, "/mutate", json.dumps(make_review(pod)).encode(), context)
    assert status == 200
    response = json.loads(body)["response"]
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"


def test_a_client_that_trusts_another_ca_fails_the_handshake(webhook: tuple[int, Path]) -> None:
    port, _ = webhook
    other_ca, _ = make_ca("someone-else")
    context = ssl.create_default_context(cadata=other_ca.decode())
    with pytest.raises(ssl.SSLCertVerificationError):
        post(port, "/mutate", b"{}", context)
