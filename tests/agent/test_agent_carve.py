"""The carving node agent over the fake libnvidia-ml (pynvml's own wrappers, the driver's
rules): carving around a busy instance, every reason to refuse or roll back, resuming after
a kill, the device plugin, the read-only gate; and the fake driver's refusals themselves."""

from __future__ import annotations

import ctypes
import datetime
import json
import subprocess
import sys

import pynvml
import pytest

from agent.carve.checks import MigWriteError
from agent.carve.nvml_writes import NvmlMig
from agent.nvml import nvml_session
from agent.service import wants_carving
from migslice.kube.transport import ApiError
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects import node_facts_from_raw, parse_layout_annotation
from migslice.objects.carve_handshake import CarvePhase, Slot
from tests.carve_agent_harness import (
    MemoryNode,
    balanced,
    carver,
    layout,
    request,
    uuid_of,
)
from tests.fake_nvml import BEFORE_R510, FakeGpu, FakeInstance, FakeNvmlLibrary, installed

BIG = [("3g.40gb", 0), ("3g.40gb", 4)]


def big_request(library: FakeNvmlLibrary, plan: str = "plan-1") -> object:
    doomed = [("1g.10gb", s, uuid_of(library, 0, "1g.10gb", s)) for s in (0, 1)]
    return request(plan, 0, doomed, [("3g.40gb", 0)], BIG)


def test_a_carve_destroys_idle_instances_creates_the_new_one_and_leaves_the_busy_one() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    with installed(library):
        busy_uuid = uuid_of(library, 0, "3g.40gb", 4)
        node.ask(big_request(library))  # type: ignore[arg-type]
        said = carver(node).run_once()
        assert uuid_of(library, 0, "3g.40gb", 4) == busy_uuid
    assert said == "carved plan plan-1"
    assert layout(library) == [("3g.40gb", 0, True), ("3g.40gb", 4, True)]
    assert [i.profile for i in library.destroyed] == ["1g.10gb", "1g.10gb"]
    assert node.statuses == [
        CarvePhase.PENDING,
        CarvePhase.PENDING,  # changed: true, right before the first NVML change
        CarvePhase.PENDING,  # advertised: true, right before the device plugin restart
        CarvePhase.SUCCESS,
    ]
    assert node.restarts == 1
    assert node_facts_from_raw(node.raw).allocatable == (("nvidia.com/mig-3g.40gb", 2),)
    published = parse_layout_annotation(node.raw["metadata"]["annotations"][LAYOUT_ANNOTATION])
    assert [(i.profile, i.start, i.busy) for i in published.gpus[0].instances] == [
        ("3g.40gb", 0, False),
        ("3g.40gb", 4, True),
    ]
    with installed(library):
        assert carver(node).run_once() == "nothing to carve"


def test_a_container_started_before_the_carve_stops_it_before_any_change() -> None:
    library = balanced()
    node = MemoryNode(library)
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        library.gpus[0].instances[2].processes = 1  # 1g.10gb@1 got a container
        said = carver(node).run_once()
    assert "1g.10gb@1 has processes running" in said
    assert said.endswith("nothing was changed")
    assert library.destroyed == []
    assert node.restarts == 0  # nothing changed: the device plugin is left alone
    assert node.statuses == [CarvePhase.PENDING, CarvePhase.FAILED]
    assert node.events[0][0] == "MigCarveFailed"


def test_a_container_started_between_two_destroys_is_spared_and_the_first_is_recreated() -> None:
    library = balanced()
    node = MemoryNode(library)
    doomed = library.gpus[0].instances[2]

    def container_starts(call: str) -> None:
        if call == "nvmlGpuInstanceDestroy":
            doomed.processes = 1

    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        first_uuid = uuid_of(library, 0, "1g.10gb", 0)
        library.on_call = container_starts
        said = carver(node).run_once()
        library.on_call = None
        assert uuid_of(library, 0, "1g.10gb", 0) not in ("", first_uuid)  # made again
    assert "rolled back" in said
    assert layout(library) == [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]
    assert doomed not in library.destroyed
    assert node.status is not None and node.status.phase == CarvePhase.FAILED
    assert node.statuses == [
        CarvePhase.PENDING,
        CarvePhase.PENDING,  # changed: true, right before the first NVML change
        CarvePhase.ROLLING_BACK,
        CarvePhase.ROLLING_BACK,  # advertised: true, right before the device plugin restart
        CarvePhase.FAILED,
    ]
    assert node.restarts == 1


