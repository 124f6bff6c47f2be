"""Serve an app built from a cluster file, rebuilt when the file changes.

For the standalone servers (``--cluster-file``): before each request the file's modification
time and size are compared with those it was built from (one ``stat``); on a change the app is
rebuilt from the new file before the request is answered, so a request sent after the file was
rewritten always sees the new cluster. A file that cannot be read or parsed keeps the previous
app serving and is logged.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ReloadingApp:
    """A WSGI app that delegates to ``build(path)``, rebuilt whenever ``path`` changes."""

    def __init__(self, path: Path | str, build: Callable[[Path], WsgiApp]) -> None:
        self._path = Path(path)
        self._build = build
        self._lock = threading.Lock()
        self._stamp = self._current_stamp()
        self._app = build(self._path)

    def _current_stamp(self) -> tuple[int, int]:
        status = os.stat(self._path)
        return (status.st_mtime_ns, status.st_size)

    @property
    def app(self) -> WsgiApp:
        """The app serving now (after a reload if the file changed)."""
        try:
            stamp = self._current_stamp()
        except OSError as error:
            log.error(
                "cluster file %s unreadable (%s); serving the previous one", self._path, error
            )
            return self._app
        if stamp != self._stamp:
            with self._lock:
                if stamp != self._stamp:
                    try:
                        self._app = self._build(self._path)
                        log.info("cluster file reloaded file=%s", self._path)
                    except Exception as error:  # a half-written or invalid file
                        log.error(
                            "cluster file %s not reloaded (%s); serving the previous one",
                            self._path,
                            error,
                        )
                    self._stamp = stamp
        return self._app

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        return self.app(environ, start_response)
