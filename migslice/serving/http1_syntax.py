"""The syntax of HTTP/1.1 messages (RFC 9112, RFC 9110), both ways: what a request's lines and
fields must be, what they say about its body, and the bytes of our answers.

Pure functions over whole lines and blocks; :mod:`migslice.serving.http1` finds them in the
bytes as they arrive. A request that breaks a rule is a :class:`ParseError`: the status to
answer and a one-line message naming the rule and its section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus

KIB = 1 << 10
#: The longest chunk-size line (size and extensions) we read.
MAX_CHUNK_LINE_BYTES = 1 * KIB
#: The most bytes of chunk extensions in one message (we ignore them: they are never needed).
MAX_CHUNK_EXTENSION_BYTES = 16 * KIB
#: Content-Length of more digits than this is refused (10**18 bytes is far past any limit).
MAX_CONTENT_LENGTH_DIGITS = 18
MAX_CHUNK_SIZE_DIGITS = 16

_TCHAR = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_TOKEN = re.compile(_TCHAR + rb"+")
_REQUEST_LINE = re.compile(rb"(" + _TCHAR + rb"+) (/[\x21-\x7e]*) HTTP/([0-9])\.([0-9])")
_VERSION = re.compile(rb"HTTP/([0-9])\.([0-9])")
#: Bytes never allowed in a head or trailer block: CTLs but HTAB (and CR, LF inside CRLF), DEL,
#: a CR not followed by LF, an LF not preceded by CR.
BAD_BYTE = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")
_CTLS = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
#: One field line at a line's start: name, and the raw value (OWS stripped afterwards).
_FIELD_LINE = re.compile(rb"^(" + _TCHAR + rb"+):([^\r\n]*)\r\n", re.MULTILINE)
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]+)((?:[ \t]*;[ \t]*"
    + _TCHAR
    + rb"+(?:[ \t]*=[ \t]*(?:"
    + _TCHAR
    + rb"+|"
    + _QUOTED
    + rb"))?)*)"
)
_DECIMAL = re.compile(rb"[0-9]+")
_HEX_DIGITS = re.compile(rb"[0-9A-Fa-f]*")
#: uri-host [ ":" port ] (RFC 3986 section 3.2.2): an IP literal or a reg-name / IPv4 address.
_HOST = re.compile(
    rb"(?:\[[0-9A-Za-z:.\-_~!$&'()*+,;=%]+\]|[0-9A-Za-z.\-_~!$&'()*+,;=%]*)(?::[0-9]*)?"
)
_FRAMING_FIELDS = frozenset(
    {b"host", b"content-length", b"transfer-encoding", b"connection", b"expect"}
)


class ParseError(Exception):
    """A request we will not read: answer ``status`` with ``message``, then close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Framing:
    """What a request's fields say about its message: ``content_length`` None for chunked."""

    content_length: int | None
    keep_alive: bool
    expects_continue: bool


def framing(version: bytes, headers: tuple[tuple[bytes, bytes], ...]) -> Framing:
    """How the body is framed, whether the connection stays open, whether 100-continue is
    expected; refuses Host, Content-Length and Transfer-Encoding by the rules that
    :mod:`migslice.serving.http1` lists."""
    hosts = 0
    lengths: list[bytes] = []
    codings: list[bytes] = []
    keep_alive = version == b"1.1"
    expects_continue = False
    for name, value in headers:
        if name not in _FRAMING_FIELDS:
            continue
        if name == b"host":
            hosts += 1
            if _HOST.fullmatch(value) is None:
                raise ParseError(
                    400, f"Host {_shown(value)} is not a valid authority (RFC 9112 section 3.2)"
                )
        elif name == b"content-length":
            lengths.extend(value.split(b","))
        elif name == b"transfer-encoding":
            codings.extend(value.split(b","))
        elif name == b"connection":
            if b"close" in _tokens(value):
                keep_alive = False
        elif version == b"1.1" and b"100-continue" in _tokens(value):  # expect
            expects_continue = True
    if hosts != 1 and (hosts or version == b"1.1"):
        raise ParseError(
            400,
            "no Host field in an HTTP/1.1 request (RFC 9112 section 3.2)"
            if hosts == 0
            else f"{hosts} Host fields: one is allowed (RFC 9112 section 3.2)",
        )
    if codings and version != b"1.1":
        raise ParseError(
            400, "Transfer-Encoding in an HTTP/1.0 request: refused (RFC 9112 section 6.1)"
        )
    if codings and lengths:
        raise ParseError(
            400, "both Content-Length and Transfer-Encoding: refused (RFC 9112 section 6.1)"
        )
    if codings:
        _check_chunked_last(codings)
        return Framing(None, keep_alive, expects_continue)
    length = _content_length(lengths) if lengths else 0
    return Framing(length, keep_alive, expects_continue)


