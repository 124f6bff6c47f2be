"""The gunicorn worker that serves our apps: an asyncio event loop, a thread pool for the app.

gunicorn's master stays what it is good at (forking ``--workers`` processes, restarting one
that dies, SIGTERM -> graceful stop, heartbeat timeouts). Each worker runs :class:`Site` on its
own event loop: the loop reads requests whole under deadlines (see ``protocol.py``), the app
answers them in ``threads`` threads. A worker that cannot build its app tells the master why
through :class:`BootFailures` and exits; the master then stops and ``serve`` raises
:class:`ServeError` with that one line.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import os
import signal
import sys
from typing import Any

from gunicorn.workers.base import Worker

from migslice.serving.loop import SWEEP_S, Site
from migslice.serving.tls import ReloadingSSLContext

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.05
M_MMAP_THRESHOLD = -3  # glibc mallopt parameter
MMAP_THRESHOLD_BYTES = 128 * 1024
MESSAGE_BYTES = 4000  # one write below PIPE_BUF arrives whole


class ServeError(Exception):
    """The server could not start: a worker could not build its app (the message says why)."""


class BootFailures:
    """A pipe from the workers to the master, made before the first fork."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        self.message: str | None = None

    def send(self, message: str) -> bool:
        data = " ".join(message.split()).encode("utf-8", "replace")[:MESSAGE_BYTES] + b"\n"
        try:
            return os.write(self._write_fd, data) == len(data)
        except OSError:
            return False

    def receive(self) -> str | None:
        """The first message a worker sent, if any (kept in :attr:`message`)."""
        if self.message is None:
            try:
                data = os.read(self._read_fd, MESSAGE_BYTES + 1)
            except BlockingIOError:
                return None
            if data:
                self.message = data.decode("utf-8", "replace").splitlines()[0]
        return self.message

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


def describe(error: BaseException) -> str:
    """One line naming the problem: our own errors speak for themselves, others by type."""
    text = str(error).strip() or type(error).__name__
    ours = type(error).__module__.partition(".")[0] in ("migslice", "webhook", "extender")
    if ours or isinstance(error, ValueError | OSError):
        return text
    return f"{type(error).__name__}: {text}"


def keep_large_buffers_out_of_the_heap() -> None:
    """Request bodies are buffered whole. glibc raises its mmap threshold when the first large
    buffer is freed, after which large buffers come from the heap and stay resident once freed;
    a fixed threshold keeps every buffer over 128 KiB its own mapping, returned when freed."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)


def freeze_what_is_loaded() -> int:
    """Move every object the worker holds before its app is built (the interpreter, the
    modules, their code: about 60 MiB) to the collector's permanent generation, and answer
    how many objects that is. They live as long as the process, so every full collection
    walked them for nothing: the caches' lists trigger many (bench/latency/sync_memory.py: sync
    6.0-6.6 -> 5.6-5.8 s, extender). Frozen objects are still freed by reference counting."""
    gc.freeze()
    return gc.get_freeze_count()


class EventLoopWorker(Worker):  # type: ignore[misc]
    """gunicorn worker class; ``self.app`` is the ``_GunicornApp`` holding ``ServerOptions``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._quick = False
        self._tls: Any = None

    def init_signals(self) -> None:
        for number in self.SIGNALS:
            signal.signal(number, signal.SIG_DFL)
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.loop.add_signal_handler(signal.SIGTERM, self._stop, False)
        self.loop.add_signal_handler(signal.SIGQUIT, self._stop, True)
        self.loop.add_signal_handler(signal.SIGINT, self._stop, True)
        self.loop.add_signal_handler(signal.SIGUSR1, self.log.reopen_files)
        self.loop.add_signal_handler(signal.SIGABRT, self._abort)
        signal.signal(signal.SIGWINCH, signal.SIG_IGN)

    def _stop(self, quick: bool) -> None:
        self.alive = False
        self._quick = self._quick or quick

    def _abort(self) -> None:
        self.alive = False
        self.cfg.worker_abort(self)
        sys.exit(1)

    def load_wsgi(self) -> None:
        """Build the app (and load the certificate) here, in the worker, or report why not."""
        options = self.app.options
        keep_large_buffers_out_of_the_heap()
        frozen = freeze_what_is_loaded()
        log.debug("worker pid=%d froze %d objects before building its app", os.getpid(), frozen)
        try:
            self.wsgi = self.app.wsgi()
            if not options.insecure_http:
                self._tls = ReloadingSSLContext(
                    options.tls_cert, options.tls_key, options.client_ca
                )
                self._tls.get()
        except Exception as error:
            log.debug("worker pid=%d could not build its app", os.getpid(), exc_info=True)
            if self.app.boot_failures.send(describe(error)):
                sys.exit(0)  # the master reads the message, stops the others and exits
            raise

    def run(self) -> None:
        assert self.loop is not None
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            self.loop.close()

    async def _serve(self) -> None:
        assert self.loop is not None
        options = self.app.options
        site = Site(
            self.loop,
            self.wsgi,
            options.limits,
            options.threads,
            self._tls,
            multiprocess=options.workers > 1,
            inline_paths=options.inline_paths,
        )
        site.listen([getattr(listener, "sock", listener) for listener in self.sockets])
        limits = options.limits
        log.info(
            "worker pid=%d serving on %s://%s threads=%d max_connections=%d "
            "request_timeout_s=%g keepalive_timeout_s=%g",
            os.getpid(),
            site.scheme,
            options.address,
            options.threads,
            limits.max_connections,
            limits.request_timeout_s,
            limits.keepalive_timeout_s,
        )
        while self.alive:
            site.sweep()
            self.notify()
            if self.ppid != os.getppid():
                log.warning("worker pid=%d lost its master; stopping", os.getpid())
                break
            await asyncio.sleep(SWEEP_S)
        site.stop_accepting()
        if not self._quick:
            deadline = self.loop.time() + self.cfg.graceful_timeout
            while len(site.table) and self.loop.time() < deadline and not self._quick:
                site.sweep()
                self.notify()
                await asyncio.sleep(DRAIN_POLL_S)
        site.close()