def test_an_idle_instance_a_pod_may_hold_is_not_destroyed() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.hold("running", "3g.40gb")
    node.hold("starting", "1g.10gb")  # its container has not started: which 1g is unknown
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        said = carver(node).run_once()
    assert "may be held: pods on the node hold 1 x 1g.10gb and 0 of them show processes" in said
    assert library.destroyed == []


def test_an_agent_killed_between_two_nvml_calls_finishes_on_restart() -> None:
    library = balanced()
    node = MemoryNode(library)

    class Killed(BaseException):
        pass

    def kill(call: str) -> None:
        if call == "nvmlGpuInstanceCreateComputeInstance":
            raise Killed

    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        library.on_call = kill
        with pytest.raises(Killed):
            carver(node).run_once()
        library.on_call = None
        assert layout(library)[0] == ("3g.40gb", 0, False)  # a GPU instance without its CI
        assert carver(node).run_once() == "carved plan plan-1"
    assert layout(library) == [("3g.40gb", 0, True), ("3g.40gb", 4, True)]


def test_a_withdrawn_request_rolls_a_pending_carve_back() -> None:
    library = balanced()
    node = MemoryNode(library)

    class Killed(BaseException):
        pass

    def kill(call: str) -> None:
        if call == "nvmlDeviceCreateGpuInstanceWithPlacement":
            raise Killed

    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        library.on_call = kill
        with pytest.raises(Killed):
            carver(node).run_once()
        library.on_call = None
        node.ask(None)  # the controller's deadline passed
        said = carver(node).run_once()
    assert "the controller withdrew the request; rolled back" in said
    assert layout(library) == [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]


def test_a_gpu_lost_mid_carve_ends_the_carve_failed_saying_why() -> None:
    """Measured before: NVML_ERROR_GPU_IS_LOST after the first destroy escaped every pass with
    a traceback; the journal stayed pending, then rolling-back, for good, and never said why
    (the controller only saw "pending after Ns")."""
    library = balanced()
    node = MemoryNode(library)
    lost = {"on": False}

    def lose(call: str) -> None:
        if call == "nvmlGpuInstanceDestroy":
            lost["on"] = True
        elif lost["on"] and call == "nvmlDeviceGetHandleByIndex_v2":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)

    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        library.on_call = lose
        said = carver(node).run_once()
        assert "stopped rolling back plan plan-1" in said
        assert carver(node).run_once() == "nothing to carve"  # ended: no loop of retries
    status = node_facts_from_raw(node.raw).carve_status
    assert status is not None and status.phase == CarvePhase.FAILED
    assert "reading the GPUs: NVML_ERROR_GPU_IS_LOST" in status.detail
    assert node.events[-1][0] == "MigCarveFailed"


def test_nvml_not_usable_before_a_carve_refuses_it_with_nothing_changed() -> None:
    library = balanced()
    node = MemoryNode(library)
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]

        def gone(call: str) -> None:
            if call in ("nvmlInitWithFlags", "nvmlInit_v2"):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

        library.on_call = gone
        said = carver(node).run_once()
    assert "nothing was changed" in said and "NVIDIA kernel driver is not loaded" in said
    status = node_facts_from_raw(node.raw).carve_status
    assert status is not None and status.phase == CarvePhase.FAILED


def test_a_device_plugin_that_does_not_advertise_is_a_failure_said_plainly() -> None:
    library = balanced()
    node = MemoryNode(library)
    node.plugin_works = False
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        said = carver(node, timeout_s=3).run_once()
    assert "the device plugin did not advertise the new devices within 3s" in said
    assert "allocatable shows 2 x 1g.10gb, 1 x 3g.40gb; NVML has 2 x 3g.40gb" in said
    assert layout(library) == [("3g.40gb", 0, True), ("3g.40gb", 4, True)]


class FlakyNode(MemoryNode):
    """A Node whose API server fails the first look at the device plugin after each restart
    (a 503 of an API server shedding load; a read that timed out reads the same, status 0)."""

    def __init__(self, library: FakeNvmlLibrary) -> None:
        super().__init__(library)
        self.fail_next = False

    def restart_device_plugin(self) -> frozenset[str]:
        self.fail_next = True
        return super().restart_device_plugin()

    def device_plugin_ready_at(self, replaced: frozenset[str]) -> datetime.datetime | None:
        if self.fail_next:
            self.fail_next = False
            raise ApiError(503, "GET /api/v1/namespaces/gpu-operator/pods: unavailable")
        return super().device_plugin_ready_at(replaced)


