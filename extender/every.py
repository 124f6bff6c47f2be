"""A call repeated every few seconds in a daemon thread of the extender's worker, outliving any
one failure (logged): the DRA node warnings and the pods to touch (:mod:`extender.retries`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Every:
    """Calls ``call`` every ``interval_s`` from :meth:`start` until :meth:`stop`; ``what``
    names it in the thread's name and the log."""

    def __init__(self, what: str, interval_s: float, call: Callable[[], object]) -> None:
        self._what = what
        self._interval_s = interval_s
        self._call = call
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._what, daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._call()
            except Exception as error:  # the loop must outlive any one failure
                log.warning("%s failed (%s); again in %.0fs", self._what, error, self._interval_s)
