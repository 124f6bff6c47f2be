"""The TenantPolicy status writer against a real HTTP server: what it PATCHes, when it stays
quiet, and how it rides out deleted policies and API errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from harness.builders import make_node, make_pod, make_policy
from migslice.admission.status import StatusUpdate
from migslice.kube import Backoff, KubernetesTransport
from migslice.kube.status import StatusWriter, merge_patch, status_path
from tests.local_api import Request, local_api
from webhook.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
PATH = "/apis/migslice.io/v1alpha1/tenantpolicies/team-a/status"


class RecordedApi:
    """Records every request; answers from ``answers`` by path (default 200 with ``{}``)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, list[int]] = {}
        self.lock = threading.Lock()

    def answer(self, request: dict[str, Any]) -> int:
        with self.lock:
            self.requests.append(request)
            script = self.answers.get(request["path"])
            return script.pop(0) if script else 200


@pytest.fixture
def api() -> Iterator[tuple[RecordedApi, KubernetesTransport]]:
    recorded = RecordedApi()

    def answer(request: Request) -> tuple[int, Any]:
        status = recorded.answer(
            {
                "method": request.method,
                "path": request.path,
                "content_type": request.content_type,
                "body": request.body,
            }
        )
        if status == 200:
            return status, {"kind": "TenantPolicy", **request.body}
        return status, {"kind": "Status", "code": status, "message": f"scripted {status}"}

    with local_api(answer) as transport:
        yield recorded, transport


def tenant_state(status: dict[str, Any] | None = None) -> ClusterState:
    """team-a with a quota of 8 compute slices and one running medium (2g.20gb) pod."""
    state = ClusterState()
    raw_policy = make_policy(generation=2, quota={"computeSlices": 8})
    if status is not None:
        raw_policy["status"] = status
    state.upsert_policy(raw_policy)
    state.upsert_node(make_node("gpu-1"))
    state.upsert_pod(make_pod("p1", profile="2g.20gb"))
    return state


def make_writer(source: Any, transport: KubernetesTransport, **kw: Any) -> StatusWriter:
    kw.setdefault("backoff", Backoff(initial_s=0.01, max_s=0.02))
    return StatusWriter(source, transport, wall_clock=lambda: NOW, **kw)


def wait_for(condition: Any, timeout_s: float = 3.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


EXPECTED_STATUS = {
    "observedGeneration": 2,
    "used": {"instances": 1, "computeSlices": 2, "memorySlices": 2, "profiles": {"2g.20gb": 1}},
    "quotaSummary": "2/8 compute slices",
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Active",
            "message": 'TenantPolicy "team-a" generation 2 is in force for admission',
            "lastTransitionTime": "2025-03-01T12:00:00Z",
            "observedGeneration": 2,
        },
        {
            "type": "QuotaExhausted",
            "status": "False",
            "reason": "WithinQuota",
            "message": 'tenant "team-a" uses 2/8 compute slices',
            "lastTransitionTime": "2025-03-01T12:00:00Z",
            "observedGeneration": 2,
        },
    ],
}


