"""The steer loop keeps the rules equal to each DynamicMIG node's steer: it writes what is
missing and deletes what is no longer wanted (deletes first), follows claims as they are
allocated, lifts a steer that keeps a pending pod of several devices off, writes nothing as a
follower or while a cache is blind, and leaves static-MIG nodes alone."""

from __future__ import annotations

import itertools
import time
from typing import Any

from prometheus_client import generate_latest

from extender.metrics import ExtenderMetrics
from extender.state import ExtenderState, StrandGuard, new_index
from extender.steer import STEER_RETRY_MAX_S, SteerLoop
from harness.steer_rules import RulesApi
from migslice.inventory import ClusterIndex
from migslice.kube.transport import ApiError
from migslice.objects import node_facts_from_raw
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.device_taint_rules import steer_rule_name, taint_rule_facts_from_raw
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.scheduling import PreparedNode, prepare_node
from tests.dra_objects import (
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)
from tests.work import lines_run

ONE = "gpu-node-a100-0"
STATIC = "gpu-node-a100-static"


def _index(
    claims: list[dict[str, Any]] | None = None, guard: StrandGuard | None = None
) -> ClusterIndex[PreparedNode]:
    static = [
        {
            **s,
            "spec": {
                **s["spec"],
                "nodeName": STATIC,
                "pool": {**s["spec"]["pool"], "name": STATIC},
            },
        }
        for s in fixture_slices("a100-80gb-staticmig-4g1g1g1g-resourceslices.json")
    ]
    index: ClusterIndex[PreparedNode] = (
        ClusterIndex(prepare_node) if guard is None else new_index(guard)
    )
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(ONE), make_dra_node(STATIC)),
            resource_slices=(
                *fixture_slices("a100-80gb-dynamicmig-1gpu-resourceslices.json"),
                *static,
            ),
            resource_claims=tuple(claims or ()),
            device_classes=tuple(migslice_classes()),
        )
    )
    return index


def _loop(index: ClusterIndex[PreparedNode], api: RulesApi, **kwargs: Any) -> SteerLoop:
    return SteerLoop(index, api, clock=lambda: 0.0, **kwargs)


def test_the_loop_writes_the_steer_once_and_follows_allocations() -> None:
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    deleted, created = loop.round()
    assert deleted == 0 and created == len(api.rules) > 0
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    assert not any(STATIC in name for name in api.rules)
    assert index.state_of(ONE).dra.pool.steered  # type: ignore[union-attr]
    api.writes.clear()
    assert loop.round() == (0, 0) and api.writes == []
    # The preferred 1g@6 is allocated: 1g@4 and 1g@5 take as much room, and 1g@4 comes first.
    claim = claim_facts_from_raw(make_claim("a", allocated=[(ONE, "gpu-0-mig-1g10gb-19-6")]))
    assert claim is not None
    index.upsert_claim(claim)
    deleted, created = loop.round()
    assert api.writes[0][0] == "delete"
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-4") not in api.rules
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-5") not in api.rules
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-3") in api.rules


def test_a_rule_edited_by_hand_is_written_again_as_the_steer_writes_it() -> None:
    """Measured before: a steer rule whose effect was edited to None was re-created every
    round (each create refused as existing, each counted as written), never restored, and
    left behind when its node went; one pointed at another device kept that device off for
    good while the device it was for stayed open."""
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    loop.round()
    first = steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0")
    second = steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-1")
    written = {name: api.rules[name] for name in (first, second)}
    api.edit(first, taint={"effect": "None"})
    api.edit(second, device="gpu-0-mig-7g80gb-0-0")
    api.writes.clear()
    assert loop.round() == (2, 2)
    assert api.writes == [
        ("delete", first),
        ("delete", second),
        ("create", first),
        ("create", second),
    ]
    assert {name: api.rules[name] for name in written} == written
    api.writes.clear()
    assert loop.round() == (0, 0) and api.writes == []
    api.edit(first, taint={"effect": "NoExecute"})  # the steer never evicts a running pod
    loop.round()
    assert api.rules[first] == written[first]


class RefusingApi(RulesApi):
    """An API server whose admission refuses every delete, for good (403)."""

    def delete_rule(self, name: str) -> bool:
        self.writes.append(("delete", name))
        raise ApiError(403, f"DELETE {name}: forbidden")


