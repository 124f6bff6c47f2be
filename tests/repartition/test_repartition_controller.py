"""The controller loop's shell over small fakes of its ports: order of writes, dry run, leader."""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from prometheus_client import generate_latest

from extender.controller import RepartitionController
from extender.metrics import ExtenderMetrics
from extender.settings import ExtenderSettings, RepartitionSettings
from extender.state import ExtenderState, new_index
from harness.builders import make_node, make_pod
from migslice.kube import LeaderElector
from migslice.kube.transport import ApiError
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted
from migslice.mig.stranding import FillerMix
from migslice.names import QUARANTINE_ANNOTATION, QUARANTINE_LABEL
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.repartition import RECORD_ANNOTATION, StepKind
from tests.dra_objects import make_claim, make_claim_pod, migslice_classes
from tests.kube.test_kube_repartition import ObjectStore
from tests.local_api import Request, local_api

MODEL = CATALOG.get("A100-80GB")
NOW = 1_750_000_000.0


def config_text() -> str:
    layout = [place(MODEL, "1g.10gb", i) for i in range(7)]
    return render_mig_parted({"all-1g.10gb": mig_parted_entries(MODEL, {0: layout})})


class FakeApi:
    """The cluster as the controller's port sees it; ``log`` lists every write in order."""

    def __init__(self) -> None:
        self.config_map: dict[str, Any] = {
            "metadata": {"name": "migslice-mig-config", "resourceVersion": "1"},
            "data": {"config.yaml": config_text()},
        }
        self.node = make_node(
            "gpu-a", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb", config_state="success"
        )
        pod = make_pod("train", profile="3g.40gb")
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "lastTransitionTime": "2025-06-15T15:00:00Z",
                }
            ],
        }
        self.pods = [pod]
        self.log: list[str] = []

    def read_config_map(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.config_map)

    def update_config_map(
        self, mutate: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        wanted = mutate(copy.deepcopy(self.config_map))
        if wanted is None:
            return None
        self.config_map = wanted
        has_config = any(
            "migslice-gpu-a" in line for line in wanted["data"]["config.yaml"].splitlines()
        )
        self.log.append(f"configmap config={has_config}")
        return copy.deepcopy(wanted)

    def list_pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        return self.pods

    def read_node(self, name: str) -> dict[str, Any] | None:
        return self.node

    def list_pods_on_node(self, name: str) -> list[dict[str, Any]]:
        return []

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        self.node["metadata"]["labels"].update(labels)
        self.log.append(f"label {name} {sorted(labels.items())}")

    def record_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        self.log.append(f"event {node} {reason}")

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool:
        self.log.append(f"touch {pod_key} {sorted(annotations)}")
        for pod in self.pods:
            if f"{pod['metadata']['namespace']}/{pod['metadata']['name']}" == pod_key:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
        return True

    def mark_quarantine(self, node: str, note: str | None) -> None:
        metadata = self.node["metadata"]
        if note is None:
            metadata["labels"].pop(QUARANTINE_LABEL, None)
            metadata.setdefault("annotations", {}).pop(QUARANTINE_ANNOTATION, None)
        else:
            metadata["labels"][QUARANTINE_LABEL] = "timeout"
            metadata.setdefault("annotations", {})[QUARANTINE_ANNOTATION] = note
        self.log.append(f"quarantine {node} {'set' if note else 'removed'}")


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


def controller(
    api: FakeApi,
    dry_run: bool = False,
    leader: bool = True,
    index: Any = None,
    clock: Callable[[], float] = lambda: NOW,
    blindness: Callable[[], list[str]] = list,
    elector: Elector | LeaderElector | None = None,
    monotonic: Callable[[], float] | None = None,
) -> RepartitionController:
    index = index if index is not None else new_index()
    index.replace_nodes([node_facts_from_raw(api.node)])
    settings = ExtenderSettings(
        repartition=RepartitionSettings(enabled=True, dry_run=dry_run, config_propagation_s=0.0)
    )
    return RepartitionController(
        api,
        elector or Elector(leader),
        index,
        settings,
        clock=clock,
        blindness=blindness,
        monotonic=monotonic or clock,  # a machine's two clocks move together, unless told
    )


def test_the_record_is_written_before_the_file_and_labels_and_then_the_node_is_labelled() -> None:
    api = FakeApi()
    steps = controller(api).run_once()
    assert [s.kind for s in steps] == [StepKind.START, StepKind.APPLY]
    assert api.log[0] == "configmap config=True"  # the plan record with its configs
    assert api.log[1] == "configmap config=True"  # the record applied, the configs again
    assert api.log[2].startswith("label gpu-a [('nvidia.com/mig.config', 'migslice-gpu-a-")
    assert "('nvidia.com/mig.config.state', 'pending')" in api.log[2]
    assert api.log[3] == "event gpu-a MigRepartition"
    record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["plan"]["appliedAt"] is not None


def test_a_label_removed_by_hand_mid_plan_has_its_pending_state_removed_too() -> None:
    """The pending our label wrote would hold the node off-limits for ever once an admin
    removed nvidia.com/mig.config (no MIG Manager run follows): it is removed, and said."""
    api = FakeApi()
    ctl = controller(api)
    ctl.run_once()
    labels = api.node["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "pending"
    del labels["nvidia.com/mig.config"]  # kubectl label node gpu-a nvidia.com/mig.config-
    api.log.clear()
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.FINISH]
    assert api.log[1:] == [
        "label gpu-a [('nvidia.com/mig.config.state', None)]",
        "event gpu-a MigRepartitionSuperseded",
    ]
    assert ctl.stats.node_outcomes == {"superseded": 1}


def test_a_dry_run_decides_and_writes_nothing() -> None:
    api = FakeApi()
    ctl = controller(api, dry_run=True)
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.START]
    assert api.log == []
    assert ctl.stats.plans_dry_run == 1
    ctl.run_once()
    assert ctl.stats.plans_dry_run == 1  # the same plan is logged once


