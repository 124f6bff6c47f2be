"""The extender's periodic loop (``extender.every``): it calls again after a call fails, and
stops when asked."""

from __future__ import annotations

import threading

from extender.every import Every


def test_a_failing_call_is_called_again_and_stop_ends_the_thread() -> None:
    calls: list[int] = []
    third = threading.Event()

    def call() -> None:
        calls.append(len(calls))
        if len(calls) == 3:
            third.set()
        if len(calls) == 1:
            raise ConnectionError("API server gone")

    loop = Every("test loop", 0.001, call)
    loop.start()
    loop.start()  # a second start starts nothing more
    assert third.wait(10)
    loop.stop()
    assert not any(t.name == "test loop" and t.is_alive() for t in threading.enumerate())
    assert calls[:3] == [0, 1, 2]