def test_a_write_refused_for_good_is_tried_again_on_the_clock_not_at_once() -> None:
    """Measured before: each failed write woke the loop and derived every node again, 40
    rounds a second (a rule the admission policy kept it from deleting: 25 ms apart)."""
    index = _index()
    api = RefusingApi(index)
    loop = _loop(index, api, interval_s=3600.0)
    loop.round()
    api.edit(steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0"), taint={"effect": "None"})
    loop.start()
    try:
        time.sleep(0.5)  # a spinning loop writes ~20 times here
    finally:
        loop.stop()
    assert api.writes.count(("delete", steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0"))) == 1
    assert loop.stats.failures == 1


class FailingApi(RulesApi):
    """An API server that answers every create 503 (overloaded, or an admission webhook on
    the rules that does not answer)."""

    refuse = True

    def create_rule(self, body: Any) -> bool:
        if not self.refuse:
            return super().create_rule(body)
        self.writes.append(("create", body["metadata"]["name"]))
        raise ApiError(503, "POST devicetaintrules: the server is currently unable to handle it")


def test_a_failed_write_waits_its_backoff_whatever_wakes_the_loop() -> None:
    """Before: every round sent each failed write again (here the node's 18 rules, again at
    the round a label on another node ran), and any change in the cluster runs a round 20 ms
    later: on a busy cluster each missing rule was POSTed to the failing API server many times
    a second, for as long as it failed. Now a rule's failed write waits ``interval_s``,
    doubling with each failure up to a cap, whatever wakes the loop."""
    now = [0.0]
    index = _index()
    api = FailingApi(index)
    loop = SteerLoop(index, api, clock=lambda: now[0], interval_s=0.5, resync_s=3600.0)
    loop.round()
    wanted = len(api.writes)
    assert wanted > 0 and api.rules == {} and loop.stats.failures == wanted
    api.writes.clear()
    # a change elsewhere in the cluster (a label on another node) wakes the loop at once
    index.upsert_node(node_facts_from_raw(make_dra_node(STATIC, **{"example.com/rack": "r1"})))
    loop.round()
    assert api.writes == []
    now[0] = 0.5  # interval_s after the failure: tried again
    loop.round()
    assert len(api.writes) == wanted
    api.writes.clear()
    now[0] = 1.0  # the second failure waits twice as long
    loop.round()
    assert api.writes == []
    now[0] = 1.5
    loop.round()
    assert len(api.writes) == wanted
    tries = []
    for step in range(1, 400):  # 100 s: the wait stops growing at its cap
        now[0] = 1.5 + step * 0.25
        api.writes.clear()
        loop.round()
        if api.writes:
            tries.append(now[0])
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert gaps and max(gaps) <= STEER_RETRY_MAX_S and gaps[-1] == gaps[-2]
    # the API server takes writes again: the rules are written at the next try
    api.refuse = False
    now[0] += STEER_RETRY_MAX_S
    loop.round()
    assert len(api.rules) == wanted


def test_a_rule_of_a_steer_name_left_over_is_deleted_whatever_it_says() -> None:
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    loop.round()
    stray = steer_rule_name(ONE, "gpu-0-mig-7g80gb-0-0")
    api.rules[stray] = {
        "metadata": {"name": stray},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": ONE}, "taint": {}},
    }
    facts = taint_rule_facts_from_raw(api.rules[stray])
    assert facts is not None and facts.steer and not facts.keeps_off
    index.upsert_rule(facts)
    api.writes.clear()
    loop.round()
    assert api.writes == [("delete", stray)] and stray not in api.rules


def test_a_resync_over_unchanged_nodes_steers_none_of_them_again() -> None:
    """Every resync (each minute) steered every DynamicMIG node again: 2.0 s of the extender's
    CPU at 1,000 nodes; the lift review did too, every 10 s while a pod of several devices
    waited. A node's steer is kept until its state, its lift or a rule changes."""
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api, resync_s=0.0)  # every round a resync
    loop.round()
    loop.round()  # the node again: its state changed with the rules the first round wrote
    api.writes.clear()
    resync = lines_run(loop.round)
    assert api.writes == [] and steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    claim = claim_facts_from_raw(make_claim("a", allocated=[(ONE, "gpu-0-mig-1g10gb-19-6")]))
    assert claim is not None
    index.upsert_claim(claim)
    steered = lines_run(loop.round)  # the node changed: steered again
    # 313 lines against 28,887 here; steering the node again took 3,112 of 31,886
    assert api.writes and resync * 20 < steered, (resync, steered)


def test_a_pending_pod_of_two_1g_devices_lifts_the_1g_steer() -> None:
    claims = [make_claim("two", count=2, profile="1g.10gb")]
    index = _index(claims)
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    api.pending = [make_claim_pod("waits", {"gpu": "two"})]
    loop.round()
    assert not any("1g10gb-19" in name for name in api.rules)
    assert any("2g20gb" in name for name in api.rules)
    api.pending = []
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules


def test_a_pod_behind_a_scheduling_gate_lifts_nothing_until_the_gate_is_removed() -> None:
    """kube-scheduler does not try a pod that carries a scheduling gate (Kueue holds queued
    workloads so, for as long as the queue is): a gated pod of two 1g devices lifted the 1g
    steer on every node for all that time, and small claims took the placements it keeps."""
    claims = [make_claim("two", count=2, profile="1g.10gb")]
    index = _index(claims)
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    gated = make_claim_pod("waits", {"gpu": "two"})
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    api.pending = [gated]
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    del gated["spec"]["schedulingGates"]  # Kueue admits the workload
    loop.round()
    assert not any("1g10gb-19" in name for name in api.rules)


def test_a_follower_or_a_blind_cache_writes_nothing() -> None:
    index = _index()
    api = RulesApi(index)
    assert _loop(index, api, may_write=lambda: False).round() == (0, 0)
    assert _loop(index, api, blindness=lambda: ["pods: not synced"]).round() == (0, 0)
    assert api.writes == []


def test_rules_of_a_node_that_is_gone_are_deleted() -> None:
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    loop.round()
    assert api.rules
    index.delete_node(ONE)
    loop.round()
    assert api.rules == {}


def test_a_node_labelled_dra_steer_off_is_left_to_first_fit() -> None:
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    loop.round()
    assert api.rules
    index.upsert_node(node_facts_from_raw(make_dra_node(ONE, **{"migslice.io/dra-steer": "off"})))
    loop.round()
    assert api.rules == {}


def test_past_the_rule_cap_nodes_in_use_keep_their_steer_and_idle_ones_are_left() -> None:
    index = _index()
    api = RulesApi(index)
    _loop(index, api).round()
    idle = len(api.rules)
    held = _index([make_claim("a", allocated=[(ONE, "gpu-0-mig-1g10gb-19-6")])])
    api = RulesApi(held)
    loop = _loop(held, api, max_rules=idle - 1)
    loop.round()
    assert api.rules and all(ONE in name for name in api.rules)
    assert loop.stats.capped_nodes == 0
    api = RulesApi(index)
    loop = _loop(index, api, max_rules=idle - 1)
    loop.round()
    assert api.rules == {} and loop.stats.capped_nodes == 1


def test_the_steer_is_counted_on_metrics() -> None:
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api)
    loop.round()
    state = ExtenderState(index, steer=loop.stats)
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert f"migslice_dra_steer_rules {float(len(api.rules))}" in text
    assert f'migslice_dra_steer_writes_total{{op="create"}} {float(len(api.rules))}' in text
    assert "migslice_dra_steer_capped_nodes 0.0" in text
    bare = generate_latest(ExtenderMetrics(ExtenderState(index)).registry).decode()
    assert "migslice_dra_steer" not in bare


def _held(index: ClusterIndex[PreparedNode], name: str, device: str) -> None:
    claim = claim_facts_from_raw(make_claim(name, allocated=[(ONE, device)]))
    assert claim is not None
    index.upsert_claim(claim)


def test_the_stranding_rule_turns_on_with_the_held_mix_and_nodes_are_derived_under_it() -> None:
    guard = StrandGuard()
    index = _index(guard=guard)
    api = RulesApi(index)
    loop = _loop(index, api, guard=guard)
    _held(index, "three", "gpu-0-mig-3g40gb-9-4")
    _held(index, "one", "gpu-0-mig-1g10gb-19-0")
    loop.round()
    assert (guard.on, guard.fill, guard.need) == (False, 1, 4)
    node = index.get(ONE)
    assert node is not None and not node.strand_guard
    _held(index, "two", "gpu-0-mig-2g20gb-14-2")
    _held(index, "one-more", "gpu-0-mig-1g10gb-19-1")
    loop.round()
    assert (guard.on, guard.fill, guard.need, guard.flips) == (True, 4, 4, 1)
    node, now = index.get(ONE), index.state_of(ONE)
    assert node is not None and node.strand_guard and now is not None
    assert node == prepare_node(now, strand_guard=True)
    state = ExtenderState(index, steer=loop.stats)
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert "migslice_dra_strand_guard 1.0" in text
    assert 'migslice_dra_strand_mix_slices{part="fill"} 4.0' in text
    assert "migslice_dra_strand_guard_flips_total 1.0" in text
    index.delete_claim("team-a/one")
    loop.round()
    assert (guard.on, guard.fill, guard.flips) == (False, 3, 2)
    node = index.get(ONE)
    assert node is not None and not node.strand_guard


def test_the_full_compute_rule_follows_3g_room_against_4g_held_and_steers_every_node_again() -> (
    None
):
    guard = StrandGuard()
    index = _index(guard=guard)
    api = RulesApi(index)
    loop = _loop(index, api, guard=guard)
    loop.round()
    assert (guard.complete, guard.complete_flips) == (False, 0)
    first = dict(api.rules)
    _held(index, "three", "gpu-0-mig-3g40gb-9-0")
    loop.round()
    assert (guard.complete, guard.need, guard.wide, guard.complete_flips) == (True, 4, 0, 1)
    text = generate_latest(ExtenderMetrics(ExtenderState(index, steer=loop.stats)).registry)
    assert b"migslice_dra_complete_rule 1.0" in text
    assert b"migslice_dra_complete_rule_flips_total 1.0" in text
    assert b'migslice_dra_strand_mix_slices{part="wide"} 0.0' in text
    assert api.rules != first  # the node was steered again with its 3g held
    index.delete_claim("team-a/three")
    _held(index, "four", "gpu-0-mig-4g40gb-5-0")
    loop.round()
    assert (guard.complete, guard.need, guard.wide, guard.complete_flips) == (False, 0, 4, 2)


def test_the_loop_steers_under_the_full_compute_rule() -> None:
    node = "gpu-node-a100-c"
    guard = StrandGuard()
    index = new_index(guard)
    held = [("a", "gpu-0-mig-3g40gb-9-0"), ("b", "gpu-0-mig-3g40gb-9-4")]
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(node),),
            resource_slices=tuple(
                fixture_slices("a100-80gb-dynamicmig-2gpu-combined-resourceslices.json")
            ),
            resource_claims=tuple(make_claim(n, allocated=[(node, d)]) for n, d in held),
            device_classes=tuple(migslice_classes()),
        )
    )
    api = RulesApi(index)
    loop = _loop(index, api, guard=guard)
    loop.round()
    assert guard.complete  # two 3g held, no 4g
    # GPU 0's memory is full; on the idle GPU 1 a 2g goes to 0 (3g@4 and a second 2g
    # still fit beside it), so the rules taint nothing of GPU 1's 2g before start 0 ...
    assert steer_rule_name(node, "gpu-1-mig-2g20gb-14-0") not in api.rules
    # ... and 1g claims still keep off the 4g placement's start.
    assert steer_rule_name(node, "gpu-1-mig-1g10gb-19-0") in api.rules