def test_a_follower_does_nothing() -> None:
    api = FakeApi()
    ctl = controller(api, leader=False)
    assert ctl.run_once() == []
    assert api.log == [] and not ctl.stats.is_leader


def test_an_unreadable_record_stops_the_controller_rather_than_overwriting_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeApi()
    api.config_map["metadata"]["annotations"] = {RECORD_ANNOTATION: "{not json"}
    ctl = controller(api)
    assert ctl.run_once() == []
    assert api.log == []
    assert "plan record unreadable" in ctl.stats.last_round
    # a warning: while it lasts nothing is re-partitioned (it was an info line)
    assert [r.levelno for r in caplog.records if "plan record" in r.getMessage()] == [
        logging.WARNING
    ]


def test_a_record_of_another_release_is_named_and_not_to_be_removed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A newer release's record (a helm rollback mid-plan): removing it would drop the plan
    that release has under way, so the advice is to run one release, not 'remove it'."""
    api = FakeApi()
    api.config_map["metadata"]["annotations"] = {
        RECORD_ANNOTATION: json.dumps({"version": "v2", "plan": None})
    }
    ctl = controller(api)
    assert ctl.run_once() == []
    assert api.log == []
    said = ctl.stats.last_round
    assert "version 'v2'" in said and "every component runs one release" in said
    assert "remove" not in said


def test_served_pods_are_touched_once_the_extender_cache_shows_the_new_layout() -> None:
    api = FakeApi()
    index = new_index()
    ctl = controller(api, index=index)
    ctl.run_once()
    labels = api.node["metadata"]["labels"]
    config = labels["nvidia.com/mig.config"]
    labels["nvidia.com/mig.config.state"] = "success"  # MIG Manager is done
    api.log.clear()
    ctl.run_once()
    assert "event gpu-a MigRepartition" in api.log
    assert not any(line.startswith("touch") for line in api.log)  # cache still shows the old

    index.replace_nodes([node_facts_from_raw(api.node)])  # the extender's cache catches up
    api.log.clear()
    ctl.run_once()
    assert api.log == ["touch team-a/train ['migslice.io/repartitioned']"]
    api.log.clear()
    ctl.run_once()
    assert api.log == []
    assert config.startswith("migslice-gpu-a-")


def succeeded_before_the_cache_saw_it(api: FakeApi, index: Any) -> RepartitionController:
    """A leader that applied a plan and saw MIG Manager's success, its cache not yet."""
    first = controller(api, index=index)
    first.run_once()
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    first.run_once()
    assert first.stats.node_outcomes == {"success": 1}
    assert not any(line.startswith("touch") for line in api.log)
    return first