def test_a_new_status_is_merge_patched_onto_the_status_subresource(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    result = make_writer(tenant_state(), transport).sync_once()
    assert (result.patched, result.failed) == (1, 0)
    assert recorded.requests == [
        {
            "method": "PATCH",
            "path": PATH,
            "content_type": "application/merge-patch+json",
            "body": {"status": EXPECTED_STATUS},
        }
    ]


def test_only_what_changed_is_patched_and_removed_keys_of_its_own_are_nulled(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    old = json.loads(json.dumps(EXPECTED_STATUS))
    old["used"] = {"instances": 2, "computeSlices": 3, "memorySlices": 3}
    old["used"]["profiles"] = {"2g.20gb": 1, "1g.10gb": 1}
    old["quotaSummary"] = "3/8 compute slices"
    old["conditions"][1]["message"] = 'tenant "team-a" uses 3/8 compute slices'
    old["placement"] = "a newer version's field: left as it is"
    make_writer(tenant_state(status=old), transport).sync_once()
    assert recorded.requests[0]["body"] == {
        "status": {
            "used": {
                "instances": 1,
                "computeSlices": 2,
                "memorySlices": 2,
                "profiles": {"1g.10gb": None},
            },
            "quotaSummary": "2/8 compute slices",
            "conditions": EXPECTED_STATUS["conditions"],
        }
    }


def test_a_status_the_cache_already_holds_is_not_patched(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    result = make_writer(tenant_state(status=EXPECTED_STATUS), transport).sync_once()
    assert (result.patched, result.current) == (0, 1)
    assert recorded.requests == []


def test_a_patch_is_not_sent_again_while_the_cache_has_not_caught_up(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    state = tenant_state()
    writer = make_writer(state, transport)
    writer.sync_once()
    assert writer.sync_once().current == 1
    state.upsert_pod(make_pod("p2", profile="1g.10gb"))  # usage changes: a new patch
    writer.sync_once()
    assert len(recorded.requests) == 2
    assert recorded.requests[1]["body"]["status"]["quotaSummary"] == "3/8 compute slices"


class ScriptedSource:
    """A StatusSource with fixed updates: each policy's desired status is ``{"quotaSummary"}``."""

    def __init__(self, *names: str, ready: bool = True) -> None:
        self.names = names
        self.ready = ready

    def is_ready(self) -> bool:
        return self.ready

    def policy_statuses(self, now: datetime) -> Sequence[StatusUpdate]:
        return [
            StatusUpdate(n, None, {"quotaSummary": f"{n} 1 compute slices"}) for n in self.names
        ]


def test_a_deleted_policy_and_api_errors_are_counted_not_raised_and_retried(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.answers = {
        status_path("gone"): [404],
        status_path("busy"): [409],
        status_path("broken"): [500],
    }
    writer = make_writer(ScriptedSource("gone", "busy", "broken", "fine"), transport)
    first = writer.sync_once()
    assert (first.patched, first.gone, first.conflicts, first.failed) == (1, 1, 1, 1)
    assert writer.stats.errors == 1 and "scripted 500" in writer.stats.last_error
    second = writer.sync_once()
    assert (second.patched, second.current) == (3, 1)
    assert [r["path"].split("/")[-2] for r in recorded.requests] == [
        "gone",
        "busy",
        "broken",
        "fine",
        "gone",
        "busy",
        "broken",
    ]


def test_a_refused_status_is_not_sent_again_until_it_changes_and_holds_back_no_other(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    # A 422 would come back on every try; backing off for it (to a minute) held back every
    # other policy's status, each sync then waiting out the backoff instead of a poke.
    recorded, transport = api
    recorded.answers = {status_path("bad"): [422, 422]}
    source = ScriptedSource("bad", "fine")
    writer = make_writer(source, transport)
    first = writer.sync_once()
    assert (first.patched, first.refused, first.failed) == (1, 1, 0)
    assert "scripted 422" in writer.stats.last_error
    second = writer.sync_once()
    assert (second.refused, second.current, second.failed) == (1, 1, 0)
    assert len(recorded.requests) == 2  # the refused status was not sent again
    source.names = ("fine",)  # the policy was deleted: forgotten
    writer.sync_once()
    source.names = ("bad", "fine")  # made again: its status is sent again
    assert writer.sync_once().refused == 1 and len(recorded.requests) == 3


def test_an_unreachable_api_server_is_a_failure_not_an_exception() -> None:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: connection refused
    writer = make_writer(
        ScriptedSource("team-a"), KubernetesTransport(client.ApiClient(configuration))
    )
    assert writer.sync_once().failed == 1


class BrokenSource(ScriptedSource):
    def policy_statuses(self, now: datetime) -> Sequence[StatusUpdate]:
        raise RuntimeError("a bug in the state")


def test_a_failing_source_is_logged_and_survived(
    api: tuple[RecordedApi, KubernetesTransport], caplog: pytest.LogCaptureFixture
) -> None:
    _, transport = api
    result = make_writer(BrokenSource("team-a"), transport).sync_once()
    assert result.failed == 1
    assert "Computing TenantPolicy statuses failed; retrying later" in caplog.text


def test_the_loop_writes_soon_after_a_poke_once_the_caches_have_synced(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    source = ScriptedSource("team-a", ready=False)
    writer = make_writer(source, transport, interval_s=60.0, settle_s=0.01)
    writer.start()
    try:
        writer.poke()
        time.sleep(0.1)
        assert recorded.requests == []  # not before the caches have synced
        source.ready = True
        wait_for(lambda: len(recorded.requests) == 1)
    finally:
        writer.stop()
    assert writer.stats.syncs >= 1


def test_the_loop_backs_off_and_retries_after_an_api_error(
    api: tuple[RecordedApi, KubernetesTransport],
) -> None:
    recorded, transport = api
    recorded.answers = {status_path("team-a"): [500, 500]}
    writer = make_writer(ScriptedSource("team-a"), transport, interval_s=60.0, settle_s=0.01)
    writer.start()
    try:
        writer.poke()
        wait_for(lambda: writer.stats.patches == 1)
    finally:
        writer.stop()
    assert len(recorded.requests) == 3 and writer.stats.errors == 2


@pytest.mark.parametrize(
    ("observed", "desired", "patch"),
    [
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1, "b": 2}, {"a": 1}, {"b": None}),
        ({"m": {"x": 1, "y": 2}}, {"m": {"x": 1}}, {"m": {"y": None}}),
        ({"m": {"x": 1}}, {"m": {"x": 1}}, {}),
        ({"l": [1, 2]}, {"l": [1]}, {"l": [1]}),
        ({"m": "text"}, {"m": {"x": 1}}, {"m": {"x": 1}}),
    ],
    ids=[
        "added",
        "same",
        "removed-is-null",
        "nested-removed",
        "nested-same",
        "lists-replaced-whole",
        "type-change",
    ],
)
def test_merge_patch_turns_observed_into_desired(
    observed: dict[str, Any], desired: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert merge_patch(observed, desired) == patch


def test_a_status_path_escapes_the_name() -> None:
    assert status_path("team-a") == PATH
    assert status_path("a/b") == "/apis/migslice.io/v1alpha1/tenantpolicies/a%2Fb/status"
