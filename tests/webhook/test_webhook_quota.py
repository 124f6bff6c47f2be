"""Quota across replicas and through outages: the ledger's compare-and-swap, and the webhook
answering 503 (retried by kube-apiserver) instead of deciding blind.

Replicas here are separate apps with separate states (as separate processes or gunicorn
workers have), sharing one ledger store (as they share the API server).
"""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Sequence
from typing import Any

import jsonpatch
import pytest
from flask.testing import FlaskClient

from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.admission import SliceUsage
from migslice.admission.ledger import Charge, Ledger
from migslice.kube.ledger import LIST_TIMEOUT_S
from migslice.kube.transport import ApiError
from webhook.app import create_app
from webhook.quota import INLINE_LIST_S, MemoryLedgers, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_746_100_000.0

    def __call__(self) -> float:
        return self.now_s


class Monotonic:
    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic_s(self) -> float:
        return self.now_s


class Cache:
    """A watch cache as readiness sees it: synced, and blind for ``blind`` seconds."""

    def __init__(self, name: str, *, synced: bool = True, blind: float = 0.0) -> None:
        self.name, self.synced, self.blind = name, synced, blind

    def blind_s(self) -> float | None:
        return self.blind if self.synced else None


def replica_state(quota: int = 4, monotonic: Monotonic | None = None) -> ClusterState:
    state = ClusterState(clock=monotonic)
    state.upsert_policy(make_policy(quota={"instances": quota}))
    state.upsert_node(make_node("gpu-1"))
    return state


def replica(store: Any, state: ClusterState, clock: Clock | None = None) -> FlaskClient:
    keeper = QuotaKeeper(state, store, wall_clock=clock or Clock())
    return create_app(WebhookSettings(), state, keeper).test_client()


def post(client: FlaskClient, uid: str, **review: Any) -> Any:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    return client.post("/mutate", json=make_review(pod, uid=uid, **review))


def allowed(client: FlaskClient, uid: str, **review: Any) -> bool:
    return bool(post(client, uid, **review).get_json()["response"]["allowed"])


def test_concurrent_admissions_on_three_replicas_admit_exactly_the_quota() -> None:
    """One replica with in-process reservations only: 3 replicas admitted 3 x 4 = 12 against
    a quota of 4 (and --workers 2 did the same: 8 of 50)."""
    states = [replica_state(quota=4) for _ in range(3)]
    store = MemoryLedgers(states[0])
    clients = [replica(store, state) for state in states]
    results: list[bool] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        ok = allowed(clients[i % 3], f"uid-{i}")
        with lock:
            results.append(ok)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 4
    assert len(store.read("team-a").charges) == 4


def test_a_charge_written_by_one_replica_counts_on_another_until_its_pod_is_seen() -> None:
    first, second = replica_state(quota=1), replica_state(quota=1)
    store = MemoryLedgers(first)
    one, two = replica(store, first), replica(store, second)
    assert allowed(one, "uid-1")
    assert not allowed(two, "uid-2")
    message = post(two, "uid-3").get_json()["response"]["status"]["message"]
    assert "1 in use or admitted" in message and "spec.quota.instances" in message


def test_a_denial_on_a_stale_ledger_is_decided_again_on_a_fresh_read() -> None:
    """Replica two last read a ledger holding a charge that replica one has since released
    (its pod was never created): two reads again before it says no."""
    clock, monotonic = Clock(), Monotonic()
    first, second = replica_state(quota=1, monotonic=monotonic), replica_state(quota=1)
    store = MemoryLedgers(first)
    one, two = replica(store, first, clock), replica(store, second, clock)
    assert allowed(one, "uid-1")
    assert not allowed(two, "uid-2")  # two now holds the ledger with uid-1
    clock.now_s += 46  # past the hold; the pod of uid-1 never came
    monotonic.now_s += 46
    QuotaKeeper(first, store, wall_clock=clock).settle("team-a")
    assert store.read("team-a").charges == ()
    assert allowed(two, "uid-3")


def test_dry_run_decides_on_the_ledger_and_writes_nothing() -> None:
    state = replica_state(quota=1)
    store = MemoryLedgers(state)
    client = replica(store, state)
    assert allowed(client, "uid-1")
    assert not allowed(client, "uid-2", dry_run=True)
    assert store.writes == 1


