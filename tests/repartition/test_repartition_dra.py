"""Re-partitioning leaves DRA nodes alone: a DynamicMIG node because NVIDIA's DRA driver carves
on prepare, a static-MIG DRA node because the driver reads its layout only when it starts.
The decision records why, and ``migslice plan`` prints it."""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.controller import RepartitionController
from extender.settings import ExtenderSettings, RepartitionSettings
from extender.state import new_index
from harness import dra_slices as gen
from harness.builders import make_mig_config_map, make_node, make_pod, unschedulable
from migslice.cli import main
from migslice.names import CARVE_ANNOTATION, MODE_CARVE
from migslice.objects import node_facts_from_raw
from migslice.objects.carve_handshake import render_carve_request
from migslice.objects.clusterfile import ClusterObjects
from migslice.repartition import (
    ABORTED,
    CarveSettings,
    ControllerSettings,
    PlanSettings,
    RepartitionRecord,
    StepKind,
    decide,
    pending_pods,
    plan_carve,
)
from migslice.repartition.modes import (
    DRA_AND_DEVICE_PLUGIN,
    DRA_DYNAMIC,
    DRA_STATIC,
    dra_exclusion,
)
from migslice.repartition.snapshot import node_states
from tests.carve_builders import carve_node, carve_node_raw, gpu, waiting
from tests.dra_objects import (
    maintenance_rule,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)
from tests.repartition.test_repartition_controller import (
    NOW,
    Elector,
    FakeApi,
    RefusingApi,
    controller,
)


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


def _turned_dra(objects: ClusterObjects, name: str) -> ClusterObjects:
    """``objects`` after node ``name`` became a static-MIG DRA node of the same layout: its
    device plugin gone (no nvidia.com allocatable), its labels kept, its slices published."""
    kept = [n for n in objects.nodes if n["metadata"]["name"] != name]
    old = next(n for n in objects.nodes if n["metadata"]["name"] == name)
    node = {"apiVersion": "v1", "kind": "Node", **make_dra_node(name, **old["metadata"]["labels"])}
    slices = gen.node_slices(
        name,
        f"uid-{name}",
        [gen.a100(0)],
        dynamic=False,
        layouts=[[("1g.10gb", start) for start in range(7)]],
    )
    return replace(
        objects,
        nodes=(*kept, node),
        resource_slices=(*objects.resource_slices, *slices),
    )


def test_a_planned_node_that_turned_dra_before_its_label_is_not_labelled() -> None:
    """The plan was written while gpu-a was a device-plugin node; its label waits for the
    mig-parted file to reach MIG Manager, and meanwhile the node became a DRA node. The
    re-check before the label drops it: no nvidia.com/mig.config on a DRA node."""
    objects, started, now, settings = _started_on_gpu_a()
    turned = _turned_dra(objects, "gpu-a")
    states = node_states(turned.nodes, turned.pods, {}, dra=turned)
    assert {s.name: s for s in states}["gpu-a"].dra is not None
    step = decide(
        started.record,
        states,
        pending_of(turned),
        file_configs=tuple(started.configs),
        now=now + settings.config_propagation_s + 1,
        settings=settings,
    )
    assert step.labels == ()
    assert step.kind is StepKind.ABORT
    assert DRA_STATIC in step.outcomes[0].detail


def test_the_controller_reads_a_plan_node_fresh_with_its_dra_slices() -> None:
    """The controller reads the nodes of the plan in flight from the API server before it
    labels them; that read keeps the node's ResourceSlices (the extender's cache), so a node
    that became a DRA node between the plan and its label is seen as one and not labelled."""
    api = FakeApi()
    index = new_index()
    index.replace_nodes([node_facts_from_raw(api.node)])
    clock = [NOW]
    settings = ExtenderSettings(
        repartition=RepartitionSettings(enabled=True, config_propagation_s=90.0)
    )
    ctl = RepartitionController(
        api, Elector(), index, settings, clock=lambda: clock[0], monotonic=lambda: clock[0]
    )
    assert [s.kind for s in ctl.run_once()] == [StepKind.START]  # the label waits for the file
    node = {"apiVersion": "v1", "kind": "Node", **api.node}
    turned = _turned_dra(ClusterObjects(nodes=(node,)), "gpu-a")
    api.node = dict(turned.nodes[0])
    index.upsert_node(node_facts_from_raw(api.node))
    index.load_dra(replace(turned, device_classes=tuple(migslice_classes())))
    clock[0] = NOW + 100
    api.log.clear()
    steps = ctl.run_once()
    assert not any(line.startswith("label") for line in api.log)
    assert [s.kind for s in steps] == [StepKind.ABORT]
    assert DRA_STATIC in steps[0].outcomes[0].detail


