"""The gate reconciler: pods created behind the admission gate while the webhook was down are
admitted, oldest first, up to the quota and no further, by one leader, exactly beside the
webhook's own admissions (docs/outages.md).

Replicas are separate states over one ledger store, as in ``test_webhook_quota.py``; the API
is a small fake that applies JSON Patches as kube-apiserver does (``test`` ops included) and
feeds every replica's pod cache, as their watches would.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import jsonpatch
import pytest

from harness.builders import make_created_pod, make_gated_pod, make_node, make_policy, make_review
from migslice.admission.gate import GatedPod, GateNote
from migslice.console import CommandError
from migslice.kube import LeaderElector
from migslice.kube.transport import ApiError
from tests.kube.test_kube_repartition import ObjectStore
from tests.local_api import Request, local_api
from webhook.app import create_app
from webhook.gate import EVENT_REPEAT_S, GateReconciler
from webhook.metrics import Metrics
from webhook.quota import MemoryLedgers, QuotaKeeper
from webhook.settings import GateSettings, WebhookSettings
from webhook.state import ClusterState

DIRECT = {"nvidia.com/mig-1g.10gb": "1"}
GATE = "migslice.io/admission"


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_746_100_000.0

    def __call__(self) -> float:
        return self.now_s

    def monotonic_s(self) -> float:
        return self.now_s


class Api:
    """The pods as kube-apiserver stores them, the Events and conditions written, and every
    replica's pod cache fed on each change."""

    def __init__(self, *states: ClusterState) -> None:
        self.states = states
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.conditions: dict[str, Mapping[str, str]] = {}
        self.refuse_next = 0
        self.version = 10
        self.namespaces: dict[str, dict[str, str]] = {}

    def create(self, pod: dict[str, Any]) -> None:
        self.version += 1
        pod["metadata"]["resourceVersion"] = str(self.version)
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self.pods[key] = pod
        self._feed(pod)

    def delete(self, key: str) -> None:
        del self.pods[key]
        namespace, _, name = key.partition("/")
        for state in self.states:
            state.delete_pod(namespace, name)

    def _feed(self, pod: dict[str, Any]) -> None:
        for state in self.states:
            state.upsert_pod(copy.deepcopy(pod))

    def patch_pod(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> bool:
        key = f"{namespace}/{name}"
        if key not in self.pods or self.refuse_next:
            self.refuse_next = max(0, self.refuse_next - 1)
            return False
        try:
            patched = jsonpatch.apply_patch(self.pods[key], list(patch))
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict):
            return False  # kube-apiserver: 422
        self.version += 1
        patched["metadata"]["resourceVersion"] = str(self.version)
        self.pods[key] = patched
        self._feed(patched)
        return True

    def set_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> None:
        self.conditions[f"{namespace}/{name}"] = condition

    def record_event(self, pod: GatedPod, note: GateNote) -> None:
        self.events.append((pod.key, note.reason, note.message))

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.namespaces.get(namespace, {})

    def admitted(self, namespace: str = "team-a") -> list[str]:
        return sorted(
            pod["metadata"]["name"]
            for key, pod in self.pods.items()
            if key.startswith(namespace + "/") and not pod["spec"].get("schedulingGates")
        )


class Elector:
    def __init__(self, leader: bool = True) -> None:
        self.leader = leader

    def try_acquire_or_renew(self) -> bool:
        return self.leader

    @property
    def is_leader(self) -> bool:
        return self.leader

    def release(self) -> None:
        self.leader = False


def replica_state(quota: int = 2, clock: Clock | None = None) -> ClusterState:
    state = ClusterState(clock=clock)
    state.upsert_policy(make_policy(quota={"instances": quota}))
    state.upsert_node(make_node("gpu-1"))
    return state


def reconciler(
    state: ClusterState,
    store: MemoryLedgers,
    api: Api,
    elector: Elector | LeaderElector | None = None,
    clock: Clock | None = None,
    **settings: Any,
) -> GateReconciler:
    clock = clock or Clock()
    keeper = QuotaKeeper(state, store, wall_clock=clock)
    return GateReconciler(
        keeper,
        api,
        elector or Elector(),
        GateSettings(**settings),
        exclude_namespaces=frozenset({"kube-system"}),
        clock=clock,
        monotonic=clock.monotonic_s,
    )


