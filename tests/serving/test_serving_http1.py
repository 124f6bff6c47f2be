"""The strict HTTP/1.1 request parser on its own: properties over any bytes and over the
requests our callers form, and the events a connection relies on."""

from __future__ import annotations

import http.client
import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.serving import ServingLimits
from migslice.serving.http1 import MAX_CHUNK_LINE_BYTES, RequestHead, RequestParser, Signal
from migslice.serving.http1_syntax import ParseError, error_response, response_head

STATUSES = {400, 414, 431, 501, 505}
MAX_STEPS = 100_000


@dataclass
class Parsed:
    """What a parser handed out for a stream of bytes."""

    requests: list[tuple[RequestHead, bytes]]
    error: ParseError | None
    needs_data: bool  # the stream ended inside a request


def parse(pieces: list[bytes], parser: RequestParser | None = None) -> Parsed:
    """Feed each piece and take every event, as the connection does; fails the test if the
    parser loops (more events than steps allowed) instead of asking for data."""
    parser = parser or RequestParser()
    requests: list[tuple[RequestHead, bytes]] = []
    head: RequestHead | None = None
    body: list[bytes] = []
    steps = 0
    try:
        for piece in pieces:
            parser.feed(piece)
            while True:
                steps += 1
                assert steps < MAX_STEPS, "the parser keeps handing out events"
                event = parser.next_event()
                if event is Signal.NEED_DATA:
                    break
                if event is Signal.PAUSED:
                    parser.start_next_cycle()
                elif event is Signal.END_OF_MESSAGE:
                    assert head is not None
                    requests.append((head, b"".join(body)))
                    head, body = None, []
                elif isinstance(event, RequestHead):
                    assert head is None
                    head = event
                else:
                    assert isinstance(event, bytes) and event and head is not None
                    body.append(event)
    except ParseError as error:
        assert error.status in STATUSES and error.message and "\n" not in error.message
        with pytest.raises(ParseError):
            parser.next_event()  # an error stays
        return Parsed(requests, error, needs_data=False)
    return Parsed(requests, None, needs_data=head is not None or parser.has_buffered)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)] or [b""]


# -- requests as kube-apiserver and kube-scheduler form them (Go's net/http) ------------------

TCHARS = "abcdefghijklmnopqrstuvwxyz"
VALUE_CHARS = "".join(chr(c) for c in range(0x21, 0x7F))


@st.composite
def canonical_names(draw: st.DrawFn) -> str:
    """A header name as Go canonicalizes it: X-Some-Thing."""
    words = draw(st.lists(st.text(TCHARS, min_size=1, max_size=8), min_size=1, max_size=3))
    return "X-" + "-".join(word.capitalize() for word in words)


values = st.lists(st.text(VALUE_CHARS, min_size=1, max_size=20), min_size=0, max_size=3).map(
    " ".join
)


@dataclass(frozen=True)
class Sent:
    method: bytes
    target: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    raw: bytes


@st.composite
def go_requests(draw: st.DrawFn) -> Sent:
    """Request.Write of Go's net/http: Host, User-Agent, the framing field, then the rest
    sorted; a chunked body in the writes the caller made, with trailers if it set any."""
    method = draw(st.sampled_from(["POST", "GET", "PUT", "PATCH"]))
    path = draw(st.sampled_from(["/filter", "/prioritize", "/mutate", "/validate", "/healthz"]))
    target = path + draw(st.sampled_from(["", "?timeout=10s", "?timeout=5s&x=%2F"]))
    body = draw(st.binary(max_size=4096)) if method != "GET" else b""
    chunked = draw(st.booleans()) and bool(body)
    headers = [("Host", "migslice-extender.migslice-system.svc:443")]
    headers.append(("User-Agent", "kube-scheduler/v1.36.3 (linux/amd64) kubernetes/abcdef0"))
    if chunked:
        headers.append(("Transfer-Encoding", "chunked"))
    elif body or method in ("POST", "PUT", "PATCH"):
        headers.append(("Content-Length", str(len(body))))
    extra = {"Accept": "application/json, */*", "Content-Type": "application/json"}
    extra["Accept-Encoding"] = "gzip"
    for name in draw(st.lists(canonical_names(), max_size=5, unique=True)):
        extra[name] = draw(values)
    headers.extend(sorted(extra.items()))
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers)
    raw = head.encode() + b"\r\n"
    if chunked:
        cuts = draw(st.lists(st.integers(0, len(body)), max_size=6))
        for piece in split(body, cuts):
            if piece:
                raw += b"%x\r\n%s\r\n" % (len(piece), piece)
        raw += b"0\r\n"
        if draw(st.booleans()):
            raw += b"X-Checksum: " + draw(values).encode() + b"\r\n"
        raw += b"\r\n"
    else:
        raw += body
    expected = tuple((n.lower().encode(), v.encode()) for n, v in headers)
    return Sent(method.encode(), target.encode(), expected, body, raw)