def test_a_dra_node_whose_slices_are_gone_while_a_claim_holds_its_gpu_is_not_planned() -> None:
    """A static-MIG DRA node whose kubelet plugin is restarting: the kubelet has withdrawn its
    ResourceSlices, but a running pod's claim still holds one of its MIG devices. Its Node has
    no device-plugin allocatable and keeps the labels MIG Manager and GFD set; read as a
    device-plugin node known by counts, with nothing held, every GPU of it would be re-shaped
    under the running pod. The claim allocated in its pool says whose the GPUs are."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": "all-1g.10gb",
        "nvidia.com/mig.config.state": "success",
    }
    node = {"apiVersion": "v1", "kind": "Node", **make_dra_node("dra-static", **labels)}
    claim = make_claim("small", allocated=[("dra-static", "gpu-0-mig-1g10gb-19-0")])
    running = {
        "apiVersion": "v1",
        "kind": "Pod",
        **make_claim_pod("small", {"gpu": "small"}, node_name="dra-static", phase="Running"),
    }
    objects = replace(
        dra_objects(),
        nodes=(node,),
        pods=(*dra_objects().pods, running),
        resource_slices=(),
        resource_claims=(claim,),
    )
    states, step = _decide(objects)
    assert step.kind is StepKind.WAIT, step.reason
    assert step.plan.changes == ()
    left = dra_exclusion(states[0])
    assert left is not None and "a DRA node (ResourceSlices incomplete)" in left.message
    # the plan records that reason (migslice plan, why), not "GPU model unknown": the node,
    # its pool unread, has no model either
    assert dict(step.plan.skipped_nodes)["dra-static"] == left.message


@pytest.mark.parametrize(
    ("held", "tainted"),
    [
        (["gpu-0-mig-1g10gb-19-0"], ["gpu-0-mig-3g40gb-9-4"]),  # the GPU in use
        ([], ["gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"]),  # the GPU idle
    ],
)
def test_a_dra_node_whose_only_fitting_devices_are_tainted_is_no_free_instance(
    held: list[str], tainted: list[str]
) -> None:
    """A 3g.40gb pod waits; the DynamicMIG node's only 3g.40gb placements the claims leave are
    tainted by an admin's DeviceTaintRules, so the extender's filter fails it there
    (DEVICES_TAINTED). The node's free counts know no taints: read as a free instance, the
    pod was "left to the scheduler" and gpu-a, which a re-partition would give it, was never
    planned; the pod waited for the taints to go."""
    objects = dra_objects()
    dynamic = gen.node_slices("dra-dynamic", "uid-dra-dynamic", [gen.a100(0)])
    claims = [make_claim("small", allocated=[("dra-dynamic", d)]) for d in held]
    objects = replace(
        objects,
        nodes=tuple(n for n in objects.nodes if n["metadata"]["name"] != "dra-static"),
        resource_slices=tuple(dynamic),
        resource_claims=tuple(claims),
        device_taint_rules=tuple(maintenance_rule("dra-dynamic", d) for d in tainted),
    )
    states, step = _decide(objects)
    dra = {s.name: s for s in states}["dra-dynamic"].dra
    assert dra is not None and dra.pool.tainted == frozenset(tainted)
    assert step.kind is StepKind.START
    assert [c.node for c in step.plan.changes] == ["gpu-a"]
    assert "research/train-1" not in dict(step.plan.unserved)


def _labelled(objects: ClusterObjects, name: str, config: str, state: str) -> ClusterObjects:
    """``objects`` with node ``name``'s MIG Manager labels set to ``config`` and ``state``."""
    nodes = []
    for raw in objects.nodes:
        if raw["metadata"]["name"] == name:
            labels = {
                **raw["metadata"]["labels"],
                "nvidia.com/mig.config": config,
                "nvidia.com/mig.config.state": state,
            }
            raw = {**raw, "metadata": {**raw["metadata"], "labels": labels}}
        nodes.append(raw)
    return replace(objects, nodes=tuple(nodes))