def gated(api: Api, count: int, namespace: str = "team-a", **pod: Any) -> None:
    for i in range(count):
        created = f"2025-05-01T00:00:{i:02d}Z"
        api.create(make_gated_pod(f"p{i}", namespace=namespace, created=created, **pod))


# -- the cache ------------------------------------------------------------------------------------


def test_a_gated_pod_holds_no_quota_and_its_own_reservation_annotation_settles_nothing() -> None:
    state = replica_state()
    forged = {"migslice.io/reservation": "uid-of-another-admission"}
    state.upsert_pod(make_gated_pod("a", limits=DIRECT, annotations=forged))
    assert state.tenant_usage("team-a").instances == 0
    assert state.reservations_in("team-a") == frozenset()
    assert [p["metadata"]["name"] for p in state.gated_pods()] == ["a"]  # type: ignore[index]
    ungated = make_gated_pod("a", limits=DIRECT, annotations=forged, gates=())
    state.upsert_pod(ungated)
    assert state.gated_pods() == ()
    assert state.tenant_usage("team-a").instances == 1


def test_the_webhook_removes_the_gate_as_it_admits_a_pod() -> None:
    state = replica_state()
    client = create_app(WebhookSettings(), state).test_client()
    pod = make_created_pod(limits=DIRECT)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    response = client.post("/mutate", json=make_review(pod)).get_json()["response"]
    assert response["allowed"]
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "remove", "path": "/spec/schedulingGates/0"} in ops


# -- the reconciler -------------------------------------------------------------------------------


def test_the_leader_admits_gated_pods_oldest_first_up_to_the_quota_and_tells_the_rest() -> None:
    state = replica_state(quota=2)
    api = Api(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api)
    gated(api, 4, limits=DIRECT)
    notes = gate.run_once()
    assert api.admitted() == ["p0", "p1"]
    assert [notes[f"team-a/p{i}"].admitted for i in range(4)] == [True, True, False, False]
    waiting = [(key, reason) for key, reason, _ in api.events if reason != "Admitted"]
    assert waiting == [("team-a/p2", "AdmissionWaiting"), ("team-a/p3", "AdmissionWaiting")]
    message = next(m for key, r, m in api.events if key == "team-a/p2")
    assert "would use 3 GPU instances (2 in use or admitted + 1 for this pod)" in message
    assert "spec.quota.instances" in message
    assert api.conditions["team-a/p2"]["status"] == "False"
    assert api.conditions["team-a/p0"]["status"] == "True"
    assert state.tenant_usage("team-a").instances == 2
    annotations = api.pods["team-a/p0"]["metadata"]["annotations"]
    assert annotations["migslice.io/reservation"] == "gate-uid-team-a-p0"
    told = len(api.events)
    gate.run_once()
    assert len(api.events) == told  # told once, until the message changes
    api.delete("team-a/p0")
    gate.run_once()
    assert api.admitted() == ["p1", "p2"]
    assert state.tenant_usage("team-a").instances == 2


def test_a_waiting_pods_event_is_not_repeated_for_every_change_of_its_tenants_usage() -> None:
    """Each change of the tenant's usage or limit changes every waiting pod's message: a busy
    tenant's gated pods each got a new Warning Event per change. The condition follows each
    change; an Event is told again for a change of reason at once, for a new message only
    once EVENT_REPEAT_S has passed since the pod's last one."""
    clock = Clock()
    state = replica_state(quota=2, clock=clock)
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api, clock=clock)
    gated(api, 4, limits=DIRECT)
    gate.run_once()
    told = [key for key, reason, _ in api.events if reason == "AdmissionWaiting"]
    assert told == ["team-a/p2", "team-a/p3"]
    for limit in (1, 2, 1, 2):  # an admin edits the quota (or the tenant's pods come and go)
        before = api.conditions["team-a/p3"]["message"]
        state.upsert_policy(make_policy(quota={"instances": limit}))
        clock.now_s += 10
        gate.run_once()
        assert api.conditions["team-a/p3"]["message"] != before  # the condition follows
    waiting = [key for key, reason, _ in api.events if reason == "AdmissionWaiting"]
    assert waiting.count("team-a/p3") == 1, api.events
    clock.now_s += EVENT_REPEAT_S
    state.upsert_policy(make_policy(quota={"instances": 1}))
    gate.run_once()
    waiting = [key for key, reason, _ in api.events if reason == "AdmissionWaiting"]
    assert waiting.count("team-a/p3") == 2
    state.upsert_policy(make_policy(quota={"instances": 1}, deniedProfiles=["1g.10gb"]))
    gate.run_once()
    assert ("team-a/p3", "AdmissionDenied") in [(k, r) for k, r, _ in api.events]


