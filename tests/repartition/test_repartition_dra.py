"""Re-partitioning leaves DRA nodes alone: a DynamicMIG node because NVIDIA's DRA driver carves
on prepare, a static-MIG DRA node because the driver reads its layout only when it starts.
The decision records why, and ``migslice plan`` prints it."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import dra_slices as gen
from harness.builders import make_mig_config_map, make_node, make_pod, unschedulable
from migslice.cli import main
from migslice.names import MODE_CARVE
from migslice.objects.clusterfile import ClusterObjects
from migslice.repartition import (
    CarveSettings,
    ControllerSettings,
    PlanSettings,
    RepartitionRecord,
    StepKind,
    decide,
    pending_pods,
    plan_carve,
)
from migslice.repartition.modes import DRA_DYNAMIC, DRA_STATIC
from migslice.repartition.snapshot import node_states
from tests.dra_objects import make_claim, make_dra_node, migslice_classes


def dra_objects() -> ClusterObjects:
    """An idle static-MIG DRA node of seven 1g.10gb, a DynamicMIG node whose GPU a claim holds
    whole (a 7g.80gb), and the device-plugin node gpu-a with one idle GPU."""
    static = gen.node_slices(
        "dra-static",
        "uid-dra-static",
        [gen.a100(0)],
        dynamic=False,
        layouts=[[("1g.10gb", start) for start in range(7)]],
    )
    dynamic = gen.node_slices("dra-dynamic", "uid-dra-dynamic", [gen.a100(0)])
    held = make_claim("big", profile="7g.80gb", allocated=[("dra-dynamic", "gpu-0-mig-7g80gb-0-0")])
    nodes = [
        {"apiVersion": "v1", "kind": "Node", **make_dra_node("dra-static")},
        {"apiVersion": "v1", "kind": "Node", **make_dra_node("dra-dynamic")},
        {
            "apiVersion": "v1",
            "kind": "Node",
            **make_node("gpu-a", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        },
    ]
    return ClusterObjects(
        nodes=tuple(nodes),
        pods=(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                **unschedulable(make_pod("train-1", namespace="research", profile="3g.40gb")),
            },
        ),
        config_maps=(make_mig_config_map(),),
        resource_slices=tuple(static + dynamic),
        resource_claims=(held,),
        device_classes=tuple(migslice_classes()),
    )


def pending_of(objects: ClusterObjects) -> list[Any]:
    now = datetime.datetime.fromtimestamp(time.time(), datetime.UTC)
    return list(pending_pods(objects.pods, now, "migslice-scheduler"))


def _decide(objects: ClusterObjects, mode: str = "mig-manager") -> Any:
    states = node_states(objects.nodes, objects.pods, {}, dra=objects)
    settings = ControllerSettings(
        plan=PlanSettings(min_pending_s=0), carve=CarveSettings(min_pending_s=0, default_mode=mode)
    )
    step = decide(
        RepartitionRecord(),
        states,
        pending_of(objects),
        file_configs=(),
        now=time.time(),
        settings=settings,
    )
    return states, step


def test_the_mig_manager_path_plans_around_dra_nodes_and_records_why() -> None:
    states, step = _decide(dra_objects())
    by_name = {s.name: s for s in states}
    assert by_name["dra-static"].dra is not None and by_name["dra-static"].gpus[0].is_idle
    assert step.kind is StepKind.START
    assert [c.node for c in step.plan.changes] == ["gpu-a"]
    skipped = dict(step.plan.skipped_nodes)
    assert skipped["dra-static"] == DRA_STATIC
    assert skipped["dra-dynamic"] == DRA_DYNAMIC


def test_the_carve_path_leaves_dra_nodes_alone_too() -> None:
    objects = dra_objects()
    states, step = _decide(objects, mode=MODE_CARVE)
    assert step.carve_plan is None
    carve = plan_carve(
        states,
        pending_of(objects),
        settings=CarveSettings(min_pending_s=0, default_mode=MODE_CARVE),
    )
    assert carve.changes == ()
    skipped = dict(carve.skipped_nodes)
    assert skipped["dra-static"] == DRA_STATIC and skipped["dra-dynamic"] == DRA_DYNAMIC
    assert dict(step.plan.skipped_nodes)["dra-static"] == DRA_STATIC


def _write(tmp_path: Path, objects: ClusterObjects) -> Path:
    path = tmp_path / "cluster.yaml"
    documents = [
        *objects.config_maps,
        *objects.nodes,
        *objects.pods,
        *objects.resource_slices,
        *objects.resource_claims,
        *objects.device_classes,
    ]
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_migslice_plan_prints_why_dra_nodes_are_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, dra_objects())
    assert main(["plan", "--cluster-file", str(path)]) == 0
    out = capsys.readouterr().out
    assert "serves: research/train-1" in out
    assert f"dra-static: {DRA_STATIC}" in out and f"dra-dynamic: {DRA_DYNAMIC}" in out
    assert main(["plan", "--cluster-file", str(path), "-o", "json"]) == 0
    skipped = {s["node"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skippedNodes"]}
    assert skipped == {"dra-static": DRA_STATIC, "dra-dynamic": DRA_DYNAMIC}
