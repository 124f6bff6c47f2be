"""A quota ledger deleted, corrupted, hand-edited or replaced by an old copy mid-traffic never
admits over quota: the replica that finds it fences the tenant for the hold, with a denial the
user sees at once, a Warning for the admins, and admissions again once every pod the lost
charges admitted is stored or never will be.

Replicas are separate states and apps sharing one ledger store over a real HTTP server kept as
kube-apiserver keeps ConfigMaps (``tests.ledger_api``), as replicas share the API server.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from flask.testing import FlaskClient

from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.admission.ledger import Damage
from migslice.kube.ledger import DATA_KEY, ConfigMapLedgers, ledger_name
from tests.ledger_api import CONFIGMAPS, LedgerApi
from tests.local_api import Request, local_api
from webhook.app import create_app
from webhook.quota import Fence, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState

LEDGER = ledger_name("team-a")


class Clock:
    """A replica's wall clock and (moved with it, by the same steps) its monotonic clock."""

    def __init__(self) -> None:
        self.now_s = 1_746_100_000.0
        self.skew_s = 0.0

    def __call__(self) -> float:
        return self.now_s + self.skew_s

    def monotonic_s(self) -> float:
        return self.now_s


class Skewed(Clock):
    """A replica on a node whose wall clock is ``skew_s`` off ``base``'s; time passes alike."""

    def __init__(self, base: Clock, skew_s: float) -> None:
        super().__init__()
        self.base, self.skew_s = base, skew_s

    def __call__(self) -> float:
        return self.base.now_s + self.skew_s

    def monotonic_s(self) -> float:
        return self.base.now_s


class Replica:
    """One webhook replica: its own caches, app and keeper, the shared ledger store."""

    def __init__(self, store: ConfigMapLedgers, clock: Clock, quota: int = 4) -> None:
        self.state = ClusterState(clock=clock)
        self.state.upsert_policy(make_policy(quota={"instances": quota}))
        self.state.upsert_node(make_node("gpu-1"))
        self.keeper = QuotaKeeper(self.state, store, wall_clock=clock, mark_wait_s=0.1)
        self.fences: list[Fence] = []
        self.keeper.fence_listeners.append(self.fences.append)
        self.client: FlaskClient = create_app(
            WebhookSettings(), self.state, self.keeper
        ).test_client()

    def admit(self, uid: str) -> dict[str, Any]:
        """The AdmissionReview answer to a sized pod's CREATE; its patched pod on ``pod``."""
        pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
        reply = self.client.post("/mutate", json=make_review(pod, uid=uid))
        assert reply.status_code == 200, reply.get_data(as_text=True)
        answer: dict[str, Any] = reply.get_json()["response"]
        if answer["allowed"]:
            answer["pod"] = jsonpatch.apply_patch(
                pod, json.loads(base64.b64decode(answer["patch"]))
            )
            answer["pod"]["metadata"]["name"] = f"train-{uid}"
        return answer


@pytest.fixture
def cluster() -> Iterator[tuple[LedgerApi, ConfigMapLedgers, Clock]]:
    api = LedgerApi()
    with local_api(api.answer) as transport:
        yield api, ConfigMapLedgers(transport, "migslice-system"), Clock()


def store_pods(replicas: list[Replica], *answers: dict[str, Any]) -> None:
    """kube-apiserver stores the admitted pods; every replica's pod cache sees them."""
    for answer in answers:
        for replica in replicas:
            replica.state.upsert_pod(answer["pod"])


