"""What one server worker lets a client use: time, bytes and connections.

Every client is held to deadlines that it cannot extend by trickling bytes: a TLS handshake
must finish within ``tls_handshake_timeout_s``; a request (request line, headers and body) must
arrive whole within ``request_timeout_s`` of its first byte; a connection waits at most
``keepalive_timeout_s`` for the first byte of a request (its first, or its next one when kept
alive). A silent connection costs memory only, and the connection table sheds the one that has
waited longest when it is full. A request body larger than its path's limit is refused
without being read. A request head is at most ``max_header_bytes`` long with at most
``max_header_count`` fields (431 beyond either) and a request line of at most
``max_request_line_bytes`` (414); trailers are held to the same two limits as the head.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

KIB = 1 << 10
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class ServingLimits:
    """Per worker process. ``body_limits``: (path, bytes) pairs; other paths get
    ``default_body_bytes``. A body over ``large_body_bytes`` waits for the worker's single
    large-request slot, so that concurrent large requests cannot multiply its memory."""

    tls_handshake_timeout_s: float = 5.0
    request_timeout_s: float = 10.0
    keepalive_timeout_s: float = 60.0
    write_timeout_s: float = 10.0
    max_connections: int = 4096
    max_requests_per_connection: int = 1000
    max_header_bytes: int = 32 * KIB
    max_header_count: int = 100
    max_request_line_bytes: int = 8 * KIB
    body_limits: tuple[tuple[str, int], ...] = ()
    default_body_bytes: int = 64 * KIB
    large_body_bytes: int = MIB

    def body_limit(self, path: str) -> int:
        """The largest body accepted for a request to ``path``."""
        for candidate, limit in self.body_limits:
            if candidate == path:
                return limit
        return self.default_body_bytes

    def with_body_limits(
        self, limits: Mapping[str, int] | Iterable[tuple[str, int]]
    ) -> ServingLimits:
        pairs = tuple(limits.items()) if isinstance(limits, Mapping) else tuple(limits)
        return replace(self, body_limits=pairs)

    def check(self) -> None:
        """Raise ValueError naming the flag of the first value out of range."""
        for flag, value in (
            ("--tls-handshake-timeout-s", self.tls_handshake_timeout_s),
            ("--request-timeout-s", self.request_timeout_s),
            ("--keepalive-timeout-s", self.keepalive_timeout_s),
            ("--write-timeout-s", self.write_timeout_s),
        ):
            if not value > 0:
                raise ValueError(f"{flag} {value:g}: must be more than 0 seconds")
        for flag, count in (
            ("--max-connections", self.max_connections),
            ("--max-requests-per-connection", self.max_requests_per_connection),
        ):
            if count < 1:
                raise ValueError(f"{flag} {count}: must be at least 1")
        for name, count in (  # fixed in the services: no flags
            ("max_header_bytes", self.max_header_bytes),
            ("max_header_count", self.max_header_count),
            ("max_request_line_bytes", self.max_request_line_bytes),
        ):
            if count < 1:
                raise ValueError(f"ServingLimits.{name} {count}: must be at least 1")
        if self.max_request_line_bytes > self.max_header_bytes:
            raise ValueError(
                f"ServingLimits.max_request_line_bytes {self.max_request_line_bytes}: must be "
                f"at most max_header_bytes {self.max_header_bytes} (the line is part of the head)"
            )
        for path, limit in self.body_limits:
            if limit < 1:
                raise ValueError(f"body limit of {path} is {limit} bytes: must be at least 1")
