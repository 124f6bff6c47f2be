"""The TLS session of a serving connection, over memory BIOs against a real client session:
the first record held until whole, a handshake both ways, records in and out, close_notify."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from migslice.serving.certs import write_tls_bundle
from migslice.serving.tls_session import WRITE_CHUNK_BYTES, Hello, TlsSession

SERVICE, NAMESPACE = "migslice-webhook", "migslice-system"


@pytest.fixture
def contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    bundle = write_tls_bundle(tmp_path, SERVICE, NAMESPACE)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(bundle.cert, bundle.key)
    client = ssl.create_default_context(cafile=str(bundle.ca_cert))
    return server, client


class Client:
    def __init__(self, context: ssl.SSLContext) -> None:
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = context.wrap_bio(
            self.incoming, self.outgoing, server_hostname=f"{SERVICE}.{NAMESPACE}.svc"
        )

    def step(self) -> bool:
        try:
            self.tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        return True


def handshake(session: TlsSession, server: ssl.SSLContext, client: Client) -> None:
    client.step()
    hello = client.outgoing.read()
    for byte in hello[:-1]:  # trickled: held, OpenSSL sees nothing yet
        assert session.take_hello(bytes([byte])) is Hello.PARTIAL
        assert not session.started
    assert session.take_hello(hello[-1:]) is Hello.WHOLE
    session.start(server)
    for _ in range(10):
        server_done = session.handshake()
        client.incoming.write(session.outgoing())
        client_done = client.step()
        session.feed(client.outgoing.read())
        if server_done and client_done:
            break
    assert session.handshake()
    assert session.answered


def test_a_trickled_hello_is_held_then_the_session_carries_data_both_ways(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, client_context = contexts
    session, client = TlsSession(), Client(client_context)
    handshake(session, server, client)
    client.tls.write(b"GET /healthz HTTP/1.1\r\n\r\n")
    session.feed(client.outgoing.read())
    assert session.decrypt() == b"GET /healthz HTTP/1.1\r\n\r\n"
    answer = b"x" * (WRITE_CHUNK_BYTES * 2 + 10)
    records = list(session.encrypt(answer))
    assert len(records) == 3  # one flush per chunk, so the transport's buffer bounds memory
    client.incoming.write(b"".join(records))
    received = b""
    while len(received) < len(answer):
        received += client.tls.read(len(answer))
    assert received == answer
    session.close_notify()
    notify = session.outgoing()
    assert notify  # a close_notify alert record
    client.incoming.write(notify)
    try:
        tail = client.tls.read(1)
    except ssl.SSLZeroReturnError:
        tail = b""
    assert tail == b""  # the client read our close_notify


def test_a_client_close_notify_marks_the_peer_done(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, client_context = contexts
    session, client = TlsSession(), Client(client_context)
    handshake(session, server, client)
    with pytest.raises(ssl.SSLWantReadError):
        client.tls.unwrap()
    session.feed(client.outgoing.read())
    assert session.decrypt() == b""
    assert session.peer_done


@pytest.mark.parametrize(
    "first",
    [b"GET / HTTP/1.1\r\n", bytes([22, 3, 1, 0xFF, 0xFF])],
    ids=["plain-http", "record-over-the-limit"],
)
def test_a_first_record_that_is_no_client_hello_is_said_at_once(first: bytes) -> None:
    assert TlsSession().take_hello(first) is Hello.NOT_TLS


def test_garbage_after_the_hello_fails_the_handshake(
    contexts: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    server, client_context = contexts
    session, client = TlsSession(), Client(client_context)
    client.step()
    assert session.take_hello(client.outgoing.read()) is Hello.WHOLE
    session.start(server)
    assert not session.handshake()
    session.feed(b"\x16\x03\x03\x00\x05hello")
    with pytest.raises(ssl.SSLError):
        session.handshake()
