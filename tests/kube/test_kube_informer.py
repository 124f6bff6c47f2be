"""The list+watch informer against a real HTTP server replaying recorded API answers."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from migslice.kube import Backoff, Informer, KubernetesTransport, ResourceRef
from migslice.kube.informer import collection_paused, continue_token_of
from tests.local_api import local_api


class RecordedApi:
    """Answers GETs from a script: each entry is (status, body, or a list of watch events)."""

    def __init__(self) -> None:
        self.lists: list[tuple[int, Any]] = []
        self.watches: list[tuple[int, Any]] = []
        self.requests: list[dict[str, str]] = []

    def answer(self, query: dict[str, str]) -> tuple[int, Any]:
        self.requests.append(query)
        script = self.watches if query.get("watch") == "true" else self.lists
        if script:
            return script.pop(0)
        time.sleep(0.05)  # nothing scripted: an idle watch that ends quietly
        return 200, []


@pytest.fixture
def api() -> Iterator[tuple[RecordedApi, KubernetesTransport]]:
    recorded = RecordedApi()
    with local_api(lambda request: recorded.answer({"path": request.path, **request.query})) as t:
        yield recorded, t


def node(name: str, version: str, gpus: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": version}, "status": {"gpus": gpus}}


def node_list(items: list[dict[str, Any]], version: str, token: str = "") -> dict[str, Any]:
    metadata = {"resourceVersion": version, **({"continue": token} if token else {})}
    return {"kind": "NodeList", "apiVersion": "v1", "metadata": metadata, "items": items}


class RecordingSink:
    def __init__(self) -> None:
        self.items: dict[str, int] = {}
        self.calls: list[str] = []

    def replace(self, items: Any) -> None:
        self.items = dict(items)
        self.calls.append(f"replace {sorted(items)}")

    def upsert(self, key: str, item: int) -> None:
        self.items[key] = item
        self.calls.append(f"upsert {key}")

    def delete(self, key: str) -> None:
        self.items.pop(key, None)
        self.calls.append(f"delete {key}")


def gpus_or_none(raw: dict[str, Any]) -> int | None:
    gpus = raw.get("status", {}).get("gpus", 0)
    return int(gpus) if gpus else None


def make_informer(transport: KubernetesTransport, sink: RecordingSink) -> Informer[int]:
    return Informer(
        name="nodes",
        transport=transport,
        resource=ResourceRef("/api/v1/nodes", label_selector="gpu=yes"),
        project=gpus_or_none,
        sink=sink,
        page_size=2,
        watch_timeout_s=1,
        backoff=Backoff(initial_s=0.01, max_s=0.02),
    )


def wait_for(condition: Any, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_lists_in_pages_then_applies_watch_events_from_the_lists_version(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.lists = [
        (200, node_list([node("n1", "5"), node("n2", "6")], "", token="page-2")),
        (200, node_list([node("n3", "7", gpus=0)], "100")),
    ]
    recorded.watches = [
        (
            200,
            [
                {"type": "ADDED", "object": node("n4", "101", gpus=4)},
                {"type": "MODIFIED", "object": node("n1", "102", gpus=8)},
                {"type": "DELETED", "object": node("n2", "103")},
                {"type": "MODIFIED", "object": node("n4", "104", gpus=0)},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "105"}}},
            ],
        ),
    ]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    informer.start()
    try:
        wait_for(lambda: informer.resource_version == "105")
    finally:
        informer.stop()
    assert sink.calls == [
        "replace ['n1', 'n2']",
        "upsert n4",
        "upsert n1",
        "delete n2",
        "delete n4",
    ]
    assert sink.items == {"n1": 8}
    assert informer.synced
    first, second, watch = recorded.requests[:3]
    assert first["labelSelector"] == "gpu=yes" and first["limit"] == "2"
    assert second["continue"] == "page-2"
    assert watch["watch"] == "true" and watch["resourceVersion"] == "100"
    assert watch["allowWatchBookmarks"] == "true"
    assert recorded.requests[3]["resourceVersion"] == "105"


@pytest.mark.parametrize("how", ["error-event", "http-status"])
def test_410_gone_makes_it_list_again(
    api: tuple[RecordedApi, KubernetesTransport], how: str
) -> None:
    recorded, transport = api
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    recorded.lists = [
        (200, node_list([node("n1", "5")], "100")),
        (200, node_list([node("n9", "300")], "300")),
    ]
    recorded.watches = [
        (200, [{"type": "ERROR", "object": gone}]) if how == "error-event" else (410, gone)
    ]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    informer.start()
    try:
        wait_for(lambda: informer.stats.lists == 2)
    finally:
        informer.stop()
    assert sink.items == {"n9": 1}
    assert informer.stats.relists_gone == 1
    assert informer.stats.errors == 0


def test_an_expired_continue_token_lists_again_whole_in_one_request(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    """client-go's pager does the same: a list that takes longer than a continue token lives
    would, paged again, expire again for ever (it never synced)."""
    recorded, transport = api
    # kube-apiserver's answer to a continue token older than etcd's compaction window.
    expired = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {"continue": "inconsistent-token"},
        "status": "Failure",
        "message": "The provided continue parameter is too old to display a consistent list "
        "result. You can start a new list without the continue parameter, or use the continue "
        "token in this response to retrieve the remainder of the results.",
        "reason": "Expired",
        "code": 410,
    }
    recorded.lists = [
        (200, node_list([node("n1", "5"), node("n2", "6")], "100", token="page-2")),
        (410, expired),
        (200, node_list([node("n1", "5"), node("n2", "6"), node("n3", "7")], "400")),
    ]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    informer.start()
    try:
        wait_for(lambda: informer.synced)
    finally:
        informer.stop()
    assert sink.calls == ["replace ['n1', 'n2', 'n3']"]  # never a partial list
    assert informer.stats.relists_gone == 1 and informer.stats.errors == 0
    assert informer.resource_version == "400"
    first, second, restart = recorded.requests[:3]
    assert second["continue"] == "page-2"
    assert "continue" not in restart and "limit" not in restart and "limit" in first


def test_api_errors_back_off_and_recover_while_staleness_shows(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    failure = {"kind": "Status", "code": 500, "message": "etcdserver: request timed out"}
    recorded.lists = [(500, failure), (503, failure), (200, node_list([node("n1", "5")], "9"))]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    assert not informer.synced and informer.staleness_s() is None
    informer.start()
    try:
        wait_for(lambda: informer.synced)
    finally:
        informer.stop()
    assert informer.stats.errors == 2
    assert "etcdserver: request timed out" in informer.stats.last_error
    staleness = informer.staleness_s()
    assert staleness is not None and staleness < 5
    assert sink.items == {"n1": 1}


def test_backoff_doubles_up_to_its_cap() -> None:
    backoff = Backoff(initial_s=0.5, max_s=4.0)
    assert [backoff.delay_s(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_an_object_the_projection_cannot_read_is_skipped_and_the_cache_still_syncs(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    odd = {"metadata": {"name": "odd", "resourceVersion": "6"}, "status": {"gpus": "many"}}
    recorded.lists = [(200, node_list([node("n1", "5", gpus=2), odd], "100"))]
    recorded.watches = [
        (
            200,
            [
                {
                    "type": "MODIFIED",
                    "object": {**odd, "metadata": {"name": "odd", "resourceVersion": "101"}},
                },
                {"type": "ADDED", "object": node("n2", "102", gpus=1)},
            ],
        )
    ]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    informer.start()
    try:
        wait_for(lambda: informer.resource_version == "102")
    finally:
        informer.stop()
    assert informer.synced
    assert sink.items == {"n1": 2, "n2": 1}
    assert informer.stats.skipped == 2
    assert "odd" in informer.stats.last_error


def test_backoff_waits_are_shortened_by_at_most_their_jitter() -> None:
    backoff = Backoff(initial_s=0.5, max_s=4.0, jitter=0.2)
    assert backoff.wait_s(5, 0.0) == 4.0
    assert backoff.wait_s(5, 0.999) == pytest.approx(3.2, abs=0.01)


def test_a_failed_watch_disconnects_the_cache_until_it_has_listed_again(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    failure = {"kind": "Status", "code": 503, "message": "etcd unavailable"}
    recorded.lists = [
        (200, node_list([node("n1", "5")], "9")),
        (500, failure),
        (200, node_list([node("n2", "20")], "20")),
    ]
    recorded.watches = [(503, failure)]
    sink = RecordingSink()
    informer = make_informer(transport, sink)
    informer.backoff = Backoff(initial_s=0.3, max_s=0.3)
    assert informer.blind_s() is None and not informer.connected
    informer.start()
    try:
        wait_for(lambda: informer.stats.errors == 1)
        assert not informer.connected
        blind = informer.blind_s()
        assert blind is not None and blind >= 0.0
        wait_for(lambda: informer.stats.lists == 2)
        wait_for(lambda: informer.connected)
    finally:
        informer.stop()
    assert informer.stats.errors == 2
    assert sink.items == {"n2": 1}


class ManualClock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def test_a_quiet_watch_stays_connected_and_one_unanswered_past_its_timeout_does_not(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.lists = [(200, node_list([node("n1", "5")], "9"))]
    clock = ManualClock()
    informer = make_informer(transport, RecordingSink())
    informer.clock = clock
    informer.watch_timeout_s = 60
    informer.list_once()
    assert informer.connected
    clock.now_s += 74.0  # a quiet watch: no event yet, the server has not ended it yet
    assert informer.connected
    clock.now_s += 6.0  # 80 s without an answer: 5 s past timeout + grace
    assert not informer.connected and informer.blind_s() == pytest.approx(5.0)


def test_a_hung_watch_that_finally_fails_stays_blind_from_when_it_became_overdue(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    """A watch to a stalled API server is counted blind once overdue (75 s), and its read
    times out later (90 s): the failure must not start the blindness again from 0, which made
    /readyz answer 200 mid-outage on a cache 90 s old."""
    recorded, transport = api
    recorded.lists = [(200, node_list([node("n1", "5")], "9"))]
    clock = ManualClock()
    released = threading.Event()
    answered = recorded.answer

    def answer(query: dict[str, str]) -> tuple[int, Any]:
        if query.get("watch") == "true":
            released.wait(5.0)  # the stalled read, until the test's clock says 90 s
            return 500, {"kind": "Status", "status": "Failure", "code": 500}
        if recorded.lists:
            return answered(query)
        return 503, {"kind": "Status", "status": "Failure", "code": 503}  # still away

    recorded.answer = answer  # type: ignore[method-assign]
    informer = make_informer(transport, RecordingSink())
    informer.clock = clock
    informer.watch_timeout_s = 60
    informer.start()
    try:
        wait_for(lambda: informer.synced)
        clock.now_s += 80.0
        assert informer.blind_s() == pytest.approx(5.0)
        clock.now_s += 10.0
        released.set()
        wait_for(lambda: informer.stats.errors >= 1)
        assert informer.blind_s() == pytest.approx(15.0)
        assert not informer.connected
    finally:
        released.set()
        informer.stop()


def test_a_watch_that_ends_at_once_and_a_410_every_time_back_off(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    """A server (or proxy) that closes every watch at once, or answers every watch 410, was
    asked again back to back: thousands of watches and full lists a second."""
    for watch in ((200, []), (410, {"kind": "Status", "status": "Failure", "code": 410})):
        recorded, transport = api
        recorded.requests.clear()
        recorded.lists = [(200, node_list([node("n1", "5")], "9"))] * 1000
        recorded.watches = [watch] * 1000
        informer = make_informer(transport, RecordingSink())
        informer.backoff = Backoff(initial_s=0.2, max_s=0.4)
        informer.start()
        try:
            wait_for(lambda i=informer: i.synced)
            time.sleep(1.0)
        finally:
            informer.stop()
        watches = sum(1 for q in recorded.requests if q.get("watch") == "true")
        assert 1 <= watches <= 8, (watch[0], watches)


class PageRecordingSink:
    """A PageSink that records its calls; with ``on_first``, its first upsert calls it first."""

    def __init__(self, on_first: Any = None) -> None:
        self.on_first = on_first
        self.items: dict[str, int] = {}
        self.calls: list[str] = []

    def upsert(self, key: str, item: int) -> None:
        if not self.calls and self.on_first is not None:
            self.on_first()
        self.items[key] = item
        self.calls.append(f"upsert {key}")

    def delete(self, key: str) -> None:
        self.items.pop(key, None)
        self.calls.append(f"delete {key}")

    def listed(self, keys: frozenset[str]) -> None:
        self.items = {k: v for k, v in self.items.items() if k in keys}
        self.calls.append(f"listed {sorted(keys)}")


def paged_informer(transport: KubernetesTransport, sink: PageRecordingSink) -> Informer[int]:
    return Informer(
        name="nodes",
        transport=transport,
        resource=ResourceRef("/api/v1/nodes"),
        project=gpus_or_none,
        sink=sink,
        page_size=2,
        watch_timeout_s=1,
        backoff=Backoff(initial_s=0.01, max_s=0.02),
    )


def test_a_page_sink_gets_each_page_as_it_arrives_then_the_whole_key_set(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.lists = [
        (200, node_list([node("n1", "5"), node("n2", "6")], "", token="page-2")),
        (200, node_list([node("n3", "7", gpus=0), node("n4", "8")], "100")),
    ]
    sink = PageRecordingSink()
    informer = paged_informer(transport, sink)
    informer.list_once()
    assert sink.calls == ["upsert n1", "upsert n2", "upsert n4", "listed ['n1', 'n2', 'n4']"]
    assert informer.synced and informer.resource_version == "100"
    assert [r.get("continue") for r in recorded.requests] == [None, "page-2"]
    recorded.lists = [(200, node_list([node("n2", "9")], "101"))]
    informer.list_once()  # a re-list: n1 and n4 are gone
    assert sink.calls[-2:] == ["upsert n2", "listed ['n2']"]
    assert sink.items == {"n2": 1}


def test_the_next_page_is_asked_for_while_the_sink_works_on_this_one(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    """kube-apiserver writes a list's metadata (and its continue token) before its items:
    the informer reads the token from the answer's head and asks for the next page before it
    decodes and delivers this one. Without that, the sink's first upsert waits in vain."""
    recorded, transport = api
    recorded.lists = [
        (200, node_list([node("n1", "5")], "", token="page-2")),
        (200, node_list([node("n2", "6")], "", token="page-3")),
        (200, node_list([node("n3", "7")], "100")),
    ]
    release = threading.Event()
    answer = recorded.answer

    def held_answer(query: dict[str, str]) -> tuple[int, Any]:
        if query.get("continue") == "page-2":
            release.wait(5)  # page 2 is answered once the sink has seen page 1
        return answer(query)

    recorded.answer = held_answer  # type: ignore[method-assign]
    fetchers: list[threading.Thread] = []

    def page_two_asked_for() -> None:
        wait_for(lambda: any(t.name.startswith("list-") for t in threading.enumerate()))
        fetchers.extend(t for t in threading.enumerate() if t.name.startswith("list-"))
        release.set()

    sink = PageRecordingSink(on_first=page_two_asked_for)
    paged_informer(transport, sink).list_once()
    assert sink.calls == ["upsert n1", "upsert n2", "upsert n3", "listed ['n1', 'n2', 'n3']"]
    assert [r.get("continue") for r in recorded.requests] == [None, "page-2", "page-3"]
    # The page asked for ahead runs in a daemon thread: one stuck on a dead API server never
    # holds up the process's exit.
    assert fetchers and all(thread.daemon for thread in fetchers)