def caches(*blind: Cache) -> Sequence[Cache]:
    names = ("tenantpolicies", "namespaces", "nodes", "pods")
    given = {cache.name: cache for cache in blind}
    return [given.get(name, Cache(name)) for name in names]


@pytest.mark.parametrize(
    ("cache", "said"),
    [
        (Cache("pods", synced=False), "cache pods has not listed once yet"),
        (Cache("tenantpolicies", blind=12.0), "cache tenantpolicies lost the API server 12s"),
    ],
    ids=["before-first-sync", "watch-broken"],
)
def test_a_blind_webhook_answers_503_to_be_retried_and_never_decides(
    cache: Cache, said: str
) -> None:
    """Before sync a restarted webhook admitted 4 pods past quota and denied 5 with "no
    TenantPolicy" and "products in the cluster: none"."""
    state = ClusterState()  # nothing listed yet: no policy, no node, no pod
    state.follow(caches(cache))
    store = MemoryLedgers(state)
    client = replica(store, state)
    reply = post(client, "uid-1")
    assert reply.status_code == 503
    assert reply.headers["Retry-After"] == "1"
    status = reply.get_json()
    assert (status["kind"], status["code"]) == ("Status", 503)
    assert status["reason"] == "ServiceUnavailable"
    assert said in status["message"]
    assert store.writes == 0
    ready = client.get("/readyz")
    assert ready.status_code == 503 and said in ready.get_json()["problems"][0]
    policy = make_policy("team-b", namespaces=["team-b"])
    body = make_review(policy, namespace="", kind=("migslice.io", "v1alpha1", "TenantPolicy"))
    assert client.post("/validate", json=body).status_code == 503


def test_a_short_blip_under_the_limit_still_decides_and_a_pod_without_gpu_always_passes() -> None:
    state = replica_state()
    state.follow(caches(Cache("pods", blind=3.0)))
    client = replica(MemoryLedgers(state), state)
    assert allowed(client, "uid-1")
    assert client.get("/readyz").status_code == 200
    state.follow(caches(Cache("pods", blind=30.0)))
    cpu_only = make_created_pod()
    reply = client.post("/mutate", json=make_review(cpu_only, uid="uid-2"))
    assert reply.status_code == 200 and reply.get_json()["response"]["allowed"]
    assert post(client, "uid-3").status_code == 503


class UnreachableLedgers(MemoryLedgers):
    def write(self, ledger: Ledger) -> Ledger:
        raise ApiError(0, "PUT /api/v1/namespaces/migslice-system/configmaps/x: connection refused")


def test_a_ledger_the_webhook_cannot_write_fails_closed_with_503() -> None:
    state = replica_state()
    reply = post(replica(UnreachableLedgers(state), state), "uid-1")
    assert reply.status_code == 503
    assert "quota ledger of tenant 'team-a'" in reply.get_json()["message"]
    assert "connection refused" in reply.get_json()["message"]


def test_a_ledger_too_full_to_store_answers_503_instead_of_failing_the_write() -> None:
    state = replica_state(quota=10_000)
    store = MemoryLedgers(state)
    charges = tuple(
        Charge(f"u-{i}", "team-a", SliceUsage(0, 0, 0), 1_746_100_000.0) for i in range(4000)
    )
    store.write(Ledger("team-a", charges))
    reply = post(replica(store, state), "uid-new")
    assert reply.status_code == 503
    assert (
        "holds 4000 recent admissions (limit 4000; each stays until its pod has been seen 50s)"
        in (reply.get_json()["message"])
    )


