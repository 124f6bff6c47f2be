"""A small, fast HTTPS client of the e2e kube-apiserver for ``bench.plane.cluster``.

One kept-alive connection per thread with the admin client certificate; bodies are encoded
with orjson. Loading tens of thousands of objects through the kubernetes client's models
would cost this 2-core machine more CPU than the API server spends storing them.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson


class ApiError(RuntimeError):
    pass


class Api:
    """``request`` and a few helpers over per-thread connections to ``server``."""

    def __init__(self, server: str, *, ca: Path, cert: Path, key: Path) -> None:
        parsed = urllib.parse.urlsplit(server)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 443
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(str(cert), str(key))
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = http.client.HTTPSConnection(
                self.host, self.port, context=self.context, timeout=120
            )
            self._local.connection = connection
        return connection

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        ok: Iterable[int] = (200, 201),
    ) -> tuple[int, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(5):
            connection = self._connection()
            try:
                connection.request(method, path, body=data, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                break
            except (OSError, http.client.HTTPException):
                connection.close()
                self._local.connection = None
                if attempt == 4:
                    raise
                time.sleep(0.5 * (attempt + 1))
        if response.status == 429 or response.status >= 500:
            time.sleep(0.5)
            return self.request(method, path, body, content_type=content_type, ok=ok)
        if response.status not in ok:
            raise ApiError(f"{method} {path}: HTTP {response.status}: {payload[:300]!r}")
        return response.status, orjson.loads(payload) if payload else None

    def create(self, path: str, body: Any) -> Any:
        """POST ``body``; an object that already exists (409) is left as it is."""
        return self.request("POST", path, body, ok=(200, 201, 202, 409))[1]

    def merge_patch(self, path: str, patch: Any) -> Any:
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")[1]

    def get(self, path: str) -> Any:
        return self.request("GET", path)[1]

    def delete(self, path: str) -> None:
        self.request("DELETE", path, {"gracePeriodSeconds": 0}, ok=(200, 202, 404))

    def list_all(self, path: str, query: Mapping[str, str] | None = None) -> Iterator[Any]:
        token = ""
        while True:
            params = dict(query or {}, limit="500")
            if token:
                params["continue"] = token
            page = self.get(f"{path}?{urllib.parse.urlencode(params)}")
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def stream(self, path: str, query: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """A watch: one decoded event per line, until the server ends it."""
        connection = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=600
        )
        connection.request("GET", f"{path}?{urllib.parse.urlencode(dict(query))}")
        response = connection.getresponse()
        if response.status != 200:
            raise ApiError(f"watch {path}: HTTP {response.status}")
        try:
            while True:
                line = response.readline()  # chunked transfer decoded
                if not line:
                    return
                if line.strip():
                    yield orjson.loads(line)
        except OSError:  # socket.timeout included
            return
        finally:
            connection.close()


def in_parallel(work: Iterable[Any], task: Callable[[Any], None], *, threads: int = 6) -> int:
    """Run ``task`` over ``work`` with ``threads`` threads; how many items were done."""
    done = 0
    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(task, work, chunksize=16):
            done += 1
    return done
