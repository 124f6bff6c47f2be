"""A node MIG Manager leaves stuck stops only itself: quarantine past the deadline, release on
success or by an admin, and other nodes re-partitioned meanwhile (join, per-pool budget)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

import pytest

from harness.builders import make_node, make_pod
from migslice.inventory import NodeState, resolve_node
from migslice.names import QUARANTINE_ANNOTATION, QUARANTINE_LABEL
from migslice.objects import node_facts_from_raw
from migslice.objects.pod_selection import pod_selection_of
from migslice.repartition import (
    TIMEOUT,
    ControllerSettings,
    PendingPod,
    PlanSettings,
    RepartitionRecord,
    Step,
    StepKind,
    decide,
    parse_record,
    render_record,
)
from migslice.repartition.migmanager.quarantine import quarantine_note
from migslice.scheduling.demand import demand_of
from tests import paths
from tests.repartition.test_repartition import ALL_1G, FILE_CONFIGS

T0 = 1_750_000_000.0
H100 = "NVIDIA-H100-80GB-HBM3"
SETTINGS = ControllerSettings(
    PlanSettings(min_pending_s=30.0), deadline_s=600.0, backoff_s=1800.0, config_propagation_s=0.0
)


def node(
    name: str,
    *,
    config: str = ALL_1G,
    state: str | None = "success",
    product: str = "NVIDIA-A100-SXM4-80GB",
    quarantine: tuple[bool, bool] = (False, False),
) -> NodeState:
    """A one-GPU node with seven idle 1g.10gb; ``quarantine``: (label, annotation) present."""
    raw = make_node(
        name, product=product, gpu_count=1, mig={"1g.10gb": 7}, config=config, config_state=state
    )
    label, note = quarantine
    if label:
        raw["metadata"]["labels"][QUARANTINE_LABEL] = "timeout"
    if note:
        raw["metadata"]["annotations"] = {QUARANTINE_ANNOTATION: '{"reason":"timeout"}'}
    return resolve_node(node_facts_from_raw(raw), [], dict(FILE_CONFIGS))


def waiting(name: str, products: Sequence[str] = ()) -> PendingPod:
    pod = make_pod(name, profile="3g.40gb")
    if products:
        pod["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": list(products),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    return PendingPod(demand_of(pod), 120.0)


def step(
    record: RepartitionRecord,
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    now: float,
    settings: ControllerSettings = SETTINGS,
) -> Step:
    return decide(
        record, nodes, pending, file_configs=set(FILE_CONFIGS), now=now, settings=settings
    )


def stuck_on(name: str, pending: Sequence[PendingPod], *, at: float = T0) -> RepartitionRecord:
    """The record once ``name`` has been labelled for ``pending`` at ``at``."""
    started = step(RepartitionRecord(), [node(name)], pending, at)
    assert started.kind == StepKind.START
    applied = step(started.record, [node(name)], pending, at + 1)
    assert applied.kind == StepKind.APPLY
    return applied.record


def config_of(record: RepartitionRecord, name: str) -> str:
    assert record.plan is not None
    return next(s.config_name for s in record.plan.nodes if s.node == name)


def test_past_the_deadline_a_node_is_quarantined_loudly_and_leaves_the_budget() -> None:
    """MIG Manager stuck at pending: the node was counted in flight for ever and nothing else
    in the cluster was re-partitioned again."""
    record = stuck_on("gpu-a", [waiting("train")])
    ours = config_of(record, "gpu-a")
    timeout = step(record, [node("gpu-a", config=ours, state="pending")], [], T0 + 602)
    assert timeout.kind == StepKind.FINISH and timeout.outcomes[0].outcome == TIMEOUT
    (entry,) = timeout.record.quarantine
    assert (entry.node, entry.config_name, entry.since) == ("gpu-a", ours, T0 + 602)
    assert timeout.record.backoff == ()
    (label,) = timeout.labels
    assert (label.config_name, label.mark_pending) == (ALL_1G, True)
    (mark,) = timeout.marks
    assert mark.node == "gpu-a" and mark.note is not None
    note = json.loads(mark.note)
    assert note["reason"] == "timeout" and note["config"] == ours
    assert note["release"] == f"kubectl label node gpu-a {QUARANTINE_LABEL}-"
    (event,) = timeout.events
    assert event.warning and event.reason == "MigRepartitionQuarantined"
    assert "until MIG Manager reports success or an admin removes label" in event.message
    # Still pending for ever, quarantined and marked: another node is planned at once.
    stuck = node("gpu-a", state="pending", quarantine=(True, True))
    seen = step(timeout.record, [stuck, node("gpu-b")], [waiting("next")], T0 + 603)
    assert seen.kind == StepKind.RESTORE  # the label set back is seen: no longer due
    nxt = step(seen.record, [stuck, node("gpu-b")], [waiting("next")], T0 + 603)
    assert nxt.kind == StepKind.START
    assert nxt.record.plan is not None and [s.node for s in nxt.record.plan.nodes] == ["gpu-b"]
    assert nxt.plan is not None
    assert dict(nxt.plan.skipped_nodes)["gpu-a"].startswith("quarantined since")


@pytest.mark.parametrize(
    ("state", "marks", "why"),
    [
        ("success", (True, True), "MIG Manager reports success on config all-1g.10gb"),
        ("pending", (False, True), f"an admin removed label {QUARANTINE_LABEL}"),
    ],
    ids=["mig-manager-recovered", "admin-released"],
)
def test_a_quarantine_ends_on_success_or_when_an_admin_removes_the_label(
    state: str, marks: tuple[bool, bool], why: str
) -> None:
    record = RepartitionRecord(quarantine=_quarantined("gpu-a"))
    released = step(record, [node("gpu-a", state=state, quarantine=marks)], [], T0 + 700)
    assert released.kind == StepKind.QUARANTINE
    assert released.record.quarantine == ()
    assert [(m.node, m.note) for m in released.marks] == [("gpu-a", None)]
    (event,) = released.events
    assert not event.warning and event.message == f"quarantine released: {why}"


def test_a_quarantine_whose_node_write_never_happened_is_marked_again_without_holding_up() -> None:
    record = RepartitionRecord(quarantine=_quarantined("gpu-a"))
    nodes = [node("gpu-a", state="pending"), node("gpu-b")]
    nxt = step(record, nodes, [waiting("train")], T0 + 700)
    assert nxt.kind == StepKind.START  # the plan for gpu-b is not held up by the mark
    assert [(m.node, m.note is not None) for m in nxt.marks] == [("gpu-a", True)]
    assert nxt.record.quarantine == record.quarantine


def test_a_mark_the_record_does_not_hold_is_removed() -> None:
    nxt = step(RepartitionRecord(), [node("gpu-a", quarantine=(True, True))], [], T0)
    assert [(m.node, m.note) for m in nxt.marks] == [("gpu-a", None)]


def test_a_quarantine_the_record_lost_is_kept_from_the_nodes_marks() -> None:
    """Measured before: with the ConfigMap holding the record deleted and created again, the
    quarantined node's marks were removed as strays without an Event; the node, still stuck at
    pending, counted against the budget again, and a healthy node's pod was left with
    "re-partition budget in use"."""
    (entry,) = _quarantined("gpu-a")
    stuck = node("gpu-a", config=entry.config_name, state="pending")  # type: ignore[attr-defined]
    raw_note = quarantine_note(entry)  # type: ignore[arg-type]
    facts = replace(stuck.facts, quarantine_label="timeout", quarantine_note=raw_note)
    stuck = replace(stuck, facts=facts)
    kept = step(RepartitionRecord(), [stuck, node("gpu-b")], [waiting("train")], T0 + 700)
    assert kept.kind == StepKind.QUARANTINE and kept.marks == ()
    assert [q.node for q in kept.record.quarantine] == ["gpu-a"]
    (event,) = kept.events
    assert event.warning and "the repartition record had lost it" in event.message
    nxt = step(kept.record, [stuck, node("gpu-b")], [waiting("train")], T0 + 701)
    assert nxt.kind == StepKind.START, nxt.reason  # gpu-a no longer holds the budget
    assert nxt.record.plan is not None
    assert [n.node for n in nxt.record.plan.nodes] == ["gpu-b"]


def _quarantined(name: str) -> tuple[object, ...]:
    record = stuck_on(name, [waiting("train")])
    ours = config_of(record, name)
    timed_out = step(record, [node(name, config=ours, state="pending")], [], T0 + 602)
    return timed_out.record.quarantine


def test_while_one_node_waits_a_node_of_another_pool_joins_the_plan_and_finishes_first() -> None:
    """One plan at a time: every other node waited the whole deadline (600 s) behind it."""
    a100 = waiting("train-a", products=["NVIDIA-A100-SXM4-80GB"])
    h100 = waiting("train-h", products=[H100])
    record = stuck_on("gpu-a", [a100])
    ours = config_of(record, "gpu-a")
    slow = node("gpu-a", config=ours, state="pending")
    other = node("gpu-h", product=H100)
    joined = step(record, [slow, other], [a100, h100], T0 + 40)
    assert joined.kind == StepKind.START and joined.reason.endswith(
        f"joined by gpu-h={config_of(joined.record, 'gpu-h')}"
    )
    applied = step(joined.record, [slow, other], [a100, h100], T0 + 41)
    assert applied.kind == StepKind.APPLY
    assert [label.node for label in applied.labels] == ["gpu-h"]
    assert applied.record.plan is not None
    times = {s.node: s.applied_at for s in applied.record.plan.nodes}
    assert times == {"gpu-a": T0 + 1, "gpu-h": T0 + 41}
    theirs = config_of(applied.record, "gpu-h")
    done = node("gpu-h", product=H100, config=theirs, state="success")
    finished = step(applied.record, [slow, done], [a100], T0 + 90)
    assert finished.kind == StepKind.OBSERVE
    assert [(s.node, s.outcome) for s in finished.outcomes] == [("gpu-h", "success")]
    # gpu-h's own deadline would not have passed; gpu-a's is measured from its own label.
    late = step(finished.record, [slow, done], [a100], T0 + 602)
    assert [(s.node, s.outcome) for s in late.outcomes] == [("gpu-a", "timeout")]


@pytest.mark.parametrize("scope_per_pool", [True, False], ids=["same-pool", "cluster-budget"])
def test_the_budget_holds_back_a_node_of_the_same_pool_or_with_a_cluster_wide_budget(
    scope_per_pool: bool,
) -> None:
    settings = replace(SETTINGS, plan=replace(SETTINGS.plan, budget_per_pool=scope_per_pool))
    first = waiting("train-a", products=["NVIDIA-A100-SXM4-80GB"])
    record = stuck_on("gpu-a", [first])
    slow = node("gpu-a", config=config_of(record, "gpu-a"), state="pending")
    product = "NVIDIA-A100-SXM4-80GB" if scope_per_pool else H100
    second = waiting("train-b", products=[product])
    held = step(record, [slow, node("gpu-b", product=product)], [first, second], T0 + 40, settings)
    assert held.kind == StepKind.WAIT and "waiting for gpu-a (pending, 39s)" in held.reason


def test_the_record_keeps_quarantine_and_node_apply_times_and_reads_older_records() -> None:
    record = RepartitionRecord(quarantine=_quarantined("gpu-a"))
    applied = stuck_on("gpu-b", [waiting("train")])
    both = replace(applied, quarantine=record.quarantine)
    assert parse_record(render_record(both)) == both
    older = json.loads(render_record(applied))
    for item in older["plan"]["nodes"]:
        del item["appliedAt"]
    del older["quarantine"]
    parsed = parse_record(json.dumps(older))
    assert parsed.plan is not None and parsed.plan.nodes[0].applied_at == T0 + 1


def test_decide_and_the_docs_name_the_one_event_a_timeout_writes() -> None:
    """decide.py said a MIG Manager timeout writes MigRepartitionFailed; it writes only
    MigRepartitionQuarantined (as docs/repartition.md and the e2e tests say)."""
    import importlib

    from migslice.repartition.actions import REASON_FAILED
    from migslice.repartition.migmanager.quarantine import REASON_QUARANTINED

    record = stuck_on("gpu-a", [waiting("train")])
    ours = config_of(record, "gpu-a")
    timeout = step(record, [node("gpu-a", config=ours, state="pending")], [], T0 + 602)
    assert [e.reason for e in timeout.events] == [REASON_QUARANTINED]
    module = importlib.import_module("migslice.repartition.decide")
    doc = " ".join((module.__doc__ or "").split())
    said = doc[doc.index("within ``deadline_s``") :].split(";")[0]
    assert f"``{REASON_QUARANTINED}``" in said, said
    assert f"a ``{REASON_FAILED}`` Event" not in said, said
    page = (paths.DOCS / "repartition.md").read_text()
    (row,) = [line for line in page.splitlines() if "| deadline passed" in line]
    assert REASON_QUARANTINED in row and REASON_FAILED not in row


def test_a_labelled_node_is_followed_while_a_joined_node_waits_for_its_config() -> None:
    """A node that joined an applied plan waits for MIG Manager's copy of the ConfigMap; the
    nodes already labelled were not followed meanwhile (their success, failure or deadline
    came up to the wait late)."""
    settings = replace(SETTINGS, config_propagation_s=90.0)
    a100 = waiting("train-a", products=["NVIDIA-A100-SXM4-80GB"])
    h100 = waiting("train-h", products=[H100])
    record = stuck_on("gpu-a", [a100])  # labelled at T0 + 1 (no wait in SETTINGS)
    ours = config_of(record, "gpu-a")
    slow = node("gpu-a", config=ours, state="pending")
    other = node("gpu-h", product=H100)
    joined = step(record, [slow, other], [a100, h100], T0 + 40, settings)
    assert joined.kind == StepKind.START
    waiting_for_file = step(joined.record, [slow, other], [a100, h100], T0 + 60, settings)
    assert waiting_for_file.kind == StepKind.WAIT and not waiting_for_file.labels
    done = node("gpu-a", config=ours, state="success")
    followed = step(joined.record, [done, other], [a100, h100], T0 + 70, settings)
    assert followed.kind == StepKind.OBSERVE
    assert [(s.node, s.outcome) for s in followed.outcomes] == [("gpu-a", "success")]
    assert not followed.labels  # gpu-h still waits for the file
    labelled = step(followed.record, [done, other], [h100], T0 + 130, settings)
    assert labelled.kind == StepKind.APPLY
    assert [label.node for label in labelled.labels] == ["gpu-h"]


@pytest.mark.parametrize("previous", [ALL_1G, None], ids=["had-a-config", "had-none"])
def test_a_label_removed_by_hand_mid_plan_leaves_no_pending_state_behind(
    previous: str | None,
) -> None:
    """Our label patch sets state=pending. An admin who removed nvidia.com/mig.config before
    MIG Manager answered left that pending for ever: no MIG Manager run ends it on a node
    without a config, so the extender's filter kept pods off the node and the planner counted
    it in its pool's budget (another idle node of the pool was never re-partitioned)."""
    pending = [waiting("train")]
    first = step(RepartitionRecord(), [node("gpu-a", config=previous)], pending, T0)
    record = step(first.record, [node("gpu-a", config=previous)], pending, T0 + 1).record
    assert record.plan is not None and record.plan.applied_at is not None
    unlabelled = node("gpu-a", config=None, state="pending")
    closed = step(record, [unlabelled, node("gpu-b")], pending, T0 + 30)
    assert closed.kind == StepKind.FINISH
    (outcome,) = closed.outcomes
    assert outcome.node == "gpu-a" and outcome.outcome in ("superseded", "aborted")
    assert [c.node for c in closed.clears] == ["gpu-a"]
    (event,) = closed.events
    assert event.warning and event.reason == "MigRepartitionSuperseded"
    assert "nvidia.com/mig.config.state removed" in event.message
    # once the state label is gone, the pool's budget is free: gpu-b serves the next pod,
    # while gpu-a, whose label the admin took away, is left alone for the backoff
    assert dict(closed.record.backoff) == {"gpu-a": T0 + 30 + SETTINGS.backoff_s}
    cleared = node("gpu-a", config=None, state=None)
    again = step(closed.record, [cleared, node("gpu-b")], [waiting("next")], T0 + 60)
    assert again.kind == StepKind.START, again.reason
    assert again.record.plan is not None
    assert [s.node for s in again.record.plan.nodes] == ["gpu-b"]