def field_lines(block: bytes, max_count: int, kind: str) -> tuple[tuple[bytes, bytes], ...]:
    """The (lower-case name, value without OWS) of each line of ``block``, each line ending in
    CRLF (the block passed :func:`check_bytes`); ``kind``: "header" or "trailer"."""
    count = block.count(b"\r\n")
    if count > max_count:
        raise too_many_fields(max_count)
    pairs = _FIELD_LINE.findall(block)
    if len(pairs) != count:
        raise _bad_field_line(block, kind)
    return tuple([(name.lower(), value.strip(b" \t")) for name, value in pairs])


def chunk_size(line: bytes) -> tuple[int, int]:
    """The size a chunk-size line announces, and the bytes of its extensions."""
    match = _CHUNK_LINE.fullmatch(line)
    if match is None:
        raise _bad_chunk_line(line)
    digits = match.group(1)
    if len(digits) > MAX_CHUNK_SIZE_DIGITS:
        raise ParseError(
            400,
            f"chunk size of {len(digits)} hex digits: at most "
            f"{MAX_CHUNK_SIZE_DIGITS} are read (RFC 9112 section 7.1)",
        )
    return int(digits, 16), len(line) - len(digits)


# -- the pieces of a request --------------------------------------------------------------------


def request_line(line: bytes) -> tuple[bytes, bytes, bytes]:
    match = _REQUEST_LINE.fullmatch(line)
    if match is not None and match.group(3) == b"1":
        method, target, _, minor = match.groups()
        return method, target, b"1.0" if minor == b"0" else b"1.1"
    parts = line.split(b" ")
    if len(parts) != 3:
        raise ParseError(
            400,
            f"request line {_shown(line)} is not METHOD SP TARGET SP "
            "HTTP-version (RFC 9112 section 3)",
        )
    method, target, version = parts
    if _TOKEN.fullmatch(method) is None:
        raise ParseError(400, f"method {_shown(method)} is not a token (RFC 9112 section 3.1)")
    version_match = _VERSION.fullmatch(version)
    if version_match is None:
        raise ParseError(
            400, f"HTTP version {_shown(version)} is not HTTP/DIGIT.DIGIT (RFC 9112 section 2.3)"
        )
    if version_match.group(1) != b"1":
        raise ParseError(
            505,
            f"{version.decode('ascii')} is not served: HTTP/1.1 and "
            "HTTP/1.0 only (RFC 9112 section 2.3)",
        )
    raise ParseError(
        400,
        f"request target {_shown(target)} is not origin-form (/path?query; RFC 9112 section 3.2.1)",
    )


def _tokens(value: bytes) -> list[bytes]:
    return [item.strip(b" \t").lower() for item in value.split(b",")]


def _content_length(values: list[bytes]) -> int:
    lengths = set()
    for raw in values:
        value = raw.strip(b" \t")
        if _DECIMAL.fullmatch(value) is None:
            raise ParseError(
                400,
                f"Content-Length {_shown(raw.strip())} is not a decimal "
                "number of bytes (RFC 9110 section 8.6)",
            )
        if len(value) > MAX_CONTENT_LENGTH_DIGITS:
            raise ParseError(
                400,
                f"Content-Length of {len(value)} digits: at most "
                f"{MAX_CONTENT_LENGTH_DIGITS} are read (RFC 9110 section 8.6)",
            )
        lengths.add(int(value))
    if len(lengths) != 1:
        shown = ", ".join(str(length) for length in sorted(lengths))
        raise ParseError(
            400, f"differing Content-Length values ({shown}): refused (RFC 9112 section 6.3)"
        )
    return lengths.pop()


def _check_chunked_last(raw_codings: list[bytes]) -> None:
    codings = [item.strip(b" \t").lower() for item in raw_codings]
    codings = [coding for coding in codings if coding]
    shown = _shown(b", ".join(codings))
    if not codings or codings[-1] != b"chunked":
        raise ParseError(
            400,
            f"Transfer-Encoding {shown}: chunked is not the final coding (RFC 9112 section 6.3)",
        )
    if codings.count(b"chunked") > 1:
        raise ParseError(
            400, f"Transfer-Encoding {shown}: chunked more than once (RFC 9112 section 7)"
        )
    if len(codings) > 1:
        raise ParseError(
            501, f"Transfer-Encoding {shown}: only chunked is implemented (RFC 9112 section 6.1)"
        )


