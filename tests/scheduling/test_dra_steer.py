"""The steer on DynamicMIG nodes: the devices it taints make kube-scheduler's first fit land on
migslice's placement, never close a profile to a one-device claim, and lift for pods of
several devices that it would keep off; the rules it writes are read back as it meant them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.inventory import ClusterIndex
from migslice.inventory.first_fit import PoolUse, Wanted, first_fit
from migslice.mig import CATALOG
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.device_taint_rules import (
    steer_rule,
    steer_rule_name,
    taint_rule_facts_from_raw,
    with_rules,
)
from migslice.objects.dra_pool import DraPool
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.objects.resource_slices import mig_device_name
from migslice.scheduling import PreparedNode, prepare_node
from migslice.scheduling.dra_steer import lifted, steer_of
from tests.dra_objects import fixture_slices, make_claim, make_dra_node, migslice_classes

ONE = "gpu-node-a100-0"
EIGHT = "gpu-node-a100-8"
ONE_GPU = "a100-80gb-dynamicmig-1gpu-resourceslices.json"
EIGHT_GPUS = "a100-80gb-dynamicmig-8gpu-resourceslices.json"


def _index(node: str, fixture: str, held: Sequence[str] = ()) -> ClusterIndex[PreparedNode]:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    claims = [make_claim(f"c{i}", allocated=[(node, d)]) for i, d in enumerate(held)]
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(node),),
            resource_slices=tuple(fixture_slices(fixture)),
            resource_claims=tuple(claims),
            device_classes=tuple(migslice_classes()),
        )
    )
    return index


def _pool_use(index: ClusterIndex[PreparedNode], node: str) -> tuple[DraPool, PoolUse]:
    state = index.state_of(node)
    assert state is not None and state.dra is not None and state.dra.use is not None
    return state.dra.pool, state.dra.use


def _steered(pool: DraPool, taints: frozenset[str]) -> DraPool:
    rules = {
        steer_rule_name(pool.node, d): taint_rule_facts_from_raw(steer_rule(pool.node, d, "x"))
        for d in taints
    }
    return with_rules(pool, {k: v for k, v in rules.items() if v is not None})


def _first(pool: DraPool, use: PoolUse, profile: str) -> str | None:
    choice = first_fit(pool, Wanted.mig(profile), use)
    return None if choice is None else choice.name


def test_on_an_idle_a100_a_1g_claim_is_steered_off_the_4g_placement() -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    assert _first(pool, use, "1g.10gb") == "gpu-0-mig-1g10gb-19-0"
    steer = steer_of(pool, use)
    assert dict(steer.preferred)["1g.10gb"] == "gpu-0-mig-1g10gb-19-6"
    assert dict(steer.preferred)["3g.40gb"] == "gpu-0-mig-3g40gb-9-4"
    assert dict(steer.preferred)["2g.20gb"] == "gpu-0-mig-2g20gb-14-4"
    assert {f"gpu-0-mig-1g10gb-19-{s}" for s in range(6)} <= steer.taints
    assert "gpu-0-mig-4g40gb-5-0" not in steer.taints
    assert "gpu-0-mig-7g80gb-0-0" not in steer.taints
    steered = _steered(pool, steer.taints)
    assert _first(steered, use, "1g.10gb") == "gpu-0-mig-1g10gb-19-6"
    # First fit's 1g@0 leaves no 4g; the steered 1g@6 leaves it.
    after_first_fit = use.copy()
    assert after_first_fit.hold("gpu-0-mig-1g10gb-19-0")
    assert _first(pool, after_first_fit, "4g.40gb") is None
    after_steer = use.copy()
    assert after_steer.hold("gpu-0-mig-1g10gb-19-6")
    assert _first(pool, after_steer, "4g.40gb") == "gpu-0-mig-4g40gb-5-0"


def test_with_the_full_compute_rule_a_2g_leaves_room_for_a_3g_and_a_second_2g() -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    # 2g@4 keeps the 4g placement, but a later 3g then takes 3g@0, beside which the last
    # compute slice fits a 1g alone; 2g@0 leaves 3g@4 and a second 2g@2 (7 of 7).
    steer = steer_of(pool, use, complete=True)
    assert dict(steer.preferred)["2g.20gb"] == "gpu-0-mig-2g20gb-14-0"
    assert dict(steer.preferred)["3g.40gb"] == "gpu-0-mig-3g40gb-9-4"
    assert dict(steer.preferred)["1g.10gb"] == "gpu-0-mig-1g10gb-19-6"
    after = use.copy()
    assert after.hold("gpu-0-mig-2g20gb-14-0")
    steered = _steered(pool, steer_of(pool, after, complete=True).taints)
    assert _first(steered, after, "3g.40gb") == "gpu-0-mig-3g40gb-9-4"
    assert after.hold("gpu-0-mig-3g40gb-9-4")
    assert _first(pool, after, "2g.20gb") == "gpu-0-mig-2g20gb-14-2"


def test_a_busy_gpu_is_filled_before_an_idle_one_is_opened() -> None:
    index = _index(EIGHT, EIGHT_GPUS, held=["gpu-3-mig-4g40gb-5-0"])
    pool, use = _pool_use(index, EIGHT)
    steer = steer_of(pool, use)
    assert dict(steer.preferred)["1g.10gb"] == "gpu-3-mig-1g10gb-19-6"
    assert {f"gpu-{g}-mig-1g10gb-19-{s}" for g in range(3) for s in range(7)} <= steer.taints
    assert {"gpu-3-mig-1g10gb-19-4", "gpu-3-mig-1g10gb-19-5"} <= steer.taints
    assert not any(t.startswith(("gpu-4-", "gpu-5-", "gpu-6-", "gpu-7-")) for t in steer.taints)
    assert _first(_steered(pool, steer.taints), use, "1g.10gb") == "gpu-3-mig-1g10gb-19-6"


def test_seven_1g_claims_one_after_the_other_all_fit_and_the_4g_stays_while_it_can() -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    taken = []
    for _ in range(7):
        steer = steer_of(pool, use)
        name = _first(_steered(pool, steer.taints), use, "1g.10gb")
        assert name is not None
        assert use.hold(name)
        taken.append(int(name.rsplit("-", 1)[1]))
        if len(taken) <= 3:
            assert _first(pool, use, "4g.40gb") == "gpu-0-mig-4g40gb-5-0"
    assert sorted(taken) == list(range(7))
    assert sorted(taken[:3]) == [4, 5, 6]
    assert steer_of(pool, use).taints == frozenset()


def test_a_pod_of_two_devices_kept_off_by_the_steer_lifts_it() -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    steer = steer_of(pool, use)
    two = [(Wanted.mig("1g.10gb"), 2)]
    one = [(Wanted.mig("2g.20gb"), 1)]
    assert lifted(pool, use, steer, [two, one]) == {"1g.10gb"}
    again = steer_of(pool, use, lift={"1g.10gb"})
    assert not any("1g10gb-19" in t for t in again.taints)
    assert any("2g20gb" in t for t in again.taints)


def test_other_taints_are_honoured_and_the_steers_own_rules_are_not_read() -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    foreign = {
        "health": taint_rule_facts_from_raw(
            {
                "metadata": {"name": "health"},
                "spec": {
                    "deviceSelector": {
                        "driver": "gpu.nvidia.com",
                        "device": "gpu-0-mig-1g10gb-19-6",
                    },
                    "taint": {"key": "example.com/bad", "effect": "NoExecute"},
                },
            }
        )
    }
    tainted = with_rules(pool, None, {k: v for k, v in foreign.items() if v is not None})
    assert "gpu-0-mig-1g10gb-19-6" in tainted.tainted
    assert dict(steer_of(tainted, use).preferred)["1g.10gb"] == "gpu-0-mig-1g10gb-19-4"
    steer = steer_of(pool, use)
    assert steer_of(_steered(pool, steer.taints), use) == steer


def test_rules_that_keep_nothing_off_are_not_read() -> None:
    base: dict[str, Any] = {
        "metadata": {"name": "r"},
        "spec": {"deviceSelector": {"driver": "gpu.nvidia.com"}, "taint": {"key": "k"}},
    }
    for effect, driver in (("None", "gpu.nvidia.com"), ("NoSchedule", "other.example.com")):
        raw = {
            "metadata": base["metadata"],
            "spec": {"deviceSelector": {"driver": driver}, "taint": {"key": "k", "effect": effect}},
        }
        assert taint_rule_facts_from_raw(raw) is None
    everything = taint_rule_facts_from_raw(
        {
            "metadata": {"name": "all"},
            "spec": {"deviceSelector": {}, "taint": {"key": "k", "effect": "NoSchedule"}},
        }
    )
    assert everything is not None and not everything.steer
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    assert _first(with_rules(pool, None, {"all": everything}), use, "1g.10gb") is None


def test_a_rule_without_a_device_selector_taints_no_device() -> None:
    """resource.k8s.io/v1 DeviceTaintRuleSpec: "The empty selector matches all devices.
    Without a selector, no devices are matched" (k8s.io/api v0.37.2 resource/v1/types.go:
    1050-1056); kube-scheduler's slice tracker skips such a rule ("No selector matches no
    devices", k8s.io/dynamic-resource-allocation v0.37.2 resourceslice/tracker/tracker.go:
    584-588), and kube-apiserver accepts it (validateDeviceTaintSelector returns no error for
    nil)."""
    for spec in (
        {"taint": {"key": "k", "effect": "NoSchedule"}},
        {"deviceSelector": None, "taint": {"key": "k", "effect": "NoExecute"}},
    ):
        assert taint_rule_facts_from_raw({"metadata": {"name": "none"}, "spec": spec}) is None
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-template"},
        "spec": {"taint": {"key": "example.com/drain", "effect": "NoSchedule"}},
    }
    index.load_objects(
        ClusterObjects(
            nodes=(make_dra_node(ONE),),
            resource_slices=tuple(fixture_slices(ONE_GPU)),
            device_classes=tuple(migslice_classes()),
            device_taint_rules=(rule,),
        )
    )
    pool, use = _pool_use(index, ONE)
    assert pool.tainted == frozenset()
    assert _first(pool, use, "1g.10gb") == "gpu-0-mig-1g10gb-19-0"


def test_the_index_reads_rules_into_the_pool() -> None:
    index = _index(ONE, ONE_GPU)
    pool, use = _pool_use(index, ONE)
    steer = steer_of(pool, use)
    for device in steer.taints:
        facts = taint_rule_facts_from_raw(steer_rule(ONE, device, "1g.10gb"))
        assert facts is not None and facts.steer
        index.upsert_rule(facts)
    read, _ = _pool_use(index, ONE)
    assert read.steered == steer.taints and read.tainted == frozenset()
    assert set(index.steer_rules()) == {steer_rule_name(ONE, d) for d in steer.taints}
    index.delete_rule(steer_rule_name(ONE, "gpu-0-mig-1g10gb-19-0"))
    read, _ = _pool_use(index, ONE)
    assert "gpu-0-mig-1g10gb-19-0" not in read.steered
    claim = claim_facts_from_raw(make_claim("late", allocated=[(ONE, "gpu-0-mig-1g10gb-19-6")]))
    assert claim is not None
    index.upsert_claim(claim)
    read, held = _pool_use(index, ONE)
    assert read.steered == steer.taints - {"gpu-0-mig-1g10gb-19-0"}
    assert _first(read, held, "1g.10gb") == "gpu-0-mig-1g10gb-19-0"


def test_a_long_pool_name_gets_a_hashed_rule_name() -> None:
    long = "n" * 240
    name = steer_rule_name(long, "gpu-0-mig-1g10gb-19-0")
    assert len(name) <= 253 and name.startswith("migslice-steer-")
    assert name != steer_rule_name("m" * 240, "gpu-0-mig-1g10gb-19-0")


PLACEMENTS = [
    "gpu-0-mig-1g10gb-19-0",
    "gpu-0-mig-1g10gb-19-3",
    "gpu-0-mig-1g10gb-19-6",
    "gpu-0-mig-1g20gb-15-2",
    "gpu-0-mig-2g20gb-14-0",
    "gpu-0-mig-2g20gb-14-4",
    "gpu-0-mig-3g40gb-9-4",
    "gpu-0-mig-4g40gb-5-0",
]
PROFILES = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(PLACEMENTS), max_size=5))
def test_a_one_device_claim_fits_steered_exactly_when_it_fits_and_lands_where_preferred(
    held: list[str],
) -> None:
    pool, use = _pool_use(_index(ONE, ONE_GPU), ONE)
    use = use.copy()
    for name in held:
        use.hold(name)
    steer = steer_of(pool, use)
    steered = _steered(pool, steer.taints)
    preferred = dict(steer.preferred)
    for profile in PROFILES:
        plain = _first(pool, use, profile)
        landed = _first(steered, use, profile)
        assert (plain is None) == (landed is None), profile
        if profile in preferred:
            assert landed == preferred[profile]


def test_every_steer_rule_kube_apiserver_would_take() -> None:
    """Names are DNS subdomains, the taint's value a label value (``1g.10gb+me`` is not)."""
    label = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    subdomain = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    for model in CATALOG.models:
        for profile in model.profiles:
            device = mig_device_name(0, profile.name, profile.gi_profile_id or 0, 0)
            rule = steer_rule("gpu-node-a100-0", device, profile.name)
            assert subdomain.match(rule["metadata"]["name"]), rule
            assert len(rule["metadata"]["name"]) <= 253
            assert label.match(rule["spec"]["taint"]["value"]), rule
            assert len(rule["spec"]["taint"]["value"]) <= 63


