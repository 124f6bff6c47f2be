"""The serving certificate, re-read when its files change (see ``server.py``); with a client CA,
clients may present a certificate signed by it, which the handshake verifies (see
``migslice.serving.clients`` for who must)."""

from __future__ import annotations

import logging
import os
import ssl
import threading

log = logging.getLogger(__name__)


class ReloadingSSLContext:
    """Builds a server SSL context from cert and key files; rebuilds when either changes."""

    def __init__(
        self, cert_path: str | None, key_path: str | None, client_ca_path: str | None = None
    ) -> None:
        self._cert_path = cert_path or ""
        self._key_path = key_path or ""
        self._client_ca_path = client_ca_path or ""
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = None
        self._context: ssl.SSLContext | None = None

    def _current_stamp(self) -> tuple[int, ...]:
        paths = [self._cert_path, self._key_path]
        if self._client_ca_path:
            paths.append(self._client_ca_path)
        stamp: list[int] = []
        for path in paths:
            found = os.stat(path)
            stamp += (found.st_mtime_ns, found.st_size)
        return tuple(stamp)

    def get(self) -> ssl.SSLContext:
        """The context for a new connection. The first load raises ValueError naming the
        files; a later change that cannot be loaded keeps the previous certificate."""
        try:
            stamp = self._current_stamp()
        except OSError as error:
            if self._context is None and error.filename == self._client_ca_path:
                raise self._unusable_client_ca(error) from None
            if self._context is None:
                raise self._unusable(error) from None
            return self._context
        with self._lock:
            if self._context is None or stamp != self._stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                context.set_alpn_protocols(["http/1.1"])
                try:
                    context.load_cert_chain(self._cert_path, self._key_path)
                except (ssl.SSLError, OSError) as error:
                    if self._context is None:
                        raise self._unusable(error) from None
                    log.error(
                        "renewed certificate cert=%s key=%s cannot be loaded (%s); "
                        "keeping the previous one",
                        self._cert_path,
                        self._key_path,
                        error,
                    )
                    self._stamp = stamp
                    return self._context
                if self._client_ca_path:
                    # Optional at the handshake: probes and scrapers present none; the app
                    # refuses an admission or extender call without one.
                    context.verify_mode = ssl.CERT_OPTIONAL
                    try:
                        context.load_verify_locations(cafile=self._client_ca_path)
                    except (ssl.SSLError, OSError) as error:
                        if self._context is None:
                            raise self._unusable_client_ca(error) from None
                        log.error(
                            "renewed client CA file=%s cannot be loaded (%s); "
                            "keeping the previous certificate and client CA",
                            self._client_ca_path,
                            error,
                        )
                        self._stamp = stamp
                        return self._context
                if self._context is not None:
                    log.info("serving certificate reloaded cert=%s", self._cert_path)
                self._context, self._stamp = context, stamp
            return self._context

    def _unusable_client_ca(self, error: Exception) -> ValueError:
        reason = _reason(error, "no PEM certificate in it")
        return ValueError(
            f"--client-ca-file {self._client_ca_path}: cannot load the client CA ({reason})"
        )

    def _unusable(self, error: Exception) -> ValueError:
        reason = _reason(error, "not a PEM certificate chain and its matching private key")
        files = f"--tls-cert {self._cert_path} --tls-key {self._key_path}"
        return ValueError(f"{files}: cannot load the serving certificate ({reason})")


def _reason(error: Exception, not_pem: str) -> str:
    """Why a file could not be loaded: ``not_pem`` (with OpenSSL's reason) for one that is no
    PEM of what it should hold, else the system's or the error's own words."""
    if isinstance(error, ssl.SSLError):
        detail = f": {error.reason.lower().replace('_', ' ')}" if error.reason else ""
        return f"{not_pem}{detail}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)
