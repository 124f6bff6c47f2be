"""A preemptor's nominated node, judged again once the extender's pod cache has caught up
with kube-scheduler's.

kube-scheduler evicts a preemptor's victims, nominates the pod to their node and tries it
there first (``evaluateNominatedNode``) with its own cache. A victim deleted at once (grace
period 0) may be gone from that cache a moment before the extender's watch says so; answered
"full" by the extender, the pod fitted no node and kube-scheduler preempted again on another
node (seen on the real control plane on a loaded 2-core machine: both victims evicted).

So when a pod nominated to a node fits no node sent, and the extender's cache still holds a
bound pod of lower priority there (a victim, maybe leaving), the filter waits for a change to
that node's pods and judges again, for :data:`CATCH_UP_S` at most in all. A node full for
another reason is answered as before, only later, and well inside kube-scheduler's extender
timeout (the chart's ``scheduler.extenderTimeout``, 2 s).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: The longest one filter call waits for the cache to change the nominated node.
CATCH_UP_S = 0.8


class NodeChanges:
    """Wakes filter calls waiting for the index to change a node (an index listener)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._waiting: Counter[str] = Counter()
        self._seen: dict[str, int] = {}
        self._everything = 0

    def __call__(self, name: str | None) -> None:
        """The index dropped node ``name`` (None: every node)."""
        if name is not None and name not in self._waiting:
            return  # nobody waits for it (read without the lock: a waiter re-judges first)
        with self._changed:
            if name is None:
                self._everything += 1
            elif name in self._waiting:
                self._seen[name] = self._seen.get(name, 0) + 1
            self._changed.notify_all()

    @contextmanager
    def watching(self, name: str) -> Iterator[Callable[[], bool]]:
        """Watch node ``name``; the ``wait()`` given says whether it changed since the watch
        began or the last ``wait()``, waiting until it does or :data:`CATCH_UP_S` from the
        start is spent."""
        deadline = time.monotonic() + CATCH_UP_S
        with self._changed:
            self._waiting[name] += 1
            mark = self._mark(name)

        def wait() -> bool:
            nonlocal mark
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self._changed:
                if not self._changed.wait_for(lambda: self._mark(name) != mark, left):
                    return False
                mark = self._mark(name)
                return True

        try:
            yield wait
        finally:
            with self._changed:
                self._waiting[name] -= 1
                if self._waiting[name] <= 0:
                    del self._waiting[name]
                    self._seen.pop(name, None)

    def _mark(self, name: str) -> tuple[int, int]:
        return (self._everything, self._seen.get(name, 0))