def test_the_gated_pods_admitted_are_exported_as_a_counter() -> None:
    state = replica_state(quota=2)
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api)
    metrics = Metrics()
    metrics.follow_gate(gate.stats)
    gated(api, 3, limits=DIRECT)
    gate.run_once()
    text = metrics.exposition().decode()
    assert "# TYPE migslice_webhook_gate_admitted_total counter" in text
    assert "migslice_webhook_gate_admitted_total 2.0" in text.splitlines()
    assert "migslice_webhook_gate_leader 1.0" in text.splitlines()


def test_a_follower_admits_nothing() -> None:
    state = replica_state()
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api, Elector(leader=False))
    gated(api, 2, limits=DIRECT)
    assert gate.run_once() == {}
    assert api.admitted() == [] and api.events == []
    assert not gate.stats.is_leader


def test_gated_pods_and_the_webhooks_own_admissions_share_the_quota_exactly() -> None:
    state = replica_state(quota=3)
    api = Api(state)
    store = MemoryLedgers(state)
    gated(api, 3, limits=DIRECT)
    client = create_app(
        WebhookSettings(), state, QuotaKeeper(state, store, wall_clock=Clock())
    ).test_client()
    pod = make_created_pod(limits=DIRECT)
    response = client.post("/mutate", json=make_review(pod, uid="fresh")).get_json()
    assert response["response"]["allowed"]  # the gated pods hold nothing yet
    reconciler(state, store, api).run_once()
    assert api.admitted() == ["p0", "p1"]  # the fresh admission's charge counts


def test_two_overlapping_leaders_on_two_replicas_never_admit_past_the_quota() -> None:
    """While a Lease changes hands two replicas may both act for a moment: the ledger's
    compare-and-swap and the pod's one admission uid keep the count exact."""
    first, second = replica_state(quota=3), replica_state(quota=3)
    api = Api(first, second)
    store = MemoryLedgers(first)
    one, two = reconciler(first, store, api, batch=1), reconciler(second, store, api, batch=1)
    gated(api, 6, limits=DIRECT)
    for _ in range(5):
        one.run_once()
        two.run_once()
        assert len(api.admitted()) <= 3
    assert api.admitted() == ["p0", "p1", "p2"]
    charged = [c.uid for c in store.read("team-a").charges]
    assert sorted(charged) == ["gate-uid-team-a-p0", "gate-uid-team-a-p1", "gate-uid-team-a-p2"]


def test_a_pod_that_changed_since_it_was_decided_is_decided_again_and_charged_once() -> None:
    state = replica_state(quota=2)
    api = Api(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api)
    gated(api, 1, limits=DIRECT)
    api.refuse_next = 1
    assert gate.run_once() == {}
    assert [c.uid for c in store.read("team-a").charges] == ["gate-uid-team-a-p0"]
    gate.run_once()
    assert api.admitted() == ["p0"]
    assert [c.uid for c in store.read("team-a").charges] == ["gate-uid-team-a-p0"]
    assert state.tenant_usage("team-a").instances == 1


def test_nothing_is_decided_while_a_cache_is_blind() -> None:
    state = replica_state()
    state.expect("pods")
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api)
    gated(api, 1, limits=DIRECT)
    assert gate.run_once() == {}
    state.mark_synced("pods")
    gate.run_once()
    assert api.admitted() == ["p0"]


def test_a_round_admits_at_most_the_batch() -> None:
    state = replica_state(quota=10)
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api, batch=2)
    gated(api, 5, limits=DIRECT)
    gate.run_once()
    assert api.admitted() == ["p0", "p1"]
    gate.run_once()
    gate.run_once()
    assert len(api.admitted()) == 5


