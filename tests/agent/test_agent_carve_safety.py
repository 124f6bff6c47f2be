"""The carving agent against the windows around it: the device plugin's restart and the
kubelet's report of it, pods bound while it carves, numbers NVML would wrap, a device plugin
the API will not let it restart, and a roll back beside a pod still starting. Each case once
let a pod be given a destroyed device, destroyed an instance a pod held, or left a GPU
half-changed (docs/repartition.md, "Carve mode")."""

from __future__ import annotations

import json

import pytest

from migslice.kube.transport import ApiError
from migslice.names import CARVE_STATE_ANNOTATION
from migslice.objects import node_facts_from_raw
from migslice.objects.carve_handshake import (
    CarveAnnotationError,
    CarveGpu,
    CarvePhase,
    CarveRequest,
    Doomed,
    Slot,
    parse_carve_request,
    render_carve_request,
)
from tests.carve_agent_harness import (
    MemoryNode,
    balanced,
    carver,
    layout,
    request,
    uuid_of,
)
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary, installed

A100 = "NVIDIA A100-SXM4-80GB"


def merge_1g(library: FakeNvmlLibrary, plan: str = "p") -> CarveRequest:
    """Destroy both idle 1g.10gb of :func:`balanced` and create a 3g.40gb at 0."""
    doomed = [("1g.10gb", s, uuid_of(library, 0, "1g.10gb", s)) for s in (0, 1)]
    return request(plan, 0, doomed, [("3g.40gb", 0)], [("3g.40gb", 0), ("3g.40gb", 4)])


def rolled_back_merge(plugin_lag_s: float) -> tuple[FakeNvmlLibrary, MemoryNode, str]:
    """:func:`merge_1g` rolled back: a container starts on the second 1g.10gb as the first is
    destroyed; the kubelet reports the new plugin's devices ``plugin_lag_s`` after it is
    Ready. The library, the node and what the pass said."""
    library = balanced()
    node = MemoryNode(library)
    node.plugin_lag_s = plugin_lag_s
    node.hold("running", "3g.40gb")
    second = library.gpus[0].instances[2]  # 1g.10gb at 1

    def container_starts(call: str) -> None:
        if call == "nvmlGpuInstanceDestroy":
            second.processes = 1

    with installed(library):
        node.ask(merge_1g(library))
        library.on_call = container_starts
        said = carver(node, timeout_s=60).run_once()
    return library, node, said


def test_success_waits_for_the_kubelets_report_of_the_new_device_plugin() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.plugin_lag_s = 6.0
    node.hold("running", "3g.40gb")
    with installed(library):
        node.ask(merge_1g(library))
        said = carver(node, timeout_s=60).run_once()
    assert said == "carved plan p"
    assert node.status is not None and node.status.phase == CarvePhase.SUCCESS
    assert node.clock.elapsed_s >= 6.0  # not before the kubelet reported the new devices
    assert node_facts_from_raw(node.raw).allocatable == (("nvidia.com/mig-3g.40gb", 2),)


def test_a_roll_back_that_restores_every_count_still_waits_for_the_new_device_plugin() -> None:
    """Rolled back, the node has the counts it had (new UUIDs for the instances made again):
    allocatable matches at once, from before the restart."""
    library, node, said = rolled_back_merge(plugin_lag_s=6.0)
    assert "rolled back" in said
    assert "did not advertise" not in said
    assert layout(library) == [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]
    assert node.clock.elapsed_s >= 6.0


def test_counts_the_kubelet_never_reports_again_are_taken_once_the_plugin_has_settled() -> None:
    """The kubelet reports node status only when it changed (or every few minutes): counts
    equal before and after are current once the new plugin has been Ready 20 s."""
    _, node, said = rolled_back_merge(plugin_lag_s=1000.0)  # no report within the timeout
    assert "rolled back" in said and "did not advertise" not in said
    assert 20.0 <= node.clock.elapsed_s < 60.0


def test_a_device_plugin_pod_that_never_comes_back_is_a_failure_not_a_success() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    node.device_plugin_ready_at = lambda replaced: None  # type: ignore[method-assign]
    with installed(library):
        node.ask(merge_1g(library))
        said = carver(node, timeout_s=30).run_once()
    assert node.status is not None and node.status.phase == CarvePhase.FAILED
    assert "did not advertise the new devices within 30s" in said
    assert "no new device plugin pod is Ready on the node" in said


def test_a_pod_bound_while_the_agent_destroys_keeps_the_instance_it_may_hold() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    destroys = []

    def binds(call: str) -> None:
        if call == "nvmlGpuInstanceDestroy":
            destroys.append(call)
            if len(destroys) == 1:
                node.hold("late", "1g.10gb")  # given the 1g.10gb at 1, not started

    with installed(library):
        node.ask(merge_1g(library))
        library.on_call = binds
        said = carver(node).run_once()
    assert ("1g.10gb", 1) not in [(i.profile, i.start) for i in library.destroyed]
    assert "may be held: pods on the node hold 1 x 1g.10gb" in said
    assert "rolled back" in said


@pytest.mark.parametrize(
    ("field", "value"),
    [("index", 2**32), ("start", 2**32 + 3), ("index", 256)],
    ids=["index-wraps", "start-wraps", "index-past-the-bound"],
)
def test_numbers_nvml_would_wrap_are_refused_when_read(field: str, value: int) -> None:
    good = CarveRequest("p", (CarveGpu(0, (), (Slot(3, "1g.10gb"),), (Slot(3, "1g.10gb"),)),))
    document = json.loads(render_carve_request(good))
    target = document["gpus"][0] if field == "index" else document["gpus"][0]["create"][0]
    target[field] = value
    with pytest.raises(CarveAnnotationError, match=f"{field}={value}; expected an integer from"):
        parse_carve_request(json.dumps(document))


