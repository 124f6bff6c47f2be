"""The server side of one TLS session over memory BIOs, for :mod:`migslice.serving.protocol`.

OpenSSL sees nothing before the client's first record is whole (a client that trickles its
ClientHello costs the bytes it sent, not a TLS session with its buffers); after that, bytes go
in with :meth:`TlsSession.feed` and what OpenSSL wants sent comes out of :meth:`outgoing`.
The connection decides what a failure means (count, log, abort); this class only says it.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Iterator
from typing import Any

TLS_READ_BYTES = 64 * 1024
TLS_RECORD_HEADER_BYTES = 5
TLS_HANDSHAKE_RECORD = 22
TLS_MAX_RECORD_BYTES = 16384 + 2048
WRITE_CHUNK_BYTES = 256 * 1024


class Hello(enum.Enum):
    """How far the client's first record has arrived."""

    PARTIAL = "partial"
    WHOLE = "whole"
    NOT_TLS = "not-tls"


class TlsSession:
    def __init__(self) -> None:
        self._tls: ssl.SSLObject | None = None
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._hello = bytearray()
        self.answered = False
        """Our reply to the ClientHello is out (the handshake waits on the client now)."""
        self.peer_done = False
        """The client sent close_notify, or closed."""

    @property
    def started(self) -> bool:
        """OpenSSL has the session (the first record was whole)."""
        return self._tls is not None

    @property
    def hello_bytes(self) -> int:
        return len(self._hello)

    def take_hello(self, data: bytes) -> Hello:
        """Hold the bytes of the client's first record until it is whole."""
        self._hello += data
        if len(self._hello) < TLS_RECORD_HEADER_BYTES:
            return Hello.PARTIAL
        record_bytes = int.from_bytes(self._hello[3:5], "big")
        if self._hello[0] != TLS_HANDSHAKE_RECORD or record_bytes > TLS_MAX_RECORD_BYTES:
            return Hello.NOT_TLS
        if len(self._hello) < TLS_RECORD_HEADER_BYTES + record_bytes:
            return Hello.PARTIAL
        return Hello.WHOLE

    def start(self, context: ssl.SSLContext) -> None:
        """Begin the session with the whole first record held by :meth:`take_hello`."""
        self._tls = context.wrap_bio(self._in, self._out, server_side=True)
        self._in.write(bytes(self._hello))
        self._hello = bytearray()

    def feed(self, data: bytes) -> None:
        self._in.write(data)

    def handshake(self) -> bool:
        """True once the handshake is done, False while it waits for the client; raises
        ``ssl.SSLError``/``OSError`` when it failed."""
        assert self._tls is not None
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            self.answered = self.answered or bool(self._out.pending)
            return False
        return True

    def peer_names(self) -> tuple[str, ...]:
        """The names a verified client certificate carries (subject common name, then DNS
        subject alternative names); empty when the client presented none."""
        if self._tls is None:
            return ()
        certificate = self._tls.getpeercert()
        if not certificate:
            return ()
        names: list[str] = []
        subject: Any = certificate.get("subject", ())
        for rdn in subject:
            names += [str(value) for key, value in rdn if key == "commonName"]
        alternatives: Any = certificate.get("subjectAltName", ())
        names += [str(value) for kind, value in alternatives if kind == "DNS"]
        return tuple(str(name) for name in names)

    def decrypt(self) -> bytes:
        """Every plaintext byte that has arrived; raises ``ssl.SSLError`` on a broken record."""
        assert self._tls is not None
        chunks: list[bytes] = []
        while True:
            try:
                chunk = self._tls.read(TLS_READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_done = True
                break
            if not chunk:
                self.peer_done = True
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def encrypt(self, data: bytes) -> Iterator[bytes]:
        """``data`` as TLS records, a chunk at a time (so the transport's buffer bounds it)."""
        assert self._tls is not None
        view = memoryview(data)
        while view:
            written = self._tls.write(view[:WRITE_CHUNK_BYTES])
            view = view[written:]
            yield self.outgoing()

    def close_notify(self) -> None:
        """Queue our close_notify (the peer's is not awaited); harmless on a broken session."""
        if self._tls is None:
            return
        try:
            self._tls.unwrap()
        except (ssl.SSLError, OSError):
            pass

    def outgoing(self) -> bytes:
        """What OpenSSL has for the client now."""
        return self._out.read()
