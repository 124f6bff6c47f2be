"""A real HTTP server on 127.0.0.1 standing in for kube-apiserver, for tests of migslice.kube.

The test supplies ``answer(request) -> (status, body)`` or ``(status, body, headers)``:
``request`` has the method, path,
query, Content-Type and decoded JSON body; a list ``body`` is sent as newline-delimited watch
events, anything else as one JSON document. The transport is the project's own
``KubernetesTransport`` over the kubernetes client, pointed at the server.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from migslice.kube import KubernetesTransport


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any
    user_agent: str | None = None


Answer = Callable[[Request], tuple[int, Any] | tuple[int, Any, dict[str, str]]]


@contextmanager
def local_api(answer: Answer) -> Iterator[KubernetesTransport]:
    with local_api_url(answer) as url:
        configuration = client.Configuration()
        configuration.host = url
        api_client = client.ApiClient(configuration)
        try:
            yield KubernetesTransport(api_client)
        finally:
            api_client.close()


UNAUTHORIZED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "Unauthorized",
    "reason": "Unauthorized",
    "code": 401,
}
"""kube-apiserver's answer (401) to every request of a token or certificate it does not know."""


def kubeconfig_file(folder: Path, url: str) -> Path:
    """A kubeconfig in ``folder`` whose only context reaches ``url`` with a token."""
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


@contextmanager
def local_api_url(answer: Answer) -> Iterator[str]:
    """The server alone: its base URL (for a kubeconfig that a command loads itself)."""

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            url = urllib.parse.urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            request = Request(
                self.command,
                url.path,
                dict(urllib.parse.parse_qsl(url.query)),
                self.headers.get("Content-Type"),
                body,
                self.headers.get("User-Agent"),
            )
            status, reply, *more = answer(request)
            headers: dict[str, str] = more[0] if more else {}
            if isinstance(reply, list):
                payload = b"".join(json.dumps(event).encode() + b"\n" for event in reply)
            else:
                payload = json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout test)

        do_GET = do_PUT = do_POST = do_PATCH = do_DELETE = _serve  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