def _started_on_gpu_a() -> tuple[ClusterObjects, Any, float, ControllerSettings]:
    """A plan started on gpu-a of :func:`dra_objects`: the objects, the START step, its time
    and the settings."""
    objects = dra_objects()
    settings = ControllerSettings(plan=PlanSettings(min_pending_s=0))
    now = time.time()
    states = node_states(objects.nodes, objects.pods, {}, dra=objects)
    started = decide(
        RepartitionRecord(),
        states,
        pending_of(objects),
        file_configs=(),
        now=now,
        settings=settings,
    )
    assert started.kind is StepKind.START and [c.node for c in started.plan.changes] == ["gpu-a"]
    return objects, started, now, settings


def _applied_to_gpu_a() -> tuple[ClusterObjects, Any, float, ControllerSettings]:
    """gpu-a labelled with a plan's config: the objects before the label, the APPLY step, its
    time and the settings."""
    objects, started, now, settings = _started_on_gpu_a()
    states = node_states(objects.nodes, objects.pods, {}, dra=objects)
    now += settings.config_propagation_s + 1
    applied = decide(
        started.record,
        states,
        pending_of(objects),
        file_configs=tuple(started.configs),
        now=now,
        settings=settings,
    )
    assert [label.node for label in applied.labels] == ["gpu-a"]
    return objects, applied, now, settings


def test_a_failed_plan_on_a_node_that_turned_dra_is_not_rolled_back() -> None:
    """MIG Manager failed the plan's config on gpu-a, which meanwhile became a DRA node: the
    driver read its layout when it started, so setting the previous config back (MIG Manager
    re-shaping the GPUs under it) is not migslice's to do. The label is left, and the Event
    says why."""
    objects, applied, now, settings = _applied_to_gpu_a()
    config = applied.labels[0].config_name
    turned = _turned_dra(_labelled(objects, "gpu-a", config, "failed"), "gpu-a")
    states = node_states(turned.nodes, turned.pods, {}, dra=turned)
    step = decide(
        applied.record,
        states,
        pending_of(turned),
        file_configs=(config, "all-1g.10gb"),
        now=now + 10,
        settings=settings,
    )
    assert step.labels == ()
    assert step.record.restores == ()
    (event,) = [e for e in step.events if e.node == "gpu-a"]
    assert "label left" in event.message and "DRA" in event.message


def test_a_roll_back_still_due_on_a_node_that_turned_dra_is_dropped() -> None:
    """The roll back was due (a refused patch, kept in the record) when gpu-a became a DRA
    node: the record drops it instead of re-shaping the GPUs under NVIDIA's driver."""
    objects, applied, now, settings = _applied_to_gpu_a()
    config = applied.labels[0].config_name
    failed = _labelled(objects, "gpu-a", config, "failed")
    states = node_states(failed.nodes, failed.pods, {}, dra=failed)
    files = (config, "all-1g.10gb")
    closed = decide(
        applied.record,
        states,
        pending_of(failed),
        file_configs=files,
        now=now + 10,
        settings=settings,
    )
    assert [r.node for r in closed.record.restores] == ["gpu-a"]
    turned = _turned_dra(failed, "gpu-a")
    states = node_states(turned.nodes, turned.pods, {}, dra=turned)
    step = decide(
        closed.record,
        states,
        pending_of(turned),
        file_configs=files,
        now=now + 20,
        settings=settings,
    )
    assert step.kind is StepKind.RESTORE
    assert step.record.restores == ()
    assert "DRA" in step.reason


