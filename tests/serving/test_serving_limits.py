"""The server holds against stalled, slow and oversized clients (real sockets, real TLS).

A probe app runs under ``serve()`` in a child process with short deadlines and a small
connection table, so every limit is reached within a second or two. Bounds in the assertions
are generous functional ones (a stalled connection is closed *at all*, long before it could
finish), never timings.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from migslice.serving.certs import write_tls_bundle
from migslice.serving.connections import ConnectionTable

SERVICE, NAMESPACE = "migslice-probe", "migslice-system"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"
MAX_CONNECTIONS = 24
ECHO_LIMIT = 4096
LARGE_BODY = 2048
WHERE_LIMIT = 256 * 1024

PROBE = f"""
import sys, time
from flask import Flask, jsonify, request
from migslice.serving import BODY_TOO_LARGE, ServerOptions, ServingLimits, serve

def make_app():
    app = Flask("probe")

    @app.post("/echo")
    def echo():
        if request.environ.get(BODY_TOO_LARGE):
            return jsonify(too_large=True, content_length=request.content_length), 400
        return jsonify(too_large=False, length=len(request.get_data()))

    @app.get("/sleep")
    def sleep():
        open(request.args["marker"], "w").close()  # the request has reached the app
        time.sleep(float(request.args.get("s", "1")))
        return jsonify(slept=True)

    @app.post("/where")
    @app.post("/where-pooled")
    def where():
        import threading
        return jsonify(thread=threading.current_thread().name, length=len(request.get_data()))

    @app.post("/boom")
    def boom():
        raise RuntimeError("the handler failed")

    app.add_url_rule("/healthz", "healthz", lambda: "ok")
    return app

limits = ServingLimits(
    tls_handshake_timeout_s=1.0, request_timeout_s=1.5, keepalive_timeout_s=1.5,
    max_connections={MAX_CONNECTIONS}, max_requests_per_connection=3,
    body_limits=(("/echo", {ECHO_LIMIT}), ("/where", {WHERE_LIMIT}), ("/where-pooled", 1024)),
    default_body_bytes=1024,
    large_body_bytes={LARGE_BODY},
)
serve(make_app, ServerOptions(host="127.0.0.1", port=int(sys.argv[1]), tls_cert=sys.argv[2],
      tls_key=sys.argv[3], threads=2, workers=int(sys.argv[4]), limits=limits,
      inline_paths=frozenset({{"/where", "/boom"}})))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Probe:
    port: int
    context: ssl.SSLContext
    process: subprocess.Popen[bytes]
    home: Path

    def tls(self, timeout: float = 5.0) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context.wrap_socket(raw, server_hostname=SERVER_NAME)

    def connection(self) -> http.client.HTTPSConnection:
        connection = http.client.HTTPSConnection(
            SERVER_NAME, self.port, context=self.context, timeout=5
        )
        connection.sock = self.tls()
        return connection

    def get(self, path: str) -> tuple[int, bytes]:
        connection = self.connection()
        try:
            connection.request("GET", path)
            reply = connection.getresponse()
            return reply.status, reply.read()
        finally:
            connection.close()


def start_probe(directory: Path, workers: int = 1) -> Probe:
    bundle = write_tls_bundle(directory, SERVICE, NAMESPACE)
    home = directory / "home"
    home.mkdir()
    environment = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    environment["HOME"] = str(home)
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(port), str(bundle.cert), str(bundle.key), str(workers)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    probe = Probe(port, ssl.create_default_context(cafile=str(bundle.ca_cert)), process, home)
    deadline = time.monotonic() + 20
    while True:
        try:
            if probe.get("/healthz")[0] == 200:
                return probe
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Probe]:
    started = start_probe(tmp_path_factory.mktemp("probe"))
    yield started
    started.process.terminate()
    started.process.wait(timeout=15)


def closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """True when the server closes (EOF or reset) within ``within_s``; reads what it sends."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return False
        try:
            if not sock.recv(65536):
                return True
        except ssl.SSLWantReadError:
            continue
        except (OSError, ssl.SSLError):
            return True
    return False


def client_hello() -> bytes:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=SERVER_NAME)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def stalled_connections(probe: Probe, each: int) -> list[tuple[str, socket.socket]]:
    stalled: list[tuple[str, socket.socket]] = []
    hello = client_hello()
    for _ in range(each):
        raw = socket.create_connection(("127.0.0.1", probe.port))
        stalled.append(("tcp, nothing sent", raw))
        raw = socket.create_connection(("127.0.0.1", probe.port))
        raw.sendall(hello[:20])
        stalled.append(("part of a ClientHello", raw))
        stalled.append(("TLS, nothing sent", probe.tls()))
        tls = probe.tls()
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: probe\r\nContent-Le")
        stalled.append(("part of the headers", tls))
        tls = probe.tls()
        tls.sendall(b"POST /echo HTTP/1.1\r\nHost: probe\r\nContent-Length: 1000\r\n\r\n{")
        stalled.append(("part of the body", tls))
    return stalled


def test_stalled_connections_give_way_to_honest_requests_and_close_by_their_deadlines(
    probe: Probe,
) -> None:
    stalled = stalled_connections(probe, each=8)  # 40 connections, the table holds 24
    for _ in range(10):
        assert probe.get("/healthz") == (200, b"ok")
    still_open = [kind for kind, sock in stalled if not closed_by_server(sock, within_s=10)]
    for _, sock in stalled:
        sock.close()
    assert still_open == []


def test_a_client_trickling_its_request_cannot_extend_its_deadline(probe: Probe) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: probe\r\nX-Padding: " + b"x" * 100 + b"\r\n\r\n"
    sock = probe.tls()
    sent, closed = 0, False
    while sent < len(request) and not closed:  # one byte every 0.1 s: 15 s for the request
        try:
            sock.sendall(request[sent : sent + 1])
        except OSError:
            closed = True
            break
        sent += 1
        closed = closed_by_server(sock, within_s=0.1)
    sock.close()
    assert closed and sent < len(request)


def test_a_kept_alive_connection_is_reused_until_its_request_limit(probe: Probe) -> None:
    connection = probe.connection()
    answers = []
    for _ in range(3):
        connection.request("POST", "/echo", b'{"x": 1}', {"Content-Type": "application/json"})
        reply = connection.getresponse()
        answers.append((reply.status, reply.getheader("Connection"), json.loads(reply.read())))
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert [header for _, header, _ in answers] == [None, None, "close"]
    assert connection.sock is None or closed_by_server(connection.sock, within_s=5)
    connection.close()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_its_paths_limit_is_refused_unread_and_the_connection_closed(
    probe: Probe, chunked: bool
) -> None:
    body = b"x" * (ECHO_LIMIT + 1)
    connection = probe.connection()
    if chunked:
        connection.putrequest("POST", "/echo")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        for start in range(0, len(body), 1000):
            piece = body[start : start + 1000]
            connection.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        connection.send(b"0\r\n\r\n")
    else:
        connection.request("POST", "/echo", body)
    reply = connection.getresponse()
    answer = json.loads(reply.read())
    assert reply.status == 400 and answer["too_large"] is True
    assert answer["content_length"] > ECHO_LIMIT
    assert reply.getheader("Connection") == "close"
    connection.close()


def post(connection: http.client.HTTPSConnection, path: str, body: bytes) -> tuple[int, bytes]:
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    reply = connection.getresponse()
    return reply.status, reply.read()


def test_inline_paths_answer_small_requests_on_the_loop_and_large_ones_in_the_pool(
    probe: Probe,
) -> None:
    connection = probe.connection()
    status, answer = post(connection, "/where", b"x" * 100)
    assert status == 200 and json.loads(answer) == {"thread": "MainThread", "length": 100}
    status, answer = post(connection, "/where-pooled", b"x" * 100)
    assert status == 200 and json.loads(answer)["thread"].startswith("wsgi")
    large = 64 * 1024 + 1  # over INLINE_BODY_BYTES: the loop must not compute on it
    status, answer = post(connection, "/where", b"x" * large)
    assert status == 200 and json.loads(answer)["thread"].startswith("wsgi")
    assert json.loads(answer)["length"] == large
    connection.close()


def test_an_inline_handler_that_fails_answers_500_and_the_connection_goes_on(
    probe: Probe,
) -> None:
    connection = probe.connection()
    status, _ = post(connection, "/boom", b"{}")
    assert status == 500
    status, answer = post(connection, "/where", b"{}")
    assert status == 200 and json.loads(answer)["thread"] == "MainThread"
    connection.close()
    assert probe.get("/healthz") == (200, b"ok")


def test_a_body_within_the_limit_arrives_whole_whether_chunked_or_not(probe: Probe) -> None:
    connection = probe.connection()
    connection.putrequest("POST", "/echo")
    connection.putheader("Transfer-Encoding", "chunked")
    connection.endheaders()
    connection.send(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    reply = connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (200, {"too_large": False, "length": 11})
    connection.close()


def answered_within(sock: ssl.SSLSocket, within_s: float) -> bytes:
    """What the server answered within ``within_s`` (b"" if nothing; TLS tickets skipped)."""
    deadline = time.monotonic() + within_s
    sock.setblocking(False)
    try:
        while time.monotonic() < deadline:
            if not select.select([sock], [], [], max(0.0, deadline - time.monotonic()))[0]:
                break
            try:
                return sock.recv(65536)
            except ssl.SSLWantReadError:
                continue
        return b""
    finally:
        sock.setblocking(True)


def test_large_bodies_take_turns_so_they_cannot_pile_up_in_memory(probe: Probe) -> None:
    body = b"y" * (LARGE_BODY + 1000)
    head = b"POST /echo HTTP/1.1\r\nHost: probe\r\nContent-Length: %d\r\n\r\n" % len(body)
    with probe.tls() as first, probe.tls() as second:
        first.sendall(head + body[:10])  # holds the worker's large-body slot, half sent
        second.sendall(head + body)  # whole, but waits for the slot
        assert answered_within(second, 0.5) == b""
        first.sendall(body[10:])
        assert answered_within(first, 5).startswith(b"HTTP/1.1 200")
        assert answered_within(second, 5).startswith(b"HTTP/1.1 200")


def test_a_malformed_request_is_answered_400_and_closed(probe: Probe) -> None:
    sock = probe.tls()
    sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
    sock.settimeout(5)
    assert sock.recv(65536).startswith(b"HTTP/1.1 400")
    assert closed_by_server(sock, within_s=5)
    sock.close()


def test_plain_http_on_the_tls_port_is_closed(probe: Probe) -> None:
    raw = socket.create_connection(("127.0.0.1", probe.port), timeout=5)
    raw.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\n\r\n")
    assert closed_by_server(raw, within_s=5)
    raw.close()


def test_nothing_is_written_to_home(probe: Probe) -> None:
    assert probe.get("/healthz")[0] == 200
    assert list(probe.home.iterdir()) == []


def test_sigterm_lets_the_request_in_flight_finish(tmp_path: Path) -> None:
    probe = start_probe(tmp_path, workers=2)
    marker = tmp_path / "in-the-app"
    connection = probe.connection()
    connection.request("GET", f"/sleep?s=1&marker={marker}")
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    probe.process.send_signal(signal.SIGTERM)
    reply = connection.getresponse()
    assert (reply.status, json.loads(reply.read())) == (200, {"slept": True})
    assert probe.process.wait(timeout=15) == 0
    connection.close()


def test_a_client_that_expects_100_continue_gets_it_only_within_the_limit(probe: Probe) -> None:
    head = (
        b"POST /echo HTTP/1.1\r\nHost: probe\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
    )
    with probe.tls() as small:
        small.sendall(head % 5)
        assert answered_within(small, 5).startswith(b"HTTP/1.1 100")
        small.sendall(b"hello")
        assert answered_within(small, 5).startswith(b"HTTP/1.1 200")
    with probe.tls() as large:
        large.sendall(head % (ECHO_LIMIT + 1))
        assert answered_within(large, 5).startswith(b"HTTP/1.1 400")


def test_the_table_sheds_the_connection_that_has_waited_longest_never_a_busy_one() -> None:
    table: ConnectionTable[str] = ConnectionTable(capacity=3)
    for name in ("kept-alive", "trickling", "silent"):
        table.add(name)
    table.hold("kept-alive")  # its request is whole: being answered
    assert table.is_full and table.oldest_waiting() == "trickling"
    table.wait("kept-alive")  # answered; now the youngest waiter
    table.remove("trickling")
    assert table.waiting() == ["silent", "kept-alive"]
    table.hold("silent")
    table.hold("kept-alive")
    assert table.oldest_waiting() is None and table.busy_count() == 2
