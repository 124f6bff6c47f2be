"""The controller shell in carve mode, over a small fake of its port: the record is written
before the node is asked, the ask is withdrawn when the agent answers, served pods are
touched once the extender's cache shows the carve done, and failures are counted."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.controller import RepartitionController
from extender.metrics import _RepartitionCollector
from extender.settings import ExtenderSettings, RepartitionSettings
from extender.state import ExtenderState, new_index
from harness.builders import make_mig_config_map, make_pod, unschedulable
from migslice.cli import main
from migslice.kube.transport import ApiError
from migslice.names import CARVE_ANNOTATION, CARVE_STATE_ANNOTATION, RECORD_ANNOTATION
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.objects.carve_handshake import CarvePhase, CarveStatus, render_carve_status
from migslice.repartition import StepKind
from tests.carve_builders import carve_node_raw, gpu

NOW = 1_750_000_000.0


class FakeApi:
    """One carve-mode node with a busy 3g.40gb and two idle 1g.10gb; a pod wants a 3g.40gb."""

    def __init__(self) -> None:
        self.config_map: dict[str, Any] = {
            "metadata": {"name": "migslice-mig-config", "resourceVersion": "1"},
            "data": {"config.yaml": "version: v1\nmig-configs: {}\n"},
        }
        layout = [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")]
        self.node = carve_node_raw("gpu-a", layout, busy=["0:3g.40gb@4"])
        self.bound = [make_pod("running", profile="3g.40gb", node_name="gpu-a")]
        self.pods = [unschedulable(make_pod("train", profile="3g.40gb"), "2025-06-15T15:00:00Z")]
        self.log: list[str] = []
        self.refuse_annotations = False
        """The API server answers a Node annotation patch with a 500."""

    def read_config_map(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.config_map)

    def update_config_map(
        self, mutate: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        wanted = mutate(copy.deepcopy(self.config_map))
        if wanted is None:
            return None
        self.config_map = wanted
        self.log.append("record")
        return copy.deepcopy(wanted)

    def list_pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        return self.pods

    def read_node(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.node)

    def list_pods_on_node(self, name: str) -> list[dict[str, Any]]:
        return self.bound

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        self.log.append(f"label {name}")

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None:
        if self.refuse_annotations:
            self.log.append(f"refused {name}")
            raise ApiError(500, f"PATCH /api/v1/nodes/{name}: etcdserver: request timed out")
        current = self.node["metadata"]["annotations"]
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        self.log.append(f"annotate {name} {sorted(annotations.items())[0][1] is not None}")

    def record_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        self.log.append(f"event {node} {reason}")

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool:
        self.log.append(f"touch {pod_key}")
        return True

    def answer(self, phase: CarvePhase, detail: str = "") -> None:
        """The agent's answer for the plan it was asked, as it writes it."""
        request = json.loads(self.node["metadata"]["annotations"][CARVE_ANNOTATION])
        status = CarveStatus(request["plan"], phase, detail)
        self.node["metadata"]["annotations"][CARVE_STATE_ANNOTATION] = render_carve_status(status)


class Elector:
    is_leader = True

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        pass


def controller(api: FakeApi, *, dry_run: bool = False) -> tuple[RepartitionController, Any]:
    index = new_index()
    index.replace_nodes([node_facts_from_raw(api.node)])
    index.replace_pods([p for p in map(pod_facts_from_raw, api.bound) if p is not None])
    settings = ExtenderSettings(repartition=RepartitionSettings(enabled=True, dry_run=dry_run))
    clock = [NOW]
    made = RepartitionController(
        api, Elector(), index, settings, clock=lambda: clock[0], monotonic=lambda: clock[0]
    )
    return made, (index, clock)


def test_the_record_comes_first_then_the_ask_then_the_event() -> None:
    api = FakeApi()
    ctl, _ = controller(api)
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.START, StepKind.APPLY]
    assert api.log == ["record", "record", "annotate gpu-a True", "event gpu-a MigCarve"]
    record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
    request = json.loads(api.node["metadata"]["annotations"][CARVE_ANNOTATION])
    assert record["carve"]["id"] == request["plan"]
    assert record["carve"]["appliedAt"] is not None
    assert request["gpus"][0]["create"] == [{"profile": "3g.40gb", "start": 0}]
    assert "label gpu-a" not in api.log  # a carve node is never labelled for MIG Manager


def test_success_withdraws_the_ask_and_the_served_pod_is_touched_once_the_cache_shows_it() -> None:
    api = FakeApi()
    ctl, (index, clock) = controller(api)
    ctl.run_once()
    api.answer(CarvePhase.SUCCESS)
    clock[0] += 20
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.FINISH]
    assert CARVE_ANNOTATION not in api.node["metadata"]["annotations"]
    assert api.log[-2:] == ["annotate gpu-a False", "event gpu-a MigCarve"]
    assert ctl.stats.carve_outcomes == {"success": 1}
    ctl.run_once()
    assert "touch team-a/train" not in api.log  # the extender's cache has not seen it yet
    index.upsert_node(node_facts_from_raw(api.node))
    ctl.run_once()
    assert api.log[-1] == "touch team-a/train"
    ctl.run_once()
    assert api.log.count("touch team-a/train") == 1