def test_a_ledger_deleted_while_creates_are_held_never_admits_over_quota(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """Measured before: with the ledger deleted while 2 creates were held between admission
    and storage, 6 pods were admitted against a quota of 4."""
    api, store, clock = cluster
    one, two = Replica(store, clock), Replica(store, clock)
    stored = [one.admit("a-1"), two.admit("a-2")]
    held = [one.admit("h-1"), two.admit("h-2")]
    assert all(a["allowed"] for a in stored + held)
    store_pods([one, two], *stored)
    api.delete(LEDGER)
    clock.now_s += 1
    later = [one.admit("b-1"), two.admit("b-2"), one.admit("b-3")]
    assert not any(a["allowed"] for a in later)
    message = later[0]["status"]["message"]
    assert "quota ledger of tenant 'team-a' (ConfigMap migslice-system/" in message
    assert "was deleted" in message and "refused until 2025-05-01T11:47:26Z" in message
    assert "Nothing to repair" in message
    assert later[0]["status"]["code"] == 403
    assert [f.damage for f in one.fences + two.fences] == [Damage.LOST]
    store_pods([one, two], *held)  # the held creates land during the fence
    clock.now_s += 46
    after = [one.admit("c-1"), two.admit("c-2")]
    assert not any(a["allowed"] for a in after)
    assert "spec.quota.instances" in after[0]["status"]["message"]
    admitted = sum(a["allowed"] for a in stored + held + later + after)
    assert admitted == 4


def test_a_replica_that_never_saw_the_ledger_finds_its_mark_and_fences_too(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    one = Replica(store, clock, quota=2)
    held = one.admit("h-1")
    assert held["allowed"]
    assert api.policies["team-a"]["status"]["quotaLedger"]["epoch"]
    api.delete(LEDGER)
    fresh = Replica(store, clock, quota=2)  # started after the deletion: knows nothing
    assert not fresh.admit("n-1")["allowed"]
    assert [f.damage for f in fresh.fences] == [Damage.LOST]
    assert not one.admit("n-2")["allowed"]  # the fence is in the ledger: one obeys it too
    assert one.fences == []


def test_a_policy_created_again_is_marked_again_so_a_later_loss_is_still_fenced(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """Measured before: a TenantPolicy deleted and created again (kubectl replace --force, a
    GitOps re-sync) lost status.quotaLedger and was never marked again; with the ledger then
    deleted, a replica started after it admitted over quota (6 pods against 4 on a real
    kube-apiserver with 3 replicas)."""
    api, store, clock = cluster
    one = Replica(store, clock, quota=2)
    assert one.admit("a-1")["allowed"]
    del api.policies["team-a"]  # deleted and created again: no status
    one.state.delete_policy("team-a")
    one.state.upsert_policy(make_policy(quota={"instances": 2}))
    assert one.admit("h-1")["allowed"]  # held: its pod is never stored
    assert api.policies["team-a"]["status"]["quotaLedger"]["epoch"] == store.read("team-a").epoch
    api.delete(LEDGER)
    fresh = Replica(store, clock, quota=2)  # started after the deletion: knows nothing
    assert not fresh.admit("n-1")["allowed"]
    assert [f.damage for f in fresh.fences] == [Damage.LOST]


@pytest.mark.parametrize("how", ["restarted", "relisted"])
def test_a_policy_created_again_unseen_by_any_replica_is_marked_again_too(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock], how: str
) -> None:
    """Measured before: a TenantPolicy deleted and created again while the replicas restarted
    (a rolling update), or during a watch gap (the relist finds the new object under the old
    name: an upsert, no delete), was never marked again; with the ledger then deleted, a
    replica started after it admitted past the quota (3 pods against 2)."""
    api, store, clock = cluster
    one = Replica(store, clock, quota=2)
    assert one.admit("a-1")["allowed"]
    one.state.upsert_policy(
        {**make_policy(quota={"instances": 2}), "status": api.policies["team-a"]["status"]}
    )  # the policy watch shows the mark
    del api.policies["team-a"]  # deleted and created again: no status
    if how == "restarted":
        one = Replica(store, clock, quota=2)  # started after: never saw the deletion
    else:
        one.state.upsert_policy(make_policy(quota={"instances": 2}))  # the relist's upsert
    assert one.admit("h-1")["allowed"]  # held: its pod is never stored
    assert api.policies["team-a"]["status"]["quotaLedger"]["epoch"] == store.read("team-a").epoch
    api.delete(LEDGER)
    fresh = Replica(store, clock, quota=2)  # started after the deletion: knows nothing
    answer = fresh.admit("n-1")
    assert not answer["allowed"]
    assert "was deleted" in answer["status"]["message"]
    assert [f.damage for f in fresh.fences] == [Damage.LOST]


def test_a_policy_that_records_the_ledger_is_not_marked_again_at_each_charge(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    one = Replica(store, clock, quota=4)
    assert one.admit("a-1")["allowed"]
    one.state.upsert_policy(
        {**make_policy(quota={"instances": 4}), "status": api.policies["team-a"]["status"]}
    )  # the policy watch shows the mark
    before = sum(r.method == "PATCH" for r in api.requests)
    assert one.admit("a-2")["allowed"] and one.admit("a-3")["allowed"]
    assert sum(r.method == "PATCH" for r in api.requests) == before


def test_a_tenants_first_ledger_is_marked_before_it_is_created_and_not_fenced(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    one = Replica(store, clock)
    assert one.admit("u-1")["allowed"]
    kinds = [(r.method, r.path.rsplit("/", 1)[-1]) for r in api.requests]
    assert kinds.index(("PATCH", "status")) < kinds.index(("POST", "configmaps"))
    ledger = store.read("team-a")
    assert ledger.epoch == api.policies["team-a"]["status"]["quotaLedger"]["epoch"]
    assert ledger.fenced_until_s is None and one.fences == []


@pytest.mark.parametrize(
    ("edit", "manager", "said", "damage"),
    [
        ({DATA_KEY: "{not json"}, "migslice-webhook", "is not JSON", Damage.CORRUPT),
        ({"other": "x"}, "kubectl-edit", "written by kubectl-edit", Damage.FOREIGN),
        (
            {DATA_KEY: '{"version":"v2","tenant":"team-a","epoch":"x","seq":0,"charges":[]}'},
            "kubectl-client-side-apply",
            "written by kubectl-client-side-apply",
            Damage.FOREIGN,
        ),
    ],
    ids=["not-json", "charges-removed", "charges-emptied"],
)
def test_a_ledger_changed_by_hand_is_denied_at_once_with_the_object_and_the_time(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
    edit: dict[str, str],
    manager: str,
    said: str,
    damage: Damage,
) -> None:
    """Before: a corrupt ledger answered 503, retried by kube-apiserver until its timeout, so
    each create took 5-10 s and ended in "context deadline exceeded"."""
    api, store, clock = cluster
    one = Replica(store, clock, quota=2)
    assert one.admit("h-1")["allowed"]  # held: its pod is never stored
    api.edit(LEDGER, edit, manager=manager)
    answer = one.admit("u-2")
    assert not answer["allowed"] and answer["status"]["code"] == 403
    assert said in answer["status"]["message"]
    assert "ConfigMap migslice-system/migslice-quota-team-a" in answer["status"]["message"]
    assert [f.damage for f in one.fences] == [damage]
    metrics = one.client.get("/metrics").get_data(as_text=True)
    assert f'migslice_webhook_ledger_fences_total{{damage="{damage.name.lower()}"}} 1.0' in metrics
    clock.now_s += 46  # h-1's create failed long ago: its pod will never be stored
    assert [one.admit(uid)["allowed"] for uid in ("u-3", "u-4", "u-5")] == [True, True, False]


def test_an_old_copy_put_back_is_stale_against_what_a_replica_has_seen(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    one = Replica(store, clock, quota=3)
    assert one.admit("u-1")["allowed"]
    backup = dict(api.objects[LEDGER]["data"])
    assert one.admit("u-2")["allowed"]
    api.edit(LEDGER, backup, manager="migslice-webhook")  # restored as if by the webhook
    answer = one.admit("u-3")
    assert not answer["allowed"]
    assert "older than a copy already seen" in answer["status"]["message"]
    assert [f.damage for f in one.fences] == [Damage.STALE]


def test_a_dry_run_after_a_loss_answers_as_a_create_would_and_writes_nothing(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """Measured before: with the ledger deleted, a dry run decided on the ledger the replica
    held in memory and answered allowed, while a create at that moment was refused."""
    api, store, clock = cluster
    one = Replica(store, clock)
    assert one.admit("u-1")["allowed"]
    api.delete(LEDGER)
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    reply = one.client.post("/mutate", json=make_review(pod, uid="d-1", dry_run=True))
    answer = reply.get_json()["response"]
    assert not answer["allowed"] and "was deleted" in answer["status"]["message"]
    assert one.fences == [] and LEDGER not in api.objects  # a dry run writes nothing
    assert not one.admit("u-2")["allowed"]
    assert [f.damage for f in one.fences] == [Damage.LOST]


def test_dry_run_is_refused_while_fenced(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    one = Replica(store, clock)
    assert one.admit("u-1")["allowed"]
    api.delete(LEDGER)
    assert not one.admit("u-2")["allowed"]
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    reply = one.client.post("/mutate", json=make_review(pod, uid="d-1", dry_run=True))
    answer = reply.get_json()["response"]
    assert not answer["allowed"] and "refused until" in answer["status"]["message"]


@pytest.mark.parametrize("skew_s", [60.0, 20.0], ids=["a-minute-ahead", "20s-ahead"])
def test_a_fence_holds_on_a_replica_whose_clock_runs_ahead_of_the_fence_writer(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock], skew_s: float
) -> None:
    """``fencedUntil`` is the writer's wall clock: a replica ``skew_s`` ahead ended the fence
    that much early (at 45 s ahead, at once) and admitted while the lost charges' pods were
    still on their way: 3 pods on a quota of 2."""
    api, store, clock = cluster
    one, two = Replica(store, clock, quota=2), Replica(store, Skewed(clock, skew_s), quota=2)
    stored, held = one.admit("a-1"), one.admit("h-1")
    assert stored["allowed"] and held["allowed"]
    store_pods([one, two], stored)
    api.delete(LEDGER)
    assert not one.admit("b-1")["allowed"]  # one finds the loss and fences until +45 s
    assert [f.damage for f in one.fences] == [Damage.LOST]
    clock.now_s += 30  # h-1's create (34 s at most) still on its way to etcd
    refused = two.admit("b-2")
    assert not refused["allowed"], "admitted during the fence: over quota once h-1 lands"
    assert "refused until" in refused["status"]["message"]
    store_pods([one, two], held)
    clock.now_s += 16  # the hold is over on one's count; two read the fence 30 s late
    assert "spec.quota.instances" in one.admit("c-1")["status"]["message"]
    assert "refused until" in two.admit("c-2")["status"]["message"]
    clock.now_s += 30  # and on two's own count (45 s after it first read the fence)
    assert "spec.quota.instances" in two.admit("c-3")["status"]["message"]


def test_a_fence_with_a_charge_is_over_on_a_replica_whose_clock_runs_behind(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """Ledger.is_fenced: "a first charge is written only by a replica that waited the hold
    itself, so a fence with charges is over on every replica's own count too". A replica 10
    minutes behind the fence writer still refused the tenant's GPU pods (403, "refused until"
    a time long past on the writer's clock) for 10 minutes after another replica had charged
    the ledger in the fence's epoch."""
    api, store, clock = cluster
    one, behind = Replica(store, clock, quota=2), Replica(store, Skewed(clock, -600.0), quota=2)
    store_pods([one, behind], one.admit("a-1"))
    api.delete(LEDGER)
    assert not one.admit("b-1")["allowed"]  # one fences until +45 s on its clock
    clock.now_s += 46
    charged = one.admit("c-1")  # the hold is over: one charges in the fence's epoch (seq 1)
    assert charged["allowed"], charged
    store_pods([one, behind], charged)
    answer = behind.admit("c-2")  # quota 2, 2 pods stored: a quota denial, not the fence
    assert "refused until" not in answer["status"]["message"], answer["status"]["message"]
    assert "spec.quota.instances" in answer["status"]["message"]


def test_a_v1_ledger_holding_a_charge_of_a_pod_never_created_is_settled_as_v2(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """A ledger an earlier release wrote (v1: no epoch, field manager python-urllib3) holding
    the charge of a create that failed after admission, its tenant at its quota of 1: the
    release of that charge rendered a ledger with no epoch, which raised ValueError: every GPU
    pod of the tenant was answered 500 and the settle thread failed every round, so the dead
    charge held the quota for ever."""
    api, store, clock = cluster
    charge = {
        "uid": "uid-0",
        "namespace": "team-a",
        "at": "2025-05-01T12:00:00.000000Z",
        "instances": 1,
        "computeSlices": 1,
        "memorySlices": 1,
        "profiles": {"1g.10gb": 1},
    }
    text = json.dumps({"version": "v1", "tenant": "team-a", "charges": [charge]})
    body = {"metadata": {"name": LEDGER}, "data": {DATA_KEY: text}}
    created = Request("POST", CONFIGMAPS, {}, "application/json", body, "python-urllib3/2.2.1")
    assert api.answer(created)[0] == 201
    replica = Replica(store, clock, quota=1)
    assert not replica.admit("uid-1")["allowed"]  # the charge's create may still be in flight
    clock.now_s += 46.0  # past the hold: the list shows that create never stored a pod
    assert replica.admit("uid-2")["allowed"]
    stored = json.loads(api.objects[LEDGER]["data"][DATA_KEY])
    assert stored["version"] == "v2" and [c["uid"] for c in stored["charges"]] == ["uid-2"]


def test_the_charge_of_a_pod_never_created_is_released_once_its_tenantpolicy_is_deleted(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock], caplog: pytest.LogCaptureFixture
) -> None:
    """A charge whose pod was never created, its TenantPolicy deleted before the charge fell
    due: the release first marked the ledger's epoch in the policy's status, the policy answered
    404, and the settler logged "Cannot release charges" every round for ever, the dead charge
    kept in the ledger (and counted against the policy if it was created again)."""
    api, store, clock = cluster
    replica = Replica(store, clock, quota=1)
    assert replica.admit("uid-1")["allowed"]  # its create fails after admission: no pod
    api.delete_policy("team-a")
    replica.state.delete_policy("team-a")  # the policy watch shows the DELETE
    clock.now_s += 46.0  # past the hold
    with caplog.at_level(logging.WARNING, logger="webhook.quota"):
        replica.keeper.settle("team-a")
    assert not [r for r in caplog.records if "Cannot release" in r.getMessage()]
    assert json.loads(api.objects[LEDGER]["data"][DATA_KEY])["charges"] == []
    writes = [r for r in api.requests if r.method in ("PUT", "POST", "PATCH")]
    replica.keeper.settle("team-a")  # nothing left to release: no more writes
    assert [r for r in api.requests if r.method in ("PUT", "POST", "PATCH")] == writes
