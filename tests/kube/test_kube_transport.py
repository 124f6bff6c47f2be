"""The transport's answers to API Priority and Fairness: a 429 with ``Retry-After`` (the
request rejected unserved) is sent again after the wait asked, as client-go does, while the
call's budget allows; any other 429 is the caller's at once."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest

from migslice.kube import ApiError
from migslice.kube.transport import THROTTLED_TRIES
from tests.local_api import Request, local_api

THROTTLED = {"kind": "Status", "status": "Failure", "reason": "TooManyRequests", "code": 429}
THROTTLED["message"] = "Too many requests, please try again later."


class Server:
    """429 for the first ``throttled`` requests (with ``retry_after`` when set), then 200."""

    def __init__(self, throttled: int, retry_after: str | None = "0") -> None:
        self.throttled = throttled
        self.retry_after = retry_after
        self.seen: list[Request] = []

    def __call__(self, request: Request) -> tuple[int, Any, dict[str, str]]:
        self.seen.append(request)
        if len(self.seen) <= self.throttled:
            headers = {} if self.retry_after is None else {"Retry-After": self.retry_after}
            return 429, THROTTLED, headers
        return 200, {"kind": "ConfigMap", "metadata": {"name": "m"}, "data": request.body}, {}


def test_a_throttled_write_is_sent_again_after_its_retry_after_and_lands_once() -> None:
    server = Server(throttled=2, retry_after="1")
    with local_api(server) as transport:
        stored = transport.put_json("/api/v1/namespaces/n/configmaps/m", {"a": "b"}, timeout_s=5)
    assert stored["data"] == {"a": "b"}
    assert [r.method for r in server.seen] == ["PUT", "PUT", "PUT"]
    assert all(r.body == {"a": "b"} for r in server.seen)


@pytest.mark.parametrize(
    ("retry_after", "timeout_s"),
    [(None, 5.0), ("soon", 5.0), ("30", 2.0)],
    ids=["no-retry-after", "not-seconds", "past-the-budget"],
)
def test_a_429_the_call_cannot_wait_for_is_the_callers_at_once(
    retry_after: str | None, timeout_s: float
) -> None:
    server = Server(throttled=1, retry_after=retry_after)
    with local_api(server) as transport, pytest.raises(ApiError) as raised:
        transport.get_json("/api/v1/namespaces/n/configmaps/m", {}, timeout_s=timeout_s)
    assert raised.value.status == 429
    assert "Too many requests" in str(raised.value)
    assert len(server.seen) == 1


def test_a_call_throttled_every_time_gives_up_after_client_gos_tries() -> None:
    server = Server(throttled=THROTTLED_TRIES + 5)
    with local_api(server) as transport, pytest.raises(ApiError) as raised:
        transport.post_json("/api/v1/namespaces/n/configmaps", {"a": "b"})
    assert raised.value.status == 429
    assert len(server.seen) == THROTTLED_TRIES == 10


def test_a_try_after_a_429_reads_within_what_is_left_of_the_calls_budget() -> None:
    """A ledger call has 3 s under kube-apiserver's 5 s webhook timeout: after a 1 s wait the
    next try gives up within the 2 s left, not after 3 more."""
    slow = threading.Event()

    class Slow(Server):
        def __call__(self, request: Request) -> tuple[int, Any, dict[str, str]]:
            if len(self.seen) == self.throttled:
                self.seen.append(request)
                slow.wait(10)  # the answer after the 429 never comes in time
                return 200, {}, {}
            return super().__call__(request)

    server = Slow(throttled=1, retry_after="1")
    with local_api(server) as transport, pytest.raises(ApiError) as raised:
        transport.get_json("/api/v1/namespaces/n/configmaps/m", {}, timeout_s=3)
    slow.set()
    assert raised.value.status == 0 and len(server.seen) == 2
    found = re.search(r"read timeout=([0-9.]+)", str(raised.value))
    assert found is not None, str(raised.value)
    assert float(found.group(1)) <= 2.0  # 3 s, less the 1 s the 429 asked to wait
