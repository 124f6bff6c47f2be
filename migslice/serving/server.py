"""Serve a Flask (WSGI) app: gunicorn's master, our event-loop workers, TLS, limits.

``serve(factory, options)`` runs gunicorn in-process with :class:`EventLoopWorker` (see
``worker.py`` and ``docs/serving.md`` for why not gthread). ``factory`` is called in each
worker; if it raises, the server stops and :class:`ServeError` carries one line saying why.
The serving certificate is re-read when its files change: every new connection asks
:class:`ReloadingSSLContext` for a context, answered from a cache keyed by the files'
modification times, so a renewed certificate (cert-manager, or ``migslice certs`` run again)
is served to the next connection without a restart. Nothing is written to ``$HOME``: gunicorn's
control socket is off and the heartbeat file lives in ``/dev/shm`` (or the temp directory).
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gunicorn import sock
from gunicorn.app.base import BaseApplication
from gunicorn.arbiter import Arbiter
from gunicorn.errors import HaltServer

from migslice.console import count, host, path_name, port, seconds
from migslice.serving.limits import ServingLimits
from migslice.serving.tls import ReloadingSSLContext
from migslice.serving.worker import BootFailures, EventLoopWorker, ServeError

log = logging.getLogger(__name__)
HEARTBEAT_DIR = "/dev/shm"


@dataclass(frozen=True, slots=True)
class ServerOptions:
    """Where and how to listen. TLS is required unless ``insecure_http`` is set."""

    host: str = "0.0.0.0"
    port: int = 8443
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure_http: bool = False
    workers: int = 1
    threads: int = 8
    graceful_timeout_s: int = 10
    limits: ServingLimits = field(default_factory=ServingLimits)
    #: Paths whose small requests the event loop answers itself, not the thread pool: for
    #: handlers that only compute, briefly (no I/O, no waiting on a lock held for long).
    inline_paths: frozenset[str] = frozenset()
    #: Verify client certificates against this CA; the app then refuses its callers' verbs
    #: without one (``migslice.serving.clients``). Probes and scrapers need none.
    client_ca: str | None = None
    #: With ``client_ca``: the certificate must name one of these (common name or DNS SAN).
    client_names: frozenset[str] = frozenset()

    def check(self) -> None:
        """Raise ValueError with a fix when the options do not make sense."""
        if self.workers < 1 or self.threads < 1:
            raise ValueError(
                f"--workers {self.workers} --threads {self.threads}: each must be at least 1"
            )
        self.limits.check()
        if self.client_names and not self.client_ca:
            raise ValueError(
                "--client-name needs --client-ca-file: names are read from certificates "
                "that CA signed"
            )
        if self.insecure_http:
            if self.tls_cert or self.tls_key or self.client_ca:
                raise ValueError(
                    "--insecure-http and --tls-cert/--tls-key/--client-ca-file exclude each other"
                )
            return
        if not self.tls_cert or not self.tls_key:
            raise ValueError(
                "TLS needs both --tls-cert and --tls-key (make them with `migslice certs`), "
                "or pass --insecure-http for a local test"
            )
        files = [("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key)]
        if self.client_ca:
            files.append(("--client-ca-file", self.client_ca))
        for flag, path in files:
            if not Path(path).is_file():
                raise ValueError(f"{flag} {path}: no such file")

    @property
    def scheme(self) -> str:
        return "http" if self.insecure_http else "https"

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def add_server_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    group = parser.add_argument_group("serving")
    group.add_argument(
        "--host", type=host, default="0.0.0.0", help="address (IP or host name) to listen on"
    )
    group.add_argument("--port", type=port, default=default_port, help="port to listen on")
    group.add_argument(
        "--tls-cert", metavar="FILE", type=path_name, help="PEM serving certificate (chain)"
    )
    group.add_argument(
        "--tls-key", metavar="FILE", type=path_name, help="PEM private key of the certificate"
    )
    group.add_argument(
        "--insecure-http", action="store_true", help="serve plain HTTP (local tests only)"
    )
    group.add_argument(
        "--client-ca-file",
        metavar="FILE",
        help="PEM CA: verify client certificates it signed, and answer the service's calls "
        "(admission reviews, extender verbs) only to a client that presents one; health, "
        "readiness and metrics stay open",
    )
    group.add_argument(
        "--client-name",
        metavar="NAME[,NAME...]",
        type=_names,
        default=frozenset(),
        help="with --client-ca-file: the client certificate must carry one of these names "
        "(subject common name or DNS subject alternative name)",
    )
    group.add_argument(
        "--workers",
        type=count(1, 64),
        default=1,
        help="gunicorn worker processes (each keeps its own metrics: prefer replicas)",
    )
    group.add_argument("--threads", type=count(1, 256), default=8, help="app threads per worker")
    defaults = ServingLimits()
    group.add_argument(
        "--request-timeout-s",
        type=seconds(allow_zero=False),
        default=defaults.request_timeout_s,
        help="a request (line, headers and body) must arrive whole within this many seconds "
        "of its first byte; slower clients are disconnected",
    )
    group.add_argument(
        "--keepalive-timeout-s",
        type=seconds(allow_zero=False),
        default=defaults.keepalive_timeout_s,
        help="an idle kept-alive connection is closed after this many seconds",
    )
    group.add_argument(
        "--tls-handshake-timeout-s",
        type=seconds(allow_zero=False),
        default=defaults.tls_handshake_timeout_s,
        help="a TLS handshake must finish within this many seconds",
    )
    group.add_argument(
        "--max-connections",
        type=count(1, 1_000_000),
        default=defaults.max_connections,
        help="open connections per worker; a new one beyond this closes the connection that "
        "has waited longest for a whole request",
    )
    group.add_argument(
        "--max-requests-per-connection",
        type=count(1, 1_000_000),
        default=defaults.max_requests_per_connection,
        help="a kept-alive connection is closed after this many requests",
    )


def options_from_args(
    args: argparse.Namespace,
    body_limits: Mapping[str, int] | None = None,
    inline_paths: Iterable[str] = (),
) -> ServerOptions:
    """Options from the flags; ``body_limits``: the largest body per path, in bytes;
    ``inline_paths``: see :attr:`ServerOptions.inline_paths`."""
    limits = replace(
        ServingLimits(),
        request_timeout_s=args.request_timeout_s,
        keepalive_timeout_s=args.keepalive_timeout_s,
        tls_handshake_timeout_s=args.tls_handshake_timeout_s,
        max_connections=args.max_connections,
        max_requests_per_connection=args.max_requests_per_connection,
    ).with_body_limits(body_limits or {})
    return ServerOptions(
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure_http=args.insecure_http,
        workers=args.workers,
        threads=args.threads,
        limits=limits,
        inline_paths=frozenset(inline_paths),
        client_ca=args.client_ca_file,
        client_names=args.client_name,
    )


def _names(text: str) -> frozenset[str]:
    names = frozenset(part.strip() for part in text.split(","))
    if not names or "" in names:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME[,NAME...], none empty")
    return names


def _heartbeat_dir() -> str | None:
    """Where gunicorn keeps each worker's heartbeat file: memory, not a disk, when possible."""
    if os.path.isdir(HEARTBEAT_DIR) and os.access(HEARTBEAT_DIR, os.W_OK):
        return HEARTBEAT_DIR
    return tempfile.gettempdir()