def test_a_new_leader_touches_the_pods_a_plan_served_before_the_old_one_could() -> None:
    """The old leader saw the success and was gone (or restarted) before its cache showed the
    node: the pods it served are in the record, so the next leader touches them, once."""
    api = FakeApi()
    index = new_index()
    succeeded_before_the_cache_saw_it(api, index)
    config = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["served"]["gpu-a"]["config"] == config
    assert record["served"]["gpu-a"]["pods"] == ["team-a/train"]
    index.replace_nodes([node_facts_from_raw(api.node)])  # the cache catches up
    second = controller(api, index=index)  # a new leader, its memory empty
    api.log.clear()
    second.run_once()
    assert api.log == ["touch team-a/train ['migslice.io/repartitioned']"]
    assert api.pods[0]["metadata"]["annotations"]["migslice.io/repartitioned"] == config
    api.log.clear()
    second.run_once()
    controller(api, index=index).run_once()  # and another: the pod says it was touched
    assert api.log == []


def test_a_served_pod_no_longer_pending_is_not_touched_by_a_new_leader() -> None:
    api = FakeApi()
    index = new_index()
    succeeded_before_the_cache_saw_it(api, index)
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.pods = []  # bound meanwhile (kube-scheduler's own retry): running pods are left alone
    api.log.clear()
    controller(api, index=index).run_once()
    assert api.log == []


def test_the_served_pods_are_touched_within_their_window_only() -> None:
    api = FakeApi()
    index = new_index()
    succeeded_before_the_cache_saw_it(api, index)
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.log.clear()
    controller(api, index=index, clock=lambda: NOW + 601).run_once()
    assert not any(line.startswith("touch") for line in api.log)


ROLL_BACK = (
    "label gpu-a [('nvidia.com/mig.config', 'all-1g.10gb'), "
    "('nvidia.com/mig.config.state', 'pending')]"
)
"""The previous config set back, and ``pending`` with it in the same patch (as a plan's label):
the node stays closed to pods until MIG Manager has applied it again."""


def test_a_stuck_node_is_quarantined_on_the_node_counted_and_released_on_success() -> None:
    api = FakeApi()
    index = new_index()
    now = [NOW]
    loop = controller(api, index=index, clock=lambda: now[0])
    loop.run_once()
    ours = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    assert loop.stats.nodes_in_flight == 1
    now[0] += 601  # MIG Manager never answers
    api.log.clear()
    index.replace_nodes([node_facts_from_raw(api.node)])
    loop.run_once()
    assert api.log[:4] == [
        "configmap config=True",
        ROLL_BACK,
        "quarantine gpu-a set",
        "event gpu-a MigRepartitionQuarantined",
    ]
    note = json.loads(api.node["metadata"]["annotations"][QUARANTINE_ANNOTATION])
    assert note["config"] == ours and note["reason"] == "timeout"
    assert (loop.stats.nodes_in_flight, loop.stats.nodes_quarantined) == (0, 1)
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.log.clear()
    steps = loop.run_once()
    assert steps[0].kind == StepKind.QUARANTINE
    assert "quarantine gpu-a removed" in api.log
    assert "event gpu-a MigRepartitionQuarantineReleased" in api.log
    assert QUARANTINE_LABEL not in api.node["metadata"]["labels"]
    assert loop.stats.nodes_quarantined == 0


