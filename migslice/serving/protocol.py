"""One client connection on the worker's event loop: TLS, HTTP/1.1, deadlines, body limits.

TLS runs over memory BIOs (``ssl.SSLObject``), so a connection costs a few kilobytes until it
sends something, the handshake is a phase of our own with its own deadline, and every new
connection gets the serving certificate as it is on disk now. HTTP/1.1 is read by our strict
parser (``http1.py``): a request it will not read is answered 400, 414, 431, 501 or 505, and
the connection closes after the answer, nothing behind it answered. A request is read whole
under one deadline (headers and body together: trickling bytes does not extend it) and only
then handed to the app in the worker's thread pool, so no thread ever waits on a client. A
request to one of the site's inline paths with a body of at most :data:`INLINE_BODY_BYTES` is
answered by the event loop itself, without the two thread hops (for handlers that only
compute, briefly: the extender's verbs). A body over its path's limit is refused without being
read, whether it is announced by Content-Length or arrives chunked; the connection closes after
the answer.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from dataclasses import replace
from typing import TYPE_CHECKING, cast
from urllib.parse import unquote

from migslice.serving.connections import Phase
from migslice.serving.http1 import RequestHead, RequestParser, Signal
from migslice.serving.http1_syntax import CONTINUE, ParseError, error_response, response_head
from migslice.serving.tls_session import Hello, TlsSession
from migslice.serving.wsgi import (
    Endpoint,
    Incoming,
    Outgoing,
    call_app,
    environ_for,
    internal_error,
)

if TYPE_CHECKING:
    from migslice.serving.loop import Site

log = logging.getLogger(__name__)

TRICKLE_AFTER_S = 1.0
LINGER_S = 2.0
LINGER_BYTES = 64 * 1024 * 1024
TRICKLE_BYTES = 16 * 1024
WRITE_HIGH_WATER_BYTES = 256 * 1024
#: The largest body an inline path is answered inline for (a Pod and about 700 node names);
#: a larger one goes to the pool like any other request.
INLINE_BODY_BYTES = 64 * 1024
#: An answer whose body is at most this long goes out as one write (head, body and end joined).
ONE_WRITE_BYTES = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


class HttpConnection(asyncio.Protocol):
    """A connection's state machine; the :class:`Site` owns the table, the clock and the pool."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.phase = Phase.HANDSHAKE
        self.deadline = 0.0
        self.write_stalled_since: float | None = None
        self.transport: asyncio.Transport | None = None
        self._endpoint = Endpoint(site.scheme, ("", 0), ("", 0), site.multiprocess)
        self._tls = TlsSession()
        limits = site.limits
        self._http = RequestParser(
            max_head_bytes=limits.max_header_bytes,
            max_header_count=limits.max_header_count,
            max_request_line_bytes=limits.max_request_line_bytes,
        )
        self._answered = 0
        self._request: RequestHead | None = None
        self._keep_alive = True
        self._body: list[bytes] = []
        self._body_bytes = 0
        self._body_limit = 0
        self._inline = False
        self._too_large = False
        self._sent_continue = False
        self._holds_slot = False
        self._waits_for_slot = False
        self._app_runs = False
        self._peer_done = False
        self.handshake_queued = False
        self._lingered_bytes = 0
        self._began = 0.0  # when the handshake, or the request being read, began
        self._request_bytes = 0
        self._stalled = False

    @property
    def handshake_answered(self) -> bool:
        """Our reply to the ClientHello is out."""
        return self._tls.answered

    @property
    def answered(self) -> int:
        """Requests answered on this connection so far."""
        return self._answered

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)
        server = transport.get_extra_info("sockname") or ("", 0)
        peer = transport.get_extra_info("peername") or ("", 0)
        self._endpoint = Endpoint(
            self.site.scheme, (str(server[0]), int(server[1])), (str(peer[0]), int(peer[1])),
            self.site.multiprocess,
        )  # fmt: skip
        limits = self.site.limits
        now = self.site.now()
        self._began = now
        if self.site.tls is not None:
            self.phase, self.deadline = Phase.HANDSHAKE, now + limits.tls_handshake_timeout_s
        else:
            self.phase, self.deadline = Phase.WAITING, now + limits.keepalive_timeout_s
        if not self.site.admit(self):
            self.phase = Phase.CLOSED
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        if self.phase is Phase.CLOSED:
            return
        if self.phase is Phase.LINGERING:
            self._lingered_bytes += len(data)
            if self._lingered_bytes > LINGER_BYTES:
                self.close(notify=False)
            return
        if self.site.tls is None:
            if data:
                self._received(data)
            self._close_if_peer_done()
            return
        if not self._tls.started:
            if not self._first_record(data):
                if self.phase is Phase.HANDSHAKE:
                    self._stall_if_trickling(self._tls.hello_bytes)
                return
        else:
            self._tls.feed(data)
        if self.phase is Phase.HANDSHAKE:
            if not self.handshake_queued:  # the Site runs handshakes a few at a time
                self.handshake_queued = True
                self.site.queue_handshake(self)
            return
        self._take_tls_data()

    def continue_handshake(self) -> None:
        """Advance the TLS handshake with what has arrived (called by the Site's queue)."""
        self.handshake_queued = False
        if self.phase is Phase.HANDSHAKE and self._handshake():
            self._take_tls_data()  # a TLS 1.3 client sends its request right behind Finished

    def _take_tls_data(self) -> None:
        plain = self._decrypt()
        if plain is None:
            return
        if plain:
            self._received(plain)
        self._close_if_peer_done()

    def _close_if_peer_done(self) -> None:
        if self._peer_done and self.phase in (Phase.WAITING, Phase.READING, Phase.HANDSHAKE):
            self.close()

    def eof_received(self) -> bool:
        if self.phase is Phase.LINGERING:
            self.close(notify=False)
            return False
        self._peer_done = True
        # A client may half-close after its request: keep the socket to send the answer.
        return self.phase is Phase.BUSY

    def connection_lost(self, exc: Exception | None) -> None:
        self._leave()

    def pause_writing(self) -> None:
        self.write_stalled_since = self.site.now()

    def resume_writing(self) -> None:
        self.write_stalled_since = None

    # -- closing ----------------------------------------------------------------------------

    def close(self, notify: bool = True) -> None:
        """Close after what is already written, with a TLS close_notify first unless the
        client stalled (``notify=False``: it gets no more of our CPU)."""
        if self.phase is Phase.CLOSED or self.transport is None:
            return
        handshaken = self.phase is not Phase.HANDSHAKE
        self._leave()
        if handshaken and notify:
            self._tls.close_notify()
            self._flush()
        self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self._leave()
            self.transport.abort()

    def _leave(self) -> None:
        """Out of the table; the large-request slot goes on unless the app still holds the body."""
        self.phase = Phase.CLOSED
        self._body = []
        if self._waits_for_slot:
            self._waits_for_slot = False
            self.site.large_slot.withdraw(self)
        if self._holds_slot and not self._app_runs:
            self._holds_slot = False
            self.site.large_slot.release(self)
        self.site.forget(self)

    def slot_granted(self) -> None:
        """The worker's large-request slot is ours: read on."""
        self._holds_slot, self._waits_for_slot = True, False
        if self.phase is Phase.READING and self.transport is not None:
            self.transport.resume_reading()
            self._advance()

    # -- TLS ------------------------------------------------------------------------------

    def _first_record(self, data: bytes) -> bool:
        """Start TLS once the client's first record is whole (see :class:`TlsSession`)."""
        hello = self._tls.take_hello(data)
        if hello is Hello.NOT_TLS:
            log.debug("not a TLS ClientHello from peer=%s; closing", self._endpoint.peer[0])
            self.site.count("tls_failed")
            self.abort()
            return False
        if hello is Hello.PARTIAL:
            return False
        assert self.site.tls is not None
        try:
            context = self.site.tls.get()
        except (ValueError, OSError, ssl.SSLError) as error:
            log.error("no serving certificate for a new connection (%s); closing it", error)
            self.abort()
            return False
        self._tls.start(context)
        return True

    def _handshake(self) -> bool:
        try:
            done = self._tls.handshake()
        except (ssl.SSLError, OSError) as error:
            log.debug("TLS handshake failed peer=%s: %s", self._endpoint.peer[0], error)
            self._flush()
            self.site.count("tls_failed")
            self.abort()
            return False
        self._flush()
        if not done:
            return False
        names = self._tls.peer_names()
        if names:
            self._endpoint = replace(self._endpoint, client_names=names)
        self.phase, self.deadline = (
            Phase.WAITING,
            self.site.now() + self.site.limits.keepalive_timeout_s,
        )
        self.site.table.wait(self)
        return True

    def _decrypt(self) -> bytes | None:
        try:
            plain = self._tls.decrypt()
        except ssl.SSLError as error:
            log.debug("TLS error peer=%s: %s", self._endpoint.peer[0], error)
            self._flush()
            self.abort()
            return None
        self._peer_done = self._peer_done or self._tls.peer_done
        self._flush()
        return plain

    def _flush(self) -> None:
        pending = self._tls.outgoing()
        if pending and self.transport is not None and not self.transport.is_closing():
            self.transport.write(pending)

    def _write(self, data: bytes | None) -> None:
        assert self.transport is not None
        if not data:
            return
        if not self._tls.started:
            self.transport.write(data)
            return
        for records in self._tls.encrypt(data):
            if records and not self.transport.is_closing():
                self.transport.write(records)

    # -- HTTP -----------------------------------------------------------------------------

    def _received(self, data: bytes) -> None:
        if self.phase is Phase.WAITING:  # a request begins: its whole-request deadline starts
            self.phase = Phase.READING
            self._began, self._request_bytes = self.site.now(), 0
            self.deadline = self._began + self.site.limits.request_timeout_s
        self._request_bytes += len(data)
        self._http.feed(data)
        if self.phase is Phase.READING and not self._waits_for_slot:
            self._advance()
        if self.phase is Phase.READING:
            self._stall_if_trickling(self._request_bytes)

    def _stall_if_trickling(self, received_bytes: int) -> None:
        """Stop reading a client that trickles: still short of a whole request (or ClientHello)
        a second after it began, with fewer than 16 KiB sent. An honest client sends in
        milliseconds; this one would only cost a wake-up of the loop per byte until its
        deadline closes it, and closing it sooner only makes it reconnect (a handshake) sooner."""
        if (
            not self._stalled
            and received_bytes < TRICKLE_BYTES
            and self.site.now() - self._began > TRICKLE_AFTER_S
            and self.transport is not None
        ):
            self._stalled = True
            self.site.count("trickling")
            self.transport.pause_reading()

    def _advance(self) -> None:
        http = self._http
        while self.phase is Phase.READING and not self._waits_for_slot:
            try:
                event = http.next_event()
            except ParseError as error:
                self._refuse_malformed(error)
                return
            if isinstance(event, bytes):
                self._take(event)
            elif event is Signal.NEED_DATA:
                if http.waits_for_continue and not self._sent_continue:
                    self._sent_continue = True
                    self._write(CONTINUE)
                return
            elif event is Signal.END_OF_MESSAGE:
                self._dispatch()
            elif isinstance(event, RequestHead):
                self._begin(event)
            else:  # PAUSED: the next request waits for this one's answer
                return

    def _begin(self, request: RequestHead) -> None:
        self._request = request
        path = unquote(request.target.partition(b"?")[0].decode("latin-1"))
        self._body_limit = self.site.limits.body_limit(path)
        self._inline = path in self.site.inline_paths
        declared = request.content_length  # None: chunked
        if declared is not None and declared > self._body_limit:
            self._refuse_body(declared)
        elif declared is not None and declared > self.site.limits.large_body_bytes:
            self._claim_slot()

    def _take(self, data: bytes) -> None:
        self._body_bytes += len(data)
        if self._body_bytes > self._body_limit:
            self._refuse_body(self._body_bytes)
            return
        self._body.append(data)
        if self._body_bytes > self.site.limits.large_body_bytes and not self._holds_slot:
            self._claim_slot()

    def _claim_slot(self) -> None:
        if self.site.large_slot.claim(self):
            self._holds_slot = True
            return
        self._waits_for_slot = True
        assert self.transport is not None
        self.transport.pause_reading()

    def _refuse_body(self, known_bytes: int) -> None:
        """Answer without reading the rest of the body: the app refuses, then we close."""
        self.site.count("body_refused")
        self._too_large = True
        self._body, self._body_bytes = [], known_bytes
        self._dispatch()

    def _refuse_malformed(self, error: ParseError) -> None:
        """Answer what was wrong and close: nothing behind it on this connection is read.
        The close lingers like a refused body's, so that bytes the client is still sending
        (the rest of the request, a pipelined one) cannot reset the connection under our
        answer."""
        self.site.count("malformed")
        log.debug(
            "malformed request from peer=%s: %s; answering %d and closing",
            self._endpoint.peer[0], error.message, error.status,
        )  # fmt: skip
        if self._holds_slot:
            self._holds_slot = False
            self.site.large_slot.release(self)
        self._body, self._request = [], None
        self._write(error_response(error))
        if self._peer_done:
            self.close()
        else:
            self._linger()

    def _dispatch(self) -> None:
        assert self._request is not None and self.transport is not None
        self.phase = Phase.BUSY
        self.site.table.hold(self)
        request = self._request
        body = b"".join(self._body)
        self._body = []
        incoming = Incoming(
            method=request.method,
            target=request.target,
            http_version=request.http_version,
            headers=request.headers,
            body=body,
            content_length=self._body_bytes if self._too_large else len(body),
            body_limit=self._body_limit,
            body_too_large=self._too_large,
        )
        environ = environ_for(incoming, self._endpoint)
        self._app_runs = True
        if self._inline and not self._too_large and len(body) <= INLINE_BODY_BYTES:
            try:
                outgoing = call_app(self.site.app, environ)
            except Exception:
                outgoing = self._failed()
            self._answer(outgoing)  # nothing was read meanwhile: the loop was here
            return
        self.transport.pause_reading()
        future = self.site.loop.run_in_executor(
            self.site.executor, call_app, self.site.app, environ
        )
        future.add_done_callback(self._answer_from)

    def _answer_from(self, future: asyncio.Future[Outgoing]) -> None:
        try:
            outgoing = future.result()
        except Exception:
            outgoing = self._failed()
        self._answer(outgoing)

    def _failed(self) -> Outgoing:
        log.exception("the app failed answering path=%s; answering 500", self._path())
        return internal_error()

    def _answer(self, outgoing: Outgoing) -> None:
        self._app_runs = False
        if self._holds_slot:
            self._holds_slot = False
            self.site.large_slot.release(self)
        if self.phase is not Phase.BUSY:
            return  # shed or lost while the app ran
        self._answered += 1
        keep_alive = (
            self._request is not None
            and self._request.keep_alive
            and not self._too_large
            and not self._peer_done
            and self.site.accepting
            and self._answered < self.site.limits.max_requests_per_connection
        )
        self._keep_alive = keep_alive
        try:
            self._send(outgoing, keep_alive)
        except ValueError as error:
            log.error(
                "answer to path=%s not sent (%s); closing the connection", self._path(), error
            )
            self.abort()
            return
        self._next_cycle()

    def _send(self, outgoing: Outgoing, keep_alive: bool) -> None:
        assert self._request is not None
        headers = [(n, v) for n, v in outgoing.headers if n != b"content-length"]
        has_body = outgoing.status not in _NO_BODY_STATUS and outgoing.status >= 200
        if has_body:
            headers.append((b"content-length", str(len(outgoing.body)).encode()))
        if not keep_alive:
            headers.append((b"connection", b"close"))
        if outgoing.status < 200:
            raise ValueError(f"status {outgoing.status} is not a final answer")
        head = response_head(outgoing.status, outgoing.reason, headers)
        body = outgoing.body if has_body and self._request.method != b"HEAD" else b""
        if len(body) <= ONE_WRITE_BYTES:
            # One write: the client reads the answer in one TLS record and one segment, not the
            # head, then (after waking again) the body.
            self._write(head + body)
            return
        self._write(head)
        self._write(body)  # a large body itself, not a copy of it

    def _next_cycle(self) -> None:
        assert self.transport is not None
        self._request, self._body_bytes, self._too_large, self._sent_continue = (
            None,
            0,
            False,
            False,
        )
        if self._http.in_body and not self._peer_done:
            self._linger()
            return
        if not self._keep_alive or self._http.in_body:
            self.close()
            return
        self._http.start_next_cycle()
        limits = self.site.limits
        self.phase, self.deadline = Phase.WAITING, self.site.now() + limits.keepalive_timeout_s
        self.site.table.wait(self)
        self.transport.resume_reading()
        if self._http.has_buffered:  # a pipelined request is already here
            self.phase, self.deadline = Phase.READING, self.site.now() + limits.request_timeout_s
            self._advance()

    def _linger(self) -> None:
        """We answered before reading the whole body (it was over its limit). Closing now
        would reset the connection while the client is still sending, and the reset can
        destroy our answer before the client reads it; so, like Apache and nginx, we say we are
        done (close_notify, FIN), then read and drop what still arrives, for a short while."""
        assert self.transport is not None
        self.phase, self.deadline = Phase.LINGERING, self.site.now() + LINGER_S
        self._lingered_bytes = 0
        self.site.table.wait(self)
        self._tls.close_notify()
        self._flush()
        try:
            if self.transport.can_write_eof():
                self.transport.write_eof()
        except OSError:  # the client is gone already
            self.close(notify=False)
            return
        self.transport.resume_reading()

    def _path(self) -> str:
        return self._request.target.decode("latin-1") if self._request is not None else "?"