def test_with_the_stranding_rule_a_3g_opens_another_gpu_instead_of_pairing_with_a_3g() -> None:
    index = _index(EIGHT, EIGHT_GPUS, held=["gpu-3-mig-3g40gb-9-4"])
    pool, use = _pool_use(index, EIGHT)
    # Without the rule the fullest GPU in use wins: 3g@0 next to 3g@4, 1 compute slice lost.
    assert dict(steer_of(pool, use).preferred)["3g.40gb"] == "gpu-3-mig-3g40gb-9-0"
    guarded = steer_of(pool, use, strand_guard=True)
    preferred = dict(guarded.preferred)
    assert preferred["3g.40gb"] == "gpu-0-mig-3g40gb-9-4"
    assert "gpu-3-mig-3g40gb-9-0" not in guarded.taints
    assert _first(_steered(pool, guarded.taints), use, "3g.40gb") == "gpu-0-mig-3g40gb-9-4"
    # Small profiles still fill the GPU in use; the rule leaves them where they were.
    assert preferred["2g.20gb"] == dict(steer_of(pool, use).preferred)["2g.20gb"]
    assert preferred["2g.20gb"].startswith("gpu-3-")


def test_a_3g_that_can_only_strand_still_fits_and_the_node_scores_it_lowest() -> None:
    index = _index(ONE, ONE_GPU, held=["gpu-0-mig-3g40gb-9-4"])
    state = index.state_of(ONE)
    assert state is not None
    plain, guarded = prepare_node(state), prepare_node(state, strand_guard=True)
    assert plain.unit_scores["nvidia.com/mig-3g.40gb"] == 10
    assert guarded.unit_scores["nvidia.com/mig-3g.40gb"] == 1
    assert (
        guarded.unit_scores["nvidia.com/mig-2g.20gb"] == plain.unit_scores["nvidia.com/mig-2g.20gb"]
    )
    assert guarded.filler_mix == plain.filler_mix
    assert (plain.filler_mix.fill, plain.filler_mix.need) == (0, 4)
    pool, use = _pool_use(index, ONE)
    assert steer_of(pool, use, strand_guard=True).taints == steer_of(pool, use).taints


def test_a_one_device_demand_pinned_to_a_gpu_the_steer_closes_lifts_it() -> None:
    """GPU 3 in use: the 1g steer prefers it and taints every 1g device of GPUs 0-2. A 1g
    pinned to GPU 0 fits unsteered and not steered; an unpinned 1g fits steered."""
    pool, use = _pool_use(_index(EIGHT, EIGHT_GPUS, ["gpu-3-mig-4g40gb-5-0"]), EIGHT)
    steer = steer_of(pool, use)
    assert {f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)} <= steer.taints
    pinned = Wanted(Wanted.mig("1g.10gb").kind, "1g.10gb", gpu_uuid=pool.gpus[0].uuid)
    assert lifted(pool, use, steer, [[(Wanted.mig("1g.10gb"), 1)]]) == frozenset()
    assert lifted(pool, use, steer, [[(pinned, 1)]]) == {"1g.10gb"}