def test_a_label_changed_by_hand_mid_plan_is_left_to_the_admin_for_the_backoff() -> None:
    """Another config set by hand: MIG Manager applies it and owns the state label. The node
    was planned again the round MIG Manager reported success on the admin's config, undoing
    it, while docs/repartition.md says a node someone else took over is not touched again."""
    pending = [waiting("train")]
    record = stuck_on("gpu-a", pending)
    theirs = node("gpu-a", config="all-3g.40gb", state="pending")
    closed = step(record, [theirs], pending, T0 + 30)
    (outcome,) = closed.outcomes
    assert outcome.outcome == "superseded" and not closed.clears and not closed.labels
    assert dict(closed.record.backoff) == {"gpu-a": T0 + 30 + SETTINGS.backoff_s}
    (event,) = closed.events
    assert event.reason == "MigRepartitionSuperseded" and not event.warning
    assert "'all-3g.40gb'" in event.message and "left alone until" in event.message
    # MIG Manager applied the admin's config: the pod still waits, the node is left alone
    done = node("gpu-a", config="all-3g.40gb", state="success")
    later = step(closed.record, [done], pending, T0 + 60)
    assert later.kind == StepKind.WAIT and later.record.plan is None
    # once the backoff is over, the node is the planner's again
    after = step(closed.record, [done], pending, T0 + 31 + SETTINGS.backoff_s)
    assert after.kind == StepKind.START