def test_the_controller_does_not_retry_a_roll_back_on_a_node_that_turned_dra() -> None:
    """The roll back was refused and kept in the record; before the next round gpu-a became a
    DRA node. The controller's retry (ahead of the round's decision) must not set the
    previous config back under NVIDIA's driver, and the round drops it from the record."""
    api = RefusingApi()
    index = new_index()
    loop = controller(api, index=index)
    loop.run_once()
    ours = api.node["metadata"]["labels"]["nvidia.com/mig.config"]
    api.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    index.replace_nodes([node_facts_from_raw(api.node)])
    api.refuse = 1
    loop.run_once()
    record = json.loads(api.config_map["metadata"]["annotations"]["migslice.io/repartition"])
    assert record["restores"] == {"gpu-a": {"config": "all-1g.10gb", "replaces": ours}}
    node = {"apiVersion": "v1", "kind": "Node", **api.node}
    turned = _turned_dra(ClusterObjects(nodes=(node,)), "gpu-a")
    api.node = dict(turned.nodes[0])
    index.upsert_node(node_facts_from_raw(api.node))
    index.load_dra(replace(turned, device_classes=tuple(migslice_classes())))
    api.log.clear()
    loop.run_once()
    assert not [line for line in api.log if line.startswith("label")]
    assert api.node["metadata"]["labels"]["nvidia.com/mig.config"] == ours
    record = json.loads(api.config_map["metadata"]["annotations"]["migslice.io/repartition"])
    assert "restores" not in record


