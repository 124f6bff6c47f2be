"""Carve planning: the room measure and the planner against brute force, table tests of the
rules, and properties over random clusters (never a pinned instance, always legal)."""

from __future__ import annotations

import gc
import random
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from migslice.inventory import NodeState
from migslice.mig import Placed, is_legal, place
from migslice.mig.room import NO_LOSS, SHAPES, add_losses, room, room_loss
from migslice.mig.stranding import FillerMix
from migslice.repartition import CarveSettings, carve_trial, held_mix, plan_carve
from migslice.repartition.carve.gpu import CarvedGpu, carved_gpus
from migslice.repartition.carve.planner import CarveMemo, carve_mode_nodes
from tests import carve_oracle, mig_oracle
from tests.carve_builders import MODEL, carve_node, gpu, waiting
from tests.work import lines_run

PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
LEGAL = [
    sorted(place(MODEL, name, start) for name, start in legal)
    for legal in mig_oracle.legal_sets("A100-80GB", PROFILES)
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(LEGAL), st.sampled_from((*PROFILES, "1g.10gb+me")))
def test_room_is_the_most_instances_brute_force_can_add(kept: list[Placed], profile: str) -> None:
    expected = carve_oracle.room(MODEL, [(p.profile, p.start) for p in kept], profile)
    assert room(MODEL, kept, profile) == expected


def test_room_loss_keeps_whole_gpus_whole() -> None:
    empty = room_loss(MODEL, [], [place(MODEL, "1g.10gb", 0)])
    beside_a_3g = room_loss(
        MODEL, gpu("3g.40gb@4"), [*gpu("3g.40gb@4"), place(MODEL, "1g.10gb", 3)]
    )
    assert beside_a_3g < empty


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], str]:
    """One or two carve nodes of one or two GPUs, some instances busy or held, one profile
    wanted, such that no free instance of it exists (else the scheduler serves the pod)."""
    nodes = []
    for n in range(draw(st.integers(1, 2))):
        layouts = [draw(st.sampled_from(LEGAL)) for _ in range(draw(st.integers(1, 2)))]
        words = [f"{i}:{p.profile}@{p.start}" for i, layout in enumerate(layouts) for p in layout]
        busy = draw(st.lists(st.sampled_from(words), unique=True)) if words else []
        rest = [w for w in words if w not in busy]
        quiet = draw(st.lists(st.sampled_from(rest), unique=True, max_size=2)) if rest else []
        held = [w.split(":")[1].split("@")[0] for w in quiet]  # held, processes not started
        nodes.append(carve_node(f"n{n}", layouts, busy=busy, held=held))
    return nodes, draw(st.sampled_from(PROFILES))


@settings(max_examples=120, deadline=None)
@given(clusters())
def test_the_planner_carves_where_brute_force_finds_the_least_fragmentation(
    case: tuple[list[NodeState], str],
) -> None:
    nodes, profile = case
    resource = "nvidia.com/mig-" + profile
    assume(all(node.free_of(resource) == 0 for node in nodes))
    found = carve_oracle.best_carve(
        MODEL, [(g.old, g.pinned) for node in nodes for g in carved_gpus(node)], profile
    )
    result = plan_carve(nodes, [waiting("t/pod", profile)], guard=False, complete=False)
    if found is None:
        assert result.is_empty
        return
    (change,) = result.changes
    destroyed = sum(len(g.step.destroy) for g in change.gpus)
    assert (change.loss, destroyed) == found


@settings(max_examples=120, deadline=None)
@given(clusters(), st.lists(st.sampled_from(PROFILES), min_size=1, max_size=4))
def test_carves_are_legal_spare_pinned_instances_and_serve_what_they_claim(
    case: tuple[list[NodeState], str], wanted: list[str]
) -> None:
    nodes, _ = case
    pending = [waiting(f"t/p{i}", profile) for i, profile in enumerate(wanted)]
    result = plan_carve(nodes, pending)
    states = {node.name: node for node in nodes}
    served = {pod for change in result.changes for pod in change.serves}
    for change in result.changes:
        pinned = {
            (g.index, p)
            for g in carved_gpus(states[change.node])
            for p, pin in zip(g.old, g.pinned, strict=True)
            if pin
        }
        for carved in change.gpus:
            assert is_legal(MODEL, carved.new)
            doomed = {(d.profile, d.start) for d in carved.step.destroy}
            gone = {(carved.index, p) for p in carved.old if (p.profile, p.start) in doomed}
            assert not gone & pinned
            assert {p for i, p in pinned if i == carved.index} <= set(carved.new)
            assert [(s.start, s.profile) for s in carved.step.layout] == [
                (p.start, p.profile) for p in carved.new
            ]
    for pod in pending:
        if pod.demand.key in served:
            assert pod.demand.key not in dict(result.unserved)


