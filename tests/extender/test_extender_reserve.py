"""The large-job reserve in the extender (``--dra-large-reserve``): the steer loop adds up the
idle DynamicMIG GPUs and their free capacity, the filter counts the pods it sees, and a small
pod that would break an idle GPU the reserve keeps goes beside others or waits."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from extender import ExtenderSettings, create_app
from extender.metrics import ExtenderMetrics
from extender.state import ExtenderState, ReserveStats, state_from_objects
from extender.steer import SteerLoop
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.objects.times import format_time
from migslice.scheduling import reasons
from migslice.scheduling.reserve import DEFAULT_MAX_HOLD_S
from tests.dra_objects import (
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)

IDLE = "gpu-node-a100-0"  # one A100, nothing held
BUSY = "gpu-node-a100-1"  # one A100 holding a 3g.40gb at 4


class NoRules:
    def create_rule(self, body: Any) -> bool:
        return True

    def delete_rule(self, name: str) -> bool:
        return True

    def list_pending_pods(self) -> list[dict[str, Any]]:
        return []


def _renamed(name: str) -> list[dict[str, Any]]:
    return [
        {
            **s,
            "spec": {**s["spec"], "nodeName": name, "pool": {**s["spec"]["pool"], "name": name}},
        }
        for s in fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json")
    ]


def _setup(
    *, enabled: bool = True, max_hold_s: float = DEFAULT_MAX_HOLD_S
) -> tuple[ExtenderState, SteerLoop, FlaskClient]:
    objects = ClusterObjects(
        nodes=(make_dra_node(IDLE), make_dra_node(BUSY)),
        resource_slices=(*_renamed(IDLE), *_renamed(BUSY)),
        resource_claims=(make_claim("held-3g", allocated=[(BUSY, "gpu-0-mig-3g40gb-9-4")]),),
        device_classes=tuple(migslice_classes()),
    )
    settings = ExtenderSettings(dra_large_reserve=enabled, dra_large_reserve_max_hold_s=max_hold_s)
    state = state_from_objects(objects, settings)
    reserve = ReserveStats(enabled=enabled, max_hold_s=max_hold_s)
    loop = SteerLoop(state.index, NoRules(), reserve=reserve)
    state.steer = loop.stats
    loop.update_guard()
    return state, loop, create_app(settings, state).test_client()


def _filter(
    client: FlaskClient,
    state: ExtenderState,
    profile: str,
    name: str,
    verb: str = "filter",
    *,
    unschedulable_s: float | None = None,
) -> Any:
    """Filter ``name``'s pod; ``unschedulable_s``: how long ago its ``PodScheduled`` condition
    turned False (None: kube-scheduler never tried it)."""
    claim = claim_facts_from_raw(make_claim(f"{name}-gpu", profile=profile, owner=name))
    assert claim is not None
    state.index.upsert_claim(claim)
    pod = make_claim_pod(name, {}, templates={"gpu": f"{name}-gpu"})
    if unschedulable_s is not None:
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "lastTransitionTime": format_time(time.time() - unschedulable_s),
            }
        ]
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [IDLE, BUSY]})
    response = client.post(f"/{verb}", data=body, content_type="application/json")
    assert response.status_code == 200
    return json.loads(response.data)


def test_the_steer_loop_adds_up_idle_gpus_and_free_capacity_as_claims_come_and_go() -> None:
    state, loop, _ = _setup()
    assert (loop.stats.reserve.idle, loop.stats.reserve.free) == (1, pytest.approx(1 + 4 / 7))
    claim = claim_facts_from_raw(make_claim("held-1g", allocated=[(IDLE, "gpu-0-mig-1g10gb-19-0")]))
    assert claim is not None
    state.index.upsert_claim(claim)
    loop.update_guard()
    assert loop.stats.reserve.idle == 0
    assert loop.stats.reserve.free == pytest.approx(6 / 7 + 4 / 7)
    state.index.delete_claim("team-a/held-1g")
    loop.update_guard()
    assert (loop.stats.reserve.idle, loop.stats.reserve.free) == (1, pytest.approx(1 + 4 / 7))


def test_a_small_pod_goes_beside_others_once_large_pods_arrive_and_a_large_one_passes() -> None:
    state, _, client = _setup()
    # nothing large arrived yet: the reserve keeps nothing
    assert _filter(client, state, "1g.10gb", "small-0")["NodeNames"] == [IDLE, BUSY]
    # a 7g arrives (it may break the idle GPU: it is what the reserve is for)
    assert _filter(client, state, "7g.80gb", "large-0")["NodeNames"] == [IDLE]
    answer = _filter(client, state, "1g.10gb", "small-1")
    assert answer["NodeNames"] == [BUSY]
    assert _filter(client, state, "2g.20gb", "small-b", "filter-best-fit")["NodeNames"] == [BUSY]
    # BUSY full: the small pod waits, and kube-scheduler reads why
    full = claim_facts_from_raw(make_claim("held-4g", allocated=[(BUSY, "gpu-0-mig-4g40gb-5-0")]))
    assert full is not None
    state.index.upsert_claim(full)
    answer = _filter(client, state, "1g.10gb", "small-2")
    assert answer["NodeNames"] == []
    share = 7 / (7 + 1 + 1 + 2 + 1)
    assert answer["FailedNodes"][IDLE] == reasons.kept_for_large(
        1, share * (1 + 4 / 7), share, DEFAULT_MAX_HOLD_S
    )
    kept = f"1 idle DynamicMIG GPU(s) left, the large-job reserve keeps {share * 11 / 7:.1f}"
    assert kept in answer["FailedNodes"][IDLE]
    assert state.steer is not None and state.steer.reserve.held_back == 1
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert "migslice_dra_large_reserve_enabled 1.0" in text
    assert "migslice_dra_idle_gpus 1.0" in text
    assert "migslice_dra_large_reserve_held_back_total 1.0" in text
    (line,) = [x for x in text.splitlines() if x.startswith("migslice_dra_large_share ")]
    assert float(line.split()[1]) == pytest.approx(share)


def test_a_small_pod_unschedulable_for_the_max_hold_may_break_the_idle_gpu() -> None:
    state, _, client = _setup(max_hold_s=120.0)
    assert _filter(client, state, "7g.80gb", "large-0")["NodeNames"] == [IDLE]
    full = claim_facts_from_raw(make_claim("held-4g", allocated=[(BUSY, "gpu-0-mig-4g40gb-5-0")]))
    assert full is not None
    state.index.upsert_claim(full)
    # found unschedulable a minute ago: still held back, the message names the longest hold
    answer = _filter(client, state, "1g.10gb", "small-0", unschedulable_s=60)
    assert answer["NodeNames"] == []
    assert "or 120s unschedulable at most" in answer["FailedNodes"][IDLE]
    assert "dra.largeJobReserve.maxHoldSeconds" in answer["FailedNodes"][IDLE]
    # three minutes: it may take the idle GPU, and the call is counted as one let past
    assert _filter(client, state, "1g.10gb", "small-0", unschedulable_s=180)["NodeNames"] == [IDLE]
    assert state.steer is not None
    assert (state.steer.reserve.held_back, state.steer.reserve.released) == (1, 1)
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert "migslice_dra_large_reserve_released_total 1.0" in text
    assert "migslice_dra_large_reserve_max_hold_seconds 120.0" in text


def test_off_by_default_a_small_pod_may_break_the_idle_gpu() -> None:
    state, _, client = _setup(enabled=False)
    assert _filter(client, state, "7g.80gb", "large-0")["NodeNames"] == [IDLE]
    assert _filter(client, state, "1g.10gb", "small-0")["NodeNames"] == [IDLE, BUSY]
    # /metrics still counts the idle GPUs (the dashboard's reserve panel), and keeps nothing
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert "migslice_dra_large_reserve_enabled 0.0" in text
    assert "migslice_dra_idle_gpus 1.0" in text
    assert "migslice_dra_large_reserve_gpus 0.0" in text
    assert "migslice_dra_large_reserve_held_back_total 0.0" in text


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_CONDITION = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["PodScheduled", "Ready"]) | st.text(max_size=10),
        "status": st.sampled_from(["False", "True"]) | _JSON,
        "reason": st.sampled_from(["Unschedulable", "SchedulingGated"]) | _JSON,
        "lastTransitionTime": st.sampled_from(
            ["2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"]
        )
        | _JSON,
    },
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=_JSON | st.fixed_dictionaries({"conditions": st.lists(_CONDITION, max_size=3) | _JSON})
)
def test_any_pod_status_gets_a_well_formed_answer_from_the_reserve(status: Any) -> None:
    state, _, client = _setup()
    assert _filter(client, state, "7g.80gb", "large-0")["NodeNames"] == [IDLE]
    full = claim_facts_from_raw(make_claim("held-4g", allocated=[(BUSY, "gpu-0-mig-4g40gb-5-0")]))
    assert full is not None
    state.index.upsert_claim(full)
    claim = claim_facts_from_raw(make_claim("small-gpu", profile="1g.10gb", owner="small"))
    assert claim is not None
    state.index.upsert_claim(claim)
    pod = make_claim_pod("small", {}, templates={"gpu": "small-gpu"})
    made = pod["status"]["resourceClaimStatuses"]  # the claim made from the template
    is_object = isinstance(status, dict)
    pod["status"] = {**status, "resourceClaimStatuses": made} if is_object else status
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [IDLE, BUSY]})
    response = client.post("/filter", data=body, content_type="application/json")
    assert response.status_code == 200
    answer = json.loads(response.data)
    if not is_object:  # no claim made from the template that the pod names
        assert answer["Error"].startswith(reasons.CLAIM_NOT_SEEN) and answer["NodeNames"] is None
        return
    assert answer["Error"] == ""
    # held back (no readable wait) or let past (a readable wait of the longest hold): never both
    assert answer["NodeNames"] in ([], [IDLE])
