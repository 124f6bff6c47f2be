"""HTTP/1.1 conformance of the served app over real sockets, plain HTTP and TLS.

A probe app runs under ``serve()`` in a child process. Each row of the table is raw bytes sent
on one new connection (or a few pieces, each sent once the answers to the one before are in),
the status lines expected back in order, and whether the server closes the connection after
them. A connection expected to stay open must answer one more request (and nothing else
first); one expected closed must reach end of file with nothing more answered. The probe's
``/status/<code>`` answers that code, so pipelined answers show their order.
"""

from __future__ import annotations

import os
import select
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

SERVICE, NAMESPACE = "migslice-probe", "migslice-system"
SERVER_NAME = f"{SERVICE}.{NAMESPACE}.svc"
ECHO_LIMIT = 4096
ANSWER_WAIT_S = 5.0  # well under the request timeout: a request that hangs fails the row

PROBE = f"""
import sys
from flask import Flask, request
from migslice.serving import ServerOptions, ServingLimits, serve

def make_app():
    app = Flask("probe")

    @app.route("/status/<int:code>", methods=["GET", "POST"])
    def status(code):
        return "ok", code

    @app.post("/echo")
    def echo():
        return request.get_data()

    app.add_url_rule("/healthz", "healthz", lambda: "ok")
    return app

tls = sys.argv[2] != "-"
limits = ServingLimits(body_limits=(("/echo", {ECHO_LIMIT}),), request_timeout_s=30.0)
serve(make_app, ServerOptions(host="127.0.0.1", port=int(sys.argv[1]),
      tls_cert=sys.argv[2] if tls else None, tls_key=sys.argv[3] if tls else None,
      insecure_http=not tls, threads=2, limits=limits))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Server:
    port: int
    context: ssl.SSLContext | None
    process: subprocess.Popen[bytes]

    def connect(self) -> socket.socket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=ANSWER_WAIT_S)
        if self.context is None:
            return raw
        return self.context.wrap_socket(raw, server_hostname=SERVER_NAME)


def start(directory: Path, tls: bool) -> Server:
    port = free_port()
    if tls:
        bundle = write_tls_bundle(directory, SERVICE, NAMESPACE)
        args = [str(bundle.cert), str(bundle.key)]
        context: ssl.SSLContext | None = ssl.create_default_context(cafile=str(bundle.ca_cert))
    else:
        args, context = ["-", "-"], None
    environment = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    process = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(port), *args],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(port, context, process)
    deadline = time.monotonic() + 20
    while True:
        try:
            with server.connect() as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
                if sock.recv(4096).startswith(b"HTTP/1.1 200"):
                    return server
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module", params=["http", "https"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    started = start(tmp_path_factory.mktemp("conformance"), tls=request.param == "https")
    yield started
    started.process.terminate()
    started.process.wait(timeout=15)


class Answers:
    """The answers read from one connection: status codes, and whether it reached EOF."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.statuses: list[int] = []
        self.bodies: list[bytes] = []
        self.eof = False

    def _read(self, until: float) -> bool:
        """Read what arrives before ``until``; False when nothing did."""
        while True:
            left = until - time.monotonic()
            if left <= 0:
                return False
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
            if not pending and not select.select([self.sock], [], [], left)[0]:
                return False
            try:
                data = self.sock.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
                data = b""
            if not data:
                self.eof = True
            self.buffer += data
            return True

    def _parse(self) -> bool:
        """Take one whole answer off the buffer (we always send Content-Length)."""
        end = self.buffer.find(b"\r\n\r\n")
        if end == -1:
            return False
        head = self.buffer[:end].split(b"\r\n")
        status = int(head[0].split(b" ")[1])
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return False
        self.bodies.append(self.buffer[end + 4 : end + 4 + length])
        self.buffer = self.buffer[end + 4 + length :]
        self.statuses.append(status)
        return True

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + ANSWER_WAIT_S
        while len(self.statuses) < count:
            if self._parse():
                continue
            if self.eof or not self._read(deadline):
                return

    def closed(self) -> bool:
        """Nothing more is answered and the server closes the connection."""
        deadline = time.monotonic() + ANSWER_WAIT_S
        while not self.eof and self._read(deadline):
            pass
        return self.eof and self.buffer == b""