def test_a_new_leader_touches_the_pods_a_carve_served_before_the_old_one_could() -> None:
    """The leader that saw the carve succeed is gone before its cache showed it: the record
    names the pods, so the next leader touches them; a pod bound meanwhile is left alone."""
    for still_pending in (True, False):
        api = FakeApi()
        ctl, (_, clock) = controller(api)
        ctl.run_once()
        api.answer(CarvePhase.SUCCESS)
        clock[0] += 20
        ctl.run_once()
        assert not any(line.startswith("touch") for line in api.log)
        record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
        assert record["served"]["gpu-a"]["pods"] == ["team-a/train"]
        assert record["served"]["gpu-a"]["config"].startswith("carve:")
        if not still_pending:
            api.pods = []  # bound by kube-scheduler's own retry: never touched
        new, (_, new_clock) = controller(api)  # its cache shows the carve done
        new_clock[0] = clock[0] + 15
        api.log.clear()
        new.run_once()
        assert api.log == (["touch team-a/train"] if still_pending else [])


def test_a_failure_is_a_warning_a_metric_and_a_backoff() -> None:
    api = FakeApi()
    ctl, (_, clock) = controller(api)
    ctl.run_once()
    api.answer(CarvePhase.FAILED, "GPU 0: 1g.10gb@1 became busy; rolled back")
    clock[0] += 20
    ctl.run_once()
    assert "event gpu-a MigCarveFailed" in api.log
    record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
    assert "gpu-a" in record["backoff"] and "carve" not in record
    collected = {
        (m.name, tuple(s.labels.items())): s.value
        for m in _RepartitionCollector(ExtenderState(new_index(), repartition=ctl.stats)).collect()
        for s in m.samples
    }
    assert collected[("migslice_repartition_carve_nodes", (("outcome", "failed"),))] == 1
    clock[0] += 20
    assert ctl.run_once() == []  # backed off: the pod waits


def test_a_withdrawal_the_api_server_refused_is_made_the_next_round() -> None:
    """Measured before: at the deadline the record closed the carve and the PATCH removing
    the request got a 500; no round withdrew it again, so the request stayed on the Node for
    good: the node closed to pods (carve in progress) and counted against the carve budget,
    and an agent that came back later carved the plan the controller had given up on."""
    api = FakeApi()
    ctl, (index, clock) = controller(api)
    ctl.run_once()
    plan = json.loads(api.node["metadata"]["annotations"][CARVE_ANNOTATION])["plan"]
    index.upsert_node(node_facts_from_raw(api.node))  # the informer saw the ask
    api.refuse_annotations = True
    clock[0] += 601  # past --repartition-deadline-s: no answer (the agent is down)
    ctl.run_once()
    assert "refused gpu-a" in api.log
    record = json.loads(api.config_map["metadata"]["annotations"][RECORD_ANNOTATION])
    assert "carve" not in record and "gpu-a" in record["backoff"]
    assert json.loads(api.node["metadata"]["annotations"][CARVE_ANNOTATION])["plan"] == plan
    api.refuse_annotations = False
    clock[0] += 15
    api.log.clear()
    ctl.run_once()
    assert CARVE_ANNOTATION not in api.node["metadata"]["annotations"]
    assert api.log.count("annotate gpu-a False") == 1
    index.upsert_node(node_facts_from_raw(api.node))
    clock[0] += 15
    api.log.clear()
    ctl.run_once()
    assert not any(line.startswith("annotate") for line in api.log)


def test_a_dry_run_says_what_it_would_carve_and_writes_nothing() -> None:
    api = FakeApi()
    ctl, _ = controller(api, dry_run=True)
    steps = ctl.run_once()
    assert [s.kind for s in steps] == [StepKind.START]
    assert api.log == []
    assert ctl.stats.plans_dry_run == 1


def test_migslice_plan_shows_a_carve_and_what_the_agent_would_be_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api = FakeApi()
    objects = [
        make_mig_config_map(),
        {"apiVersion": "v1", "kind": "Node", **api.node},
        *({"apiVersion": "v1", "kind": "Pod", **pod} for pod in [*api.bound, *api.pods]),
    ]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    assert main(["plan", "--cluster-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "carve: GPU 0: destroy 1g.10gb@0, 1g.10gb@1; create 3g.40gb@0" in out
    assert "serves: team-a/train" in out
    assert main(["plan", "--cluster-file", str(path), "-o", "json"]) == 0
    (change,) = json.loads(capsys.readouterr().out)["changes"]
    assert change["gpus"][0]["create"] == [{"profile": "3g.40gb", "start": 0}]