@settings(max_examples=300, deadline=None)
@given(sent=st.lists(go_requests(), min_size=1, max_size=3), cuts=st.lists(st.integers()))
def test_any_request_a_go_client_forms_parses_to_what_it_sent(
    sent: list[Sent], cuts: list[int]
) -> None:
    parsed = parse(split(b"".join(s.raw for s in sent), cuts))
    assert parsed.error is None and not parsed.needs_data
    assert [(head.method, head.target, head.headers, body) for head, body in parsed.requests] == [
        (s.method, s.target, s.headers, s.body) for s in sent
    ]


class Capture:
    """A socket that keeps what http.client sends."""

    def __init__(self) -> None:
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += data


@settings(max_examples=200, deadline=None)
@given(
    method=st.sampled_from(["GET", "POST"]),
    body=st.binary(max_size=2048),
    chunked=st.booleans(),
    extra=st.dictionaries(canonical_names(), values, max_size=4),
    cuts=st.lists(st.integers()),
)
def test_any_request_our_python_client_forms_parses_to_what_it_sent(
    method: str, body: bytes, chunked: bool, extra: dict[str, str], cuts: list[int]
) -> None:
    """ServerProcess.request, the demo and the benchmarks talk to our servers through
    http.client."""
    connection = http.client.HTTPConnection("migslice-webhook.migslice-system.svc", 8443)
    capture = Capture()
    connection.sock = capture
    if chunked and method == "POST":
        pieces = [body[:100], body[100:]]
        headers = {**extra, "Transfer-Encoding": "chunked"}
        connection.request(
            method, "/mutate?timeout=10s", iter(pieces), headers, encode_chunked=True
        )
    else:
        connection.request(method, "/mutate?timeout=10s", body or None, extra)
    parsed = parse(split(capture.sent, cuts))
    assert parsed.error is None and len(parsed.requests) == 1
    head, received = parsed.requests[0]
    assert (head.method, head.target, received) == (method.encode(), b"/mutate?timeout=10s", body)
    sent = dict(head.headers)
    for name, value in extra.items():
        assert sent[name.lower().encode()] == value.encode()


# -- any bytes ---------------------------------------------------------------------------------

VALID = [
    b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /filter HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /filter HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
]