@settings(max_examples=80, deadline=None)
@given(clusters(), st.lists(st.sampled_from(PROFILES), min_size=1, max_size=3))
def test_after_a_carve_the_pods_it_served_find_free_instances(
    case: tuple[list[NodeState], str], wanted: list[str]
) -> None:
    nodes, _ = case
    pending = [waiting(f"t/p{i}", profile) for i, profile in enumerate(wanted)]
    result = plan_carve(nodes, pending)
    for change in result.changes:
        node = next(n for n in nodes if n.name == change.node)
        new = {c.index: c.new for c in change.gpus}
        after = [new.get(g.index, g.instances) for g in node.gpus]
        counts = Counter(p.profile for layout in after for p in layout)
        held = Counter({r.removeprefix("nvidia.com/mig-"): n for r, n in node.allocated if n})
        wants = Counter(p.demand.units[0].profile for p in pending if p.demand.key in change.serves)
        for profile, count in wants.items():
            assert counts[profile] - held[profile] >= count


@settings(max_examples=80, deadline=None)
@given(clusters(), st.lists(st.sampled_from(PROFILES), min_size=2, max_size=4))
def test_one_nodes_carved_gpus_answer_every_pod_as_fresh_ones_do(
    case: tuple[list[NodeState], str], wanted: list[str]
) -> None:
    """A caller may keep a node's carved GPUs and ask about pod after pod (the simulator
    does): each answer is the one fresh GPUs give, and asking changes nothing."""
    nodes, _ = case
    node = nodes[0]
    kept = carved_gpus(node)
    before = [(g.destroyed.copy(), g.reserved.copy(), list(g.created)) for g in kept]
    for i, profile in enumerate(wanted):
        count = 1 + i % 2
        pod = waiting(f"t/p{i}", profile, count=count).demand
        trial, plain = carve_trial(pod, node, gpus=kept), carve_trial(pod, node)
        assert (trial and trial.cost) == (plain and plain.cost)
    assert [(g.destroyed, g.reserved, g.created) for g in kept] == before


@settings(max_examples=80, deadline=None)
@given(clusters(), st.lists(st.sampled_from(PROFILES), min_size=1, max_size=4))
def test_a_plan_from_kept_carved_gpus_is_the_plan_from_fresh_ones_and_keeps_them(
    case: tuple[list[NodeState], str], wanted: list[str]
) -> None:
    nodes, _ = case
    pending = [waiting(f"t/p{i}", profile) for i, profile in enumerate(wanted)]
    kept = {node.name: carved_gpus(node) for node in nodes[:1]}
    before = {
        name: [(g.destroyed.copy(), g.reserved.copy(), list(g.created)) for g in gpus]
        for name, gpus in kept.items()
    }
    assert plan_carve(nodes, pending, carved=kept) == plan_carve(nodes, pending)
    after = {
        name: [(g.destroyed, g.reserved, g.created) for g in gpus] for name, gpus in kept.items()
    }
    assert after == before


@settings(max_examples=60, deadline=None)
@given(
    clusters(),
    clusters(),
    st.lists(st.lists(st.sampled_from(PROFILES), min_size=1, max_size=3), min_size=2, max_size=4),
)
def test_plans_with_a_memo_are_the_plans_without_one_as_nodes_change_between_them(
    case: tuple[list[NodeState], str],
    other: tuple[list[NodeState], str],
    rounds: list[list[str]],
) -> None:
    """The controller keeps a :class:`CarveMemo` between decisions: each plan is the plan of a
    planner that knew nothing, whether a node stayed the same object, became another (changed)
    or went, and whatever the stranding rules."""
    nodes, _ = case
    memo = CarveMemo()
    for k, wanted in enumerate(rounds):
        pending = [waiting(f"t/p{k}-{i}", profile) for i, profile in enumerate(wanted)]
        rules = {"guard": k % 2 == 1, "complete": k % 3 == 2}
        assert plan_carve(nodes, pending, memo=memo, **rules) == plan_carve(nodes, pending, **rules)
        changed = other[0][0]
        # one node changes (a new state of the same name), or one goes and comes back
        nodes = [changed if n.name == changed.name else n for n in nodes] if k % 2 else nodes[:1]