def test_a_carve_planned_on_a_node_that_turned_dra_is_aborted_saying_why() -> None:
    """The carve was planned while gpu-a was a carve-mode device-plugin node; before it was
    sent the node became a static-MIG DRA node. The re-check aborts it and names DRA (it
    said "the node agent's layout no longer agrees with allocatable")."""
    layout = [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")]
    busy = ["0:3g.40gb@4"]
    settings = ControllerSettings(carve=CarveSettings(cooldown_s=60))
    first = decide(
        RepartitionRecord(),
        [carve_node("gpu-a", layout, busy=busy)],
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW,
        settings=settings,
    )
    assert first.kind is StepKind.START
    raw = {"apiVersion": "v1", "kind": "Node", **carve_node_raw("gpu-a", layout, busy=busy)}
    turned = _turned_dra(ClusterObjects(nodes=(raw,)), "gpu-a")
    states = node_states(turned.nodes, turned.pods, {}, dra=turned)
    step = decide(
        first.record, states, [], file_configs=frozenset(), now=NOW + 1, settings=settings
    )
    assert step.kind is StepKind.ABORT
    assert DRA_STATIC in step.reason


def test_a_carve_asked_of_a_node_that_turned_dra_before_its_agent_took_it_up_is_withdrawn() -> None:
    """The carve was asked while gpu-a was a carve-mode device-plugin node; before its agent
    took it up the node became a static-MIG DRA node, whose instances DRA claims hold without
    any pod request the agent counts. The request is withdrawn at once (it waited for the
    deadline, the node closed to pods, and an agent that came back carved it)."""
    layout = [gpu("1g.10gb@0", "1g.10gb@1", "3g.40gb@4")]
    busy = ["0:3g.40gb@4"]
    settings = ControllerSettings(carve=CarveSettings(cooldown_s=60))
    first = decide(
        RepartitionRecord(),
        [carve_node("gpu-a", layout, busy=busy)],
        [waiting("team-a/big", "3g.40gb")],
        file_configs=frozenset(),
        now=NOW,
        settings=settings,
    )
    second = decide(
        first.record,
        [carve_node("gpu-a", layout, busy=busy)],
        [],
        file_configs=frozenset(),
        now=NOW + 1,
        settings=settings,
    )
    assert second.kind is StepKind.APPLY
    (write,) = second.carve_writes
    assert write.request is not None
    raw = {"apiVersion": "v1", "kind": "Node", **carve_node_raw("gpu-a", layout, busy=busy)}
    turned = _turned_dra(ClusterObjects(nodes=(raw,)), "gpu-a")
    (node,) = turned.nodes
    node["metadata"].setdefault("annotations", {})[CARVE_ANNOTATION] = render_carve_request(
        write.request
    )
    states = node_states(turned.nodes, turned.pods, {}, dra=turned)
    step = decide(
        second.record, states, [], file_configs=frozenset(), now=NOW + 20, settings=settings
    )
    assert [(s.node, s.outcome) for s in step.carve_outcomes] == [("gpu-a", ABORTED)]
    assert DRA_STATIC in step.carve_outcomes[0].detail
    assert [(w.node, w.request) for w in step.carve_writes] == [("gpu-a", None)]


def _served_by_both(objects: ClusterObjects) -> ClusterObjects:
    """``objects`` with NVIDIA's DRA driver publishing gpu-a's GPU too, beside its device
    plugin (gpu-a keeps its ``nvidia.com/mig-1g.10gb`` allocatable), and a claim allocated
    from those slices: a pod's MIG device migslice's device-plugin view cannot see. gpu-a's
    node agent reports its seven idle 1g.10gb, so either path could re-shape it."""
    reported = carve_node_raw("gpu-a", [gpu(*(f"1g.10gb@{s}" for s in range(7)))], mode=None)
    nodes = [n for n in objects.nodes if n["metadata"]["name"] != "gpu-a"]
    slices = gen.node_slices(
        "gpu-a",
        "uid-gpu-a",
        [gen.a100(0)],
        dynamic=False,
        layouts=[[("1g.10gb", start) for start in range(7)]],
    )
    claim = make_claim("on-both", allocated=[("gpu-a", "gpu-0-mig-1g10gb-19-0")])
    return replace(
        objects,
        nodes=(*nodes, {"apiVersion": "v1", "kind": "Node", **reported}),
        resource_slices=(*objects.resource_slices, *slices),
        resource_claims=(*objects.resource_claims, claim),
    )


@pytest.mark.parametrize("mode", ["mig-manager", MODE_CARVE], ids=["mig-manager", "carve"])
def test_a_node_served_by_the_device_plugin_and_the_dra_driver_is_never_re_partitioned(
    mode: str,
) -> None:
    """gpu-a's idle GPU would serve the waiting 3g.40gb pod, but NVIDIA's DRA driver publishes
    the same GPU and a claim holds one of its MIG devices: the device-plugin view migslice
    reads the node by sees neither, and a new layout would wipe the claim's instance. Neither
    path plans it, and the plan says why."""
    objects = _served_by_both(dra_objects())
    states, step = _decide(objects, mode=mode)
    gpu_a = {s.name: s for s in states}["gpu-a"]
    assert gpu_a.dra is None and gpu_a.gpus[0].is_idle  # read as a device-plugin node
    assert step.plan is None or step.plan.changes == ()
    assert step.carve_plan is None or step.carve_plan.changes == ()
    carve = plan_carve(
        states, pending_of(objects), settings=CarveSettings(min_pending_s=0, default_mode=mode)
    )
    assert carve.changes == ()
    if mode == MODE_CARVE:
        assert dict(carve.skipped_nodes)["gpu-a"] == DRA_AND_DEVICE_PLUGIN
    else:
        assert step.plan is not None
        assert dict(step.plan.skipped_nodes)["gpu-a"] == DRA_AND_DEVICE_PLUGIN
        assert "research/train-1" in dict(step.plan.unserved)


def test_migslice_plan_prints_why_a_node_of_both_device_apis_is_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _served_by_both(dra_objects()))
    assert main(["plan", "--cluster-file", str(path), "-o", "json"]) == 0
    skipped = {s["node"]: s["reason"] for s in json.loads(capsys.readouterr().out)["skippedNodes"]}
    assert skipped["gpu-a"] == DRA_AND_DEVICE_PLUGIN
