"""The carve branch of the controller's state machine: every transition, the record round
trip, and the two paths keeping to their own nodes."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from extender.controller import decide_paused
from migslice.inventory import NodeState, resolve_node
from migslice.mig import place
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects import node_facts_from_raw
from migslice.objects.carve_handshake import (
    CarvePhase,
    CarveStatus,
    render_carve_request,
    render_carve_status,
)
from migslice.repartition import (
    ABORTED,
    FAILED,
    SUCCESS,
    TIMEOUT,
    CarveSettings,
    ControllerSettings,
    RepartitionRecord,
    StepKind,
    decide,
    parse_record,
    render_record,
)
from migslice.repartition.carve.branch import decide_carve
from migslice.repartition.pending import PendingPod
from migslice.repartition.record import CarveStep
from tests.carve_builders import MODEL, carve_node, carve_node_raw, gpu, waiting
from tests.work import lines_run

NOW = 1_750_000_000.0
SETTINGS = ControllerSettings(deadline_s=300, backoff_s=900, carve=CarveSettings(cooldown_s=60))
LAYOUT = [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")]
BUSY = ["0:3g.40gb@4"]


def node(**kwargs: object) -> NodeState:
    return carve_node("gpu-a", LAYOUT, busy=BUSY, **kwargs)  # type: ignore[arg-type]


def step(record: RepartitionRecord, nodes: list[NodeState], now: float = NOW) -> object:
    return decide(
        record,
        nodes,
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset(),
        now=now,
        settings=SETTINGS,
    )


def started() -> RepartitionRecord:
    first = decide(
        RepartitionRecord(),
        [node()],
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW,
        settings=SETTINGS,
    )
    assert first.kind == StepKind.START
    return first.record


def applied() -> tuple[RepartitionRecord, str]:
    record = started()
    second = decide(record, [node()], [], file_configs=frozenset(), now=NOW + 1, settings=SETTINGS)
    assert second.kind == StepKind.APPLY
    assert second.record.carve is not None
    return second.record, second.record.carve.plan_id


def asked(plan_id: str, status: CarveStatus | None = None) -> NodeState:
    record, _ = applied()
    assert record.carve is not None
    request = render_carve_request(record.carve.nodes[0].request(plan_id))
    return node(request=request, status=render_carve_status(status) if status else None)


def test_a_carve_is_planned_and_written_before_anything_changes() -> None:
    first = decide(
        RepartitionRecord(),
        [node()],
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW,
        settings=SETTINGS,
    )
    assert first.kind == StepKind.START
    assert first.carve_writes == () and first.events == ()
    carve = first.record.carve
    assert carve is not None and carve.applied_at is None
    (planned,) = carve.nodes
    assert planned.serves == ("team-a/big",)
    assert [(d.profile, d.start) for d in planned.gpus[0].destroy] == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
    ]
    assert parse_record(render_record(first.record)) == first.record


def test_applying_asks_the_agent_and_says_so() -> None:
    record = started()
    second = decide(record, [node()], [], file_configs=frozenset(), now=NOW + 1, settings=SETTINGS)
    assert second.kind == StepKind.APPLY
    (write,) = second.carve_writes
    assert write.node == "gpu-a" and write.request is not None
    assert write.request.gpus[0].create[0].profile == "3g.40gb"
    (event,) = second.events
    assert event.reason == "MigCarve" and not event.warning
    assert "destroy 1g.10gb@0, 1g.10gb@1; create 3g.40gb@0" in event.message


def test_a_node_whose_instance_got_busy_since_planning_is_aborted() -> None:
    record = started()
    now_busy = carve_node("gpu-a", LAYOUT, busy=[*BUSY, "0:1g.10gb@1"])
    second = decide(
        record, [now_busy], [], file_configs=frozenset(), now=NOW + 1, settings=SETTINGS
    )
    assert second.kind == StepKind.ABORT
    assert second.record.carve is None
    assert "1g.10gb@1 may be in use now" in second.reason
    assert second.carve_outcomes[0].outcome == ABORTED


def test_an_agents_success_finishes_the_plan_removes_the_request_and_starts_a_cooldown() -> None:
    record, plan_id = applied()
    done = asked(plan_id, CarveStatus(plan_id, CarvePhase.SUCCESS))
    third = decide(record, [done], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert third.kind == StepKind.FINISH
    assert third.record.carve is None
    assert third.carve_outcomes[0].outcome == SUCCESS
    assert [(w.node, w.request) for w in third.carve_writes] == [("gpu-a", None)]
    assert dict(third.record.finished) == {"gpu-a": NOW + 20}
    assert "can now be placed" in third.events[0].message
    # the pods it served, for whichever replica leads to touch once its cache shows the carve
    (served,) = third.record.served
    assert (served.node, served.config, served.at) == ("gpu-a", f"carve:{plan_id}", NOW + 20)
    assert served.pods == third.carve_outcomes[0].serves != ()


def test_the_carve_cooldown_holds_whatever_the_mig_manager_paths_cooldown() -> None:
    """Measured before: the record's finished nodes were pruned at the MIG Manager path's
    --repartition-cooldown-s, so with it below --repartition-carve-cooldown-s (0 against 60
    here) a node carved 20 s ago was carved again at once."""
    settings = replace(SETTINGS, plan=replace(SETTINGS.plan, cooldown_s=0))
    record, plan_id = applied()
    done = asked(plan_id, CarveStatus(plan_id, CarvePhase.SUCCESS))
    third = decide(record, [done], [], file_configs=frozenset(), now=NOW + 20, settings=settings)
    assert dict(third.record.finished) == {"gpu-a": NOW + 20}
    again = decide(
        third.record,
        [node()],
        [waiting("team-b/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW + 40,
        settings=settings,
    )
    assert again.record.carve is None, again.reason
    later = decide(
        third.record,
        [node()],
        [waiting("team-b/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW + 81,
        settings=settings,
    )
    assert later.kind == StepKind.START and later.record.carve is not None


def test_an_agents_failure_is_reported_and_backed_off() -> None:
    record, plan_id = applied()
    failed = asked(plan_id, CarveStatus(plan_id, CarvePhase.FAILED, "1g.10gb@1 became busy"))
    third = decide(record, [failed], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert third.kind == StepKind.FINISH
    assert third.carve_outcomes[0].outcome == FAILED
    (event,) = third.events
    assert event.warning and event.reason == "MigCarveFailed"
    assert "1g.10gb@1 became busy" in event.message
    assert dict(third.record.backoff) == {"gpu-a": NOW + 20 + 900}


def test_no_answer_within_the_deadline_withdraws_the_request() -> None:
    record, plan_id = applied()
    working = asked(plan_id, CarveStatus(plan_id, CarvePhase.PENDING))
    waiting_step = decide(
        record, [working], [], file_configs=frozenset(), now=NOW + 100, settings=SETTINGS
    )
    assert waiting_step.kind == StepKind.WAIT
    late = decide(record, [working], [], file_configs=frozenset(), now=NOW + 400, settings=SETTINGS)
    assert late.carve_outcomes[0].outcome == TIMEOUT
    assert [(w.node, w.request) for w in late.carve_writes] == [("gpu-a", None)]
    assert "gpu-a" in dict(late.record.backoff)


def test_an_agent_that_never_answers_again_keeps_its_node_off_limits_not_the_budget() -> None:
    """Measured before: with --repartition-carve-max-nodes-in-flight 1, a node whose agent
    died mid-carve (journal pending, request withdrawn at the deadline) held the budget for
    good: a day later a healthy node got "nothing to re-partition" for a waiting pod, and the
    only Event said the node was left alone until its backoff ended."""
    settings = replace(SETTINGS, carve=replace(SETTINGS.carve, max_nodes_in_flight=1))
    record, plan_id = applied()
    open_journal = CarveStatus(plan_id, CarvePhase.PENDING, "", changed=True)
    late = decide(
        record,
        [asked(plan_id, open_journal)],
        [],
        file_configs=frozenset(),
        now=NOW + 400,
        settings=settings,
    )
    assert late.carve_outcomes[0].outcome == TIMEOUT
    (event,) = late.events
    assert "journal (migslice.io/carve-state) is still open" in event.message
    assert "no GPU pod is placed on the node" in event.message
    dead = node(status=render_carve_status(open_journal))  # request withdrawn, agent gone
    assert dead.facts.is_carving  # still off-limits: its layout is whatever the agent left
    healthy = carve_node("gpu-b", LAYOUT, busy=BUSY)
    day_later = decide(
        late.record,
        [dead, healthy],
        [waiting("team-b/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW + 86400,
        settings=settings,
    )
    assert day_later.kind == StepKind.START, day_later.reason
    assert day_later.record.carve is not None
    assert [s.node for s in day_later.record.carve.nodes] == ["gpu-b"]


def test_a_node_turned_to_mig_manager_mode_before_its_agent_took_the_carve_up_is_aborted() -> None:
    """Measured before: the agent ignores a request on a node in mig-manager mode (MIG Manager
    owns it), yet the carve stayed open: the node closed to pods until the deadline, then a
    'no answer after 301s' Warning and a backoff that kept the MIG Manager path off it too."""
    record, plan_id = applied()
    request = render_carve_request(record.carve.nodes[0].request(plan_id))  # type: ignore[union-attr]
    turned = carve_node("gpu-a", LAYOUT, busy=BUSY, mode="mig-manager", request=request)
    now = decide(record, [turned], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert [(s.node, s.outcome) for s in now.carve_outcomes] == [("gpu-a", ABORTED)]
    assert "no longer in carve mode (mig-manager)" in now.carve_outcomes[0].detail
    assert [(w.node, w.request) for w in now.carve_writes] == [("gpu-a", None)]
    assert now.record.carve is None and not now.record.backoff
    # an agent that took it up before the label changed finishes or rolls it back: waited for
    taken = carve_node(
        "gpu-a",
        LAYOUT,
        busy=BUSY,
        mode="mig-manager",
        request=request,
        status=render_carve_status(CarveStatus(plan_id, CarvePhase.PENDING, "", changed=True)),
    )
    later = decide(record, [taken], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert later.kind == StepKind.WAIT


def test_a_request_gone_while_the_agent_carves_it_waits_for_the_agents_answer() -> None:
    """The Node was deleted and made again mid-carve (or the request removed by hand): the
    agent writes its journal back and rolls the carve back. Measured before: the controller
    closed the node at once as aborted, 'not applied: a carve is under way' (its own carve,
    applied), with no backoff, and the agent's failure was never observed."""
    record, plan_id = applied()
    journal = CarveStatus(plan_id, CarvePhase.PENDING, "", changed=True)
    lost = node(status=render_carve_status(journal))
    now = decide(record, [lost], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert now.kind == StepKind.WAIT, now.reason
    assert not now.carve_writes and not now.carve_outcomes
    rolled = CarveStatus(plan_id, CarvePhase.FAILED, "the controller withdrew the request")
    answered = node(status=render_carve_status(rolled))
    later = decide(
        record, [answered], [], file_configs=frozenset(), now=NOW + 40, settings=SETTINGS
    )
    assert [(s.node, s.outcome) for s in later.carve_outcomes] == [("gpu-a", FAILED)]
    assert "gpu-a" in dict(later.record.backoff)


def made_again(
    layout: list[Any], busy: list[str], *, reported: bool = True, advertised: bool = True
) -> NodeState:
    """gpu-a as the kubelet registers it anew: no carve request, no journal; the agent's
    layout once it has published it (``reported``); allocatable as the device plugin lists
    the layout (``advertised``) or as it listed the layout before the carve."""
    raw = carve_node_raw("gpu-a", layout, busy=busy)
    if not advertised:
        allocatable = raw["status"]["allocatable"]
        for key in [k for k in allocatable if k.startswith("nvidia.com/mig-")]:
            del allocatable[key]
        allocatable.update({"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1"})
    if not reported:
        del raw["metadata"]["annotations"][LAYOUT_ANNOTATION]
    return resolve_node(node_facts_from_raw(raw), [])


@pytest.mark.parametrize(
    ("layout", "busy"),
    [
        ([gpu("3g.40gb@0", "3g.40gb@4")], [*BUSY, "0:3g.40gb@0"]),
        ([gpu("1g.10gb@1", "3g.40gb@4")], BUSY),
    ],
    ids=["carved-and-in-use", "one-destroyed"],
)
@pytest.mark.parametrize("advertised", [True, False], ids=["advertised", "plugin-stale"])
def test_a_node_made_again_after_its_agent_acted_is_asked_to_resume_not_aborted(
    layout: list[Any], busy: list[str], advertised: bool
) -> None:
    """The Node deleted and made again (no request, no journal) after the agent changed NVML
    for the plan. Measured before: closed at once as aborted, "not applied: GPU 0: 1g.10gb@0
    changed since planned", with no backoff, no cooldown and the pods it served forgotten,
    while NVML held the whole or half of the carve and no one finished or rolled it back."""
    record, plan_id = applied()
    now = decide(
        record,
        [made_again(layout, busy, advertised=advertised)],
        [],
        file_configs=frozenset(),
        now=NOW + 20,
        settings=SETTINGS,
    )
    assert now.carve_outcomes == (), now.carve_outcomes
    assert now.record.carve is not None and now.record.carve.open_nodes
    (write,) = now.carve_writes
    assert write.request is not None and write.request.plan_id == plan_id
    assert write.request.resume
    assert [e.reason for e in now.events] == ["MigCarveJournal"]
    # the agent's answer to the resumed request closes it as any answer does
    answer = render_carve_status(CarveStatus(plan_id, CarvePhase.SUCCESS))
    done = carve_node("gpu-a", [gpu("3g.40gb@0", "3g.40gb@4")], busy=BUSY, status=answer)
    later = decide(
        now.record, [done], [], file_configs=frozenset(), now=NOW + 40, settings=SETTINGS
    )
    assert [(s.node, s.outcome) for s in later.carve_outcomes] == [("gpu-a", SUCCESS)]
    assert "gpu-a" in dict(later.record.finished)


def test_a_node_made_again_before_its_agent_reported_waits_for_the_report() -> None:
    """Measured before: aborted at once, "the node agent's layout no longer agrees with
    allocatable", while the agent might be mid-carve."""
    record, _ = applied()
    bare = made_again([gpu("3g.40gb@4")], BUSY, reported=False)
    now = decide(record, [bare], [], file_configs=frozenset(), now=NOW + 20, settings=SETTINGS)
    assert now.kind == StepKind.WAIT, now.reason
    late = decide(record, [bare], [], file_configs=frozenset(), now=NOW + 400, settings=SETTINGS)
    assert [(s.node, s.outcome) for s in late.carve_outcomes] == [("gpu-a", TIMEOUT)]
    assert "gpu-a" in dict(late.record.backoff)


def test_a_request_lost_to_a_restart_is_written_again() -> None:
    record, _ = applied()
    third = decide(record, [node()], [], file_configs=frozenset(), now=NOW + 5, settings=SETTINGS)
    assert third.kind == StepKind.OBSERVE
    (write,) = third.carve_writes
    assert write.request is not None


def test_the_mig_manager_path_leaves_carve_nodes_alone() -> None:
    idle = carve_node("gpu-b", [[place(MODEL, "1g.10gb", i) for i in range(7)]])
    result = decide(
        RepartitionRecord(),
        [idle],
        [waiting("team-a/big", "7g.80gb")],
        file_configs=frozenset({"all-1g.10gb"}),
        now=NOW,
        settings=SETTINGS,
    )
    assert result.kind == StepKind.START  # the carve path takes it, not MIG Manager
    assert result.record.plan is None and result.record.carve is not None


def test_pods_a_carve_serves_are_not_planned_again_by_mig_manager() -> None:
    record = started()
    carve = record.carve
    assert carve is not None
    still_open = replace(record, carve=replace(carve, applied_at=NOW))
    manager_node = carve_node(
        "gpu-m", [[place(MODEL, "1g.10gb", i) for i in range(7)]], mode="mig-manager"
    )
    result = decide(
        still_open,
        [asked(carve.plan_id), manager_node],
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset({"all-1g.10gb"}),
        now=NOW + 5,
        settings=SETTINGS,
    )
    assert result.kind == StepKind.WAIT


def test_a_carve_step_survives_the_record_round_trip() -> None:
    record, _ = applied()
    assert record.carve is not None
    closed = replace(
        record,
        carve=replace(
            record.carve, nodes=(replace(record.carve.nodes[0], outcome=FAILED, detail="x"),)
        ),
    )
    again = parse_record(render_record(closed))
    assert again == closed
    assert isinstance(again.carve.nodes[0], CarveStep)  # type: ignore[union-attr]


def test_a_carve_waits_for_its_own_min_pending_not_the_mig_manager_paths() -> None:
    settings = ControllerSettings(carve=CarveSettings(min_pending_s=10))
    assert settings.plan.min_pending_s == 30

    def kind(waited_s: float) -> StepKind:
        return decide(
            RepartitionRecord(),
            [node()],
            [waiting("team-a/big", "3g.40gb", waited_s=waited_s)],
            file_configs=frozenset(),
            now=NOW,
            settings=settings,
        ).kind

    assert kind(9.9) == StepKind.WAIT
    assert kind(10.1) == StepKind.START


def test_with_no_node_in_carve_mode_the_branch_weighs_no_pod() -> None:
    """MIG Manager mode, the default: the carve branch steps aside before reading the pods
    (it weighed each against every node, and the nodes' held mix, each loop for nothing)."""
    nodes = [carve_node(f"n{i}", LAYOUT, busy=BUSY, mode="mig-manager") for i in range(8)]

    def work(pods: int) -> int:
        pending = [waiting(f"team-a/p{i}", "3g.40gb") for i in range(pods)]
        return lines_run(lambda: decide_carve_only(nodes, pending))

    assert work(1) == work(40)


def decide_carve_only(nodes: list[NodeState], pending: list[PendingPod]) -> object:
    return decide_carve(
        RepartitionRecord(),
        nodes,
        pending,
        now=NOW,
        settings=SETTINGS.carve,
        deadline_s=SETTINGS.deadline_s,
        backoff_s=SETTINGS.backoff_s,
    )


def test_the_controller_decides_with_the_collector_held_off_and_the_same_answer() -> None:
    """extender.controller.decide_paused: no automatic collection walks the heap while a
    decision makes its short-lived objects (with a threshold of one object, decide alone
    collects about a hundred times), the step is decide's, and the collector is on again after."""
    nodes = [node()]
    pending = [waiting("team-a/big", "3g.40gb")]
    collections: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    def count(call: Callable[[], object]) -> tuple[object, int]:
        collections.clear()
        thresholds = gc.get_threshold()
        gc.callbacks.append(record)
        gc.set_threshold(1)
        try:
            answer = call()
        finally:
            gc.set_threshold(*thresholds)
            gc.callbacks.remove(record)
        return answer, len(collections)

    args = (RepartitionRecord(), nodes, pending)
    kwargs: dict[str, Any] = {"file_configs": frozenset(), "now": NOW, "settings": SETTINGS}
    decide(*args, **kwargs)  # the caches a first decision fills, filled
    plain, walks = count(lambda: decide(*args, **kwargs))
    paused, paused_walks = count(lambda: decide_paused(*args, **kwargs))
    assert walks > 50 and paused_walks <= 10  # a few on the way in and out, none inside
    assert paused == plain
    assert gc.isenabled()