def test_an_api_error_while_the_device_plugin_comes_back_is_waited_out_not_a_restart_again() -> (
    None
):
    """Before: one failed look while waiting for the new device plugin ended the pass, and the
    next pass restarted the plugin again and waited anew: on a flaky API server the plugin was
    restarted over and over and the carve outlived the controller's deadline. Now a look the
    API server does not answer is tried again within the wait."""
    library = balanced()
    node = FlakyNode(library)
    node.hold("running", "3g.40gb")
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
        said = carver(node).run_once()
    assert said == "carved plan plan-1"
    assert node.restarts == 1
    assert node.status is not None and node.status.phase == CarvePhase.SUCCESS


def test_a_node_in_mig_manager_mode_is_not_carved_and_not_even_loaded() -> None:
    library = balanced()
    node = MemoryNode(library)
    with installed(library):
        node.ask(big_request(library))  # type: ignore[arg-type]
    assert wants_carving(node_facts_from_raw(node.raw))
    node.raw["metadata"]["labels"]["migslice.io/repartition-mode"] = "mig-manager"
    assert not wants_carving(node_facts_from_raw(node.raw))
    request = node.raw["metadata"]["annotations"]["migslice.io/carve"]
    script = f"""
import json, sys
import agent.command
from agent.service import AgentService
from agent.settings import AgentSettings

class Transport:  # the API server's answers for this node
    def __init__(self, node):
        self.node = node
    def get_json(self, path, query):
        return self.node

plain = {{"metadata": {{"name": "gpu-a", "labels": {{}}, "annotations": {{}}}}}}
manager = {{"metadata": {{"name": "gpu-a",
    "labels": {{"migslice.io/repartition-mode": "mig-manager"}},
    "annotations": {{"migslice.io/carve": {json.dumps(request)!r}}}}}}}
for node in (plain, manager):
    service = AgentService(AgentSettings("gpu-a", carve=True), Transport(node), None, None)
    assert service.carve_pass() is None
loaded = [m for m in ("agent.carve", "migslice.kube.carve_node") if m in sys.modules]
assert not loaded, loaded
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=".")


@pytest.mark.parametrize(
    ("slot", "error"),
    [
        (Slot(4, "1g.10gb"), "NVML_ERROR_INSUFFICIENT_RESOURCES"),  # under the 3g
        (Slot(0, "4g.40gb"), "NVML_ERROR_INSUFFICIENT_RESOURCES"),  # 3 + 4 + 1 + 1 SM slices
    ],
    ids=["overlap", "sm-slices"],
)
def test_the_fake_driver_refuses_what_the_real_one_refuses(slot: Slot, error: str) -> None:
    with installed(balanced()), nvml_session(), pytest.raises(MigWriteError, match=error):
        NvmlMig().create(0, slot)


def test_a_start_nvml_does_not_offer_is_refused_before_nvml_is_asked() -> None:
    """A start NVML takes as a C unsigned int wraps around past 2**32 - 1 (2**32 + 3 would be
    made at 3); the agent creates only at the starts NVML's possible placements list."""
    library = balanced()
    with installed(library), nvml_session():
        for start in (2, 2**32):
            with pytest.raises(MigWriteError, match=f"at starts 0, 4 on this GPU, not {start}"):
                NvmlMig().create(0, Slot(start, "3g.40gb"))
        # The fake itself refuses it as the real driver does.
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = 2, 4
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, 2, ctypes.byref(placement))
    assert layout(library) == [("1g.10gb", 0, True), ("1g.10gb", 1, True), ("3g.40gb", 4, True)]


def test_the_fake_driver_refuses_to_destroy_an_instance_in_use() -> None:
    with installed(balanced()), nvml_session():
        with pytest.raises(MigWriteError, match=r"nvmlComputeInstanceDestroy .* NVML_ERROR_IN_USE"):
            NvmlMig().destroy(0, Slot(4, "3g.40gb"))


def test_the_fake_driver_refuses_a_gpu_without_mig() -> None:
    """NVML answers no GPU instance profile while MIG mode is off (NOT_SUPPORTED), so the
    agent said the GPU "offers no GPU instance profile 7g.80gb", as if the profile did not
    exist; it says MIG mode is off."""
    library = FakeNvmlLibrary([FakeGpu("NVIDIA A100-SXM4-80GB", "A100-80GB", mig_enabled=False)])
    with installed(library), nvml_session():
        for change in (NvmlMig().create, NvmlMig().destroy):
            with pytest.raises(MigWriteError, match="MIG mode is not enabled on this GPU") as error:
                change(0, Slot(0, "7g.80gb"))
            assert "NVML_ERROR_NOT_SUPPORTED" in str(error.value)
    assert library.gpus[0].instances == []