def exchange(server: Server, row: Row) -> tuple[list[int], bool]:
    """Send each piece once the answers to the one before it are in; the status codes
    answered, and whether the server closed the connection after them. Once the row's count
    of answers is in, a connection at EOF must have sent nothing more; one still open must
    answer a probe request next (an extra answer first, such as a smuggled request's, shows)."""
    with server.connect() as sock:
        answers = Answers(sock)
        for number, piece in enumerate(row.pieces):
            try:
                sock.sendall(piece)
            except OSError:
                break
            if number < len(row.pieces) - 1:
                answers.wait_for(len(answers.statuses) + 1)
        answers.wait_for(len(row.statuses))
        if answers.eof or answers.buffer:
            return answers.statuses, answers.closed()
        answered = len(answers.statuses)
        try:
            sock.sendall(b"GET /status/299 HTTP/1.1\r\nHost: probe\r\n\r\n")
        except OSError:
            return answers.statuses, True
        answers.wait_for(answered + 1)
        if answers.statuses[answered:] == [299]:
            return answers.statuses[:answered], False
        return answers.statuses, answers.closed()


HOST = b"Host: probe\r\n"


def get(target: bytes = b"/status/200", fields: bytes = HOST, version: bytes = b"1.1") -> bytes:
    return b"GET " + target + b" HTTP/" + version + b"\r\n" + fields + b"\r\n"


def post(fields: bytes, body: bytes = b"", target: bytes = b"/echo") -> bytes:
    return b"POST " + target + b" HTTP/1.1\r\n" + HOST + fields + b"\r\n" + body


CHUNKED = b"Transfer-Encoding: chunked\r\n"
HELLO = b"5\r\nhello\r\n0\r\n\r\n"
SMUGGLED = get(b"/status/298")


def fields(count: int) -> bytes:
    """``count`` header fields, Host among them."""
    return HOST + b"".join(b"X-Field-%d: %d\r\n" % (n, n) for n in range(count - 1))


OPEN, CLOSED = False, True  # the connection after the answers


@dataclass(frozen=True)
class Row:
    id: str
    pieces: tuple[bytes, ...]
    statuses: list[int]
    closed: bool

    @classmethod
    def of(cls, id: str, raw: bytes, statuses: list[int], closed: bool) -> Row:
        return cls(id, (raw,), statuses, closed)


