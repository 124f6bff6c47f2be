"""The repartition controller's state machine, its record, the mig-parted merge and pending pods."""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import fields, replace

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod
from migslice.inventory import NodeState, resolve_node
from migslice.mig import CATALOG, place
from migslice.mig.migparted import (
    MigPartedError,
    mig_parted_entries,
    parse_mig_parted,
    render_mig_parted,
)
from migslice.names import ADMITTED_CONDITION
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.repartition import (
    ABORTED,
    FAILED,
    OPEN,
    SUCCESS,
    SUPERSEDED,
    TIMEOUT,
    ControllerSettings,
    PendingPod,
    PlanResult,
    PlanSettings,
    RecordError,
    RepartitionRecord,
    Step,
    StepKind,
    decide,
    merge_mig_parted,
    parse_record,
    pending_pods,
    render_record,
)
from migslice.repartition.record import TOUCH_WINDOW_S
from migslice.scheduling.demand import demand_of
from tests.repartition.test_planning import node_state

MODEL = CATALOG.get("A100-80GB")
ALL_1G = "all-1g.10gb"
T0 = 1_750_000_000.0
SETTINGS = ControllerSettings(
    PlanSettings(min_pending_s=30.0), deadline_s=600.0, backoff_s=1800.0, config_propagation_s=0.0
)
"""No wait for the ConfigMap to reach MIG Manager (its own tests set one)."""


def one_gpu_config() -> dict[str, tuple[object, ...]]:
    layout = [place(MODEL, "1g.10gb", i) for i in range(7)]
    return {ALL_1G: mig_parted_entries(MODEL, {0: layout})}


FILE_CONFIGS = parse_mig_parted(render_mig_parted(one_gpu_config()))  # type: ignore[arg-type]


def node(
    name: str = "gpu-a",
    config: str = ALL_1G,
    state: str | None = "success",
    mig: dict[str, int] | None = None,
    held: Sequence[str] = (),
    labels: dict[str, str] | None = None,
) -> NodeState:
    """A one-GPU node laid out by ``config``; ``held`` profiles are held by bound pods."""
    raw = make_node(
        name,
        gpu_count=1,
        mig=mig or {"1g.10gb": 7},
        config=config,
        config_state=state,
        extra_labels=labels,
    )
    pods = [
        pod_facts_from_raw(make_pod(f"{name}-p{i}", profile=profile, node_name=name))
        for i, profile in enumerate(held)
    ]
    configs = dict(FILE_CONFIGS)
    return resolve_node(node_facts_from_raw(raw), [p for p in pods if p], configs)


def waiting(profile: str = "3g.40gb", waited_s: float = 120.0, name: str = "train") -> PendingPod:
    return PendingPod(demand_of(make_pod(name, profile=profile)), waited_s)


