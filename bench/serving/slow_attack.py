"""The attacker of ``bench.serving.slow_clients``: a child process holding ``--count`` stalled
connections (idle after TLS, a request at 1 byte per second, or a ClientHello at 1 byte per
second), reconnecting when closed, and reporting how many it holds and how long each lived."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.paths import REPO
from migslice.serving.process import ServerProcess

FD_LIMIT = 8192


def client_hello(server_name: str) -> bytes:
    """The first flight of a TLS client, to send one byte at a time."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname=server_name)
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


async def server_closes(reader: asyncio.StreamReader) -> None:
    """Returns when the server closes the connection (or resets it)."""
    with contextlib.suppress(OSError, ssl.SSLError):
        while await reader.read(65536):
            pass


async def attack(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    context = ssl.create_default_context(cafile=args.cafile)
    hello = client_hello(args.server_name)
    request = (
        f"POST {args.path} HTTP/1.1\r\nHost: {args.server_name}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
    ).encode() + b"{" * 100
    stats: dict[str, Any] = {"mode": args.mode, "open": 0, "opened": 0, "failed": 0}
    lifetimes: list[float] = []
    running = True

    def stop() -> None:
        nonlocal running
        running = False

    loop.add_signal_handler(signal.SIGTERM, stop)

    async def one_slot(slot: int) -> None:
        await asyncio.sleep(slot * args.ramp_s / args.count)
        while running:
            try:
                if args.mode == "handshake":
                    reader, writer = await asyncio.open_connection("127.0.0.1", args.port)
                else:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection(
                            "127.0.0.1", args.port, ssl=context, server_hostname=args.server_name
                        ),
                        30,
                    )
            except (OSError, TimeoutError, ssl.SSLError):
                stats["failed"] += 1
                await asyncio.sleep(0.5)
                continue
            opened_at = loop.time()
            stats["opened"] += 1
            stats["open"] += 1
            closed = asyncio.ensure_future(server_closes(reader))
            payload = hello if args.mode == "handshake" else request if args.mode == "slow" else b""
            sent = 0
            while running and not closed.done():
                if sent < len(payload):
                    writer.write(payload[sent : sent + 1])
                    sent += 1
                await asyncio.wait([closed], timeout=1.0)
            stats["open"] -= 1
            if closed.done():
                lifetimes.append(loop.time() - opened_at)
            else:
                closed.cancel()
            writer.close()

    def write_status() -> None:
        ordered = sorted(lifetimes)
        status = dict(stats)
        status["closed_by_server"] = len(ordered)
        if ordered:
            status["lifetime_s"] = {
                "p50": round(ordered[len(ordered) // 2], 2),
                "max": round(ordered[-1], 2),
            }
        Path(args.status).write_text(json.dumps(status))

    tasks = [asyncio.ensure_future(one_slot(i)) for i in range(args.count)]
    while running:
        write_status()
        await asyncio.sleep(0.5)
    await asyncio.wait(tasks, timeout=5)
    write_status()


def attacker_main(args: argparse.Namespace) -> int:
    raise_fd_limit()
    # In a cluster the attacker runs on other machines; here it shares two cores with the
    # server and the honest client, so it yields the CPU to them.
    os.nice(19)
    asyncio.run(attack(args))
    return 0


class Attacker:
    """``bench.serving.slow_clients --attacker``: holds ``count`` stalled connections until
    stopped."""

    def __init__(self, mode: str, server: ServerProcess, path: str, count: int, tmp: Path):
        self.status = tmp / f"attack-{mode}-{server.command}.json"
        self.process = subprocess.Popen(
            [
                sys.executable, "-m", "bench.serving.slow_clients", "--attacker", mode,
                "--port", str(server.port), "--count", str(count), "--path", path,
                "--server-name", server.server_name, "--cafile", str(server.bundle.ca_cert),
                "--status", str(self.status), "--ramp-s", "4",
            ],
            cwd=REPO,
        )  # fmt: skip

    def read(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status.read_text()))
        except (OSError, ValueError):
            return {}

    def wait_open(self, count: int, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.read().get("open", 0) >= count:
                break
            time.sleep(0.5)
        return self.read()

    def stop(self) -> dict[str, Any]:
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return self.read()


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(soft, min(FD_LIMIT, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