def cordoned(name: str) -> NodeState:
    """``node(name)`` after ``kubectl cordon`` (and the taint the lifecycle controller adds)."""
    raw = make_node(name, gpu_count=1, mig={"1g.10gb": 7}, config=ALL_1G, config_state="success")
    raw["spec"] = {
        "unschedulable": True,
        "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
    }
    return resolve_node(node_facts_from_raw(raw), [], dict(FILE_CONFIGS))


def test_a_node_cordoned_between_plan_and_label_is_not_re_partitioned() -> None:
    """An admin cordoned the node (a drain, maintenance) in the config-propagation wait: the
    node was labelled anyway, MIG Manager stopped its GPU clients (and may reboot it) for pods
    that could no longer be placed there, and the pool's budget was spent on it."""
    pending = [waiting("train")]
    first = step(RepartitionRecord(), [node("gpu-a")], pending, T0)
    assert first.kind == StepKind.START
    due = step(first.record, [cordoned("gpu-a")], pending, T0 + 1)
    assert due.kind == StepKind.ABORT and not due.labels
    (outcome,) = due.outcomes
    assert outcome.outcome == "aborted"
    assert "no pod it serves can be placed on the node now" in outcome.detail
    assert "unschedulable" in outcome.detail
    assert due.record.plan is None
    # a pod that tolerates the cordon still goes there: the plan is applied
    tolerant = make_pod("train", profile="3g.40gb")
    tolerant["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unschedulable"}]
    patient = [PendingPod(demand_of(tolerant), 120.0, pod_selection_of(tolerant))]
    first = step(RepartitionRecord(), [node("gpu-a")], patient, T0)
    assert step(first.record, [cordoned("gpu-a")], patient, T0 + 1).kind == StepKind.APPLY


