"""A ``migslice <command>`` server as a child process, for the demo and the e2e harness.

It runs exactly as in a cluster (gunicorn, TLS from ``migslice certs``) on 127.0.0.1 and is
ready when ``/readyz`` answers 200 over TLS, verified against our CA with the Service DNS name
as SNI. :meth:`ServerProcess.request` is a kept-alive HTTPS client of it.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migslice.errors import MigsliceError
from migslice.serving.certs import TlsBundle


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ServingError(MigsliceError):
    """Root of the errors of the serving layer."""


class ServerStartError(ServingError, RuntimeError):
    """The server exited or did not become ready; the message carries its log's tail."""


_CLOSED_BEFORE_ANSWER = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError)
"""How a request fails on a connection the server closed while it was idle."""


class _StaleConnectionError(OSError):
    """The connection was closed before any answer (see :meth:`ServerProcess.request`)."""


@dataclass
class ServerProcess:
    """``migslice <command> --host 127.0.0.1 --port P --tls-cert ... <args>``; restartable."""

    command: str
    args: Sequence[str]
    bundle: TlsBundle
    log_path: Path
    server_name: str
    port: int = field(default_factory=free_port)
    cwd: Path | None = None
    client_cert: tuple[Path, Path] | None = None
    """A client certificate and key to present (a server run with ``--client-ca-file``)."""
    client_names: tuple[str, ...] = ()
    """Run with ``--client-ca-file`` (the bundle's CA) and ``--client-name`` these: the
    service's verbs then answer only callers presenting such a certificate."""
    process: subprocess.Popen[bytes] | None = None
    _connection: http.client.HTTPSConnection | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.bundle.ca_cert))
        if self.client_cert is not None:
            context.load_cert_chain(str(self.client_cert[0]), str(self.client_cert[1]))
        return context

    def command_line(self) -> list[str]:
        """The process to start: this interpreter's ``migslice`` (a subclass may wrap it)."""
        return [
            sys.executable,
            "-m",
            "migslice.cli",
            self.command,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--tls-cert",
            str(self.bundle.cert),
            "--tls-key",
            str(self.bundle.key),
            *self.client_arguments(str(self.bundle.ca_cert)),
            *self.args,
        ]

    def client_arguments(self, ca_path: str) -> list[str]:
        """``--client-ca-file ca_path --client-name ...`` when :attr:`client_names` is set."""
        if not self.client_names:
            return []
        return [f"--client-ca-file={ca_path}", f"--client-name={','.join(self.client_names)}"]

    def start(self, timeout_s: float = 60.0) -> ServerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command_line(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise ServerStartError(f"migslice {self.command} exited:\n{self.log_tail()}")
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"migslice {self.command} not ready in {timeout_s:.0f}s:\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One HTTPS request on a kept-alive connection (our CA, SNI = ``server_name``).

        A kept-alive connection the server has closed meanwhile (its keep-alive timeout, 60 s
        by default, ends idle connections) fails before any answer: the request is sent once
        more on a new connection, as HTTP clients do; a new connection is never retried."""
        reused = self._connection is not None
        try:
            return self._request_once(method, path, body)
        except _StaleConnectionError:
            if not reused:
                raise
            return self._request_once(method, path, body)

    def _request_once(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if self._connection is None:
            connection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10)
            connection.sock = self.context().wrap_socket(
                socket.create_connection(("127.0.0.1", self.port), timeout=10),
                server_hostname=self.server_name,
            )
            self._connection = connection
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data else {}
        try:
            self._connection.request(method, path, body=data, headers=headers)
            response = self._connection.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException) as error:
            self._connection.close()
            self._connection = None
            message = f"migslice {self.command} {method} {path} failed: {error}"
            if isinstance(error, _CLOSED_BEFORE_ANSWER):
                raise _StaleConnectionError(message) from None
            raise OSError(message) from None
        try:
            return response.status, json.loads(payload) if payload else None
        except ValueError:
            return response.status, payload.decode(errors="replace")

    def stop(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
