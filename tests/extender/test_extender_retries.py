"""The pods the filter turned away for a reason no cluster event ends are touched once it ends
(``extender.retries``): a pod the large-job reserve held back when its hold is over, a pod
filtered while the caches were blind once they follow the API again. kube-scheduler retries a
pod every node failed only on a later cluster event; in a quiet cluster that is minutes away.

The touch is the Kubernetes API call (``migslice.kube.pod_touch``, against a real
kube-apiserver in e2e/test_dra_reserve_e2e.py); here it is recorded."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
from prometheus_client import generate_latest

from extender.metrics import ExtenderMetrics
from extender.retries import (
    CACHES_READY,
    HOLD_ENDED,
    MAX_TRIES,
    RETRY_AFTER_S,
    PodRef,
    Retries,
)
from migslice.names import RETRY_ANNOTATION
from migslice.objects.resource_claims import claim_facts_from_raw
from tests.dra_objects import make_claim
from tests.extender.test_extender_contract import FakeCache
from tests.extender.test_extender_reserve import BUSY, IDLE, _filter, _setup

POD = PodRef("team-a", "small", "uid-small")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Api:
    """The pod API as the touch sees it: pods by key and uid, each touch recorded."""

    def __init__(self, pods: Mapping[str, str] = {"team-a/small": "uid-small"}) -> None:
        self.pods = dict(pods)
        self.touched: list[tuple[str, dict[str, str]]] = []
        self.failures = 0

    def touch(self, pod: PodRef, annotations: Mapping[str, str]) -> bool:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("connection refused")
        if self.pods.get(pod.key) != pod.uid:
            return False
        self.touched.append((pod.key, dict(annotations)))
        return True


def _retries(api: Api, clock: Clock, ready: list[bool] | None = None) -> Retries:
    state = ready if ready is not None else [True]
    return Retries(api.touch, lambda: state[0], clock=clock)


def test_a_held_pod_is_touched_a_second_after_its_hold_ends_and_once() -> None:
    api, clock = Api(), Clock()
    retries = _retries(api, clock)
    retries.after_hold(POD, clock.now + 60)
    clock.now += 60
    assert retries.touch_due() == [] and api.touched == []
    clock.now += 1
    assert retries.touch_due() == [POD]
    ((key, annotations),) = api.touched
    assert key == "team-a/small"
    assert annotations[RETRY_ANNOTATION].startswith(f"{HOLD_ENDED} ")
    assert retries.touch_due() == [] and retries.waiting() == 0
    assert retries.touched == {HOLD_ENDED: 1, CACHES_READY: 0}


def test_a_pod_filtered_blind_is_touched_only_once_the_caches_are_ready() -> None:
    api, clock, ready = Api(), Clock(), [False]
    retries = _retries(api, clock, ready)
    retries.after_blind(POD)
    clock.now += 30
    assert retries.touch_due() == [] and retries.waiting() == 1
    ready[0] = True
    assert retries.touch_due() == [POD]
    assert api.touched[0][1][RETRY_ANNOTATION].startswith(f"{CACHES_READY} ")


def test_a_pod_let_through_is_forgotten_and_a_pod_of_another_uid_is_not() -> None:
    api, clock = Api(), Clock()
    retries = _retries(api, clock)
    retries.after_hold(POD, clock.now)
    retries.forget(PodRef("team-a", "small", "uid-other"))  # a new pod of the same name
    assert retries.waiting() == 1
    retries.forget(POD)
    clock.now += 10
    assert retries.touch_due() == [] and api.touched == []


def test_a_gone_or_replaced_pod_is_dropped_and_a_refused_touch_is_tried_again() -> None:
    api, clock = Api(pods={"team-a/small": "uid-new"}), Clock()
    retries = _retries(api, clock)
    retries.after_blind(POD)
    assert retries.touch_due() == [] and retries.waiting() == 0  # replaced: nothing to touch
    api = Api()
    api.failures = 1
    retries = _retries(api, clock)
    retries.after_blind(POD)
    assert retries.touch_due() == [] and retries.waiting() == 1
    assert retries.failures == 1  # migslice_extender_pod_touch_failures_total: the alert's
    clock.now += RETRY_AFTER_S - 1
    assert retries.touch_due() == []
    clock.now += 1
    assert retries.touch_due() == [POD]


def test_a_touch_the_api_keeps_refusing_is_given_up_after_its_tries() -> None:
    api, clock = Api(), Clock()
    api.failures = MAX_TRIES
    retries = _retries(api, clock)
    retries.after_blind(POD)
    for _ in range(MAX_TRIES):
        assert retries.touch_due() == []
        clock.now += RETRY_AFTER_S
    assert retries.waiting() == 0 and api.touched == []


def test_the_pods_kept_are_bounded_the_oldest_first_forgotten() -> None:
    api, clock = Api(), Clock()
    retries = Retries(api.touch, lambda: True, clock=clock, max_pods=2)
    for name in ("a", "b", "c"):
        retries.after_blind(PodRef("team-a", name, f"uid-{name}"))
    assert retries.waiting() == 2


def _full(state: Any) -> None:
    """BUSY holds a 3g and a 4g: a small pod fits only on IDLE, which the reserve keeps."""
    claim = claim_facts_from_raw(make_claim("held-4g", allocated=[(BUSY, "gpu-0-mig-4g40gb-5-0")]))
    assert claim is not None
    state.index.upsert_claim(claim)


def test_the_filter_asks_for_a_touch_when_the_reserves_hold_of_a_pod_ends() -> None:
    """Before, a held pod was tried again on the next cluster event: in a quiet cluster, after
    the unschedulable pool's flush (5 minutes by default) rather than the hold (60 s)."""
    state, _, client = _setup(max_hold_s=120.0)
    api, clock = Api({"team-a/small-0": "uid-small-0"}), Clock()
    state.retries = _retries(api, clock)
    assert _filter(client, state, "7g.80gb", "large-0")["NodeNames"] == [IDLE]
    assert state.retries.waiting() == 0  # a large pod is never held back
    _full(state)
    answer = _filter(client, state, "1g.10gb", "small-0", unschedulable_s=60)
    assert answer["NodeNames"] == []
    assert state.retries.waiting() == 1
    # the hold ends 120 s after the pod became unschedulable, 60 s from the call
    clock.now = time.time() + 60 - 5
    assert state.retries.touch_due() == []
    clock.now = time.time() + 60 + 5
    assert [p.key for p in state.retries.touch_due()] == ["team-a/small-0"]
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert 'migslice_extender_pods_touched_total{reason="hold-ended"} 1.0' in text
    assert "migslice_extender_pods_to_touch 0.0" in text