def _bad_field_line(block: bytes, kind: str) -> ParseError:
    """Why a field line of ``block`` is not ``token ":" value`` (the first that is not)."""
    for line in block.split(b"\r\n"):
        if _FIELD_LINE.fullmatch(line + b"\r\n") is not None:
            continue
        if line[:1] in (b" ", b"\t"):
            return ParseError(
                400,
                f"obs-fold (a {kind} line beginning with SP or HTAB): "
                "refused (RFC 9112 section 5.2)",
            )
        name, colon, _ = line.partition(b":")
        if not colon:
            return ParseError(400, f"{kind} line {_shown(line)} has no colon (RFC 9112 section 5)")
        if name.rstrip(b" \t") != name and _TOKEN.fullmatch(name.rstrip(b" \t")):
            return ParseError(
                400,
                f"whitespace between the {kind} name {_shown(name)} and "
                "its colon (RFC 9112 section 5.1)",
            )
        return ParseError(400, f"{kind} name {_shown(name)} is not a token (RFC 9110 section 5.1)")
    return ParseError(400, f"malformed {kind} section (RFC 9112 section 5)")


def _bad_chunk_line(line: bytes) -> ParseError:
    if b"\n" in line:
        return bare_lf("in a chunk-size line")
    if b"\r" in line:
        return bare_cr("in a chunk-size line")
    digits = _HEX_DIGITS.match(line)
    assert digits is not None
    if not digits.group():
        return ParseError(
            400, f"chunk size {_shown(line)} is not hexadecimal (RFC 9112 section 7.1)"
        )
    return ParseError(
        400, f"chunk extension {_shown(line[digits.end() :])} is malformed (RFC 9112 section 7.1.1)"
    )


def check_bytes(block: bytes, where: str) -> None:
    """Refuse a whole block with a bare CR or LF or a control character: counts and a
    translation in C (a regular expression that looks around every byte costs 20 times more)."""
    crlfs = block.count(b"\r\n")
    if (
        block.count(b"\r") != crlfs
        or block.count(b"\n") != crlfs
        or len(block.translate(None, _CTLS)) != len(block)
    ):
        bad = BAD_BYTE.search(block)
        assert bad is not None
        raise bad_byte(bad.group(), where)


def bad_byte(found: bytes, where: str) -> ParseError:
    if found == b"\n":
        return bare_lf(where)
    if found == b"\r":
        return bare_cr(where)
    return ParseError(
        400, f"control character 0x{found[0]:02x} {where}: refused (RFC 9110 section 5.5)"
    )


def bare_lf(where: str) -> ParseError:
    return ParseError(400, f"bare LF {where}: lines end in CRLF (RFC 9112 section 2.2)")


def bare_cr(where: str) -> ParseError:
    return ParseError(400, f"bare CR {where}: lines end in CRLF (RFC 9112 section 2.2)")


def line_too_long(limit: int) -> ParseError:
    return ParseError(414, f"request line longer than {limit} bytes (RFC 9112 section 3)")


def head_too_large(limit: int) -> ParseError:
    return ParseError(431, f"request head or trailers longer than {limit} bytes (max_header_bytes)")


def too_many_fields(limit: int) -> ParseError:
    return ParseError(431, f"more than {limit} header fields (max_header_count)")


def _shown(value: bytes, limit: int = 40) -> str:
    """A value in a message: quoted, escaped, cut short."""
    text = repr(value[:limit])[1:]
    return text[:-1] + "...'" if len(value) > limit else text


# -- answers ---------------------------------------------------------------------------------

_FIELD_VALUE_OUT = re.compile(rb"[^\x00-\x08\x0a-\x1f\x7f]*")


def response_head(status: int, reason: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """``HTTP/1.1 status reason``, the fields, the empty line. Raises ValueError for a field
    or reason that would break the framing (a CR, an LF, a name that is not a token)."""
    if not 100 <= status <= 999 or _FIELD_VALUE_OUT.fullmatch(reason) is None:
        raise ValueError(f"status {status} {reason!r} cannot be sent")
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
    for name, value in headers:
        if _TOKEN.fullmatch(name) is None or _FIELD_VALUE_OUT.fullmatch(value) is None:
            raise ValueError(f"header {name!r}: {value!r} cannot be sent")
        lines.append(b"%s: %s\r\n" % (name, value))
    lines.append(b"\r\n")
    return b"".join(lines)


CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def error_response(error: ParseError) -> bytes:
    """The whole answer to a request we refused to read; the connection closes after it."""
    body = f"{error.message}\n".encode("utf-8", "replace")
    head = response_head(
        error.status,
        HTTPStatus(error.status).phrase.encode("ascii"),
        [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"%d" % len(body)),
            (b"connection", b"close"),
        ],
    )
    return head + body