def test_a_node_cordoned_before_its_label_after_a_restart_is_not_re_partitioned() -> None:
    """A controller restarted between the file write and the label finds the node still at
    the previous config and labels it then: that labelling skipped the check the first one
    runs, so a node cordoned meanwhile (a drain) was re-partitioned for pods that could no
    longer go there."""
    pending = [waiting("train")]
    record = stuck_on("gpu-a", pending)  # written as applied; the label patch never happened
    again = step(record, [cordoned("gpu-a")], pending, T0 + 30)
    assert not again.labels
    assert again.kind == StepKind.FINISH
    (outcome,) = again.outcomes
    assert outcome.outcome == "aborted"
    assert "no pod it serves can be placed on the node now" in outcome.detail
    assert again.record.plan is None
    # not cordoned: labelled again, as before
    relabel = step(record, [node("gpu-a")], pending, T0 + 30)
    assert [label.node for label in relabel.labels] == ["gpu-a"]


def test_a_roll_back_is_kept_in_the_record_until_the_node_shows_it() -> None:
    """A roll back is asked for in the record written before the label patch, so a refused
    patch (or a leader gone before it) is retried by whichever leader comes next; the file
    keeps the config it needs, and records without the field read as no roll back."""
    old = "migslice-gpu-a-00000000"  # the node's config came from an earlier plan
    files = {*FILE_CONFIGS, old}

    def at(record: RepartitionRecord, nodes: Sequence[NodeState], now: float) -> Step:
        pending = [waiting("train"), waiting("next")]
        return decide(record, nodes, pending, file_configs=files, now=now, settings=SETTINGS)

    started = at(RepartitionRecord(), [node("gpu-a", config=old)], T0)
    record = at(started.record, [node("gpu-a", config=old)], T0 + 1).record
    ours = config_of(record, "gpu-a")
    failed = at(record, [node("gpu-a", config=ours, state="failed")], T0 + 30)
    (label,) = failed.labels
    assert (label.config_name, label.replaces) == (old, ours)
    (restore,) = failed.record.restores
    assert (restore.node, restore.config_name, restore.replaces) == ("gpu-a", old, ours)
    assert parse_record(render_record(failed.record)) == failed.record
    assert parse_record(render_record(replace(failed.record, restores=()))).restores == ()
    # the file keeps the config to set back while the roll back is due, whatever else changes
    still = node("gpu-a", config=ours, state="failed")
    other = at(failed.record, [still, node("gpu-b")], T0 + 60)
    assert other.kind == StepKind.START and other.configs
    assert old in other.referenced
    # the label set back: dropped, in a record write of its own
    back = node("gpu-a", config=old, state="success")
    done = at(other.record, [back, node("gpu-b")], T0 + 61)
    assert done.kind == StepKind.RESTORE and done.record.restores == ()
    assert done.record.plan == other.record.plan
    # someone else's label since: dropped as well (theirs wins), and a node gone
    theirs = node("gpu-a", config="all-3g.40gb", state="pending")
    assert at(failed.record, [theirs], T0 + 61).record.restores == ()
    assert at(failed.record, [], T0 + 61).record.restores == ()
