"""One decision: the controller, ``migslice plan``, the demo and the simulator plan the same
re-partition for the same cluster."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.controller import RepartitionController
from extender.settings import ExtenderSettings, RepartitionSettings
from extender.state import mig_configs_from, new_index
from harness.builders import make_mig_config_map, make_node, make_pod, unschedulable
from migslice.cli import main
from migslice.demo.controller import decide_on_cluster_file
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted
from migslice.names import RECORD_ANNOTATION
from migslice.objects import load_cluster_text, node_facts_from_raw, pod_facts_from_raw
from migslice.repartition import (
    PlanSettings,
    StepKind,
    node_states,
    parse_record,
    read_config_map,
)
from migslice.scheduling import demand_of
from migslice.sim.policies import planned_reshape

MODEL = CATALOG.get("A100-80GB")
NOW = 1_750_000_000.0


def cluster_objects() -> list[dict[str, Any]]:
    """Two nodes; a pod on gpu-a holds a 1g.10gb, and no agent says on which GPU (the device
    plugin picks it), so neither of gpu-a's GPUs may change; gpu-b's are idle; one 7g pod
    waits. It is planned on gpu-b (gpu-a, fewest idle GPUs, was chosen on a guess that the
    pod's instance was on GPU 0: a wrong guess destroyed the pod's instance)."""
    all_1g = [place(MODEL, "1g.10gb", i) for i in range(7)]
    text = render_mig_parted(
        {"all-1g.10gb": mig_parted_entries(MODEL, {0: all_1g, 1: all_1g, 2: all_1g})}
    )
    nodes = [
        make_node("gpu-a", gpu_count=2, mig={"1g.10gb": 14}, config="all-1g.10gb"),
        make_node("gpu-b", gpu_count=3, mig={"1g.10gb": 21}, config="all-1g.10gb"),
    ]
    for node in nodes:
        node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    busy = make_pod("infer", profile="1g.10gb", node_name="gpu-a", phase="Running")
    waiting = unschedulable(make_pod("train", namespace="research", profile="7g.80gb"))
    kinds = [("Node", n) for n in nodes] + [("Pod", busy), ("Pod", waiting)]
    return [make_mig_config_map(text)] + [{"apiVersion": "v1", "kind": k, **o} for k, o in kinds]


def plan_summary(changes: list[tuple[str, str, list[tuple[int, list[str]]], list[str]]]) -> Any:
    return sorted(changes)


class ClusterApi:
    """The controller's port over the same objects (what kube-apiserver would answer)."""

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = copy.deepcopy(objects)

    def _of(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def read_config_map(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._of("ConfigMap")[0])

    def update_config_map(
        self, mutate: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
        current = self._of("ConfigMap")[0]
        wanted = mutate(copy.deepcopy(current))
        if wanted is not None:
            current.clear()
            current.update(wanted)
        return copy.deepcopy(wanted)

    def list_pending_pods(self, scheduler_name: str) -> list[dict[str, Any]]:
        return [p for p in self._of("Pod") if not p["spec"].get("nodeName")]

    def read_node(self, name: str) -> dict[str, Any] | None:
        return next((n for n in self._of("Node") if n["metadata"]["name"] == name), None)

    def list_pods_on_node(self, name: str) -> list[dict[str, Any]]:
        return [p for p in self._of("Pod") if p["spec"].get("nodeName") == name]

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        raise AssertionError("a dry run labels nothing")

    def record_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        pass

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool:
        return False


class Leader:
    is_leader = True

    def try_acquire_or_renew(self) -> bool:
        return True

    def release(self) -> None:
        pass


def controller_plan(objects: list[dict[str, Any]]) -> Any:
    api = ClusterApi(objects)
    index = new_index()
    index.set_mig_configs(mig_configs_from(api.read_config_map(), "config.yaml"))
    index.replace_nodes(node_facts_from_raw(n) for n in api._of("Node"))
    index.replace_pods(p for p in map(pod_facts_from_raw, api._of("Pod")) if p is not None)
    settings = ExtenderSettings(repartition=RepartitionSettings(enabled=True, min_pending_s=0))
    step = RepartitionController(api, Leader(), index, settings, clock=lambda: NOW).run_once()[0]
    assert step.kind is StepKind.START
    record = parse_record(api.read_config_map()["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record.plan is not None
    assert step.plan is not None
    return plan_summary(
        [
            (
                change.node,
                change.config_name,
                [(g.index, sorted(p.profile for p in g.new)) for g in change.gpus],
                list(change.serves),
            )
            for change in step.plan.changes
        ]
    )


def cli_plan(objects: list[dict[str, Any]], tmp_path: Path, capsys: Any) -> Any:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    assert main(["plan", "--cluster-file", str(path), "-o", "json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["step"] == "start"
    return plan_summary(
        [
            (
                c["node"],
                c["configName"],
                [(g["index"], sorted(p["profile"] for p in g["after"])) for g in c["gpus"]],
                c["serves"],
            )
            for c in answer["changes"]
        ]
    )


def demo_plan(objects: list[dict[str, Any]], tmp_path: Path) -> Any:
    path = tmp_path / "demo-cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    step = decide_on_cluster_file(path, NOW)
    assert step.kind is StepKind.START and step.plan is not None
    return plan_summary(
        [
            (
                c.node,
                c.config_name,
                [(g.index, sorted(p.profile for p in g.new)) for g in c.gpus],
                list(c.serves),
            )
            for c in step.plan.changes
        ]
    )


def sim_plan(objects: list[dict[str, Any]]) -> Any:
    parsed = load_cluster_text(yaml.safe_dump_all(objects))
    configs = read_config_map(parsed.config_maps[0], "config.yaml").configs
    states = node_states(parsed.nodes, parsed.pods, configs)
    waiting = next(p for p in parsed.pods if not p["spec"].get("nodeName"))
    result = planned_reshape(states, demand_of(waiting), PlanSettings(min_pending_s=0))
    assert result is not None
    return plan_summary(
        [
            (
                c.node,
                c.config_name,
                [(g.index, sorted(p.profile for p in g.new)) for g in c.gpus],
                list(c.serves),
            )
            for c in result.changes
        ]
    )


def test_the_controller_the_plan_command_the_demo_and_the_simulator_plan_alike(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    objects = cluster_objects()
    expected = controller_plan(objects)
    (node, _, gpus, serves) = expected[0]
    assert (node, gpus, serves) == ("gpu-b", [(0, ["7g.80gb"])], ["research/train"])
    assert cli_plan(objects, tmp_path, capsys) == expected
    assert demo_plan(objects, tmp_path) == expected
    assert sim_plan(objects) == expected
