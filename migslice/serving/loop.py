"""What the connections of one worker share: the listeners, the table, the deadlines, the pool.

The worker's event loop accepts connections itself, so it can stop accepting while every
connection is busy (new ones wait in the kernel's backlog) and shed the connection that has
waited longest when the table is full. A sweep every :data:`SWEEP_S` closes connections past
their deadline. The app runs in a pool of ``threads`` threads (a small request to one of
``inline_paths`` runs on the loop itself); bodies over ``large_body_bytes`` take turns through
one :class:`LargeSlot`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from migslice.serving.connections import ConnectionTable, Phase
from migslice.serving.limits import ServingLimits
from migslice.serving.protocol import HttpConnection
from migslice.serving.wsgi import WsgiApp

if TYPE_CHECKING:
    from migslice.serving.tls import ReloadingSSLContext

log = logging.getLogger(__name__)

SWEEP_S = 0.25
HANDSHAKES_PER_TURN = 1
EXPIRIES_PER_TURN = 16
ACCEPT_BATCH = 8
ACCEPT_RETRY_S = 0.5
STATS_EVERY_S = 60.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_EXPIRED = {
    Phase.HANDSHAKE: "handshake_timeouts",
    Phase.WAITING: "silent_timeouts",  # connected, never sent a request
    Phase.READING: "request_timeouts",
    Phase.LINGERING: "lingering_closes",
}
_ROUTINE = frozenset(
    {"keepalive_timeouts", "trickling", "lingering_closes"}
)  # kept-alive connections idle past their time


class LargeSlot:
    """One request with a large body at a time; the others wait in arrival order."""

    def __init__(self) -> None:
        self.holder: HttpConnection | None = None
        self._queue: deque[HttpConnection] = deque()

    def claim(self, connection: HttpConnection) -> bool:
        if self.holder is None or self.holder is connection:
            self.holder = connection
            return True
        self._queue.append(connection)
        return False

    def withdraw(self, connection: HttpConnection) -> None:
        try:
            self._queue.remove(connection)
        except ValueError:
            pass

    def release(self, connection: HttpConnection) -> None:
        if self.holder is not connection:
            return
        self.holder = None
        while self._queue:
            successor = self._queue.popleft()
            if successor.phase is Phase.READING:
                self.holder = successor
                successor.slot_granted()
                return


class Site:
    """The serving state of one worker process."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        app: WsgiApp,
        limits: ServingLimits,
        threads: int,
        tls: ReloadingSSLContext | None,
        multiprocess: bool,
        inline_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.loop = loop
        self.app = app
        self.limits = limits
        self.inline_paths = inline_paths
        self.tls = tls
        self.scheme = "https" if tls is not None else "http"
        self.multiprocess = multiprocess
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wsgi")
        self.table: ConnectionTable[HttpConnection] = ConnectionTable(limits.max_connections)
        self.large_slot = LargeSlot()
        self.accepting = True
        self.stats: Counter[str] = Counter()
        self._listeners: list[socket.socket] = []
        self._accept_paused = False
        self._starting: deque[HttpConnection] = deque()  # ClientHello waiting for an answer
        self._finishing: deque[HttpConnection] = deque()  # answered; the client's reply is in
        self._handshakes_scheduled = False
        self._stats_logged_at = loop.time()

    def now(self) -> float:
        return self.loop.time()

    def count(self, what: str) -> None:
        self.stats[what] += 1

    # -- accepting ------------------------------------------------------------------------

    def listen(self, listeners: Sequence[socket.socket]) -> None:
        for listener in listeners:
            listener.setblocking(False)
            self._listeners.append(listener)
        self._resume_accepting()

    def _resume_accepting(self) -> None:
        self._accept_paused = False
        for listener in self._listeners:
            self.loop.add_reader(listener.fileno(), self._accept, listener)

    def _pause_accepting(self) -> None:
        if not self._accept_paused:
            self._accept_paused = True
            for listener in self._listeners:
                self.loop.remove_reader(listener.fileno())

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPT_BATCH):
            if self.table.is_full and self.table.oldest_waiting() is None:
                self._pause_accepting()  # every connection is busy: new ones wait in the backlog
                return
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as error:
                if error.errno in _OUT_OF_RESOURCES:
                    log.warning(
                        "cannot accept connections (%s); retrying in %ss", error, ACCEPT_RETRY_S
                    )
                    self._pause_accepting()
                    self.loop.call_later(ACCEPT_RETRY_S, self._retry_accepting)
                    return
                continue  # the client gave up before we accepted
            client.setblocking(False)
            if client.family in (socket.AF_INET, socket.AF_INET6):
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.loop.create_task(self._connect(client))

    def _retry_accepting(self) -> None:
        if self.accepting and self._accept_paused:
            self._resume_accepting()

    async def _connect(self, client: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(lambda: HttpConnection(self), client)
        except OSError:
            client.close()

    def admit(self, connection: HttpConnection) -> bool:
        """Take a new connection into the table, shedding the longest waiter if it is full."""
        if self.table.is_full:
            victim = self.table.oldest_waiting()
            if victim is None:
                self.count("refused_full")
                return False
            self.count("shed")
            log.debug("connection table full; shedding a connection phase=%s", victim.phase.value)
            victim.close(notify=victim.phase is Phase.WAITING and victim.answered > 0)
        self.table.add(connection)
        return True

    def forget(self, connection: HttpConnection) -> None:
        self.table.remove(connection)
        if self._accept_paused and self.accepting and not self.table.is_full:
            self._resume_accepting()

    # -- handshakes -----------------------------------------------------------------------

    def queue_handshake(self, connection: HttpConnection) -> None:
        """TLS handshakes cost far more CPU than reading a request. They run one per turn of
        the loop, so requests on established connections are not held up behind a wave of
        reconnecting clients. Handshakes we have already answered finish first (in order);
        new ones start newest first, so a new client is served before the backlog of a wave,
        whose oldest members time out rather than everyone waiting for all of them."""
        (self._finishing if connection.handshake_answered else self._starting).append(connection)
        if not self._handshakes_scheduled:
            self._handshakes_scheduled = True
            self.loop.call_soon(self._run_handshakes)

    def _run_handshakes(self) -> None:
        self._handshakes_scheduled = False
        for _ in range(HANDSHAKES_PER_TURN):
            if self._finishing:
                self._finishing.popleft().continue_handshake()
            elif self._starting:
                self._starting.pop().continue_handshake()
            else:
                return
        if self._finishing or self._starting:
            self._handshakes_scheduled = True
            self.loop.call_soon(self._run_handshakes)

    # -- deadlines ------------------------------------------------------------------------

    def sweep(self) -> None:
        """Close connections past their deadline, and those whose client stopped reading."""
        now = self.now()
        if self._starting:  # forget queued handshakes of connections closed meanwhile
            self._starting = deque(c for c in self._starting if c.phase is Phase.HANDSHAKE)
        self._expire([c for c in self.table.waiting() if c.deadline <= now])
        write_timeout_s = self.limits.write_timeout_s
        for connection in self.table:
            stalled = connection.write_stalled_since
            if stalled is not None and now - stalled > write_timeout_s:
                self.count("write_timeouts")
                connection.abort()
        if now - self._stats_logged_at >= STATS_EVERY_S:
            self._log_stats(now)

    def _expire(self, expired: list[HttpConnection]) -> None:
        """Close connections past their deadline, a few per turn of the loop: stalled clients
        opened together expire together, and a thousand closes at once would hold up the
        requests of everyone else."""
        now = self.now()
        for connection in expired[:EXPIRIES_PER_TURN]:
            if connection.phase in _EXPIRED and connection.deadline <= now:
                routine = connection.phase is Phase.WAITING and connection.answered > 0
                self.count("keepalive_timeouts" if routine else _EXPIRED[connection.phase])
                connection.close(notify=routine)
        if len(expired) > EXPIRIES_PER_TURN:
            self.loop.call_soon(self._expire, expired[EXPIRIES_PER_TURN:])

    def _log_stats(self, now: float) -> None:
        self._stats_logged_at = now
        if set(self.stats) - _ROUTINE:
            summary = " ".join(f"{key}={value}" for key, value in sorted(self.stats.items()))
            log.warning(
                "connections closed by the server's limits in the last %ds: %s; open=%d",
                STATS_EVERY_S,
                summary,
                len(self.table),
            )
        self.stats.clear()

    # -- stopping -------------------------------------------------------------------------

    def stop_accepting(self) -> None:
        """Stop taking connections; idle ones close now, the others after their answer."""
        self.accepting = False
        self._pause_accepting()
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        for connection in self.table.waiting():
            if connection.phase is Phase.WAITING:
                connection.close()

    def close(self) -> None:
        for connection in self.table:
            connection.abort()
        self.executor.shutdown(wait=False, cancel_futures=True)