def label(api: Api, state: ClusterState, namespace: str, **labels: str) -> None:
    """An admin labels ``namespace``: stored at once, and in the cache as its watch says."""
    api.namespaces[namespace] = dict(labels)
    state.upsert_namespace({"metadata": {"name": namespace, "labels": dict(labels)}})


OPTED_OUT = {"migslice.io/admission": "disabled"}


def test_a_gated_pod_of_a_namespace_taken_out_of_migslice_is_released_as_it_is() -> None:
    """A fail-open namespace's pods gated while the webhook was down (or waiting for quota),
    then the namespace opted out of migslice (migslice.io/admission=disabled): the reconciler
    skipped such namespaces, and their pods stayed SchedulingGated for ever, though nothing
    else may remove migslice's gate and the webhook would now let such a pod through
    untouched. The leader removes the gate and nothing else (no charge, no reservation,
    no affinity), and an Event and the pod's condition say why."""
    state = replica_state(quota=1)
    api = Api(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api)
    gated(api, 2, limits=DIRECT)
    gate.run_once()
    assert api.admitted() == ["p0"]  # p1 waits for the tenant's quota
    before = copy.deepcopy(api.pods["team-a/p1"])
    label(api, state, "team-a", **OPTED_OUT)
    notes = gate.run_once()
    assert api.admitted() == ["p0", "p1"]
    after = api.pods["team-a/p1"]
    assert "schedulingGates" not in after["spec"] or after["spec"]["schedulingGates"] == []
    after_rest = {**after, "metadata": {**after["metadata"]}, "spec": dict(after["spec"])}
    after_rest["spec"].pop("schedulingGates", None)
    before["spec"].pop("schedulingGates")
    after_rest["metadata"].pop("resourceVersion")
    before["metadata"].pop("resourceVersion")
    assert after_rest == before  # unmutated: the gate is all that changed
    assert "gate-uid-team-a-p1" not in {c.uid for c in store.read("team-a").charges}
    note = notes["team-a/p1"]
    assert (note.admitted, note.reason) == (False, "AdmissionSkipped")
    key, reason, message = api.events[-1]
    assert (key, reason) == ("team-a/p1", "AdmissionSkipped")
    assert "migslice.io/admission=disabled" in message and "not admitted" in message
    assert api.conditions["team-a/p1"]["reason"] == "AdmissionSkipped"
    told = len(api.events)
    gate.run_once()
    assert len(api.events) == told


def test_a_gated_pod_of_an_excluded_namespace_is_released_by_the_leader_only() -> None:
    """The same for a namespace added to --exclude-namespaces (the chart's
    webhook.excludeNamespaces) after its pods were gated: only the Lease's holder writes."""
    state = replica_state()
    api = Api(state)
    follower = reconciler(state, MemoryLedgers(state), api, Elector(leader=False))
    gated(api, 1, namespace="kube-system", limits=DIRECT)
    assert follower.run_once() == {}
    assert api.admitted("kube-system") == [] and api.events == []
    notes = reconciler(state, MemoryLedgers(state), api).run_once()
    assert api.admitted("kube-system") == ["p0"]
    assert notes["kube-system/p0"].reason == "AdmissionSkipped"
    assert "--exclude-namespaces" in api.events[0][2]


def test_a_pod_is_released_only_once_the_api_server_confirms_the_opt_out() -> None:
    """An opt-out is read again from kube-apiserver before a gate is removed unadmitted: a
    cache that lags an admin who took the label off again must not let a pod of a namespace
    migslice admits run past its tenant's quota."""
    state = replica_state(quota=1)
    api = Api(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api)
    gated(api, 2, limits=DIRECT)
    gate.run_once()
    state.upsert_namespace({"metadata": {"name": "team-a", "labels": OPTED_OUT}})  # stale
    gate.run_once()
    assert api.admitted() == ["p0"]
    label(api, state, "team-a")  # the cache catches up: admitted again
    gate.run_once()
    assert api.admitted() == ["p0"]
    assert state.tenant_usage("team-a").instances == 1