@st.composite
def mutated_requests(draw: st.DrawFn) -> bytes:
    """A valid request with a few bytes inserted, deleted or replaced anywhere."""
    data = bytearray(draw(st.sampled_from(VALID)) * draw(st.integers(1, 2)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        byte = draw(st.sampled_from([b"\r", b"\n", b" ", b"\t", b"\x00", b":", b"0", b"\xff"]))
        if action == "insert":
            data[at:at] = byte
        elif action == "delete":
            del data[at : at + 1]
        else:
            data[at : at + 1] = byte
    return bytes(data)


@settings(max_examples=1000, deadline=None)
@given(data=st.binary(max_size=3000) | mutated_requests(), cuts=st.lists(st.integers()))
def test_any_bytes_give_requests_a_need_for_more_data_or_an_error_never_a_crash(
    data: bytes, cuts: list[int]
) -> None:
    whole = parse([data])
    pieces = parse(split(data, cuts))
    assert pieces.requests == whole.requests  # however the bytes arrive
    assert (pieces.error is None) == (whole.error is None)


@st.composite
def framing_broken(draw: st.DrawFn) -> tuple[bytes, str]:
    """A valid request (chunked, with trailers) with one of its framing CRLFs made a bare LF
    or a bare CR: in the request line, a field line, the end of the head, a chunk-size line,
    after chunk data, in the trailers, or at their end."""
    lines = [
        b"POST /filter HTTP/1.1",
        b"Host: a",
        b"Transfer-Encoding: chunked",
        b"",
        b"5;ext=1",
        b"hello",
        b"3",
        b"abc",
        b"0",
        b"X-Trailer: 1",
        b"",
    ]
    at = draw(st.integers(0, len(lines) - 1))
    ending = draw(st.sampled_from([b"\n", b"\r"]))
    raw = b"".join(line + (ending if n == at else b"\r\n") for n, line in enumerate(lines))
    if at == len(lines) - 1:
        raw += b"GET / HTTP/1.1\r\n"  # a bare CR is one only once the next byte is in
    return raw, repr(ending)


@settings(max_examples=300, deadline=None)
@given(broken=framing_broken(), cuts=st.lists(st.integers()))
def test_a_bare_lf_or_cr_anywhere_in_the_framing_is_refused_never_waited_on(
    broken: tuple[bytes, str], cuts: list[int]
) -> None:
    raw, _ = broken
    parsed = parse(split(raw, cuts))
    assert parsed.error is not None and parsed.error.status == 400, parsed
    assert not parsed.requests


@settings(max_examples=100, deadline=None)
@given(over=st.sampled_from([1, 2, 3, 30, 2000]), cuts=st.lists(st.integers(), max_size=3))
def test_a_chunk_size_line_too_long_is_said_to_be_too_long_however_it_arrives(
    over: int, cuts: list[int]
) -> None:
    """Measured before: a line of 1,030 bytes and more that ended in CRLF, arriving whole,
    was refused as a bare LF (the LF of its CRLF, past the window searched for the CRLF)."""
    line = b"2;" + b"x" * (MAX_CHUNK_LINE_BYTES - 2 + over)
    raw = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" + line
    parsed = parse(split(raw + b"\r\n{}\r\n0\r\n\r\n", cuts))
    assert parsed.error is not None and "chunk-size line longer than" in parsed.error.message


# -- events the connection relies on ------------------------------------------------------------


def test_a_pipelined_request_waits_until_the_next_cycle() -> None:
    parser = RequestParser()
    parser.feed(VALID[1] + VALID[0])
    head = parser.next_event()
    assert isinstance(head, RequestHead) and head.content_length == 5
    assert parser.next_event() == b"hello"
    assert parser.next_event() is Signal.END_OF_MESSAGE
    assert parser.next_event() is Signal.PAUSED and parser.has_buffered
    parser.start_next_cycle()
    second = parser.next_event()
    assert isinstance(second, RequestHead) and second.target == b"/healthz"


def test_a_body_that_arrives_alone_is_handed_out_as_it_came() -> None:
    parser = RequestParser()
    parser.feed(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n")
    assert isinstance(parser.next_event(), RequestHead)
    assert parser.next_event() is Signal.NEED_DATA and parser.in_body
    piece = b"0123456789"
    parser.feed(piece)
    assert parser.next_event() is piece  # no copy
    assert parser.next_event() is Signal.END_OF_MESSAGE and not parser.in_body


def test_a_request_that_expects_100_continue_waits_for_it_until_its_body_starts() -> None:
    parser = RequestParser()
    parser.feed(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\nContent-Length: 2\r\n\r\n")
    head = parser.next_event()
    assert isinstance(head, RequestHead) and head.expects_continue
    assert parser.next_event() is Signal.NEED_DATA and parser.waits_for_continue
    parser.feed(b"h")
    assert parser.next_event() == b"h" and not parser.waits_for_continue


@pytest.mark.parametrize(
    ("version", "fields", "keep_alive"),
    [
        (b"1.1", b"", True),
        (b"1.1", b"Connection: keep-alive, Close\r\n", False),
        (b"1.0", b"", False),
        (b"1.0", b"Connection: keep-alive\r\n", False),  # HTTP/1.0 always closes
    ],
    ids=["1.1", "1.1 close", "1.0", "1.0 keep-alive"],
)
def test_keep_alive_is_http_1_1_without_connection_close(
    version: bytes, fields: bytes, keep_alive: bool
) -> None:
    parsed = parse([b"GET / HTTP/" + version + b"\r\nHost: a\r\n" + fields + b"\r\n"])
    assert parsed.requests[0][0].keep_alive is keep_alive


def test_the_limits_are_the_parsers() -> None:
    long_line = parse(
        [b"GET /" + b"a" * 20 + b" HTTP/1.1\r\n"], RequestParser(max_request_line_bytes=20)
    )
    too_many = b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n"  # the third field, still coming
    many = parse([too_many], RequestParser(max_header_count=2))
    too_long = parse([b"GET / HTTP/1.1\r\nHost: " + b"a" * 100], RequestParser(max_head_bytes=100))
    assert [p.error.status if p.error else None for p in (long_line, many, too_long)] == [
        414,
        431,
        431,
    ]


def test_an_answer_that_would_break_the_framing_is_not_written() -> None:
    assert response_head(200, b"OK", [(b"content-length", b"2")]) == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
    )
    with pytest.raises(ValueError, match="cannot be sent"):
        response_head(200, b"OK", [(b"x-injected", b"a\r\nset-cookie: b")])
    with pytest.raises(ValueError, match="cannot be sent"):
        response_head(200, b"OK", [(b"bad name", b"a")])


def test_an_error_answer_is_its_status_and_one_line() -> None:
    answer = error_response(ParseError(431, "more than 100 header fields (max_header_count)"))
    assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert answer.endswith(b"\r\n\r\nmore than 100 header fields (max_header_count)\n")


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        (ServingLimits(max_header_count=0), "ServingLimits.max_header_count 0"),
        (ServingLimits(max_request_line_bytes=0), "ServingLimits.max_request_line_bytes 0"),
        (
            ServingLimits(max_header_bytes=1024, max_request_line_bytes=2048),
            "at most max_header_bytes 1024",
        ),
    ],
    ids=["header count", "request line", "line over head"],
)
def test_head_limits_out_of_range_are_refused_with_their_name(
    limits: ServingLimits, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        limits.check()