class _Arbiter(Arbiter):  # type: ignore[misc]
    """gunicorn's master; stops with :class:`ServeError` when a worker could not boot."""

    _halting = False

    def reap_workers(self) -> None:
        super().reap_workers()
        failure = self.app.boot_failures.receive()
        if failure is not None and not self._halting:
            raise HaltServer(failure, 1)

    def halt(self, reason: str | None = None, exit_status: int = 0) -> None:
        failure = self.app.boot_failures.receive()
        if failure is None:
            super().halt(reason, exit_status)
            return
        self._halting = True
        self.stop()
        raise ServeError(failure)


class _GunicornApp(BaseApplication):  # type: ignore[misc]
    def __init__(self, factory: Callable[[], Any], options: ServerOptions) -> None:
        self._factory = factory
        self.options = options
        self.boot_failures = BootFailures()
        super().__init__()

    def load_config(self) -> None:
        options = self.options
        settings: dict[str, Any] = {
            "bind": options.address,
            "workers": options.workers,
            "worker_class": EventLoopWorker,
            "timeout": 30,
            "graceful_timeout": options.graceful_timeout_s,
            "accesslog": None,
            "errorlog": "-",
            "loglevel": "warning",
            "control_socket_disable": True,
            "worker_tmp_dir": _heartbeat_dir(),
        }
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._factory()

    def run(self) -> None:
        try:
            arbiter = _Arbiter(self)
            arbiter.LISTENERS = self._listen(arbiter)
            arbiter.run()
        finally:
            self.boot_failures.close()

    def _listen(self, arbiter: Arbiter) -> list[Any]:
        """The listening socket, bound once here: gunicorn's own binding
        (``sock.create_sockets``) retries a failed bind five times a second apart, logging
        each, and then exits; a host that does not resolve or a port in use is one
        :class:`ServeError` line at once instead. Sockets handed over by systemd or a
        re-exec (``LISTEN_FDS``, ``GUNICORN_FD``) are left to gunicorn."""
        if "LISTEN_FDS" in os.environ or "GUNICORN_FD" in os.environ:
            return []
        listeners = []
        for address in self.cfg.address:
            try:
                listeners.append(sock._sock_type(address)(address, self.cfg, arbiter.log))
            except OSError as error:
                sock.close_sockets(listeners, unlink=False)
                raise ServeError(
                    f"cannot listen on {self.options.address}: {error.strerror or error}"
                ) from None
        return listeners