def test_a_charge_leaves_the_ledger_once_the_writer_has_held_its_pod_long_enough() -> None:
    """Every replica that may decide follows the API within --max-blind-s past the longest a
    stalled watch goes unnoticed (the webhook's 20 s watches and 15 s grace: an open
    connection carrying no bytes looks like a quiet cluster until then), so a charge whose pod
    this cache has held for that and twice --max-blind-s (and 5 s) is counted everywhere by
    its pod."""
    monotonic = Monotonic()
    state = ClusterState(clock=monotonic)
    state.upsert_policy(make_policy(quota={"instances": 10}))
    state.upsert_node(make_node("gpu-1"))
    store = MemoryLedgers(state)
    client = replica(store, state)
    answer = post(client, "uid-1").get_json()["response"]
    pod = jsonpatch.apply_patch(
        make_created_pod(annotations={"migslice.io/gpu-size": "small"}),
        json.loads(base64.b64decode(answer["patch"])),
    )
    pod["metadata"]["name"] = "train-1"
    state.upsert_pod(pod)
    monotonic.now_s += 49.0  # 35 s unnoticed, 2 x 5 s blind, 5 s
    assert allowed(client, "uid-2")
    assert [c.uid for c in store.read("team-a").charges] == ["uid-1", "uid-2"]
    monotonic.now_s += 1.0
    assert allowed(client, "uid-3")
    assert [c.uid for c in store.read("team-a").charges] == ["uid-2", "uid-3"]


class ApiLedgers(MemoryLedgers):
    """Ledgers whose namespace list answers as kube-apiserver would: the pods stored so far,
    whatever any replica's cache holds (a create admitted but still in flight is not)."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.stored: set[str] = set()

    def reservations_in(
        self, namespace: str, *, timeout_s: float = LIST_TIMEOUT_S
    ) -> frozenset[str]:
        return frozenset(self.stored)


@pytest.mark.parametrize(
    ("skew_s", "in_flight_s"),
    [(60.0, 0.0), (12.0, 34.0)],
    ids=["a-node-a-minute-ahead", "ntp-12s-while-etcd-holds-the-create"],
)
def test_a_replica_whose_clock_runs_ahead_never_releases_a_charge_whose_create_is_in_flight(
    skew_s: float, in_flight_s: float
) -> None:
    """Charge ages were the writer's wall clock judged on the reader's: a replica ``skew_s``
    ahead took a charge ``in_flight_s`` old for one past the 45 s hold, listed the namespace
    before the create was stored, released it and admitted a second pod against a quota of 1;
    the first pod then landed (2 pods on quota 1)."""
    writer_wall, reader_wall = Clock(), Clock()
    reader_wall.now_s += skew_s
    monotonic = Monotonic()
    first, second = ClusterState(clock=monotonic), ClusterState(clock=monotonic)
    for state in (first, second):
        state.upsert_policy(make_policy(quota={"instances": 1}))
        state.upsert_node(make_node("gpu-1"))
    store = ApiLedgers(first)
    one, two = replica(store, first, writer_wall), replica(store, second, reader_wall)
    assert allowed(one, "uid-1")  # its pod's create goes on; kube-apiserver has not stored it
    for clock in (writer_wall, reader_wall):
        clock.now_s += in_flight_s
    monotonic.now_s += in_flight_s
    assert not allowed(two, "uid-2")
    assert [c.uid for c in store.read("team-a").charges] == ["uid-1"]


def test_a_charge_of_a_pod_never_created_is_released_on_the_judge_s_own_clock() -> None:
    """The release still comes, after the hold as the releasing replica measures it."""
    writer_wall, reader_wall = Clock(), Clock()
    reader_wall.now_s -= 600.0  # ten minutes behind: the writer's stamp looks like the future
    monotonic = Monotonic()
    first, second = ClusterState(clock=monotonic), ClusterState(clock=monotonic)
    for state in (first, second):
        state.upsert_policy(make_policy(quota={"instances": 1}))
        state.upsert_node(make_node("gpu-1"))
    store = ApiLedgers(first)
    one, two = replica(store, first, writer_wall), replica(store, second, reader_wall)
    assert allowed(one, "uid-1")
    assert not allowed(two, "uid-2")  # two reads the charge now
    monotonic.now_s += 46.0  # the create failed: its pod will never be stored
    reader_wall.now_s += 46.0
    assert allowed(two, "uid-3")


class SlowListLedgers(ApiLedgers):
    """A namespace list that takes ``LIST_S`` (6 s, under ConfigMapLedgers' LIST_TIMEOUT_S of
    10 s): asked to finish sooner, it fails as the transport's read timeout does."""

    LIST_S = 6.0

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.asked: list[float] = []

    def reservations_in(
        self, namespace: str, *, timeout_s: float = LIST_TIMEOUT_S
    ) -> frozenset[str]:
        self.asked.append(timeout_s)
        if timeout_s < self.LIST_S:
            raise ApiError(0, f"GET /api/v1/namespaces/{namespace}/pods: read timed out")
        return super().reservations_in(namespace, timeout_s=timeout_s)


