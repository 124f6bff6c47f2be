"""HTTP/1.1 requests parsed strictly from the bytes of one connection (RFC 9112).

A :class:`RequestParser` is fed bytes as they arrive and hands out events: a
:class:`RequestHead`, body bytes (de-chunked), :attr:`Signal.END_OF_MESSAGE`, or
:attr:`Signal.NEED_DATA`; after a whole request it answers :attr:`Signal.PAUSED` until the
connection calls :meth:`RequestParser.start_next_cycle` (a pipelined request stays buffered).
Anything it will not read raises :class:`ParseError` with the status to answer and a one-line
reason; the connection then answers it and closes. Pure: no I/O, no clock.

The rules, with the sections of RFC 9112 (HTTP/1.1) and RFC 9110 (semantics) they apply:

* Lines end in CRLF everywhere: request line, field lines, chunk-size lines, after chunk data,
  trailers. A bare LF or a bare CR is a 400 as soon as it arrives (9112 section 2.2 allows
  either accepting or refusing a bare LF; we refuse, one way everywhere). Empty lines (CRLF)
  before a request line are skipped (section 2.2) and count toward the head's size.
* The request line is ``token SP origin-form SP HTTP/1.x`` (sections 3, 3.2.1); HTTP/1.1 and
  HTTP/1.0 are served, a higher 1.x is read as 1.1 (section 2.3), any other major is a 505.
* A field line is ``token ":" OWS value OWS`` (section 5): whitespace before the colon is a
  400 (section 5.1), a line beginning with SP or HTAB (obs-fold) is a 400 (section 5.2), a
  control character other than HTAB in a value (NUL included) is a 400 (9110 section 5.5).
* Size: the head (empty lines before it, request line, fields) at most ``max_head_bytes``, at
  most ``max_header_count`` fields (431 either way); the request line at most
  ``max_request_line_bytes`` (414). Trailers are read with the same rules and limits.
* Host: exactly one in HTTP/1.1, at most one in HTTP/1.0, a valid authority (9112 section 3.2).
* Framing (section 6): Content-Length and Transfer-Encoding together are a 400 (section 6.1: a
  request smuggling shape); Transfer-Encoding in HTTP/1.0 is a 400 (section 6.1); the only
  transfer coding is ``chunked``, once and last: chunked not last (or absent) is a 400
  (section 6.3), another coding before it a 501 (section 6.1). Content-Length is digits
  only (9110 section 8.6): a sign, a space inside, hex, or differing values are a 400; equal
  repeated values are one.
* Chunked (section 7.1): a chunk size is 1 to 16 hex digits; extensions must be well formed
  (section 7.1.1) and are capped (:data:`MAX_CHUNK_LINE_BYTES` a line,
  :data:`MAX_CHUNK_EXTENSION_BYTES` a message); chunk data is followed by CRLF.

The rules themselves, and the bytes of our answers, are in :mod:`migslice.serving.http1_syntax`;
this module finds the lines and blocks they apply to in the bytes as they arrive, and refuses
a bare CR or LF, or a head past its limits, as soon as it is there (never waiting on it).

Costs: the end of a head is found with ``bytes.find``; the whole head is checked with byte
counts and a translation, split with one ``findall``; body bytes are handed out as received
(no copy when a read holds only body). No per-byte Python loop anywhere: a head of a
kube-scheduler call parses in about 12 us (h11: about 40).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from migslice.serving.http1_syntax import (
    BAD_BYTE,
    KIB,
    MAX_CHUNK_EXTENSION_BYTES,
    MAX_CHUNK_LINE_BYTES,
    ParseError,
    bad_byte,
    bare_cr,
    bare_lf,
    check_bytes,
    chunk_size,
    field_lines,
    framing,
    head_too_large,
    line_too_long,
    request_line,
    too_many_fields,
)

_CRLFS = re.compile(rb"(?:\r\n)+")


class Signal(enum.Enum):
    NEED_DATA = "need-data"
    END_OF_MESSAGE = "end-of-message"
    PAUSED = "paused"  # a request is whole: nothing more until start_next_cycle()


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request line and its fields. ``headers``: (lower-case name, value without OWS), in
    order; ``content_length`` is None for a chunked body (0 when there is no body)."""

    method: bytes
    target: bytes
    http_version: bytes  # b"1.1" or b"1.0"
    headers: tuple[tuple[bytes, bytes], ...]
    content_length: int | None
    keep_alive: bool
    expects_continue: bool


Event = RequestHead | bytes | Signal


class _State(enum.Enum):
    HEAD = "head"
    BODY = "body"  # Content-Length bytes remain
    CHUNK_SIZE = "chunk-size"
    CHUNK_DATA = "chunk-data"
    CHUNK_END = "chunk-end"  # the CRLF after chunk data
    TRAILERS = "trailers"
    DONE = "done"
    ERROR = "error"


_IN_BODY = frozenset(
    {_State.BODY, _State.CHUNK_SIZE, _State.CHUNK_DATA, _State.CHUNK_END, _State.TRAILERS}
)