def test_a_replica_that_stops_writing_exports_none_of_the_writers_gauges() -> None:
    """MigsliceDraSteerCapped takes max() over the replicas: a count an ex-writer kept (its
    Lease lost) would fire for ever."""
    for cap, kept in ((None, "rules"), (1, "capped_nodes")):
        index = _index()
        writer = [True]
        limits = {} if cap is None else {"max_rules": cap}
        loop = _loop(index, RulesApi(index), may_write=lambda w=writer: w[0], **limits)
        loop.round()
        assert getattr(loop.stats, kept) > 0
        writer[0] = False
        loop.round()
        text = generate_latest(ExtenderMetrics(ExtenderState(index, steer=loop.stats)).registry)
        assert f"migslice_dra_steer_{kept} 0.0" in text.decode()


def test_a_writer_that_loses_the_lease_in_a_round_writes_no_more_of_it() -> None:
    """The Lease was asked once a round, before its writes: a round of many writes (the first
    at 1,000 nodes: thousands of calls, each up to 60 s against an API server that sheds
    load) went on writing after the Lease had passed to another replica."""
    writer = [True]

    class LosesTheLease(RulesApi):
        def create_rule(self, body: Any) -> bool:
            writer[0] = False  # the Lease expires while this write is under way
            return super().create_rule(body)

    index = _index()
    api = LosesTheLease(index)
    loop = _loop(index, api, may_write=lambda: writer[0])
    assert loop.round() == (0, 1)
    assert len(api.writes) == 1
    writer[0] = True  # the Lease again: the rest are written
    loop.round()
    assert len(api.rules) > 1