FILES_BESIDE_CONNECTIONS = 64
"""Open files a worker needs besides its connections: the listening socket, the certificate
files as they are reloaded, logs, the API server's connections, Python's own."""


def raise_open_files(wanted: int) -> int:
    """Raise this process's soft limit of open files (inherited by the workers) to ``wanted``,
    or to the hard limit if that is lower, as the Go runtime does for its programs: a container
    often starts with a soft limit of 1,024, which would cap the connections a worker holds
    below ``--max-connections``. Never lowers it; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft if soft != resource.RLIM_INFINITY else wanted


def serve(app_factory: Callable[[], Any], options: ServerOptions) -> None:
    """Serve the app built by ``app_factory`` (called in each worker) until a signal stops it.

    Raises ValueError for options that do not make sense and :class:`ServeError` when the
    certificate cannot be loaded or a worker cannot build its app.
    """
    options.check()
    if not options.insecure_http:
        try:
            ReloadingSSLContext(options.tls_cert, options.tls_key, options.client_ca).get()
        except ValueError as error:
            raise ServeError(str(error)) from None
    wanted = options.limits.max_connections + FILES_BESIDE_CONNECTIONS
    allowed = raise_open_files(wanted)
    if allowed < wanted:
        log.warning(
            "open files limited to %d (RLIMIT_NOFILE hard limit): a worker holds about %d "
            "connections, not --max-connections %d; raise the container's nofile limit",
            allowed,
            max(1, allowed - FILES_BESIDE_CONNECTIONS),
            options.limits.max_connections,
        )
    if options.workers > 1:
        log.warning(
            "--workers %d: each worker keeps its own metrics, and a scrape of /metrics reads "
            "the one that answers it, so counters and rates read low; for metrics to count "
            "every request, run one worker per pod and scale with replicas (the chart does)",
            options.workers,
        )
    log.debug("starting %d worker(s) for %s://%s", options.workers, options.scheme, options.address)
    _GunicornApp(app_factory, options).run()