def test_a_quota_denial_lists_no_longer_than_it_can_answer_in_and_the_settler_lists_later() -> None:
    """kube-apiserver gives up on the webhook after its timeoutSeconds (5 s by default;
    failurePolicy Fail: the create fails with "context deadline exceeded", not the quota
    denial). A quota denial settled overdue charges inline with a list of up to 10 s (answers
    at 6 and 9.5 s), and the admission, still running, might charge for the failed create.
    Its list now has INLINE_LIST_S; one that takes longer leaves the charge counted, and the
    settle thread, unhurried, releases it."""
    wall, monotonic = Clock(), Monotonic()
    state = replica_state(quota=1, monotonic=monotonic)
    store = SlowListLedgers(state)
    client = replica(store, state, wall)
    assert allowed(client, "uid-1")
    monotonic.now_s += 46  # uid-1's charge is overdue: the next quota denial lists first
    assert not allowed(client, "uid-2")
    assert store.asked and max(store.asked) <= INLINE_LIST_S < 5.0
    assert [c.uid for c in store.read("team-a").charges] == ["uid-1"]  # still counts
    keeper = QuotaKeeper(state, store, wall_clock=wall)
    keeper.settle("team-a")  # the settle thread's round
    assert store.asked[-1] > SlowListLedgers.LIST_S  # up to LIST_TIMEOUT_S
    assert store.read("team-a").charges == ()
    assert allowed(client, "uid-3")


def reinvoked(client: FlaskClient, uid: str, raw_pod: dict[str, Any]) -> dict[str, Any]:
    """The answer to ``raw_pod`` sent again, as kube-apiserver reinvokes a webhook
    (reinvocationPolicy IfNeeded): a later webhook changed the pod, and every call to a
    webhook carries a new request uid (``CreateAdmissionObjects``: ``uuid.NewUUID()``)."""
    again = copy.deepcopy(raw_pod)
    again["metadata"].setdefault("labels", {})["sidecar.example.com/injected"] = "true"
    answer: dict[str, Any] = client.post("/mutate", json=make_review(again, uid=uid)).get_json()
    return answer["response"]


def first_round(client: FlaskClient, uid: str) -> dict[str, Any]:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    answer = client.post("/mutate", json=make_review(pod, uid=uid)).get_json()["response"]
    assert answer["allowed"], answer
    patched: dict[str, Any] = jsonpatch.apply_patch(
        pod, json.loads(base64.b64decode(answer["patch"]))
    )
    return patched


def test_a_reinvocation_with_its_new_request_uid_charges_the_pod_once() -> None:
    """The tenant's last free slice: the first round admitted and charged the pod; the second
    round (another mutating webhook changed the pod after ours) came with a new request uid and
    was denied over the first round's own charge ("2 GPU instances (1 in use or admitted + 1
    for this pod)"), so with any other mutating webhook a tenant never got its last slice,
    and below it each pod held two charges for the hold."""
    state = replica_state(quota=1)
    store = ApiLedgers(state)
    client = replica(store, state)
    pod = first_round(client, "uid-1")
    answer = reinvoked(client, "uid-2", pod)
    assert answer["allowed"], answer
    assert [c.uid for c in store.read("team-a").charges] == ["uid-2"]
    final = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    assert final["metadata"]["annotations"]["migslice.io/reservation"] == "uid-2"
    assert not allowed(client, "uid-3")  # the quota still holds


def test_a_reservation_copied_from_a_stored_pod_releases_nothing() -> None:
    """A tenant can read a stored pod's reservation before a replica's cache has seen that pod:
    an authoritative list finds the pod, so its charge still counts."""
    state = replica_state(quota=1)
    store = ApiLedgers(state)
    client = replica(store, state)
    pod = first_round(client, "uid-1")
    store.stored.add("uid-1")  # stored; this replica's cache has not seen it yet
    answer = reinvoked(client, "uid-2", pod)
    assert not answer["allowed"]
    assert "spec.quota.instances" in answer["status"]["message"]
    assert [c.uid for c in store.read("team-a").charges] == ["uid-1"]