class RefusingApi(FakeApi):
    """The API server refuses the next ``refuse`` label patches (a 500, a 429, a webhook)."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse = 0

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        if self.refuse:
            self.refuse -= 1
            self.log.append(f"refused label {name}")
            raise RuntimeError("HTTP 500: etcdserver: request timed out")
        super().set_node_labels(name, labels)


def test_a_roll_back_the_api_server_refused_is_said_and_tried_again() -> None:
    """MIG Manager failed and the label patch that sets the previous config back was refused:
    the plan was already closed in the record, so nothing asked for it again, and the node
    kept the failed config while the Event said "label restored"."""
    api = RefusingApi()
    index = new_index()
    loop = controller(api, index=index)
    loop.run_once()
    ours = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.refuse = 1
    api.log.clear()
    steps = loop.run_once()
    assert [s.kind for s in steps] == [StepKind.FINISH]
    assert api.log[1:] == [
        "refused label gpu-a",
        "event gpu-a MigRepartitionFailed",  # not set back: what to run by hand
        "event gpu-a MigRepartitionFailed",  # the failure itself
    ]
    assert api.node["metadata"]["labels"]["nvidia.com/mig.config"] == ours
    api.log.clear()
    loop.run_once()  # the next round sets it back
    assert api.log[0] == ROLL_BACK
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.log.clear()
    loop.run_once()
    assert not [line for line in api.log if line.startswith("label")]  # done, not again


def test_a_refused_roll_back_is_dropped_once_someone_else_relabels_the_node() -> None:
    api = RefusingApi()
    index = new_index()
    loop = controller(api, index=index)
    loop.run_once()
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.refuse = 1
    loop.run_once()
    api.node["metadata"]["labels"]["nvidia.com/mig.config"] = "all-3g.40gb"  # an admin's
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.log.clear()
    loop.run_once()
    assert not [line for line in api.log if line.startswith("label")]
    assert api.node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-3g.40gb"


def test_a_refused_roll_back_is_tried_again_by_the_next_leader() -> None:
    """The retry lived in the leader's memory: a leader that stopped (a rollout, a lost
    Lease) right after the refusal took it along, and the node kept the failed config."""
    api = RefusingApi()
    index = new_index()
    first = controller(api, index=index)
    first.run_once()
    ours = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.refuse = 1
    first.run_once()
    assert api.node["metadata"]["labels"]["nvidia.com/mig.config"] == ours
    record = json.loads(api.config_map["metadata"]["annotations"]["migslice.io/repartition"])
    assert record["restores"] == {"gpu-a": {"config": "all-1g.10gb", "replaces": ours}}
    api.log.clear()
    successor = controller(api, index=index)  # another replica takes the Lease
    successor.run_once()
    assert api.log[0] == ROLL_BACK
    index.replace_nodes([node_facts_from_raw(api.node)])
    successor.run_once()  # seen done: dropped from the record
    record = json.loads(api.config_map["metadata"]["annotations"]["migslice.io/repartition"])
    assert "restores" not in record


def test_the_controller_decides_nothing_while_its_caches_are_blind() -> None:
    api = FakeApi()
    loop = controller(api, blindness=lambda: ["cache nodes lost the API server 9s ago"])
    assert loop.run_once() == []
    assert api.log == []
    assert "cache nodes lost the API server" in loop.stats.last_round


def test_the_leader_exports_the_planners_stranding_rule_as_the_pods_hold_it() -> None:
    api = FakeApi()
    index = new_index()
    busy = make_node("gpu-b", gpu_count=1, mig={"3g.40gb": 1, "2g.20gb": 2})
    held = [("held-3g", "3g.40gb"), ("held-2g-0", "2g.20gb"), ("held-2g-1", "2g.20gb")]
    elector = Elector()
    ctl = controller(api, index=index, elector=elector)
    index.upsert_node(node_facts_from_raw(busy))
    for name, profile in held:
        facts = pod_facts_from_raw(make_pod(name, profile=profile, node_name="gpu-b"))
        assert facts is not None
        index.upsert_pod(facts)
    ctl.run_once()
    assert ctl.stats.stranding == FillerMix(fill=4, need=4)
    state = ExtenderState(index, repartition=ctl.stats)
    text = generate_latest(ExtenderMetrics(state).registry).decode()
    assert "migslice_repartition_strand_guard 1.0" in text
    assert 'migslice_repartition_strand_mix_slices{part="need"} 4.0' in text
    assert "migslice_repartition_complete_rule 1.0" in text  # no 4g held
    assert 'migslice_repartition_strand_mix_slices{part="wide"} 0.0' in text
    # Leadership lost: the leader's view goes with it (the new leader exports its own)
    elector.leader = False
    ctl.run_once()
    assert ctl.stats.stranding == FillerMix()
    assert (
        "migslice_repartition_strand_guard 0.0"
        in generate_latest(ExtenderMetrics(state).registry).decode()
    )


def scrape(stats: Any) -> str:
    return generate_latest(
        ExtenderMetrics(ExtenderState(new_index(), repartition=stats)).registry
    ).decode()


class FailingApi(FakeApi):
    """The API server answers the pod list with an error from some moment on."""

    failing = False

    def list_pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        if self.failing:
            raise OSError("connection refused")
        return super().list_pending_pods(scheduler_name)


def test_the_waits_exported_keep_growing_while_rounds_fail() -> None:
    """The pending and stuck alerts read waits the leader's round takes: a round that fails
    (the API server gone) must not freeze them below the alerts' thresholds."""
    api = FailingApi()
    now = [NOW]
    ctl = controller(api, clock=lambda: now[0])
    ctl.run_once()  # labels gpu-a: a step is open from NOW
    now[0] += 300
    ctl.run_once()
    assert 'migslice_repartition_open_step_age_seconds{mode="mig-manager"} 300.0' in scrape(
        ctl.stats
    )
    api.failing = True
    now[0] += 1700
    with pytest.raises(OSError):
        ctl.run_once()
    text = scrape(ctl.stats)
    assert 'migslice_repartition_open_step_age_seconds{mode="mig-manager"} 2000.0' in text
    assert 'migslice_repartition_open_step_age_seconds{mode="carve"} 0.0' in text  # none open
    # Unschedulable since 15:00:00; NOW is 15:06:40
    assert 'migslice_extender_pending_max_age_seconds{profile="3g.40gb"} 2400.0' in text


