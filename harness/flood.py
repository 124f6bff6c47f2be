"""A slow-client flood, as a hostile pod inside the cluster could send it, for e2e scenarios.

``Flood(host, port, connections)`` opens that many connections to one server from a thread
of its own, split three ways and kept that way while it runs (a connection the server closes
is opened again):

* idle: TCP connected, nothing sent;
* half handshakes: the first bytes of a TLS ClientHello, then nothing;
* trickles: a full TLS handshake, request headers announcing a 1,000-byte body, then one body
  byte per second.

It only counts; the scenario judges the servers by what honest clients see meanwhile.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from dataclasses import dataclass, field

# The start of a real TLS 1.2 ClientHello record: handshake type, version, a length it never
# completes.
CLIENT_HELLO_START = bytes.fromhex("160301020001000200")
OPEN_WITHIN_S = 60.0
TRICKLE_HEADERS = (
    b"POST /mutate HTTP/1.1\r\nHost: flood\r\nContent-Type: application/json\r\n"
    b"Content-Length: 1000\r\n\r\n"
)


@dataclass
class FloodStats:
    opened: int = 0
    reopened: int = 0
    failed: int = 0
    kinds: dict[str, int] = field(default_factory=dict)


class Flood:
    def __init__(self, host: str, port: int, connections: int) -> None:
        self.host = host
        self.port = port
        self.connections = connections
        self.stats = FloodStats()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)
        self._ready = threading.Event()
        self._stopping = threading.Event()
        # One context for every trickle (no certificate is checked, so no CA store is loaded):
        # a context per connection cost the loop seconds on a loaded machine.
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE

    def __enter__(self) -> Flood:
        self._thread.start()
        self._ready.wait(OPEN_WITHIN_S + 10)
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        self._stopping.set()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if failed is None:  # never hide the scenario's own failure behind this one
            assert not self._thread.is_alive(), "the flood did not stop within 30 s"

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        kinds = ("idle", "half-handshake", "trickle")
        tasks = [
            asyncio.create_task(self._keep(kinds[i % len(kinds)])) for i in range(self.connections)
        ]
        # The scenario starts once every connection is open (or OPEN_WITHIN_S have passed).
        for _ in range(int(OPEN_WITHIN_S * 10)):
            if self.stats.opened >= self.connections or self._stopping.is_set():
                break
            await asyncio.sleep(0.1)
        self._ready.set()
        if not self._stopping.is_set():  # a stop asked before the loop ran is not lost
            await self._stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _keep(self, kind: str) -> None:
        """One connection of ``kind``, opened again whenever the server closes it."""
        assert self._stop is not None
        first = True
        while not self._stop.is_set():
            try:
                await self._one(kind)
            except (OSError, ssl.SSLError, asyncio.IncompleteReadError):
                self.stats.failed += 1
                await asyncio.sleep(0.2)
            if first:
                self.stats.kinds[kind] = self.stats.kinds.get(kind, 0) + 1
                first = False
            else:
                self.stats.reopened += 1

    async def _one(self, kind: str) -> None:
        context = self._tls if kind == "trickle" else None
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=context)
        self.stats.opened += 1
        try:
            if kind == "half-handshake":
                writer.write(CLIENT_HELLO_START)
                await writer.drain()
            elif kind == "trickle":
                writer.write(TRICKLE_HEADERS)
                await writer.drain()
            while True:  # until the server closes it, or the flood ends
                if kind == "trickle":
                    writer.write(b" ")
                    await writer.drain()
                try:
                    if not await asyncio.wait_for(reader.read(1024), timeout=1.0):
                        return  # closed by the server
                except TimeoutError:
                    continue
        finally:
            writer.transport.abort()  # at once: the flood never waits on a server to close