@pytest.mark.parametrize(
    ("head", "token"),
    [
        (
            b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9",'
            b'"continue":"eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ","remainingItemCount":3},"items":[]}',
            "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ",
        ),
        (b'{"kind": "NodeList", "apiVersion": "v1", "metadata": {"continue": "a-b_c="}}', "a-b_c="),
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[]}', ""),
        (b'{"items":[],"metadata":{"continue":"late"},"kind":"PodList","apiVersion":"v1"}', ""),
        (b'{"kind":"PodList","apiVersion":"v1","metadata":{"labels":{"continue":"x"}}}', ""),
        (b"not json at all", ""),
    ],
)
def test_the_continue_token_is_read_from_the_head_only_as_kube_apiserver_writes_it(
    head: bytes, token: str
) -> None:
    assert continue_token_of(head) == token


def test_pages_are_decoded_and_projected_with_the_cyclic_collector_held_off(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.lists = [
        (200, node_list([node("n1", "5"), node("n2", "6")], "", token="page-2")),
        (200, node_list([node("n3", "7")], "100")),
    ]
    seen: list[bool] = []

    def project(raw: dict[str, Any]) -> int | None:
        seen.append(gc.isenabled())
        return gpus_or_none(raw)

    informer = paged_informer(transport, PageRecordingSink())
    informer.project = project
    assert gc.isenabled()
    informer.list_once()
    assert seen == [False, False, False]
    assert gc.isenabled()  # on again once the list is taken


def test_collection_pauses_nest_across_threads_and_keep_a_collector_that_was_off_off() -> None:
    inner = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        with collection_paused():
            inner.set()
            release.wait(5)

    assert gc.isenabled()
    with collection_paused():
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner.wait(5)
    assert not gc.isenabled()  # the other thread's pause still holds
    release.set()
    thread.join(5)
    assert gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()  # off before: left off
    finally:
        gc.enable()


def test_a_410_after_a_watch_that_ended_as_watches_do_lists_again_at_once(
    api: tuple[RecordedApi, KubernetesTransport], caplog: pytest.LogCaptureFixture
) -> None:
    """Only 410s in a row back off: on a quiet resource (no events for hours) the count grew
    from one incident to the next, and a later 410 waited the longest backoff, blind."""
    recorded, transport = api
    gone = (410, {"kind": "Status", "status": "Failure", "code": 410})
    recorded.lists = [(200, node_list([node("n1", "5")], "9"))] * 3
    recorded.watches = [gone, (200, []), gone]
    informer = make_informer(transport, RecordingSink())
    informer.backoff = Backoff(initial_s=0.2, max_s=0.4)
    with caplog.at_level(logging.INFO, logger="migslice.kube.informer"):
        informer.start()
        try:
            wait_for(lambda: informer.stats.relists_gone >= 2)
        finally:
            informer.stop()
    expired = [r.getMessage() for r in caplog.records if "expired (410 Gone" in r.getMessage()]
    assert len(expired) >= 2 and all(m.endswith("in 0.0s") for m in expired[:2]), expired