def _unschedulable(pod: dict[str, Any], since: str) -> dict[str, Any]:
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "lastTransitionTime": since,
        }
    ]
    return pod


def test_pods_asking_for_mig_through_claims_are_counted_pending_per_profile() -> None:
    """A tenant's own claim, and the claim made from the template the webhook gives a sized
    pod, ask for MIG as extended resources do: the pending gauges left their pods out, so the
    pending alert never fired for a DRA tenant. The claim kube-scheduler makes for a pod's
    extended resources counts once, with them."""
    api = FakeApi()  # train: 3g.40gb as an extended resource, Unschedulable since 15:00:00
    own = make_claim("own-claim", profile="3g.40gb", device_class="mig.nvidia.com")
    sized = make_claim("sized-gpu-x7k2p", profile="1g.10gb", device_class="migslice-mig-1g.10gb")
    served = make_claim("served-ext", profile="2g.20gb", extended_resource=True)
    api.pods += [
        _unschedulable(make_claim_pod("own", {"gpu": "own-claim"}), "2025-06-15T14:50:00Z"),
        _unschedulable(
            make_claim_pod("sized", {}, templates={"gpu": "sized-gpu-x7k2p"}),
            "2025-06-15T15:05:00Z",
        ),
        _unschedulable(
            make_claim_pod("ext", {}, mig={"2g.20gb": 1}, extended_claim="served-ext"),
            "2025-06-15T15:06:00Z",
        ),
    ]
    index = new_index()
    index.replace_classes(
        f for c in migslice_classes() if (f := device_class_facts_from_raw(c)) is not None
    )
    index.replace_claims(
        f for c in (own, sized, served) if (f := claim_facts_from_raw(c)) is not None
    )
    ctl = controller(api, dry_run=True, index=index)
    ctl.run_once()
    text = scrape(ctl.stats)
    # NOW is 15:06:40
    assert 'migslice_extender_pending_pods{profile="3g.40gb"} 2.0' in text
    assert 'migslice_extender_pending_max_age_seconds{profile="3g.40gb"} 1000.0' in text
    assert 'migslice_extender_pending_pods{profile="1g.10gb"} 1.0' in text
    assert 'migslice_extender_pending_max_age_seconds{profile="1g.10gb"} 100.0' in text
    assert 'migslice_extender_pending_pods{profile="2g.20gb"} 1.0' in text