def test_a_journal_naming_a_gpu_nvml_does_not_report_is_rolled_back_without_touching_gpu_0() -> (
    None
):
    """Written by someone who may patch the Node: a roll back of GPU 9 on a one-GPU node."""
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    node.hold("pulling-image", "1g.10gb")
    journal = {
        "version": "v1",
        "plan": "x",
        "state": "rolling-back",
        "changed": True,
        "gpus": [{"index": 9, "create": [{"profile": "1g.10gb", "start": 0}]}],
    }
    node.raw["metadata"]["annotations"][CARVE_STATE_ANNOTATION] = json.dumps(journal)
    with installed(library):
        said = carver(node).run_once()
    assert library.destroyed == []
    assert "GPU 9: not a MIG GPU NVML reports; left" in said
    assert node.status is not None and node.status.phase == CarvePhase.FAILED


def test_a_device_plugin_the_api_will_not_let_the_agent_restart_closes_the_journal() -> None:
    library = balanced()

    class Forbidden(MemoryNode):
        def restart_device_plugin(self) -> frozenset[str]:
            raise ApiError(403, 'pods "nvidia-device-plugin-x" is forbidden')

    node = Forbidden(library)
    node.hold("running", "3g.40gb")
    with installed(library):
        node.ask(merge_1g(library))
        said = carver(node).run_once()
    assert node.status is not None and node.status.phase == CarvePhase.FAILED
    assert "the device plugin could not be restarted (HTTP 403" in said
    assert "--device-plugin-selector" in said
    assert layout(library) == [("3g.40gb", 0, True), ("3g.40gb", 4, True)]


def test_an_api_server_away_during_the_restart_leaves_the_journal_for_the_next_pass() -> None:
    library = balanced()
    away = [True]

    class Away(MemoryNode):
        def restart_device_plugin(self) -> frozenset[str]:
            if away[0]:
                raise ApiError(503, "the server is currently unable to handle the request")
            return super().restart_device_plugin()

    node = Away(library)
    node.hold("running", "3g.40gb")
    with installed(library):
        node.ask(merge_1g(library))
        with pytest.raises(ApiError):
            carver(node).run_once()
        assert node.status is not None and node.status.phase == CarvePhase.PENDING
        away[0] = False
        assert carver(node).run_once() == "carved plan p"
    assert node.status.phase == CarvePhase.SUCCESS  # type: ignore[union-attr]


def test_a_roll_back_before_the_plugin_restart_destroys_its_own_new_instances() -> None:
    """No pod can hold an instance the device plugin never advertised: a pod elsewhere on the
    node still starting on an idle 3g.40gb does not pin the 3g.40gb the plan just made."""
    library = FakeNvmlLibrary(
        [
            FakeGpu(
                A100,
                "A100-80GB",
                instances=[
                    FakeInstance("3g.40gb", 4, processes=1),
                    FakeInstance("1g.10gb", 0),
                    FakeInstance("1g.10gb", 1),
                ],
            ),
            FakeGpu(A100, "A100-80GB", instances=[FakeInstance("3g.40gb", 0)]),
            FakeGpu(A100, "A100-80GB", instances=[FakeInstance("1g.10gb", 0)]),
        ]
    )
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    node.hold("pulling-image", "3g.40gb")  # the idle 3g.40gb on GPU 1
    later = library.gpus[2].instances[0]

    def starts(call: str) -> None:
        if call == "nvmlGpuInstanceCreateComputeInstance":
            later.processes = 1  # the 1g.10gb on GPU 2 the plan would destroy starts

    with installed(library):

        def u(gpu: int, start: int) -> str:
            return uuid_of(library, gpu, "1g.10gb", start)

        merge = CarveGpu(
            0,
            (Doomed(0, "1g.10gb", u(0, 0)), Doomed(1, "1g.10gb", u(0, 1))),
            (Slot(0, "3g.40gb"),),
            (Slot(0, "3g.40gb"), Slot(4, "3g.40gb")),
        )
        whole = CarveGpu(2, (Doomed(0, "1g.10gb", u(2, 0)),), (Slot(0, "7g.80gb"),), ())
        whole = CarveGpu(2, whole.destroy, whole.create, (Slot(0, "7g.80gb"),))
        node.ask(CarveRequest("p", (merge, whole)))
        library.on_call = starts
        said = carver(node).run_once()
    assert "rolled back" in said
    assert layout(library) == [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]
    assert "left 3g.40gb@0" not in said


def test_a_plan_that_would_create_an_instance_that_exists_is_refused_before_any_change() -> None:
    """Its roll back would destroy the "created" instance, checked for processes alone before
    the device plugin restart: a pod still starting on it would lose its device."""
    library = FakeNvmlLibrary(
        [
            FakeGpu(
                A100,
                "A100-80GB",
                instances=[
                    FakeInstance("1g.10gb", 0, holder="team-a/pulling-image"),
                    FakeInstance("1g.20gb", 4),
                ],
            )
        ]
    )
    node = MemoryNode(library)
    node.hold("pulling-image", "1g.10gb")  # given the 1g.10gb at 0, not started
    with installed(library):
        doomed = [("1g.20gb", 4, uuid_of(library, 0, "1g.20gb", 4))]
        # The layout also names what is there: the carve then fails to verify and rolls back.
        layout_after = [("1g.10gb", 0), ("1g.10gb", 1)]
        node.ask(request("p", 0, doomed, [("1g.10gb", 0)], layout_after))
        said = carver(node).run_once()
    assert [(i.profile, i.start) for i in library.destroyed] == []
    assert "GPU 0: 1g.10gb@0 exists already; the plan would create it" in said
    assert "nothing was changed" in said
