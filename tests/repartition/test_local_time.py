"""Open plans timed on the leader's own clock (migslice.repartition.record.local_time): what
the decision sees, and what is written back."""

from __future__ import annotations

from dataclasses import replace

from migslice.repartition.record.carve_plan import ActiveCarve
from migslice.repartition.record.document import RepartitionRecord
from migslice.repartition.record.local_time import LocalTimes
from migslice.repartition.record.plan import ActivePlan, NodeStep
from migslice.repartition.record.wire import SUPERSEDED, TIMEOUT

WRITER_APPLIED = 1_000_000.0  # the applying leader's wall clock


def step(node: str) -> NodeStep:
    return NodeStep(
        node=node,
        config_name=f"migslice-{node}",
        previous_config="all-1g.10gb",
        gpus=(0,),
        serves=(),
        entries=(),
        applied_at=WRITER_APPLIED,
        written_at=WRITER_APPLIED - 90,
    )


def record() -> RepartitionRecord:
    plan = ActivePlan("p1", WRITER_APPLIED - 95, WRITER_APPLIED, (step("a"), step("b")))
    carve = ActiveCarve("c1", WRITER_APPLIED - 5, WRITER_APPLIED, ())
    return RepartitionRecord(plan=plan, carve=carve)


def test_a_stamp_is_shown_as_old_as_this_process_has_known_it_whatever_its_wall_clock() -> None:
    times = LocalTimes()
    stored = record()
    # this leader's wall clock is 11 minutes ahead of the writer's; it first sees the plan now
    first = times.localize(stored, now_s=WRITER_APPLIED + 660, mono_s=50.0)
    assert first.plan is not None and first.carve is not None
    assert first.plan.nodes[0].applied_at == WRITER_APPLIED + 660  # known for 0 s
    assert first.carve.applied_at == WRITER_APPLIED + 660
    later = times.localize(stored, now_s=WRITER_APPLIED + 1260, mono_s=650.0)
    assert later.plan is not None
    assert [s.applied_at for s in later.plan.nodes] == [WRITER_APPLIED + 660] * 2  # 600 s old
    # a wall clock stepped back an hour changes nothing of the age
    stepped = times.localize(stored, now_s=WRITER_APPLIED + 1260 - 3600, mono_s=650.0)
    assert stepped.plan is not None and stepped.plan.nodes[0].applied_at is not None
    assert WRITER_APPLIED + 1260 - 3600 - stepped.plan.nodes[0].applied_at == 0.0 + 600


def test_what_is_written_back_keeps_the_writers_stamps_and_the_decisions_own() -> None:
    times = LocalTimes()
    stored = record()
    local = times.localize(stored, now_s=WRITER_APPLIED + 660, mono_s=50.0)
    assert local.plan is not None
    # the decision closes node a (timeout) and leaves b open; both keep their stamps
    closed = replace(local.plan.nodes[0], outcome=TIMEOUT, detail="deadline")
    decided = replace(local, plan=replace(local.plan, nodes=(closed, local.plan.nodes[1])))
    back = times.restore(decided, stored)
    assert back.plan is not None and back.carve is not None
    assert [s.applied_at for s in back.plan.nodes] == [WRITER_APPLIED] * 2
    assert [s.written_at for s in back.plan.nodes] == [WRITER_APPLIED - 90] * 2
    assert back.plan.applied_at == WRITER_APPLIED and back.carve.applied_at == WRITER_APPLIED
    assert back.plan.nodes[0].outcome == TIMEOUT
    # a stamp the decision set itself (a node labelled now) is this leader's, and stays
    own = replace(local.plan.nodes[1], applied_at=WRITER_APPLIED + 700)
    decided = replace(local, plan=replace(local.plan, nodes=(local.plan.nodes[0], own)))
    assert times.restore(decided, stored).plan.nodes[1].applied_at == WRITER_APPLIED + 700  # type: ignore[union-attr]


def test_a_closed_plans_stamps_are_forgotten() -> None:
    times = LocalTimes()
    times.localize(record(), now_s=WRITER_APPLIED, mono_s=0.0)
    times.localize(RepartitionRecord(), now_s=WRITER_APPLIED + 10, mono_s=10.0)
    again = times.localize(record(), now_s=WRITER_APPLIED + 20, mono_s=20.0)
    assert again.plan is not None and again.plan.applied_at == WRITER_APPLIED + 20  # new


def test_a_node_that_joins_the_plan_again_keeps_its_new_step_s_own_stamp() -> None:
    """A node whose step was superseded (closed, not held) may join the same plan again as a
    new step, written now. In a leader's first round every stamp it reads is shown as now, so
    the new step's writtenAt (now) matched the closed step's shown stamp and was written back
    as that old step's: the config-propagation wait of the new step was skipped (labelled at
    once, before MIG Manager's copy of the file has its config)."""
    times = LocalTimes()
    superseded = replace(step("a"), outcome=SUPERSEDED, detail="label changed")
    stored = RepartitionRecord(
        plan=ActivePlan("p1", WRITER_APPLIED - 95, WRITER_APPLIED, (superseded, step("b")))
    )
    now = WRITER_APPLIED + 30
    local = times.localize(stored, now_s=now, mono_s=5.0)  # a new leader's first round
    assert local.plan is not None
    again = replace(step("a"), applied_at=None, written_at=now)  # decide.py: written_at=now
    decided = replace(local, plan=replace(local.plan, nodes=(*local.plan.nodes, again)))
    back = times.restore(decided, stored)
    assert back.plan is not None
    assert [s.written_at for s in back.plan.nodes] == [
        WRITER_APPLIED - 90,
        WRITER_APPLIED - 90,
        now,
    ]
