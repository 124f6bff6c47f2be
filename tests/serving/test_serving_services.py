"""`migslice webhook` and `migslice extender` as shipped: body limits, deep JSON, boot errors.

Both run through the real command line (gunicorn master, our event-loop workers, TLS) with
``--max-body-mib 1``. An over-limit body is refused the same way whether it is announced by
Content-Length or chunked, through each service's own error channel: the webhook answers HTTP
400 with ``{"error": ...}``, the extender HTTP 200 with ``Error`` (kube-scheduler treats any
other status as a failed call). JSON nested too deep is a clean error, never a traceback.
"""

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
from typing import Any

import pytest
import yaml

from harness.builders import make_created_pod, make_node, make_pod, make_policy, make_review
from migslice.serving.certs import write_tls_bundle
from migslice.serving.process import ServerProcess

NAMESPACE = "migslice-system"
LIMIT = 1 << 20


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start(command: str, directory: Path, documents: list[dict[str, Any]]) -> ServerProcess:
    service = f"migslice-{command}"
    bundle = write_tls_bundle(directory / service, service, NAMESPACE)
    cluster = directory / f"{command}-cluster.yaml"
    cluster.write_text(yaml.safe_dump_all(documents))
    args = ["--cluster-file", str(cluster), "--max-body-mib", "1", "--threads", "2"]
    # A webhook over a cluster file keeps its quota ledger in the process: one worker only.
    workers = "1" if command == "webhook" else "2"
    server = ServerProcess(
        command, [*args, "--workers", workers], bundle, directory / f"{command}.log",
        f"{service}.{NAMESPACE}.svc",
    )  # fmt: skip
    return server.start(timeout_s=60)


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    node = {"apiVersion": "v1", "kind": "Node", **make_node("gpu-1", mig={"1g.10gb": 7})}
    server = start("webhook", tmp_path_factory.mktemp("webhook"), [make_policy(), node])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def extender(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    node = {"apiVersion": "v1", "kind": "Node", **make_node("gpu-a", mig={"1g.10gb": 7})}
    server = start("extender", tmp_path_factory.mktemp("extender"), [node])
    yield server
    server.stop()


def post(server: ServerProcess, path: str, body: bytes, chunked: bool = False) -> tuple[int, Any]:
    """POST over TLS (our CA, the Service name as SNI); chunked in 64 KiB pieces if asked."""
    context = server.context()
    connection = http.client.HTTPSConnection(
        server.server_name, server.port, context=context, timeout=10
    )
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    connection.sock = context.wrap_socket(raw, server_hostname=server.server_name)
    try:
        if chunked:
            connection.putrequest("POST", path)
            connection.putheader("Content-Type", "application/json")
            connection.putheader("Transfer-Encoding", "chunked")
            connection.endheaders()
            try:
                for start_at in range(0, len(body), 1 << 16):
                    piece = body[start_at : start_at + (1 << 16)]
                    connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                connection.send(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass  # refused before the whole body went out: the answer is waiting
        else:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
        reply = connection.getresponse()
        return reply.status, json.loads(reply.read())
    finally:
        connection.close()


def over_limit() -> bytes:
    return b'{"padding": "' + b"x" * LIMIT + b'"}'


DEEP = "deep value goes here"


def with_deep_value(document: Any, depth: int) -> bytes:
    """``document`` as JSON with the string DEEP replaced by a list nested ``depth`` deep."""
    deep = "[" * depth + '"bottom"' + "]" * depth
    return json.dumps(document).replace(json.dumps(DEEP), deep).encode()


def deep_json(depth: int) -> bytes:
    return b'{"a": ' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_webhook_refuses_an_over_limit_body_with_http_400(
    webhook: ServerProcess, chunked: bool
) -> None:
    status, answer = post(webhook, "/mutate", over_limit(), chunked)
    assert (status, answer) == (
        400,
        {"error": f"request body is larger than the limit of {LIMIT} bytes"},
    )


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_the_extender_refuses_an_over_limit_body_with_200_and_error(
    extender: ServerProcess, chunked: bool
) -> None:
    for verb in ("filter", "filter-best-fit", "prioritize"):
        status, answer = post(extender, f"/{verb}", over_limit(), chunked)
        assert status == 200
        assert f"larger than the limit {LIMIT} bytes (--max-body-mib)" in answer["Error"]


def test_the_webhook_answers_json_nested_too_deep_as_malformed(webhook: ServerProcess) -> None:
    status, answer = post(webhook, "/mutate", deep_json(5000))
    assert status == 400 and "not JSON" in answer["error"]
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    pod["spec"]["containers"][0]["args"] = DEEP
    status, answer = post(webhook, "/mutate", with_deep_value(make_review(pod), 1000))
    assert (status, answer["response"]["allowed"]) == (200, True)
    assert "Traceback" not in webhook.log_path.read_text()


def test_the_extender_answers_json_nested_too_deep_with_error(extender: ServerProcess) -> None:
    status, answer = post(extender, "/filter", deep_json(5000))
    assert status == 200 and "not JSON ExtenderArgs" in answer["Error"]
    pod = make_pod("train-0", profile="1g.10gb")
    pod["spec"]["deep"] = DEEP
    status, answer = post(
        extender, "/filter", with_deep_value({"Pod": pod, "NodeNames": ["gpu-a"]}, 1000)
    )
    assert (status, answer["Error"], answer["NodeNames"]) == (200, "", ["gpu-a"])
    node = make_node("gpu-b", mig={"1g.10gb": 7})
    node["status"]["deep"] = DEEP  # a fitting Node is echoed back in full-Node mode
    args = {"Pod": make_pod("train-1", profile="1g.10gb"), "Nodes": {"items": [node]}}
    status, answer = post(extender, "/filter", with_deep_value(args, 1000))
    assert status == 200 and "cannot be encoded" in answer["Error"]
    assert "Traceback" not in extender.log_path.read_text()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "migslice.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_webhook_worker_that_cannot_build_its_app_stops_the_server_with_one_line(
    tmp_path: Path,
) -> None:
    bundle = write_tls_bundle(tmp_path, "migslice-webhook", NAMESPACE)
    broken = tmp_path / "cluster.yaml"
    broken.write_text("apiVersion: v1\nkind: Node\nmetadata: {name: [unclosed\n")
    result = run_cli(
        "webhook", "--cluster-file", str(broken), "--host", "127.0.0.1", "--port", "0",
        "--tls-cert", str(bundle.cert), "--tls-key", str(bundle.key), "--workers", "1",
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"migslice: error: --cluster-file {broken}: ")
    assert "not valid YAML" in lines[0]


def test_a_serving_key_that_cannot_be_loaded_stops_the_server_with_one_line(
    tmp_path: Path,
) -> None:
    bundle = write_tls_bundle(tmp_path, "migslice-extender", NAMESPACE)
    bundle.key.write_text("not a key\n")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Node", **make_node("a")}))
    result = run_cli(
        "extender", "--cluster-file", str(cluster), "--host", "127.0.0.1", "--port", "0",
        "--tls-cert", str(bundle.cert), "--tls-key", str(bundle.key), "--log-level", "warning",
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert f"--tls-key {bundle.key}: cannot load the serving certificate" in lines[0]


@pytest.mark.parametrize("content", ["", "the key"], ids=["empty", "a-key"])
def test_a_client_ca_that_cannot_be_loaded_is_named_not_the_serving_certificate(
    tmp_path: Path, content: str
) -> None:
    """A --client-ca-file with no certificate in it (empty, or the key passed by mistake) was
    reported as the serving certificate: 'cannot load the serving certificate (not a PEM
    certificate chain and its matching private key: no certificate or crl found)'."""
    bundle = write_tls_bundle(tmp_path, "migslice-webhook", NAMESPACE)
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(bundle.key.read_bytes() if content else b"")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    result = run_cli(
        "webhook", "--cluster-file", str(cluster), "--host", "127.0.0.1", "--port", "0",
        "--tls-cert", str(bundle.cert), "--tls-key", str(bundle.key),
        "--client-ca-file", str(client_ca), "--log-level", "warning",
    )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0] == (
        f"migslice: error: --client-ca-file {client_ca}: cannot load the client CA (no PEM "
        "certificate in it: no certificate or crl found)"
    )


@pytest.mark.parametrize("service", ["webhook", "extender"])
@pytest.mark.parametrize("where", ["unresolvable-host", "port-in-use"])
def test_a_server_that_cannot_bind_says_so_in_one_line_without_retrying(
    tmp_path: Path, service: str, where: str
) -> None:
    """gunicorn retried the bind five times, a second apart, and logged 6-11 lines."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        host, port = ("127.0.0.1", busy.getsockname()[1])
        if where == "unresolvable-host":
            host, port = "no.such.host.invalid", 9443
        result = run_cli(
            service, "--cluster-file", str(cluster), "--insecure-http", "--host", host,
            "--port", str(port), "--log-level", "warning",
        )  # fmt: skip
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"migslice: error: cannot listen on {host}:{port}: "), lines[0]


def can_remount() -> bool:
    probe = ["unshare", "--mount", "--propagation", "private", "mount", "--bind", "/", "/mnt"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


READ_ONLY_ROOT = """
set -e
mount --bind /tmp /tmp
mount -o remount,bind,ro /
if mountpoint -q /dev/shm; then mount -o remount,bind,ro /dev/shm; fi
export HOME=/root
unset XDG_RUNTIME_DIR
exec "$@"
"""


@pytest.mark.skipif(not can_remount(), reason="needs a private mount namespace (unshare)")
def test_the_webhook_runs_with_a_read_only_root_and_home_and_only_tmp_writable(
    tmp_path: Path,
) -> None:
    service = "migslice-webhook"
    bundle = write_tls_bundle(tmp_path, service, NAMESPACE)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([make_policy()]))
    port = str(free_port())
    command = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c", READ_ONLY_ROOT, "sh",
        sys.executable, "-m", "migslice.cli", "webhook", "--cluster-file", str(cluster),
        "--host", "127.0.0.1", "--port", port, "--tls-cert", str(bundle.cert),
        "--tls-key", str(bundle.key), "--log-level", "warning",
    ]  # fmt: skip
    log = tmp_path / "webhook.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = ServerProcess("webhook", [], bundle, log, f"{service}.{NAMESPACE}.svc", int(port))
    try:
        deadline = time.monotonic() + 60
        status: int | None = None
        while status != 200 and process.poll() is None and time.monotonic() < deadline:
            try:
                status = server.request("GET", "/readyz")[0]
            except OSError:
                time.sleep(0.2)
        assert status == 200, log.read_text()
        assert "ERROR" not in log.read_text()
    finally:
        server.stop()
        process.terminate()
        process.wait(timeout=15)


def test_the_harness_client_asks_again_when_the_server_closed_its_idle_connection(
    tmp_path: Path,
) -> None:
    service = "migslice-extender"
    bundle = write_tls_bundle(tmp_path / service, service, NAMESPACE)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump_all([]))
    server = ServerProcess(
        "extender",
        ["--cluster-file", str(cluster), "--workers", "1", "--keepalive-timeout-s", "0.5"],
        bundle,
        tmp_path / "extender.log",
        f"{service}.{NAMESPACE}.svc",
    ).start(timeout_s=60)
    try:
        assert server.request("GET", "/healthz")[0] == 200
        time.sleep(1.5)  # past the keep-alive timeout: the server has closed the connection
        assert server.request("GET", "/healthz")[0] == 200
    finally:
        server.stop()