ROWS = [
    # valid requests, one or pipelined
    Row.of("a valid GET", get(), [200], OPEN),
    Row.of("empty lines before the request line", b"\r\n\r\n" + get(), [200], OPEN),
    Row.of("Connection: close", get(fields=HOST + b"Connection: close\r\n"), [200], CLOSED),
    Row.of(
        "HTTP/1.0 without Host is answered then closed",
        get(b"/status/200", b"", b"1.0"),
        [200],
        CLOSED,
    ),
    Row.of("HTTP/1.2 is read as HTTP/1.1", get(version=b"1.2"), [200], OPEN),
    Row.of("two pipelined", get(b"/status/201") + get(b"/status/202"), [201, 202], OPEN),
    Row.of(
        "three pipelined, with bodies",
        post(b"Content-Length: 2\r\n", b"ab", b"/status/201")
        + post(CHUNKED, HELLO, b"/status/202")
        + get(b"/status/203"),
        [201, 202, 203],
        OPEN,
    ),
    Row.of(
        "chunked with extensions and trailers",
        post(
            CHUNKED,
            b'5;name=value;quoted="a b";bare\r\nhello\r\n'
            b"6 ; spaced = 1\r\n world\r\n0;last\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\n",
        ),
        [200],
        OPEN,
    ),
    Row.of("chunked, in any case", post(b"Transfer-Encoding: Chunked\r\n", HELLO), [200], OPEN),
    Row(
        "Expect: 100-continue",
        (post(b"Expect: 100-continue\r\nContent-Length: 5\r\n"), b"hello"),
        [100, 200],
        OPEN,
    ),
    Row.of("exactly 100 header fields", get(fields=fields(100)), [200], OPEN),
    Row.of(
        "equal Content-Length values are one",
        post(b"Content-Length: 5\r\nContent-Length: 5\r\n", b"hello"),
        [200],
        OPEN,
    ),
    Row.of(
        "Content-Length with OWS around it",
        post(b"Content-Length:  5 \r\n", b"hello"),
        [200],
        OPEN,
    ),
    # request smuggling shapes (RFC 9112 section 6.1)
    Row.of(
        "Content-Length then Transfer-Encoding",
        post(b"Content-Length: 4\r\n" + CHUNKED, b"0\r\n\r\n" + SMUGGLED),
        [400],
        CLOSED,
    ),
    Row.of(
        "Transfer-Encoding then Content-Length",
        post(CHUNKED + b"Content-Length: 40\r\n", HELLO + SMUGGLED),
        [400],
        CLOSED,
    ),
    Row.of(
        "Transfer-Encoding chunked with Content-Length 0",
        post(CHUNKED + b"Content-Length: 0\r\n", HELLO + SMUGGLED),
        [400],
        CLOSED,
    ),
    Row.of(
        "a valid request, then CL+TE, then a smuggled one",
        get(b"/status/201") + post(b"Content-Length: 5\r\n" + CHUNKED, HELLO) + SMUGGLED,
        [201, 400],
        CLOSED,
    ),
    Row.of(
        "a request behind a malformed one is never answered",
        get(fields=HOST + b"Bad Name: x\r\n") + get(b"/status/201"),
        [400],
        CLOSED,
    ),
    Row.of(
        "obs-fold on Transfer-Encoding",
        post(b"Transfer-Encoding:\r\n chunked\r\n", HELLO),
        [400],
        CLOSED,
    ),
    Row.of("obs-fold on another field", get(fields=HOST + b"X-A: 1\r\n\t2\r\n"), [400], CLOSED),
    # line endings: CRLF only (RFC 9112 section 2.2)
    Row.of(
        "bare LF in the request line",
        b"GET /status/200 HTTP/1.1\n" + HOST + b"\r\n",
        [400],
        CLOSED,
    ),
    Row.of("bare LF ending every line", b"GET / HTTP/1.1\nHost: probe\n\n", [400], CLOSED),
    Row.of(
        "bare LF in a header line",
        b"GET / HTTP/1.1\r\nHost: probe\nX: 1\r\n\r\n",
        [400],
        CLOSED,
    ),
    Row.of("bare LF in a chunk-size line", post(CHUNKED, b"5\nhello\r\n0\r\n\r\n"), [400], CLOSED),
    Row.of("bare LF after chunk data", post(CHUNKED, b"5\r\nhello\n0\r\n\r\n"), [400], CLOSED),
    Row.of("bare LF in the trailers", post(CHUNKED, b"0\r\nX-T: 1\n\r\n"), [400], CLOSED),
    Row.of("bare LF ending the trailers", post(CHUNKED, b"0\r\nX-T: 1\r\n\n"), [400], CLOSED),
    Row.of("bare CR in a header line", get(fields=HOST + b"X-A: 1\rX-B: 2\r\n"), [400], CLOSED),
    Row.of("bare CR after chunk data", post(CHUNKED, b"5\r\nhello\r0\r\n\r\n"), [400], CLOSED),
    # sizes
    Row.of("101 header fields", get(fields=fields(101)), [431], CLOSED),
    Row.of("10,000 header fields", get(fields=fields(10_000)), [431], CLOSED),
    Row.of(
        "a head over max_header_bytes",
        get(fields=HOST + b"X-Big: " + b"x" * 33_000 + b"\r\n"),
        [431],
        CLOSED,
    ),
    Row.of("a request line over 8 KiB", get(b"/status/200?" + b"q" * 8200), [414], CLOSED),
    # Content-Length (RFC 9110 section 8.6)
    Row.of(
        "differing Content-Length fields",
        post(b"Content-Length: 5\r\nContent-Length: 6\r\n", b"hello!"),
        [400],
        CLOSED,
    ),
    Row.of(
        "differing Content-Length values in one field",
        post(b"Content-Length: 5, 6\r\n"),
        [400],
        CLOSED,
    ),
    Row.of("Content-Length +5", post(b"Content-Length: +5\r\n", b"hello"), [400], CLOSED),
    Row.of("Content-Length -5", post(b"Content-Length: -5\r\n", b"hello"), [400], CLOSED),
    Row.of("Content-Length with a space inside", post(b"Content-Length: 1 0\r\n"), [400], CLOSED),
    Row.of("Content-Length in hex", post(b"Content-Length: 0x5\r\n", b"hello"), [400], CLOSED),
    Row.of("Content-Length empty", post(b"Content-Length: \r\n"), [400], CLOSED),
    # Transfer-Encoding (RFC 9112 sections 6.1, 6.3, 7)
    Row.of("TE gzip, chunked", post(b"Transfer-Encoding: gzip, chunked\r\n", HELLO), [501], CLOSED),
    Row.of("TE chunked, gzip", post(b"Transfer-Encoding: chunked, gzip\r\n", HELLO), [400], CLOSED),
    Row.of("TE gzip", post(b"Transfer-Encoding: gzip\r\n", HELLO), [400], CLOSED),
    Row.of("TE chunked twice", post(CHUNKED + CHUNKED, HELLO), [400], CLOSED),
    Row.of(
        "HTTP/1.0 with TE",
        b"POST /echo HTTP/1.0\r\n" + HOST + CHUNKED + b"\r\n" + HELLO,
        [400],
        CLOSED,
    ),
    # chunks (RFC 9112 section 7.1)
    Row.of("a chunk size not in hex", post(CHUNKED, b"zz\r\nhello\r\n0\r\n\r\n"), [400], CLOSED),
    Row.of(
        "a chunk size of 17 hex digits",
        post(CHUNKED, b"0" * 16 + b"5\r\nhello\r\n0\r\n\r\n"),
        [400],
        CLOSED,
    ),
    Row.of(
        "a malformed chunk extension", post(CHUNKED, b"5;=x\r\nhello\r\n0\r\n\r\n"), [400], CLOSED
    ),
    Row.of(
        "a chunk-size line over 1 KiB",
        post(CHUNKED, b"5;a=" + b"b" * 1100 + b"\r\nhello\r\n"),
        [400],
        CLOSED,
    ),
    Row.of(
        "chunk data longer than its size", post(CHUNKED, b"3\r\nhello\r\n0\r\n\r\n"), [400], CLOSED
    ),
    Row.of("a malformed trailer", post(CHUNKED, b"0\r\nBad Trailer: 1\r\n\r\n"), [400], CLOSED),
    # Host (RFC 9112 section 3.2)
    Row.of("no Host", get(fields=b""), [400], CLOSED),
    Row.of("two Hosts", get(fields=HOST + HOST), [400], CLOSED),
    Row.of("a Host that is not an authority", get(fields=b"Host: a b\r\n"), [400], CLOSED),
    # field syntax (RFC 9112 section 5, RFC 9110 section 5.5)
    Row.of("a space before the colon", get(fields=HOST + b"X-A : 1\r\n"), [400], CLOSED),
    Row.of("a field line without a colon", get(fields=HOST + b"X-A 1\r\n"), [400], CLOSED),
    Row.of("NUL in a header value", get(fields=HOST + b"X-A: a\x00b\r\n"), [400], CLOSED),
    Row.of(
        "a control character in a header value",
        get(fields=HOST + b"X-A: a\x01b\r\n"),
        [400],
        CLOSED,
    ),
    Row.of(
        "obs-text in a header value is accepted",
        get(fields=HOST + b"X-A: caf\xc3\xa9\r\n"),
        [200],
        OPEN,
    ),
    # request line (RFC 9112 section 3)
    Row.of("a method that is not a token", b"G(T / HTTP/1.1\r\n" + HOST + b"\r\n", [400], CLOSED),
    Row.of("absolute-form", get(b"http://probe/status/200"), [400], CLOSED),
    Row.of("asterisk-form", b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n", [400], CLOSED),
    Row.of(
        "two spaces in the request line", b"GET  / HTTP/1.1\r\n" + HOST + b"\r\n", [400], CLOSED
    ),
    Row.of("HTTP/2.0", get(version=b"2.0"), [505], CLOSED),
    Row.of("not HTTP at all", b"NOT HTTP AT ALL\r\n\r\n", [400], CLOSED),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_the_server_answers_each_request_as_rfc_9112_says(server: Server, row: Row) -> None:
    assert exchange(server, row) == (row.statuses, row.closed)


def test_an_error_answer_says_what_was_wrong_in_one_line_and_closes(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(post(b"Content-Length: 5\r\n" + CHUNKED, HELLO))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n") == [
        b"HTTP/1.1 400 Bad Request",
        b"content-type: text/plain; charset=utf-8",
        b"content-length: %d" % len(body),
        b"connection: close",
    ]
    assert body == b"both Content-Length and Transfer-Encoding: refused (RFC 9112 section 6.1)\n"


def test_a_chunked_body_arrives_whole_and_in_order(server: Server) -> None:
    body = b"".join(b"%x\r\n%s\r\n" % (n, bytes([65 + n]) * n) for n in range(1, 20))
    with server.connect() as sock:
        sock.sendall(post(CHUNKED, body + b"0\r\n\r\n") + get(b"/status/201"))
        answers = Answers(sock)
        answers.wait_for(2)
    assert answers.statuses == [200, 201]
    assert answers.bodies[0] == b"".join(bytes([65 + n]) * n for n in range(1, 20))
