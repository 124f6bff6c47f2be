"""The open connections of one worker, and which one gives way when the table is full.

A connection is *waiting* (TLS handshake, waiting for a request, or reading one) or *busy* (its
request is whole and the app answers it). Waiting connections are kept in the order they
started to wait: when a new connection arrives at a full table, the one that has waited
longest is closed to make room. An honest client waits milliseconds between connecting and
sending a whole request; a stalled or trickling one is, by then, the oldest waiter. Busy
connections are never shed: their request has arrived and is being answered.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from typing import Generic, TypeVar


class Phase(enum.Enum):
    HANDSHAKE = "handshake"  # TLS handshake under way
    WAITING = "waiting"  # for the first byte of a request (new or kept-alive connection)
    READING = "reading"  # a request has begun and is not whole yet
    BUSY = "busy"  # the request is whole; the app answers it or the answer goes out
    LINGERING = "lingering"  # answered before its body was read: the rest is read and dropped
    CLOSED = "closed"


T = TypeVar("T")


class ConnectionTable(Generic[T]):
    """Open connections, at most ``capacity`` of them (the caller sheds before adding)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._open: set[T] = set()
        self._waiting: dict[T, None] = {}  # insertion order = the order they began to wait

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._open))

    @property
    def is_full(self) -> bool:
        return len(self._open) >= self.capacity

    def add(self, connection: T) -> None:
        """A new connection; it waits (for its handshake or its first request)."""
        self._open.add(connection)
        self._waiting[connection] = None

    def remove(self, connection: T) -> None:
        self._open.discard(connection)
        self._waiting.pop(connection, None)

    def hold(self, connection: T) -> None:
        """The connection's request is whole: it is not shed while it is answered."""
        self._waiting.pop(connection, None)

    def wait(self, connection: T) -> None:
        """The connection waits again (answered, kept alive); it is now the youngest waiter."""
        if connection in self._open:
            self._waiting.pop(connection, None)
            self._waiting[connection] = None

    def oldest_waiting(self) -> T | None:
        """The connection to shed to make room, or None when every connection is busy."""
        return next(iter(self._waiting), None)

    def waiting(self) -> list[T]:
        """Waiting connections, oldest first (a copy: callers close some of them)."""
        return list(self._waiting)

    def busy_count(self) -> int:
        return len(self._open) - len(self._waiting)