def test_a_replica_that_stops_leading_exports_none_of_the_leaders_gauges() -> None:
    """The alerts take max() over the replicas: a gauge an ex-leader kept would fire for ever."""
    api = FakeApi()
    elector = Elector()
    ctl = controller(api, elector=elector)
    ctl.run_once()
    ctl.stats.nodes_quarantined = 1
    ctl.stats.mig_manager_config_mismatch = True
    assert ctl.stats.nodes_in_flight == 1
    elector.leader = False
    ctl.run_once()
    text = scrape(ctl.stats)
    for gauge in ("nodes_in_flight", "nodes_quarantined", "mig_manager_config_mismatch"):
        assert f"migslice_repartition_{gauge} 0.0" in text, gauge
    assert "migslice_repartition_leader 0.0" in text
    assert "migslice_repartition_open_step_age_seconds{" not in text
    assert "migslice_repartition_open_step_leader_age_seconds{" not in text
    assert "migslice_extender_pending_max_age_seconds{" not in text


def test_the_node_is_labelled_a_propagation_delay_after_its_config_is_written() -> None:
    """MIG Manager reads the kubelet's copy of the ConfigMap, refreshed about once a minute,
    and only on a label change: the label waits --repartition-config-propagation-s."""
    api = FakeApi()
    now = [NOW]
    index = new_index()
    index.replace_nodes([node_facts_from_raw(api.node)])
    settings = ExtenderSettings(
        repartition=RepartitionSettings(enabled=True, config_propagation_s=90.0)
    )
    loop = RepartitionController(
        api, Elector(), index, settings, clock=lambda: now[0], monotonic=lambda: now[0]
    )
    assert [s.kind for s in loop.run_once()] == [StepKind.START]
    assert api.log == ["configmap config=True"]
    now[0] += 60
    assert loop.run_once() == [] and len(api.log) == 1
    assert "reaches MIG Manager: gpu-a (30s)" in loop.stats.last_round
    now[0] += 30
    assert [s.kind for s in loop.run_once()] == [StepKind.APPLY]
    assert any(line.startswith("label gpu-a") for line in api.log)


@pytest.mark.parametrize(
    "clock_of_b",
    [NOW + 30 + 11 * 60, NOW + 30 - 2 * 3600],
    ids=["new-leader-11-min-ahead", "new-leader-2-h-behind"],
)
def test_a_new_leader_s_clock_does_not_decide_the_deadline_of_the_plan_it_inherits(
    clock_of_b: float,
) -> None:
    """``appliedAt`` is the old leader's time.time(), the deadline the new leader's: 30 s into
    MIG Manager's run, a leader 11 min ahead found it 11 min late, quarantined the node and
    labelled its old config back mid-reconfiguration; one 2 h behind would have let a stuck
    node hold the plan 2 h past its 10 min deadline."""
    api = FakeApi()
    index = new_index()
    a, b = Elector(), Elector(leader=False)
    first = controller(api, index=index, clock=lambda: NOW, elector=a, monotonic=lambda: 100.0)
    first.run_once()
    ours = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    assert ours != "all-1g.10gb"  # applied: MIG Manager is at it
    index.replace_nodes([node_facts_from_raw(api.node)])
    a.leader, b.leader = False, True  # replica A's pod is evicted; B takes the Lease
    now_b, mono_b = [clock_of_b], [5000.0]  # another machine: its own monotonic clock
    second = controller(
        api, index=index, clock=lambda: now_b[0], elector=b, monotonic=lambda: mono_b[0]
    )
    api.log.clear()
    written = copy.deepcopy(api.config_map)
    second.run_once()
    assert not [line for line in api.log if "quarantine" in line], api.log
    assert api.config_map == written  # nothing written: the writer's stamps stay as written
    assert api.node["metadata"]["labels"]["nvidia.com/mig.config"] == ours
    # a deadline after B first saw the plan (the 30 s before its Lease it cannot know: an
    # inherited plan's deadline runs late by up to one deadline, never early)
    now_b[0] += 601
    mono_b[0] += 601
    index.replace_nodes([node_facts_from_raw(api.node)])
    second.run_once()
    assert "quarantine gpu-a set" in api.log


class RefusingLabels(FakeApi):
    """The API server refuses the config label (422, say a label value a policy forbids)."""

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        if "nvidia.com/mig.config" in labels:
            self.log.append(f"refused {name}")
            raise ApiError(422, "Node is invalid")
        super().set_node_labels(name, labels)