def test_a_sized_pod_stays_gated_and_is_told_to_be_created_again() -> None:
    state = replica_state()
    api = Api(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api)
    gated(api, 1, annotations={"migslice.io/gpu-size": "small"})
    notes = gate.run_once()
    assert not notes["team-a/p0"].admitted and notes["team-a/p0"].reason == "AdmissionDenied"
    assert "delete it and create it again" in api.events[0][2]
    assert store.read("team-a").charges == ()


def test_a_denied_pod_is_admitted_once_its_policy_allows_it() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy(deniedProfiles=["1g.10gb"]))
    state.upsert_node(make_node("gpu-1"))
    api = Api(state)
    gate = reconciler(state, MemoryLedgers(state), api)
    gated(api, 1, limits=DIRECT)
    assert gate.run_once()["team-a/p0"].reason == "AdmissionDenied"
    state.upsert_policy(make_policy(generation=2))
    gate.run_once()
    assert api.admitted() == ["p0"]


def test_the_gate_settings_refuse_a_lease_shorter_than_two_rounds() -> None:
    with pytest.raises(CommandError, match="at least twice --gate-interval-s"):
        GateSettings(interval_s=5.0, lease_s=8.0)
    assert not GateSettings(interval_s=0.0).is_on
    assert GateSettings().lease_namespace == "migslice-system"


@pytest.mark.parametrize(
    ("renew_s", "said"),
    [
        (15.0, "--gate-renew-deadline-s 15 must be shorter than --gate-lease-s 15"),
        (2.0, "--gate-interval-s 2 must be shorter than --gate-renew-deadline-s 2"),
        (0.0, "--gate-renew-deadline-s 0.0: must be a finite number > 0"),
    ],
    ids=["not-shorter-than-the-lease", "not-longer-than-a-round", "zero"],
)
def test_the_gate_settings_refuse_a_renew_deadline_outside_round_and_lease(
    renew_s: float, said: str
) -> None:
    with pytest.raises(CommandError, match=said):
        GateSettings(interval_s=2.0, lease_s=15.0, renew_deadline_s=renew_s)
    assert GateSettings().lease_renew_deadline_s == 10
    assert GateSettings(renew_deadline_s=5.0).lease_renew_deadline_s == 5