def test_a_plan_over_nodes_unchanged_since_the_last_weighs_none_of_them_again() -> None:
    """At 5,000 carve-mode nodes one decision took 2.7 s of the extender's CPU, every loop of
    15 s while pods waited, though nothing had changed (bench/latency plan_scale)."""
    layouts = [gpu("4g.40gb@0", "3g.40gb@4"), gpu(*(f"1g.10gb@{i}" for i in range(7)))]
    nodes = [
        carve_node(f"n{n:03d}", layouts, busy=["0:4g.40gb@0", "0:3g.40gb@4"]) for n in range(40)
    ]
    pending = [waiting(f"t/p{i}", p) for i, p in enumerate(("2g.20gb", "7g.80gb", "3g.40gb"))]
    memo = CarveMemo()
    first = lines_run(lambda: plan_carve(nodes, pending, memo=memo))
    again = lines_run(lambda: plan_carve(nodes, pending, memo=memo))
    # without the memo the second plan runs as many lines as the first; with it, a fifth
    # (a quarter once the room-loss caches are warm from other tests)
    assert again < first / 4, (first, again)
    nodes[7] = carve_node("n007", [gpu(), gpu()])  # one node changed: it alone is weighed again
    after_one = lines_run(lambda: plan_carve(nodes, pending, memo=memo))
    assert after_one < first / 3, (first, after_one)
    assert plan_carve(nodes, pending, memo=memo) == plan_carve(nodes, pending)


def test_the_memo_keeps_costs_not_gpus() -> None:
    """A memo that kept each node's carved GPUs and trials held 75 MiB at 5,000 nodes, most of
    what the extender's worker holds for the whole cluster (bench/latency plan_scale)."""
    nodes = [carve_node(f"n{n}", [gpu("3g.40gb@4"), gpu()], busy=["0:3g.40gb@4"]) for n in range(6)]
    memo = CarveMemo()
    plan_carve(nodes, [waiting("t/a", "2g.20gb"), waiting("t/b", "4g.40gb")], memo=memo)
    seen: set[int] = set()
    found: list[object] = []
    todo: list[object] = [memo]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, (NodeState, type)):
            continue  # the caller's node states are its own
        seen.add(id(item))
        if isinstance(item, CarvedGpu):
            found.append(item)
        todo.extend(gc.get_referents(item))
    assert found == []


def test_pods_past_the_carve_budget_weigh_only_the_nodes_already_in_the_plan() -> None:
    """Every pod weighed every candidate node, though once the budget is spent only the
    nodes in the plan may take more: at 5,000 nodes one decision took 2.7 s."""
    nodes = [carve_node(f"n{n:03d}", [gpu()]) for n in range(200)]

    def work(count: int) -> int:
        pending = [waiting(f"t/p{i:03d}", "7g.80gb") for i in range(count)]
        return lines_run(lambda: plan_carve(nodes, pending))

    few, many = work(10), work(80)
    assert many < 1.5 * few, (few, many)  # 8x the pods: 1.04x the work (it was 2.0x)


