"""Run a Flask app under gunicorn (gthread workers) with TLS, in-process.

The serving certificate is re-read when its files change: gunicorn's gthread worker asks for an
SSL context for every new connection, and :class:`ReloadingSSLContext` answers from a cache
keyed by the files' modification times, so a renewed certificate (cert-manager, or
``migslice certs`` run again) is served to the next connection without a restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from migslice.console import count, port

log = logging.getLogger(__name__)


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

    def check(self) -> None:
        """Raise ValueError with a fix when the TLS options do not make sense."""
        if self.insecure_http:
            if self.tls_cert or self.tls_key:
                raise ValueError("--insecure-http and --tls-cert/--tls-key exclude each other")
            return
        if not self.tls_cert or not self.tls_key:
            raise ValueError(
                "TLS needs both --tls-cert and --tls-key (make them with `migslice certs`), "
                "or pass --insecure-http for a local test"
            )
        for flag, path in (("--tls-cert", self.tls_cert), ("--tls-key", self.tls_key)):
            if not Path(path).is_file():
                raise ValueError(f"{flag} {path}: no such file")

    @property
    def scheme(self) -> str:
        return "http" if self.insecure_http else "https"


def add_server_arguments(parser: argparse.ArgumentParser, default_port: int) -> None:
    group = parser.add_argument_group("serving")
    group.add_argument("--host", default="0.0.0.0", help="address to listen on")
    group.add_argument("--port", type=port, default=default_port, help="port to listen on")
    group.add_argument("--tls-cert", metavar="FILE", help="PEM serving certificate (chain)")
    group.add_argument("--tls-key", metavar="FILE", help="PEM private key of the certificate")
    group.add_argument(
        "--insecure-http", action="store_true", help="serve plain HTTP (local tests only)"
    )
    group.add_argument("--workers", type=count(1, 64), default=1, help="gunicorn worker processes")
    group.add_argument("--threads", type=count(1, 256), default=8, help="threads per worker")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        host=args.host,
        port=args.port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        insecure_http=args.insecure_http,
        workers=args.workers,
        threads=args.threads,
    )


class ReloadingSSLContext:
    """Builds a server SSL context from cert and key files; rebuilds when either changes."""

    def __init__(self, cert_path: str, key_path: str) -> None:
        self._cert_path = cert_path
        self._key_path = key_path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        self._context: ssl.SSLContext | None = None

    def _current_stamp(self) -> tuple[int, int, int, int]:
        cert, key = os.stat(self._cert_path), os.stat(self._key_path)
        return (cert.st_mtime_ns, cert.st_size, key.st_mtime_ns, key.st_size)

    def get(self) -> ssl.SSLContext:
        stamp = self._current_stamp()
        with self._lock:
            if self._context is None or stamp != self._stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                try:
                    context.load_cert_chain(self._cert_path, self._key_path)
                except (ssl.SSLError, OSError) as error:
                    if self._context is None:
                        raise
                    log.error(
                        "renewed certificate cert=%s key=%s cannot be loaded (%s); "
                        "keeping the previous one",
                        self._cert_path,
                        self._key_path,
                        error,
                    )
                    return self._context
                if self._context is not None:
                    log.info("serving certificate reloaded cert=%s", self._cert_path)
                self._context, self._stamp = context, stamp
            return self._context


class _GunicornApp(BaseApplication):  # type: ignore[misc]
    def __init__(self, factory: Callable[[], Any], options: ServerOptions) -> None:
        self._factory = factory
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        options = self._options
        settings: dict[str, Any] = {
            "bind": f"[{options.host}]:{options.port}"
            if ":" in options.host
            else f"{options.host}:{options.port}",
            "workers": options.workers,
            "threads": options.threads,
            "worker_class": "gthread",
            "keepalive": 75,
            "timeout": 30,
            "graceful_timeout": options.graceful_timeout_s,
            "accesslog": None,
            "errorlog": "-",
            "loglevel": "info",
            "limit_request_line": 8190,
        }
        if not options.insecure_http:
            assert options.tls_cert and options.tls_key
            reloading = ReloadingSSLContext(options.tls_cert, options.tls_key)
            settings["certfile"] = options.tls_cert
            settings["keyfile"] = options.tls_key
            settings["ssl_context"] = lambda _config, _default: reloading.get()
        for key, value in settings.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._factory()


def serve(app_factory: Callable[[], Any], options: ServerOptions) -> None:
    """Serve the app built by ``app_factory`` (called in each worker) until a signal stops it."""
    options.check()
    if not options.insecure_http:
        ReloadingSSLContext(options.tls_cert or "", options.tls_key or "").get()
    log.info(
        "serving on %s://%s:%d workers=%d threads=%d",
        options.scheme,
        options.host,
        options.port,
        options.workers,
        options.threads,
    )
    _GunicornApp(app_factory, options).run()