class RefusingApi(Api):
    """kube-apiserver refusing one pod's un-gate (another admission policy, or RBAC)."""

    refused = "team-a/p0"

    def patch_pod(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> bool:
        if f"{namespace}/{name}" == self.refused:
            raise ApiError(403, f"PATCH /api/v1/namespaces/{namespace}/pods/{name}: forbidden")
        return super().patch_pod(namespace, name, patch)


def test_a_pod_whose_un_gate_is_refused_does_not_hold_back_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One 403 ended every round at the oldest pod (a traceback every 2 s): no later gated
    pod was ever admitted."""
    state = replica_state(quota=3)
    api = RefusingApi(state)
    gate = reconciler(state, MemoryLedgers(state), api)
    gated(api, 3, limits=DIRECT)
    with caplog.at_level(logging.WARNING, logger="webhook.gate"):
        gate.run_once()
        gate.run_once()
    assert api.admitted() == ["p1", "p2"]
    refusals = [r for r in caplog.records if "cannot remove the gate of pod=team-a/p0" in r.message]
    assert len(refusals) == 1 and not any(r.exc_info for r in caplog.records)


def test_a_pod_whose_un_gate_is_refused_holds_no_quota_for_good() -> None:
    """Its decision charged it; decided again each round, the charge was renewed as long as
    the pod existed, and the tenant's other gated pods waited on quota for ever."""
    clock = Clock()
    state = replica_state(quota=1, clock=clock)
    api = RefusingApi(state)
    store = MemoryLedgers(state)
    gate = reconciler(state, store, api, clock=clock)
    gated(api, 2, limits=DIRECT)
    gate.run_once()
    assert api.admitted() == []  # p0 refused, p1 waits on the quota p0's charge holds
    charged = {c.uid for c in store.read("team-a").charges}
    clock.now_s += 10
    gate.run_once()
    assert {c.uid for c in store.read("team-a").charges} == charged  # not renewed
    clock.now_s += 50  # past the charge's 45 s hold, before p0 is tried again (90 s)
    gate.run_once()
    assert api.admitted() == ["p1"]


@pytest.mark.parametrize(
    ("namespace", "resource"),
    [
        ("team-a", "deviceclass.resource.kubernetes.io/nic.example.com"),
        ("elsewhere", "deviceclass.resource.kubernetes.io/gpu.nvidia.com"),
        ("team-a", "nvidia.com/hostdev"),
    ],
    ids=["tenant-other-class", "no-tenant-nvidia-class", "tenant-nvidia-non-gpu"],
)
def test_the_webhook_removes_the_gate_from_a_pod_it_admits_as_asking_no_gpu(
    namespace: str, resource: str
) -> None:
    """The gate policy's matchConditions are the webhook's: since they match any DeviceClass's
    implicit extended resource (deviceclass.resource.kubernetes.io/*), a fail-open namespace's
    pod asking one is stored gated even while the webhook answers. The webhook admits it as
    asking for no GPU; it must take the gate off as it does for every pod it admits
    (docs/outages.md), not leave it to the reconciler's next round (which tells it was
    "created while the webhook was unavailable")."""
    state = replica_state()
    client = create_app(WebhookSettings(), state).test_client()
    pod = make_created_pod(limits={resource: "1"}, namespace=namespace)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    response = client.post("/mutate", json=make_review(pod, namespace=namespace)).get_json()
    answer = response["response"]
    assert answer["allowed"], answer
    ops = json.loads(base64.b64decode(answer.get("patch") or "W10="))
    assert {"op": "remove", "path": "/spec/schedulingGates/0"} in ops, ops


def test_a_wall_clock_stepped_back_does_not_keep_a_refused_pod_gated() -> None:
    """The retry of a refused un-gate was due at time.time() + 90 s: an NTP step back of an
    hour left the pod gated (and never tried again) for an hour and 90 s."""
    state = replica_state(quota=2)
    api = RefusingApi(state)
    wall, monotonic = Clock(), Clock()
    keeper = QuotaKeeper(state, MemoryLedgers(state), wall_clock=wall)
    gate = GateReconciler(
        keeper, api, Elector(), GateSettings(), clock=wall, monotonic=monotonic.monotonic_s
    )
    gated(api, 1, limits=DIRECT)
    gate.run_once()
    assert api.admitted() == []  # refused
    api.refused = ""  # the policy that refused it is fixed
    wall.now_s -= 3600.0  # NTP steps the node's clock back an hour
    wall.now_s += 91.0
    monotonic.now_s += 91.0
    gate.run_once()
    assert api.admitted() == ["p0"]


class SlowApi(Api):
    """kube-apiserver answering each un-gate ``delay_s`` late (on the test's clock)."""

    def __init__(self, clock: Clock, delay_s: float, *states: ClusterState) -> None:
        super().__init__(*states)
        self.clock, self.delay_s = clock, delay_s

    def patch_pod(self, namespace: str, name: str, patch: Sequence[Mapping[str, Any]]) -> bool:
        patched = super().patch_pod(namespace, name, patch)
        self.clock.now_s += self.delay_s
        return patched


def test_a_gate_leader_past_its_renew_deadline_mid_round_admits_no_more_pods() -> None:
    """Lease 15 s, renew deadline 10 s: the first un-gate takes 11 s, after which another
    replica may hold the Lease 4 s later; the round admits no further pod."""
    objects = ObjectStore()

    def answer(request: Request) -> tuple[int, Any]:
        return objects.handle(request.method, request.path, request.query, request.body)

    clock = Clock()
    state = replica_state(quota=4, clock=clock)
    api = SlowApi(clock, 11.0, state)
    with local_api(answer) as transport:
        elector = LeaderElector(
            transport,
            "migslice-system",
            "migslice-admission-gate",
            "a",
            lease_duration_s=15,
            renew_deadline_s=10,
            clock=clock.monotonic_s,
        )
        gate = reconciler(state, MemoryLedgers(state), api, elector=elector, clock=clock)
        gated(api, 3, limits=DIRECT)
        gate.run_once()
    assert api.admitted() == ["p0"]