def test_a_pod_the_filter_lets_through_is_not_touched() -> None:
    state, _, client = _setup(max_hold_s=120.0)
    api, clock = Api({"team-a/small-0": "uid-small-0"}), Clock(time.time())
    state.retries = _retries(api, clock)
    _filter(client, state, "7g.80gb", "large-0")
    _full(state)
    assert _filter(client, state, "1g.10gb", "small-0", unschedulable_s=60)["NodeNames"] == []
    # its hold is over when kube-scheduler tries it next (another event came): it fits
    assert _filter(client, state, "1g.10gb", "small-0", unschedulable_s=180)["NodeNames"] == [IDLE]
    clock.now += 600
    assert state.retries.touch_due() == [] and api.touched == []


def test_a_pod_with_no_room_anywhere_is_left_to_the_cluster_events() -> None:
    """Nothing fits even without the reserve: a departure (an event) is what it waits for."""
    state, _, client = _setup(max_hold_s=120.0)
    state.retries = _retries(Api(), Clock())
    _filter(client, state, "7g.80gb", "large-0")
    _full(state)
    assert _filter(client, state, "7g.80gb", "large-1")["NodeNames"] == [IDLE]
    held = claim_facts_from_raw(make_claim("held-7g", allocated=[(IDLE, "gpu-0-mig-7g80gb-0-0")]))
    assert held is not None
    state.index.upsert_claim(held)
    assert _filter(client, state, "1g.10gb", "small-0", unschedulable_s=60)["NodeNames"] == []
    assert state.retries.waiting() == 0


@pytest.mark.parametrize("verb", ["filter", "filter-best-fit"])
def test_a_pod_filtered_while_the_caches_are_blind_is_touched_once_they_are_ready(
    verb: str,
) -> None:
    """Before, such a pod was tried again on the next cluster event after the outage."""
    state, _, client = _setup()
    state.caches = (FakeCache(True, 27.0),)
    api, clock = Api({"team-a/small-0": "uid-small-0"}), Clock()
    state.retries = Retries(api.touch, lambda: state.readiness(5.0)[0], clock=clock)
    answer = _filter(client, state, "1g.10gb", "small-0", verb)
    assert not answer.get("NodeNames") and answer["Error"].startswith("node state unknown")
    assert state.retries.touch_due() == []  # still blind
    state.caches = (FakeCache(True, 0.0),)
    assert [p.key for p in state.retries.touch_due()] == ["team-a/small-0"]
    assert api.touched[0][1][RETRY_ANNOTATION].startswith(CACHES_READY)