def test_a_follower_runs_on_the_clock_not_in_a_busy_loop() -> None:
    """Measured before: a follower's round marked every node changed through the listener,
    whose wake ran the next round 20 ms later: 74 rounds in 2 s (4 for the leader), each
    adding up every node's held mix again (0.64 s of CPU in 5 s at 1,000 nodes)."""
    index = _index()
    loop = SteerLoop(index, RulesApi(index), may_write=lambda: False, interval_s=0.25)
    rounds = [0]
    run = loop.round

    def counted() -> tuple[int, int]:
        rounds[0] += 1
        return run()

    loop.round = counted  # type: ignore[method-assign]
    loop.start()
    time.sleep(1.0)
    loop.stop()
    assert rounds[0] <= 6, rounds[0]


def test_a_follower_that_becomes_leader_steers_every_node() -> None:
    index = _index()
    api = RulesApi(index)
    writer = [False]
    loop = _loop(index, api, may_write=lambda: writer[0])
    loop.round()
    loop._dirty = set()  # a round of nothing changed since
    loop.round()
    writer[0] = True
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules


def test_with_the_steer_off_the_rules_a_steering_extender_left_are_deleted() -> None:
    """Measured before: with --no-dra-steer (the chart's dra.steer.enabled=false) nothing
    deleted the rules an earlier steering extender wrote, and its ClusterRole lost the delete:
    every device they kept off stayed off for ever (a 1g.10gb claim on the idle A100 got only
    start 6, then none; e2e/test_dra_steer_orphaned_e2e.py)."""
    index = _index()
    api = RulesApi(index)
    _loop(index, api).round()
    assert api.rules
    written = len(api.writes)
    off = _loop(index, api, steer=False)
    off.round()
    assert api.rules == {}
    assert {op for op, _ in api.writes[written:]} == {"delete"}
    assert off.round() == (0, 0)
    follower = _index()
    kept = RulesApi(follower)
    _loop(follower, kept).round()
    assert _loop(follower, kept, steer=False, may_write=lambda: False).round() == (0, 0)
    assert kept.rules


