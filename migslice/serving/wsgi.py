"""One whole request through a WSGI app (PEP 3333), in a thread of the worker's pool.

The event loop hands over a request only once it has arrived whole, so the app never waits on
a client: ``wsgi.input`` is the buffered body and ``CONTENT_LENGTH`` its true length (a chunked
body arrives de-chunked). A body over its limit is not read at all: the app sees an empty
input, ``CONTENT_LENGTH`` = the bytes known to be coming, and :data:`BODY_TOO_LARGE` set, and
answers through its own error channel.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_to_bytes

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

#: environ key: True when the request body was over the limit and was not read.
BODY_TOO_LARGE = "migslice.body_too_large"
#: environ key: the body limit (bytes) that applied to this request.
BODY_LIMIT = "migslice.body_limit"
CLIENT_NAMES = "migslice.client_names"
"""The environ key of the names in the client's verified certificate (a tuple, maybe empty)."""

_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request as the event loop read it."""

    method: bytes
    target: bytes
    http_version: bytes
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes
    content_length: int  # the body's length; for a refused body, the bytes known to be coming
    body_limit: int
    body_too_large: bool


@dataclass(frozen=True, slots=True)
class Outgoing:
    status: int
    reason: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes


@dataclass(frozen=True, slots=True)
class Endpoint:
    """What the environ says about the server side and the peer."""

    scheme: str
    server: tuple[str, int]
    peer: tuple[str, int]
    multiprocess: bool
    client_names: tuple[str, ...] = ()
    """The names of the client's verified certificate (none: it presented none)."""


def buffered_body(environ: Mapping[str, Any]) -> bytes | None:
    """The body as our server buffered it (the same bytes, not a copy), or None when the app
    runs under another WSGI server (then read ``wsgi.input`` up to the app's own limit)."""
    if BODY_LIMIT not in environ:
        return None
    body: bytes = environ["wsgi.input"].read()
    return body


def environ_for(request: Incoming, endpoint: Endpoint) -> dict[str, Any]:
    path, _, query = request.target.partition(b"?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method.decode("ascii"),
        "SCRIPT_NAME": "",
        "PATH_INFO": unquote_to_bytes(path).decode("latin-1"),
        "QUERY_STRING": query.decode("latin-1"),
        "SERVER_NAME": endpoint.server[0],
        "SERVER_PORT": str(endpoint.server[1]),
        "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("ascii"),
        "REMOTE_ADDR": endpoint.peer[0],
        "REMOTE_PORT": str(endpoint.peer[1]),
        "CONTENT_LENGTH": str(request.content_length),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": endpoint.scheme,
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.input_terminated": True,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": endpoint.multiprocess,
        "wsgi.run_once": False,
        BODY_LIMIT: request.body_limit,
        BODY_TOO_LARGE: request.body_too_large,
        CLIENT_NAMES: endpoint.client_names,
    }
    for raw_name, raw_value in request.headers:
        name = raw_name.decode("latin-1")
        if "_" in name:  # would be indistinguishable from "-" once in the environ
            continue
        value = raw_value.decode("latin-1")
        if name == "content-type":
            environ["CONTENT_TYPE"] = value
            continue
        if name == "content-length" or name == "transfer-encoding":
            continue  # the body is whole and de-chunked: CONTENT_LENGTH says how long
        key = "HTTP_" + name.upper().replace("-", "_")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def call_app(app: WsgiApp, environ: dict[str, Any]) -> Outgoing:
    """Run the app to the end of its answer (our apps answer small JSON documents)."""
    started: list[tuple[str, list[tuple[str, str]]]] = []
    chunks: list[bytes] = []

    def start_response(
        status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], None]:
        if exc_info is not None and started and chunks:
            raise exc_info[1].with_traceback(exc_info[2])
        started[:] = [(status, headers)]
        return chunks.append

    result = app(environ, start_response)
    try:
        for chunk in result:
            if chunk:
                chunks.append(bytes(chunk))
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    if not started:
        raise RuntimeError("the WSGI app returned without calling start_response")
    status, headers = started[0]
    code, _, reason = status.partition(" ")
    return Outgoing(
        status=int(code),
        reason=reason.encode("latin-1"),
        headers=[
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers
            if name.lower().encode("latin-1") not in _HOP_BY_HOP
        ],
        body=b"".join(chunks),
    )


def internal_error() -> Outgoing:
    body = b'{"error": "internal server error"}\n'
    return Outgoing(500, b"Internal Server Error", [(b"content-type", b"application/json")], body)