def started(nodes: Sequence[NodeState] | None = None) -> RepartitionRecord:
    step = decide(
        RepartitionRecord(),
        nodes or [node()],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.START
    return step.record


def applied(at: float = T0 + 1) -> RepartitionRecord:
    step = decide(
        started(), [node()], [waiting()], file_configs=set(FILE_CONFIGS), now=at, settings=SETTINGS
    )
    assert step.kind == StepKind.APPLY
    return step.record


def config_of(record: RepartitionRecord) -> str:
    assert record.plan is not None
    return record.plan.nodes[0].config_name


# -- idle -> planned -> applying ---


def test_a_plan_is_written_before_anything_on_the_cluster_changes() -> None:
    step = decide(
        RepartitionRecord(),
        [node()],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.START
    assert not step.labels and not step.events
    # the configs go into the file with the plan; the label waits for MIG Manager's copy
    assert list(step.configs) == [step.record.plan.nodes[0].config_name]  # type: ignore[union-attr]
    plan = step.record.plan
    assert plan is not None and plan.applied_at is None
    (node_step,) = plan.nodes
    assert node_step.node == "gpu-a"
    assert node_step.previous_config == ALL_1G
    assert node_step.gpus == (0,)
    assert node_step.serves == ("team-a/train",)
    assert node_step.config_name.startswith("migslice-gpu-a-")


def test_the_label_waits_until_mig_manager_can_have_read_the_config() -> None:
    """MIG Manager reads the file the kubelet projects from the ConfigMap (refreshed on the
    pod's periodic sync, about a minute) and only when its label changes: labelled in the
    round that wrote the config, it found no such config, answered failed and never tried
    again (the node backed off for 30 minutes)."""
    settings = ControllerSettings(PlanSettings(min_pending_s=30.0), config_propagation_s=90.0)
    first = decide(
        RepartitionRecord(),
        [node()],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=settings,
    )
    assert first.kind == StepKind.START and first.configs and not first.labels
    config = config_of(first.record)
    early = decide(
        first.record,
        [node()],
        [waiting()],
        file_configs={*FILE_CONFIGS, config},
        now=T0 + 60,
        settings=settings,
    )
    assert early.kind == StepKind.WAIT and not early.labels
    assert "once the mig-parted ConfigMap reaches MIG Manager: gpu-a (30s)" in early.reason
    due = decide(
        first.record,
        [node()],
        [waiting()],
        file_configs={*FILE_CONFIGS, config},
        now=T0 + 90,
        settings=settings,
    )
    assert due.kind == StepKind.APPLY
    assert [(label.node, label.config_name) for label in due.labels] == [("gpu-a", config)]
    # a GPU taken meanwhile is still caught by the re-check when the label is due
    busy = decide(
        first.record,
        [node(held=["1g.10gb"] * 7)],
        [waiting()],
        file_configs={*FILE_CONFIGS, config},
        now=T0 + 90,
        settings=settings,
    )
    assert busy.kind == StepKind.ABORT and not busy.labels


def test_the_written_plan_is_applied_with_config_label_and_event() -> None:
    record = started()
    step = decide(
        record, [node()], [waiting()], file_configs=set(FILE_CONFIGS), now=T0 + 1, settings=SETTINGS
    )
    assert step.kind == StepKind.APPLY
    name = config_of(record)
    assert set(step.configs) == {name}
    (label,) = step.labels
    assert (label.node, label.config_name, label.mark_pending) == ("gpu-a", name, True)
    (event,) = step.events
    assert event.reason == "MigRepartition" and not event.warning
    # Only 3g demand is seen (nothing else is held or waiting), so the rest of the GPU is a 3g.
    assert "(GPU 0: 2x3g.40gb)" in event.message
    assert step.record.plan is not None and step.record.plan.applied_at == T0 + 1
    assert name in step.referenced


@pytest.mark.parametrize(
    ("now_node", "why"),
    [
        (node(held=["1g.10gb"]), "GPU 0 is in use by a pod since planning"),
        (node(config="all-3g.40gb", mig={"3g.40gb": 2}), "label nvidia.com/mig.config is"),
        (node(state="pending"), "MIG Manager is applying a config"),
        (
            node(labels={"nvidia.com/gpu.deploy.mig-manager": "false"}),
            "no MIG Manager runs on the node (label nvidia.com/gpu.deploy.mig-manager=false)",
        ),
        (None, "node is gone"),
    ],
    ids=["gpu-became-busy", "label-changed", "mig-manager-busy", "mig-manager-off", "node-deleted"],
)
def test_a_node_whose_state_changed_since_planning_is_not_applied(
    now_node: NodeState | None, why: str
) -> None:
    nodes = [now_node] if now_node is not None else []
    step = decide(
        started(), nodes, [waiting()], file_configs=set(FILE_CONFIGS), now=T0 + 1, settings=SETTINGS
    )
    assert step.kind == StepKind.ABORT
    assert not step.labels and not step.configs
    assert step.record.plan is None
    (outcome,) = step.outcomes
    assert outcome.outcome == ABORTED and why in outcome.detail


def test_a_gpu_the_plan_leaves_as_it_is_that_changed_since_planning_is_not_wiped() -> None:
    # After a reboot a node's MIG instances are gone: its agent reports empty MIG GPUs until
    # MIG Manager applies the node's config again, under the same label. A plan made meanwhile
    # describes the GPUs it leaves as empty; labelled once MIG Manager had applied that config
    # (the planned GPU idle again), mig-parted would clear every other GPU, and the instances
    # pods had been given there since with them.
    rebooted = node_state("gpu-a", [[], []])
    start = decide(
        RepartitionRecord(),
        [rebooted],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=SETTINGS,
    )
    assert start.kind == StepKind.START and start.record.plan is not None
    (planned,) = start.record.plan.nodes
    assert planned.gpus == (0,)
    assert [dict(e.mig_devices) for e in planned.entries if e.devices == (1,)] == [{}]
    layout = [place(MODEL, "1g.10gb", i) for i in range(7)]
    reapplied = node_state("gpu-a", [layout, layout])
    step = decide(
        start.record,
        [reapplied],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0 + 1,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.ABORT and not step.labels
    (outcome,) = step.outcomes
    assert outcome.outcome == ABORTED
    assert "GPU 1 has 7 x 1g.10gb, the plan keeps it as none" in outcome.detail


def test_nothing_moves_without_a_readable_mig_parted_file() -> None:
    step = decide(
        RepartitionRecord(), [node()], [waiting()], file_configs=None, now=T0, settings=SETTINGS
    )
    assert step.kind == StepKind.WAIT
    assert "ConfigMap" in step.reason


def test_young_demand_waits_for_min_pending() -> None:
    step = decide(
        RepartitionRecord(),
        [node()],
        [waiting(waited_s=5)],
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.WAIT


# -- applying -> finished ---


@pytest.mark.parametrize(
    ("label", "state", "elapsed_s", "kind", "outcome"),
    [
        ("ours", "pending", 30, StepKind.WAIT, OPEN),
        ("ours", "success", 30, StepKind.FINISH, SUCCESS),
        ("ours", "failed", 30, StepKind.FINISH, FAILED),
        ("ours", "pending", 601, StepKind.FINISH, TIMEOUT),
        ("ours", "rebooting", 601, StepKind.FINISH, TIMEOUT),
        ("all-3g.40gb", "success", 30, StepKind.FINISH, SUPERSEDED),
    ],
    ids=["in-progress", "success", "failed", "pending-past-deadline", "rebooting-past", "relabel"],
)
def test_outcomes_after_applying(
    label: str, state: str, elapsed_s: float, kind: StepKind, outcome: str
) -> None:
    record = applied()
    name = config_of(record)
    now_node = node(config=name if label == "ours" else label, state=state)
    step = decide(
        record,
        [now_node],
        [],
        file_configs=set(FILE_CONFIGS),
        now=T0 + 1 + elapsed_s,
        settings=SETTINGS,
    )
    assert step.kind == kind
    if kind == StepKind.WAIT:
        assert step.record == record
        return
    (closed,) = step.outcomes
    assert closed.outcome == outcome
    assert step.record.plan is None


def _succeeded() -> tuple[RepartitionRecord, float, Step]:
    """The applied plan's one node reports success a minute later: the record, then, the step."""
    record = applied()
    now = T0 + 60
    step = decide(
        record,
        [node(config=config_of(record))],
        [],
        file_configs=set(FILE_CONFIGS),
        now=now,
        settings=SETTINGS,
    )
    return record, now, step


def test_success_records_the_cooldown_and_an_event() -> None:
    _, now, step = _succeeded()
    assert dict(step.record.finished) == {"gpu-a": now}
    assert not step.labels
    (event,) = step.events
    assert event.reason == "MigRepartition" and "applied" in event.message


def test_success_names_the_pods_it_served_in_the_record_for_any_leader_to_touch() -> None:
    """The touch that makes kube-scheduler retry the served pods at once is the shell's; the
    pods are in the record written with the success, not in one leader's memory, so a new
    leader does it. The entry lasts its window (pruned by the next write after it)."""
    record, now, step = _succeeded()
    assert step.kind == StepKind.FINISH and step.result == PlanResult.SUCCEEDED
    (served,) = step.record.served
    assert (served.node, served.config, served.at) == ("gpu-a", config_of(record), now)
    assert served.pods == ("team-a/train",)
    assert parse_record(render_record(step.record)) == step.record
    later = decide(
        step.record,
        [node(config=config_of(record))],
        [],
        file_configs=set(FILE_CONFIGS),
        now=now + TOUCH_WINDOW_S,
        settings=SETTINGS,
    )
    assert later.record.served == ()


def test_a_roll_back_on_a_node_where_no_mig_manager_runs_does_not_mark_it_pending() -> None:
    """MIG Manager turned off on the node since the plan (label
    nvidia.com/gpu.deploy.mig-manager=false): no run would end a ``pending`` the roll back
    set, and the node would stay closed to pods with no plan left to notice."""
    record = applied()
    off = node(
        config=config_of(record),
        state="failed",
        labels={"nvidia.com/gpu.deploy.mig-manager": "false"},
    )
    step = decide(record, [off], [], file_configs=set(FILE_CONFIGS), now=T0 + 60, settings=SETTINGS)
    (label,) = step.labels
    assert (label.config_name, label.mark_pending) == (ALL_1G, False)


def test_a_record_without_served_pods_reads_as_nothing_to_touch() -> None:
    """A record an earlier version wrote has no ``served``: nothing to touch, and none written."""
    text = render_record(replace(applied(), finished=(("gpu-b", T0 - 60),)))
    assert '"served"' not in text
    assert parse_record(text).served == ()


def test_failure_restores_the_previous_label_backs_off_and_warns() -> None:
    """The roll back is a label change MIG Manager answers like any other: it sets ``pending``
    in the same patch, as labelling for a plan does, so that the stale ``failed`` of the plan's
    run does not open the node to pods (counted from allocatable) while MIG Manager sets the
    previous config back."""
    record = applied()
    now = T0 + 60
    failed = node(config=config_of(record), state="failed")
    step = decide(record, [failed], [], file_configs=set(FILE_CONFIGS), now=now, settings=SETTINGS)
    (label,) = step.labels
    assert (label.node, label.config_name, label.mark_pending) == ("gpu-a", ALL_1G, True)
    assert dict(step.record.backoff) == {"gpu-a": now + 1800}
    (event,) = step.events
    assert event.warning and event.reason == "MigRepartitionFailed"
    assert "label restored to all-1g.10gb" in event.message


def test_a_previous_config_gone_from_the_file_is_not_restored() -> None:
    record = applied()
    failed = node(config=config_of(record), state="failed")
    step = decide(
        record, [failed], [], file_configs={"all-disabled"}, now=T0 + 60, settings=SETTINGS
    )
    assert not step.labels
    assert "not in the file; label left" in step.events[0].message


def test_a_backed_off_node_is_not_planned_again_until_the_backoff_ends() -> None:
    record = RepartitionRecord(backoff=(("gpu-a", T0 + 100),))
    pods = [waiting()]
    early = decide(
        record, [node()], pods, file_configs=set(FILE_CONFIGS), now=T0 + 50, settings=SETTINGS
    )
    assert early.kind == StepKind.WAIT
    assert early.plan is not None
    assert dict(early.plan.skipped_nodes)["gpu-a"].startswith("backed off")
    late = decide(
        record, [node()], pods, file_configs=set(FILE_CONFIGS), now=T0 + 101, settings=SETTINGS
    )
    assert late.kind == StepKind.START
    assert late.record.backoff == ()


def test_a_node_just_re_partitioned_cools_down() -> None:
    record = RepartitionRecord(finished=(("gpu-a", T0),))
    step = decide(
        record,
        [node()],
        [waiting()],
        file_configs=set(FILE_CONFIGS),
        now=T0 + 10,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.WAIT


def test_a_restart_between_file_write_and_label_labels_the_node_then() -> None:
    record = applied()
    step = decide(
        record, [node()], [], file_configs=set(FILE_CONFIGS), now=T0 + 5, settings=SETTINGS
    )
    assert step.kind == StepKind.OBSERVE
    (label,) = step.labels
    assert label.config_name == config_of(record)
    assert step.record == record


# -- the record ---


def test_the_record_survives_its_json_round_trip() -> None:
    record = replace(applied(), finished=(("gpu-b", T0 - 60),), backoff=(("gpu-c", T0 + 1800),))
    assert parse_record(render_record(record)) == record
    assert parse_record(None) == RepartitionRecord()


def test_a_record_given_a_plan_keeps_every_other_field() -> None:
    # each field a value of its own, so that one left out or swapped shows
    record = RepartitionRecord(**{f.name: object() for f in fields(RepartitionRecord)})  # type: ignore[arg-type]
    plan = applied().plan
    assert record.with_plan(plan) == replace(record, plan=plan)


def test_the_record_keeps_the_keys_a_newer_release_wrote_through_a_rollback() -> None:
    """A newer release may add top-level keys (as ``restores``, ``served`` and ``carve`` were
    added); after a ``helm rollback`` this release reads and rewrites the record, and must
    write them back as they were, or the newer one, back again, has lost its state."""
    reservations = {"gpu-b": {"pods": ["team-b/infer"], "until": "2025-06-15T15:30:00Z"}}
    newer = json.loads(render_record(applied()))
    newer["reservations"] = reservations
    newer["hints"] = [1, "two", None, {"nested": True}]
    text = json.dumps(newer, separators=(",", ":"))
    record = parse_record(text)
    assert render_record(record) == text  # byte for byte, the unknown keys after the known ones
    assert parse_record(render_record(record)) == record
    assert record != parse_record(render_record(applied()))
    # a round that changes nothing in it leaves it equal; one that ends the plan keeps them
    idle = decide(
        record, [node()], [], file_configs=set(FILE_CONFIGS), now=T0 + 5, settings=SETTINGS
    )
    assert idle.kind == StepKind.OBSERVE and idle.record == record
    step = decide(
        record,
        [node(config=config_of(record))],
        [],
        file_configs=set(FILE_CONFIGS),
        now=T0 + 60,
        settings=SETTINGS,
    )
    assert step.kind == StepKind.FINISH and step.record.plan is None
    written = json.loads(render_record(step.record))
    assert written["plan"] is None and "gpu-a" in written["finished"]
    assert written["reservations"] == reservations
    assert written["hints"] == newer["hints"]
    assert list(written)[-2:] == ["reservations", "hints"]


def test_a_record_of_another_version_is_still_refused() -> None:
    newer = json.loads(render_record(applied()))
    newer["version"] = "v2"
    with pytest.raises(RecordError, match="version 'v2'; this migslice reads v1") as error:
        parse_record(json.dumps(newer))
    assert "finish the helm upgrade or rollback" in str(error.value)


# -- the mig-parted merge ---


def test_merge_keeps_foreign_configs_adds_ours_and_drops_unreferenced_own_ones() -> None:
    text = yaml.safe_dump(
        {
            "version": "v1",
            "mig-configs": {
                "all-1g.10gb": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
                "migslice-old-11111111": [{"devices": "all", "mig-enabled": False}],
                "migslice-used-22222222": [{"devices": "all", "mig-enabled": False}],
                "custom": [CUSTOM_ENTRY],
            },
        }
    )
    layout = [place(MODEL, "3g.40gb", 0), place(MODEL, "3g.40gb", 4)]
    ours = {"migslice-new-33333333": mig_parted_entries(MODEL, {0: layout})}
    merged = yaml.safe_load(merge_mig_parted(text, ours, {"migslice-used-22222222"}))
    assert set(merged["mig-configs"]) == {
        "all-1g.10gb",
        "migslice-used-22222222",
        "custom",
        "migslice-new-33333333",
    }
    assert merged["mig-configs"]["custom"] == [CUSTOM_ENTRY]
    assert merged["mig-configs"]["migslice-new-33333333"][0]["mig-devices"] == {"3g.40gb": 2}


# Written as our types would not write it (a string filter, mig-devices on a disabled entry),
# so that carrying it over verbatim shows.
CUSTOM_ENTRY = {
    "device-filter": "0x20B210DE",
    "devices": [0],
    "mig-enabled": False,
    "mig-devices": {},
}


def test_merge_refuses_a_file_mig_parted_would_refuse_and_says_where() -> None:
    text = "version: v1\nmig-configs:\n  custom: [{devices: [0], mig-enabled: false, x-extra: 1}]\n"
    with pytest.raises(MigPartedError, match=r"mig-configs.custom\[0\] has unknown keys: x-extra"):
        merge_mig_parted(text, {}, set())


def test_merge_that_drops_every_config_leaves_a_file_mig_parted_accepts() -> None:
    text = (
        "version: v1\nmig-configs:\n  migslice-old-11111111: [{devices: all, mig-enabled: false}]\n"
    )
    merged = merge_mig_parted(text, {}, set())
    assert yaml.safe_load(merged) == {"version": "v1"}
    assert parse_mig_parted(merged) == {}


# -- pending pods ---


def unschedulable(
    raw: dict[str, object], at: str, reason: str = "Unschedulable"
) -> dict[str, object]:
    raw["status"] = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": reason, "lastTransitionTime": at}
        ],
    }
    return raw


def test_pending_pods_are_unschedulable_mig_pods_of_our_scheduler_with_their_wait() -> None:
    now = datetime.datetime(2025, 5, 1, 10, 0, 30, tzinfo=datetime.UTC)
    at = "2025-05-01T10:00:00Z"
    other = make_pod("other", profile="3g.40gb")
    other["spec"]["schedulerName"] = "default-scheduler"
    raws = [
        unschedulable(make_pod("wait", profile="3g.40gb"), at),
        unschedulable(make_pod("cpu"), at),
        unschedulable(other, at),
        unschedulable(make_pod("gated", profile="3g.40gb"), at, reason="SchedulingGated"),
        make_pod("fresh", profile="3g.40gb"),
        unschedulable(make_pod("bound", profile="3g.40gb", node_name="n"), at),
    ]
    found = pending_pods(raws, now)
    assert [(p.demand.key, p.pending_s) for p in found] == [("team-a/wait", 30.0)]


def test_a_pod_admitted_through_the_gate_counts_its_wait_from_its_admission() -> None:
    # a gated pod's PodScheduled turned False (SchedulingGated) when it was created, and keeps
    # that time when kube-scheduler finds it Unschedulable after the gate came off
    now = datetime.datetime(2025, 5, 1, 10, 0, 30, tzinfo=datetime.UTC)
    raw = unschedulable(make_pod("late", profile="3g.40gb"), "2025-05-01T09:00:00Z")
    admitted = {"type": ADMITTED_CONDITION, "status": "True", "reason": "Admitted"}
    raw["status"]["conditions"].append({**admitted, "lastTransitionTime": "2025-05-01T10:00:20Z"})
    assert [p.pending_s for p in pending_pods([raw], now)] == [10.0]
    # admitted before it was last found unschedulable, or at a time that cannot be read: the
    # PodScheduled condition's time
    raw["status"]["conditions"][1]["lastTransitionTime"] = "2025-05-01T08:00:00Z"
    assert [p.pending_s for p in pending_pods([raw], now)] == [3630.0]
    raw["status"]["conditions"][1]["lastTransitionTime"] = "yesterday"
    assert [p.pending_s for p in pending_pods([raw], now)] == [3630.0]
    # still gated, or refused at the gate: not admitted, the PodScheduled time stands
    raw["status"]["conditions"][1] = {**admitted, "status": "False", "lastTransitionTime": "x"}
    assert [p.pending_s for p in pending_pods([raw], now)] == [3630.0]


# -- the property: never apply to a GPU busy at apply time ---


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeState], list[NodeState]]:
    """Nodes at planning time, and the same nodes at apply time after some pods were bound."""
    count = draw(st.integers(1, 3))
    before, after = [], []
    for i in range(count):
        name = f"gpu-{i}"
        held_before = draw(st.lists(st.just("1g.10gb"), max_size=2))
        held_after = held_before + draw(st.lists(st.just("1g.10gb"), max_size=2))
        state = draw(st.sampled_from(["success", "success", "pending"]))
        before.append(node(name, held=held_before))
        after.append(node(name, state=state, held=held_after[:7]))
    return before, after


@settings(max_examples=60, deadline=None)
@given(
    clusters(), st.lists(st.sampled_from(["3g.40gb", "2g.20gb", "4g.40gb"]), min_size=1, max_size=3)
)
def test_an_applied_plan_never_names_a_gpu_busy_when_it_is_applied(
    cluster: tuple[list[NodeState], list[NodeState]], profiles: list[str]
) -> None:
    before, after = cluster
    pods = [waiting(p, name=f"p{i}") for i, p in enumerate(profiles)]
    settings_ = ControllerSettings(PlanSettings(max_nodes_in_flight=3))
    first = decide(
        RepartitionRecord(),
        before,
        pods,
        file_configs=set(FILE_CONFIGS),
        now=T0,
        settings=settings_,
    )
    if first.kind != StepKind.START:
        return
    second = decide(
        first.record, after, pods, file_configs=set(FILE_CONFIGS), now=T0 + 1, settings=settings_
    )
    by_name = {n.name: n for n in after}
    assert first.record.plan is not None
    planned = {s.node: s for s in first.record.plan.nodes}
    for label in second.labels:
        state = by_name[label.node]
        assert state.facts.mig_config_state not in ("pending", "rebooting")
        for index in planned[label.node].gpus:
            gpu = next(g for g in state.gpus if g.index == index)
            assert gpu.is_idle, f"{label.node} GPU {index} is busy at apply time"
    labelled = {label.node for label in second.labels}
    for n in after:
        busy_now = any(not g.is_idle for g in n.gpus) or n.facts.mig_config_state == "pending"
        if busy_now:
            assert n.name not in labelled
    assert Counter(label.node for label in second.labels) == Counter(labelled)


def test_a_plan_of_the_previous_version_writes_its_config_and_waits_before_the_label() -> None:
    """A plan written by a controller that wrote configs with their labels has no writtenAt:
    labelled at once after an upgrade, MIG Manager would not find the config."""
    started = decide(
        RepartitionRecord(), [node()], [waiting()], file_configs=set(FILE_CONFIGS), now=T0
    )
    assert started.record.plan is not None
    older = replace(
        started.record,
        plan=replace(
            started.record.plan,
            nodes=tuple(replace(s, written_at=None) for s in started.record.plan.nodes),
        ),
    )
    settings = ControllerSettings(PlanSettings(min_pending_s=30.0), config_propagation_s=90.0)
    config = config_of(older)
    upgraded = decide(
        older, [node()], [waiting()], file_configs=set(FILE_CONFIGS), now=T0 + 5, settings=settings
    )
    assert upgraded.kind == StepKind.OBSERVE and not upgraded.labels
    assert list(upgraded.configs) == [config]
    later = decide(
        upgraded.record,
        [node()],
        [waiting()],
        file_configs={*FILE_CONFIGS, config},
        now=T0 + 95,
        settings=settings,
    )
    assert later.kind == StepKind.APPLY and [x.node for x in later.labels] == ["gpu-a"]