class RequestParser:
    """The requests of one connection, in order; see the module's docstring for the rules."""

    def __init__(
        self,
        *,
        max_head_bytes: int = 32 * KIB,
        max_header_count: int = 100,
        max_request_line_bytes: int = 8 * KIB,
    ) -> None:
        self.max_head_bytes = max_head_bytes
        self.max_header_count = max_header_count
        self.max_request_line_bytes = max_request_line_bytes
        self._buf: bytes | bytearray = b""
        self._pos = 0
        self._state = _State.HEAD
        self._error: ParseError | None = None
        self._remaining = 0  # of the Content-Length body, or of the current chunk
        self._extension_bytes = 0
        self._skipped = 0  # empty lines before the request line
        self._scanned = 0  # of a block still incomplete: how far it has been checked
        self._lines = 0  # CRLFs seen in that block so far
        self._line_seen = False  # its first line is whole
        self._expects_continue = False

    # -- the connection's side ---------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Bytes as received (kept by reference until handed out)."""
        if not data or self._state is _State.ERROR:
            return
        buf, pos = self._buf, self._pos
        if pos == len(buf):
            self._buf, self._pos, self._scanned = data, 0, 0
            return
        if isinstance(buf, bytes):
            buf = bytearray(memoryview(buf)[pos:])
        elif pos:
            del buf[:pos]
        self._scanned = max(0, self._scanned - pos)
        buf += data
        self._buf, self._pos = buf, 0

    @property
    def in_body(self) -> bool:
        """A head was read and the end of its message was not (the client still sends it)."""
        return self._state in _IN_BODY

    @property
    def has_buffered(self) -> bool:
        """Bytes were received that no event has handed out yet (a pipelined request)."""
        return self._pos < len(self._buf)

    @property
    def waits_for_continue(self) -> bool:
        """The request expects 100-continue and has sent none of its body yet."""
        return self._expects_continue and self._state in _IN_BODY

    def start_next_cycle(self) -> None:
        """The answer to the request is out: read the next one."""
        if self._state is not _State.DONE:
            raise RuntimeError(f"start_next_cycle in state {self._state.value}")
        self._state = _State.HEAD
        self._skipped = self._scanned = self._lines = 0
        self._line_seen = False
        self._expects_continue = False
        self._extension_bytes = 0

    def next_event(self) -> Event:
        """The next event; raises :class:`ParseError` (again on every later call)."""
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ParseError as error:
            self._state, self._error = _State.ERROR, error
            self._buf, self._pos = b"", 0
            raise

    # -- states ------------------------------------------------------------------------

    def _next(self) -> Event:
        state = self._state
        if state is _State.BODY or state is _State.CHUNK_DATA:
            return self._body_bytes()
        if state is _State.HEAD:
            return self._head()
        if state is _State.CHUNK_SIZE:
            return self._chunk_size()
        if state is _State.CHUNK_END:
            return self._chunk_end()
        if state is _State.TRAILERS:
            return self._trailers()
        return Signal.PAUSED

    def _body_bytes(self) -> Event:
        if self._remaining == 0:  # a Content-Length body is whole
            self._state = _State.DONE
            return Signal.END_OF_MESSAGE
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available == 0:
            return Signal.NEED_DATA
        self._expects_continue = False
        count = min(available, self._remaining)
        end = pos + count
        if isinstance(buf, bytes):
            piece = buf if pos == 0 and end == len(buf) else buf[pos:end]
        else:
            with memoryview(buf) as view:
                piece = bytes(view[pos:end])
        self._remaining -= count
        if end == len(buf):
            self._buf, self._pos = b"", 0
        else:
            self._pos = end
        if self._remaining == 0 and self._state is _State.CHUNK_DATA:
            self._state = _State.CHUNK_END
        return piece

    def _head(self) -> Event:
        buf, pos = self._buf, self._pos
        if buf.startswith(b"\r\n", pos):  # empty lines before a request line (section 2.2)
            match = _CRLFS.match(buf, pos)
            assert match is not None
            self._skipped += match.end() - pos
            self._pos = pos = match.end()
            self._scanned = max(self._scanned, pos)
            if self._skipped > self.max_head_bytes:
                raise head_too_large(self.max_head_bytes)
        if pos == len(buf):
            self._buf, self._pos, self._scanned = b"", 0, 0
            return Signal.NEED_DATA
        end = self._block_end(pos, "in the request head")
        if end is None:
            return Signal.NEED_DATA
        if end + 4 - pos + self._skipped > self.max_head_bytes:
            raise head_too_large(self.max_head_bytes)
        head = bytes(buf[pos : end + 2])
        self._pos = end + 4
        self._scanned = self._lines = 0
        self._line_seen = False
        return self._begin(head)

    def _block_end(self, start: int, where: str) -> int | None:
        """Where the block of lines at ``start`` ends (the index of its final CRLFCRLF), or
        None while it is incomplete: then refuse what is already wrong with what has come."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n", max(start, self._scanned - 3))
        if end != -1:
            return end
        scan_from = max(start, self._scanned - 1)
        if scan_from == start and buf[start] == 0x0A:
            raise bare_lf(where)
        bad = BAD_BYTE.search(buf, max(scan_from, start + 1))
        if bad is not None and not (bad.group() == b"\r" and bad.start() == len(buf) - 1):
            raise bad_byte(bad.group(), where)
        is_head = where == "in the request head"
        if is_head and not self._line_seen:
            line_end = buf.find(b"\r\n", scan_from)
            if line_end != -1:
                self._line_seen = True
                if line_end - start > self.max_request_line_bytes:
                    raise line_too_long(self.max_request_line_bytes)
            elif len(buf) - start > self.max_request_line_bytes + 1:
                raise line_too_long(self.max_request_line_bytes)
        self._lines += buf.count(b"\r\n", scan_from)
        if self._lines > self.max_header_count + (1 if is_head else 0):
            raise too_many_fields(self.max_header_count)
        if len(buf) - start + (self._skipped if is_head else 0) > self.max_head_bytes:
            raise head_too_large(self.max_head_bytes)
        self._scanned = len(buf)
        return None

    def _begin(self, head: bytes) -> Event:
        """The head is whole: check it and choose how the body is read."""
        check_bytes(head, "in the request head")
        line_end = head.find(b"\r\n")
        if line_end > self.max_request_line_bytes:
            raise line_too_long(self.max_request_line_bytes)
        method, target, version = request_line(head[:line_end])
        headers = field_lines(head[line_end + 2 :], self.max_header_count, "header")
        body = framing(version, headers)
        if body.content_length is None:
            self._state = _State.CHUNK_SIZE
        else:  # a Content-Length body, or none: END_OF_MESSAGE once its bytes are out
            self._remaining = body.content_length
            self._state = _State.BODY
        self._expects_continue = body.expects_continue and body.content_length != 0
        return RequestHead(
            method,
            target,
            version,
            headers,
            body.content_length,
            body.keep_alive,
            body.expects_continue,
        )

    def _chunk_size(self) -> Event:
        buf, pos = self._buf, self._pos
        window = pos + MAX_CHUNK_LINE_BYTES + 2  # the longest line and its CRLF
        end = buf.find(b"\r\n", pos, window)
        if end == -1:  # a bare LF or CR inside the window, else too long or not all here
            available = len(buf) - pos
            if buf.find(b"\n", pos, window) != -1:
                raise bare_lf("in a chunk-size line")
            cr = buf.find(b"\r", pos, window)
            if cr != -1 and cr != len(buf) - 1 and buf[cr + 1] != 0x0A:
                raise bare_cr("in a chunk-size line")
            if available > MAX_CHUNK_LINE_BYTES + 1:
                raise ParseError(
                    400,
                    f"chunk-size line longer than {MAX_CHUNK_LINE_BYTES} "
                    "bytes (RFC 9112 section 7.1.1)",
                )
            return Signal.NEED_DATA
        line = bytes(buf[pos:end])
        self._pos = end + 2
        size, extension_bytes = chunk_size(line)
        self._extension_bytes += extension_bytes
        if self._extension_bytes > MAX_CHUNK_EXTENSION_BYTES:
            raise ParseError(
                400,
                f"more than {MAX_CHUNK_EXTENSION_BYTES} bytes of chunk "
                "extensions in one request (RFC 9112 section 7.1.1)",
            )
        if size == 0:
            self._state = _State.TRAILERS
            return self._trailers()
        self._remaining = size
        self._state = _State.CHUNK_DATA
        return self._body_bytes()

    def _chunk_end(self) -> Event:
        buf, pos = self._buf, self._pos
        available = len(buf) - pos
        if available == 0:
            return Signal.NEED_DATA
        if buf[pos] != 0x0D:
            if buf[pos] == 0x0A:
                raise bare_lf("after chunk data")
            raise ParseError(
                400,
                "chunk data longer than its chunk size, or not followed by "
                "CRLF (RFC 9112 section 7.1)",
            )
        if available == 1:
            return Signal.NEED_DATA
        if buf[pos + 1] != 0x0A:
            raise bare_cr("after chunk data")
        self._pos = pos + 2
        self._state = _State.CHUNK_SIZE
        return self._chunk_size()

    def _trailers(self) -> Event:
        buf, pos = self._buf, self._pos
        if buf.startswith(b"\r\n", pos):
            self._pos = pos + 2
            self._state = _State.DONE
            return Signal.END_OF_MESSAGE
        if pos == len(buf) or (pos == len(buf) - 1 and buf[pos] == 0x0D):
            return Signal.NEED_DATA
        end = self._block_end(pos, "in the trailer section")
        if end is None:
            return Signal.NEED_DATA
        if end + 4 - pos > self.max_head_bytes:
            raise head_too_large(self.max_head_bytes)
        block = bytes(buf[pos : end + 2])
        self._pos = end + 4
        self._scanned = self._lines = 0
        check_bytes(block, "in the trailer section")
        field_lines(
            block, self.max_header_count, "trailer"
        )  # checked, then dropped: the app never sees trailers
        self._state = _State.DONE
        return Signal.END_OF_MESSAGE