def test_a_pending_pod_of_two_1g_extended_resources_lifts_the_1g_steer() -> None:
    """A pod asking ``nvidia.com/mig-1g.10gb: 2`` is served on a DRA node through the class's
    ``extendedResourceName`` (KEP-5004) and has no ``spec.resourceClaims``: the steer's
    untainted 1g tail on the idle A100 (start 6 alone) is too short for it, so it must be
    lifted as a claim pod's is, or the pod waits for good while the GPU is idle."""
    index = _index()
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    api.pending = [make_claim_pod("waits", {}, mig={"1g.10gb": 2})]
    loop.round()
    assert not any("1g10gb-19" in name for name in api.rules)
    api.pending = []
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules


def test_a_pending_pod_of_one_device_pinned_to_a_gpu_lifts_the_steer_that_keeps_it_off() -> None:
    """A claim may pin its GPU (``parentUUID``, read as docs/dra.md says). With GPU 3 in use
    the 1g steer prefers GPU 3 and taints every 1g device of GPUs 0-2 before it: a 1g claim
    pinned to GPU 0 fits the node unsteered but no device is left open to it, so it waits
    for as long as the steer stands unless the lift review lifts it as it does for pods of
    several devices."""
    eight, gpu0 = EIGHT, GPU0
    selectors = [
        f"device.attributes['gpu.nvidia.com'].profile == '1g.10gb' && "
        f"device.attributes['gpu.nvidia.com'].parentUUID == '{gpu0}'"
    ]
    pinned = make_claim(
        "pinned",
        requests=[
            {
                "name": "mig",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "selectors": [{"cel": {"expression": e}} for e in selectors],
                },
            }
        ],
    )
    index = _eight_gpus_gpu3_in_use(pinned)
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    gpu0_1g = [steer_rule_name(eight, f"gpu-0-mig-1g10gb-19-{s}") for s in range(7)]
    assert all(name in api.rules for name in gpu0_1g)
    api.pending = [make_claim_pod("waits", {"gpu": "pinned"})]
    loop.round()
    assert not any(name in api.rules for name in gpu0_1g)
    api.pending = []
    loop.round()
    assert all(name in api.rules for name in gpu0_1g)


def _unschedulable(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as kube-scheduler leaves it after a try that found no node."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "lastTransitionTime": "2026-12-07T10:00:00Z",
    }
    return {**pod, "status": {**pod["status"], "conditions": [condition]}}