def test_a_refused_label_ends_the_round_so_each_round_writes_a_bounded_amount() -> None:
    """A label patch that fails is decided again next round, not within the same one: the
    round that planned and applied stops at the refusal, and each later round writes the
    unchanged record once and tries the label once (not up to four times each)."""
    api = RefusingLabels()
    ctl = controller(api)
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.START, StepKind.APPLY]
    assert api.log == [
        "configmap config=True",
        "configmap config=True",
        "refused gpu-a",
        "event gpu-a MigRepartition",
    ]
    for _ in range(3):
        api.log.clear()
        steps = ctl.run_once()
        assert [s.kind for s in steps] == [StepKind.OBSERVE]  # labelling again
        assert api.log == ["configmap config=True", "refused gpu-a"]


def test_a_round_the_api_server_fails_is_one_line_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: a round an API call of failed (a 5xx, a list whose continue token expired, a
    timeout) logged a traceback every interval while it lasted; an error of our own still
    logs one."""
    failed = threading.Event()

    class Api(FakeApi):
        def list_pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
            failed.set()
            raise ApiError(410, "GET /api/v1/pods: The provided continue parameter is too old")

    ctl = controller(Api())
    with caplog.at_level(logging.WARNING, logger="extender.controller"):
        ctl.start()
        assert failed.wait(10)
        ctl.stop()
    (record,) = [r for r in caplog.records if "round failed" in r.getMessage()]
    assert "HTTP 410" in record.getMessage() and not record.exc_info
    assert ctl.stats.errors == 1


class SlowRecordApi(FakeApi):
    """The API server answers the record's write ``delay_s`` late (on the test's clock)."""

    def __init__(self, clock: list[float], delay_s: float) -> None:
        super().__init__()
        self.clock, self.delay_s = clock, delay_s

    def update_config_map(
        self, mutate: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        stored = super().update_config_map(mutate)
        self.clock[0] += self.delay_s
        return stored


def test_a_leader_past_its_renew_deadline_mid_round_writes_nothing_more() -> None:
    """Lease 15 s, renew deadline 10 s. The round renews, then the record's write takes
    11 s: the leader leads no more (another replica may hold the Lease 4 s later), so the
    round stops there: no APPLY, no label, no Event; the steer and the DRA warnings, which
    ask :meth:`RepartitionController.is_leader`, stop writing at the same moment."""
    objects = ObjectStore()

    def answer(request: Request) -> tuple[int, Any]:
        return objects.handle(request.method, request.path, request.query, request.body)

    clock = [1000.0]
    with local_api(answer) as transport:
        elector = LeaderElector(
            transport,
            "migslice-system",
            "migslice-repartition",
            "a",
            lease_duration_s=15,
            renew_deadline_s=10,
            clock=lambda: clock[0],
        )
        api = SlowRecordApi(clock, delay_s=11)
        ctl = controller(api, elector=elector)
        steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.START]
    assert api.log == ["configmap config=True"]  # the plan record, and nothing after it
    assert not ctl.is_leader() and not ctl.stats.is_leader


def test_a_new_leader_exports_the_step_s_age_by_its_writer_and_as_its_own_deadline_counts() -> None:
    """The stuck alert reads both: by the writer's stamp alone it fired while a new leader
    still rightly waited out the deadline it restarted (docs/operate.md)."""
    api = FakeApi()
    index = new_index()
    a, b = Elector(), Elector(leader=False)
    first = controller(api, index=index, clock=lambda: NOW, elector=a, monotonic=lambda: 100.0)
    first.run_once()  # labels gpu-a at NOW
    index.replace_nodes([node_facts_from_raw(api.node)])
    a.leader, b.leader = False, True
    now = [NOW + 500]
    second = controller(
        api, index=index, clock=lambda: now[0], elector=b, monotonic=lambda: now[0] - NOW
    )
    second.run_once()
    text = scrape(second.stats)
    assert 'migslice_repartition_open_step_age_seconds{mode="mig-manager"} 500.0' in text
    assert 'migslice_repartition_open_step_leader_age_seconds{mode="mig-manager"} 0.0' in text
    now[0] += 60
    second.run_once()
    text = scrape(second.stats)
    assert 'migslice_repartition_open_step_age_seconds{mode="mig-manager"} 560.0' in text
    assert 'migslice_repartition_open_step_leader_age_seconds{mode="mig-manager"} 60.0' in text