def test_a_busy_instance_stays_and_idle_ones_in_the_way_go() -> None:
    node = carve_node("a", [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")], busy=["0:3g.40gb@4"])
    (change,) = plan_carve([node], [waiting("t/big", "3g.40gb")]).changes
    (carved,) = change.gpus
    assert [(d.profile, d.start, d.uuid) for d in carved.step.destroy] == [
        ("1g.10gb", 0, "MIG-a-0-1g.10gb-0"),
        ("1g.10gb", 1, "MIG-a-0-1g.10gb-1"),
    ]
    assert [(s.profile, s.start) for s in carved.step.create] == [("3g.40gb", 0)]
    assert carved.new == tuple(gpu("3g.40gb@0", "3g.40gb@4"))


def test_an_instance_a_pod_may_hold_without_processes_is_pinned() -> None:
    # One pod holds a 1g.10gb whose processes have not started: either 1g may be it.
    node = carve_node(
        "a", [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")], busy=["0:3g.40gb@4"], held=["1g.10gb"]
    )
    result = plan_carve([node], [waiting("t/big", "3g.40gb")])
    assert result.is_empty
    assert result.unserved == (("t/big", "no carve-mode GPU can take it"),)


def test_free_slices_are_used_before_idle_instances_are_destroyed() -> None:
    node = carve_node("a", [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")], busy=["0:3g.40gb@4"])
    (change,) = plan_carve([node], [waiting("t/mid", "2g.20gb")]).changes
    assert change.gpus[0].step.destroy == ()
    assert [(s.profile, s.start) for s in change.gpus[0].step.create] == [("2g.20gb", 2)]


def test_a_gpu_in_use_is_carved_before_a_whole_idle_gpu_is_broken() -> None:
    idle = carve_node("a", [[]])
    in_use = carve_node("b", [gpu("3g.40gb@4")], busy=["0:3g.40gb@4"])
    (change,) = plan_carve([idle, in_use], [waiting("t/small", "1g.10gb")]).changes
    assert change.node == "b"


def test_under_the_stranding_rule_a_3g_opens_a_gpu_instead_of_stranding_compute() -> None:
    # GPU 0 holds a 3g.40gb: a second one beside it fills the memory and leaves a compute
    # slice unused; on GPU 1 it leaves 4 memory slices that 1g/2g pods fill to 7 of 7.
    node = carve_node("a", [gpu("3g.40gb@4"), []], busy=["0:3g.40gb@4"])
    pod = [waiting("t/p", "3g.40gb")]
    (beside,) = plan_carve([node], pod, guard=False).changes
    assert [(g.index, g.new) for g in beside.gpus] == [(0, tuple(gpu("3g.40gb@0", "3g.40gb@4")))]
    (apart,) = plan_carve([node], pod, guard=True).changes
    assert [(g.index, g.new) for g in apart.gpus] == [(1, tuple(gpu("3g.40gb@4")))]
    # With no GPU to open, the 3g still goes beside the other: the rule orders, never refuses.
    full = carve_node("b", [gpu("3g.40gb@4")], busy=["0:3g.40gb@4"])
    assert not plan_carve([full], pod, guard=True).is_empty
    trial = carve_trial(pod[0].demand, full, guard=True)
    assert trial is not None and trial.cost[0] == 1


def test_the_stranding_rule_is_read_from_what_the_pods_hold() -> None:
    # A 3g.40gb held leaves 4 memory slices to fill; the 2g pods on a MIG Manager node count
    # towards filling them as the carve node's own would.
    pairing = carve_node("a", [gpu("3g.40gb@4"), []], busy=["0:3g.40gb@4"])
    two = gpu("2g.20gb@0", "2g.20gb@2")
    few = carve_node("f", [two], busy=["0:2g.20gb@0"], mode="mig-manager")
    enough = carve_node("e", [two], busy=["0:2g.20gb@0", "0:2g.20gb@2"], mode="mig-manager")
    assert held_mix([pairing, few]) == FillerMix(fill=2, need=4)
    assert held_mix([pairing, enough]) == FillerMix(fill=4, need=4)
    pod = [waiting("t/p", "3g.40gb")]
    (off,) = plan_carve([pairing, few], pod).changes
    assert [g.index for g in off.gpus] == [0]
    (on,) = plan_carve([pairing, enough], pod).changes
    assert (on.node, [g.index for g in on.gpus]) == ("a", [1])


def test_under_the_full_compute_rule_a_2g_leaves_room_for_a_3g_and_a_second_2g() -> None:
    # GPU 0's memory is full (3g + 3g); on the idle GPU 1 a 2g at 4 keeps the 4g placement,
    # but a later 3g could then take only start 0, beside which the last compute slice fits
    # a 1g alone; a 2g at 0 leaves 3g@4 and a second 2g (7 of 7).
    node = carve_node("a", [gpu("3g.40gb@0", "3g.40gb@4"), []], busy=["0:3g.40gb@0", "0:3g.40gb@4"])
    pod = [waiting("t/p", "2g.20gb")]
    (keeps_4g,) = plan_carve([node], pod, guard=False, complete=False).changes
    assert [(g.index, g.new) for g in keeps_4g.gpus] == [(1, tuple(gpu("2g.20gb@4")))]
    (completes,) = plan_carve([node], pod, guard=False, complete=True).changes
    assert [(g.index, g.new) for g in completes.gpus] == [(1, tuple(gpu("2g.20gb@0")))]
    # Read from what the pods hold: two 3g leave 8 memory slices beside them, no 4g is held:
    # on. Two 4g held take 8 memory slices, more than half the 3g room: off.
    assert held_mix([node]) == FillerMix(need=8)
    (read,) = plan_carve([node], pod).changes
    assert read.gpus[0].new == tuple(gpu("2g.20gb@0"))
    fours = carve_node(
        "m",
        [gpu("4g.40gb@0"), gpu("4g.40gb@0")],
        busy=["0:4g.40gb@0", "1:4g.40gb@0"],
        mode="mig-manager",
    )
    assert held_mix([node, fours]) == FillerMix(need=8, wide=8)
    (off,) = plan_carve([node, fours], pod).changes
    assert off.gpus[0].new == tuple(gpu("2g.20gb@4"))


def test_only_carve_mode_nodes_are_carved_and_a_bad_label_is_said() -> None:
    layouts = [gpu("3g.40gb@4")]
    nodes = [
        carve_node("default", layouts, busy=["0:3g.40gb@4"], mode=None),
        carve_node("manager", layouts, busy=["0:3g.40gb@4"], mode="mig-manager"),
        carve_node("typo", layouts, busy=["0:3g.40gb@4"], mode="carev"),
    ]
    result = plan_carve(nodes, [waiting("t/p", "1g.10gb")])
    assert result.is_empty
    assert [name for name, _ in result.skipped_nodes] == ["typo"]
    assert "expected one of mig-manager, carve" in result.skipped_nodes[0][1]
    with_default = plan_carve(
        nodes, [waiting("t/p", "1g.10gb")], settings=CarveSettings(default_mode="carve")
    )
    assert [c.node for c in with_default.changes] == ["default"]
    assert set(carve_mode_nodes(nodes, "mig-manager")) == {"typo"}
    assert set(carve_mode_nodes(nodes, "carve")) == {"default", "typo"}


def test_a_node_without_the_agents_layout_or_carving_already_is_left_alone() -> None:
    carving = carve_node("busy", [gpu("3g.40gb@4")], request=_request("p1"))
    result = plan_carve([carving], [waiting("t/p", "1g.10gb")])
    assert result.skipped_nodes == (("busy", "a carve is under way"),)


def test_at_most_max_nodes_in_flight_carve_at_once() -> None:
    nodes = [carve_node(f"n{i}", [gpu("7g.80gb@0")], busy=["0:7g.80gb@0"]) for i in range(3)]
    nodes += [carve_node(f"m{i}", [[]]) for i in range(3)]
    pending = [waiting(f"t/p{i}", "7g.80gb") for i in range(3)]
    result = plan_carve(nodes, pending, settings=CarveSettings(max_nodes_in_flight=2))
    assert len(result.changes) == 2
    assert ("t/p2", "carve budget in use") in result.unserved


def test_pods_share_a_node_already_in_the_plan() -> None:
    nodes = [carve_node(n, [[]]) for n in ("a", "b")]
    result = plan_carve(nodes, [waiting("t/p1", "3g.40gb"), waiting("t/p2", "3g.40gb")])
    (change,) = result.changes
    assert change.serves == ("t/p1", "t/p2")


@pytest.mark.parametrize("seed", range(3))
def test_the_plan_is_the_same_for_the_same_cluster(seed: int) -> None:
    rng = random.Random(seed)
    layouts = [rng.choice(LEGAL) for _ in range(2)]
    nodes = [carve_node("a", layouts), carve_node("b", list(reversed(layouts)))]
    pending = [waiting(f"t/p{i}", rng.choice(PROFILES)) for i in range(3)]
    assert plan_carve(nodes, pending) == plan_carve(list(reversed(nodes)), pending)


def _request(plan: str) -> str:
    return '{"version":"v1","plan":"' + plan + '","gpus":[]}'


@given(
    st.lists(
        st.lists(st.integers(-8, 8), min_size=len(SHAPES), max_size=len(SHAPES)).map(tuple),
        max_size=4,
    )
)
def test_losses_add_up_shape_by_shape(losses: list[tuple[int, ...]]) -> None:
    total = add_losses(iter(losses))
    assert total == tuple(sum(loss[i] for loss in losses) for i in range(len(SHAPES)))
    assert add_losses([]) == NO_LOSS and type(total) is tuple