def _eight_gpus_gpu3_in_use(claim: dict[str, Any]) -> ClusterIndex[PreparedNode]:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(EIGHT),),
            resource_slices=tuple(fixture_slices("a100-80gb-dynamicmig-8gpu-resourceslices.json")),
            resource_claims=(
                make_claim("held", allocated=[(EIGHT, "gpu-3-mig-4g40gb-5-0")]),
                claim,
            ),
            device_classes=tuple(migslice_classes()),
        )
    )
    return index


EIGHT = "gpu-node-a100-8"
GPU0 = "GPU-4a1f7c2e-9b3d-1e5f-a0c4-7d2e6f810000"


def test_a_pod_whose_claim_migslice_cannot_read_is_not_kept_off_for_good() -> None:
    """A claim left to kube-scheduler (a selector migslice does not read: a list of GPUs, a
    NUMA node; a request with tolerations; firstAvailable) was never part of the lift review:
    a 1g claim that may take only GPU 0's devices waited for as long as the steer preferred
    GPU 3 and tainted every 1g device before it, though GPU 0 was idle. Once kube-scheduler
    has found no node for it, the steer of the profiles it may be given is lifted."""
    expression = (
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb' && "
        f"device.attributes['gpu.nvidia.com'].parentUUID in ['{GPU0}']"
    )
    listed = make_claim(
        "listed",
        requests=[
            {
                "name": "mig",
                "exactly": {
                    "deviceClassName": "mig.nvidia.com",
                    "allocationMode": "ExactCount",
                    "count": 1,
                    "selectors": [{"cel": {"expression": expression}}],
                },
            }
        ],
    )
    index = _eight_gpus_gpu3_in_use(listed)
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    gpu0_1g = [steer_rule_name(EIGHT, f"gpu-0-mig-1g10gb-19-{s}") for s in range(7)]
    assert all(name in api.rules for name in gpu0_1g)
    pod = make_claim_pod("waits", {"gpu": "listed"})
    api.pending = [pod]  # not tried yet: the steer may well serve it
    loop.round()
    assert all(name in api.rules for name in gpu0_1g)
    api.pending = [_unschedulable(pod)]
    loop.round()
    assert not any("1g10gb-19-" in name for name in api.rules)
    assert any("2g20gb" in name for name in api.rules)  # other profiles keep their steer
    api.pending = []
    loop.round()
    assert all(name in api.rules for name in gpu0_1g)


def test_a_pod_of_two_1g_devices_whose_claim_tolerates_another_taint_is_lifted_for() -> None:
    """A request with tolerations is left to kube-scheduler (the allocator may give it a
    device tainted by what it tolerates), and so was left out of the lift review: two 1g
    devices that tolerate an admin's maintenance taint, not the steer's, found one untainted
    1g device on the idle A100 and waited there for good."""
    tolerant = make_claim("tolerant", count=2)
    tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoSchedule"}
    ]
    index = _index([tolerant])
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    assert steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0") in api.rules
    api.pending = [_unschedulable(make_claim_pod("waits", {"gpu": "tolerant"}))]
    loop.round()
    assert not any("1g10gb-19" in name for name in api.rules)


def test_a_first_available_claim_lifts_the_profiles_of_its_sub_requests_alone() -> None:
    """``firstAvailable`` is left to kube-scheduler: two 1g.10gb devices, else one 2g.20gb.
    On the idle A100 the steer leaves one 1g device and the 2g at 4 open, so the claim would
    take the 2g; once kube-scheduler has found no node for the pod all the same, the steer of
    both profiles is lifted there, and of no other."""
    subs = [
        {"name": "two-1g", "deviceClassName": "migslice-mig-1g.10gb", "count": 2},
        {"name": "one-2g", "deviceClassName": "migslice-mig-2g.20gb", "count": 1},
    ]
    either = make_claim("either", requests=[{"name": "gpu", "firstAvailable": subs}])
    index = _index([either])
    api = RulesApi(index)
    loop = _loop(index, api, lift_interval_s=0.0)
    loop.round()
    before = set(api.rules)
    assert any("3g40gb" in name for name in before)
    api.pending = [_unschedulable(make_claim_pod("waits", {"gpu": "either"}))]
    loop.round()
    assert not any("1g10gb-19-" in name or "2g20gb" in name for name in api.rules)
    assert {n for n in before if "1g10gb-19-" not in n and "2g20gb" not in n} == set(api.rules)