def test_a_busy_gpu_instance_is_never_destroyed_even_when_asked_directly() -> None:
    library = FakeNvmlLibrary(
        [FakeGpu("NVIDIA A100-SXM4-80GB", "A100-80GB", instances=[FakeInstance("7g.80gb", 0)])]
    )
    library.gpus[0].instances[0].processes = 2
    with installed(library), nvml_session(), pytest.raises(MigWriteError):
        NvmlMig().destroy(0, Slot(0, "7g.80gb"))
    assert library.destroyed == []


@pytest.mark.parametrize(
    ("nvml_name", "model", "slots"),
    [
        ("NVIDIA A30", "A30-24GB", [Slot(0, "2g.12gb"), Slot(2, "2g.12gb+me")]),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "RTX-PRO-6000",
            [Slot(0, "1g.24gb+me.all"), Slot(1, "1g.24gb-me"), Slot(2, "2g.48gb-me")],
        ),
    ],
    ids=["a30", "rtx-pro-6000"],
)
def test_a_four_slice_gpu_is_carved_at_nvmls_own_profile_ids(
    nvml_name: str, model: str, slots: list[Slot]
) -> None:
    """The profile ids the agent creates with are those NVML answers at each profile index
    (an A30's 2g.12gb+me is id 6, an RTX PRO 6000's 1g.24gb+me.all id 65)."""
    library = FakeNvmlLibrary([FakeGpu(nvml_name, model)])
    with installed(library), nvml_session():
        for slot in slots:
            NvmlMig().create(0, slot)
        (reading,) = NvmlMig().read()
        names = {p.gi_profile_id: p.profile_name for p in reading.profiles}
        assert [(names[i.gi_profile_id], i.start) for i in reading.instances] == [
            (slot.profile, slot.start) for slot in slots
        ]
        assert all(i.uuid.startswith("MIG-") for i in reading.instances)
        NvmlMig().destroy(0, slots[-1])
    assert [(i.profile, i.start) for i in library.gpus[0].instances] == [
        (slot.profile, slot.start) for slot in slots[:-1]
    ]


def test_a_profile_past_the_installed_pynvmls_count_is_carved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvidia-ml-py 12.535 (pyproject.toml's lowest) ends NVML_GPU_INSTANCE_PROFILE_COUNT at
    0xA (NVML 12.2); the driver's 1_SLICE_GFX is 0xA and 1_SLICE_NO_ME 0xD: the carve finds
    them by asking the driver until it says no more, not the bindings."""
    monkeypatch.setattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0xA)
    library = FakeNvmlLibrary(
        [FakeGpu("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX-PRO-6000")]
    )
    with installed(library), nvml_session():
        NvmlMig().create(0, Slot(0, "1g.24gb+gfx"))
        NvmlMig().create(0, Slot(1, "1g.24gb-me"))
        NvmlMig().destroy(0, Slot(0, "1g.24gb+gfx"))
    assert [(i.profile, i.start) for i in library.gpus[0].instances] == [("1g.24gb-me", 1)]


def test_a_gpu_on_a_driver_before_r510_is_carved_through_the_unversioned_queries() -> None:
    """An R470 libnvidia-ml has neither nvmlDeviceGetGpuInstanceProfileInfoV nor
    nvmlGpuInstanceGetComputeInstanceProfileInfoV (NVML 11.6 added them): pynvml's wrappers
    (nvidia-ml-py 13.615.71, pynvml.py:6097 and 6175) raise NVMLError_FunctionNotFound for
    ``version=2``; the carve asks ``version=1`` there, as it does for the process query."""
    library = FakeNvmlLibrary([FakeGpu("NVIDIA A100-SXM4-80GB", "A100-80GB")])
    library.missing.update(BEFORE_R510)
    with installed(library), nvml_session():
        NvmlMig().create(0, Slot(0, "3g.40gb"))
        NvmlMig().create(0, Slot(4, "2g.20gb"))
        NvmlMig().destroy(0, Slot(0, "3g.40gb"))
    assert [(i.profile, i.start, i.with_compute_instance) for i in library.gpus[0].instances] == [
        ("2g.20gb", 4, True)
    ]
