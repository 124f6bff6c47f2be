"""The agent's read path when NVML answers an error for one GPU, or for the whole read.

The driver's own return codes (nvml.h, NVIDIA/go-nvml ``gen/nvml/nvml.h``): every device query
may answer ``NVML_ERROR_GPU_IS_LOST`` ("the GPU has fallen off the bus"); ``nvmlDeviceGetCount_v2``
counts devices ``nvmlDeviceGetHandleByIndex_v2`` then answers ``NVML_ERROR_NO_PERMISSION`` for
("Update your code to handle this error"); ``nvmlDeviceGetGpuInstances`` and
``...PossiblePlacements_v2`` "Require privileged user" (``NVML_ERROR_NO_PERMISSION``);
``nvmlDeviceGetComputeRunningProcesses`` on a MIG device handle "is not supported if the device
is in vGPU Host virtualization mode". pynvml raises each as an ``NVMLError`` subclass
(pynvml.py ``_nvmlCheckReturn``). One bad GPU must not take the node's others down with it,
nor the DaemonSet; what the agent could not read is marked, never guessed, and the extender
does not serve a layout with a GPU it could not read.
"""

from __future__ import annotations

import datetime
import logging

import pynvml
import pytest

from agent.nvml import NvmlUnavailableError, nvml_session, read_gpus
from agent.publisher import Publisher
from agent.readings import GpuReading
from agent.report import build_report
from agent.service import AgentService, _carve_pass, _publish_pass
from agent.settings import AgentSettings
from migslice.cli import main
from migslice.inventory.layouts import LayoutSource, resolve_node
from migslice.mig import CATALOG
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects.gpu_layout import LayoutAnnotationError, parse_layout_annotation
from migslice.objects.nodes import node_facts_from_raw
from tests.fake_nvml import BEFORE_R510, FakeGpu, FakeInstance, FakeNvmlLibrary, installed
from tests.local_api import Request, local_api

A100 = "NVIDIA A100-SXM4-80GB"
LOST = pynvml.NVML_ERROR_GPU_IS_LOST


def a100(*instances: FakeInstance) -> FakeGpu:
    return FakeGpu(A100, "A100-80GB", instances=list(instances))


def two_a100s() -> FakeNvmlLibrary:
    return FakeNvmlLibrary(
        [
            a100(FakeInstance("3g.40gb", 0, processes=1), FakeInstance("3g.40gb", 4)),
            a100(FakeInstance("7g.80gb", 0, processes=1)),
        ]
    )


def read_with(library: FakeNvmlLibrary) -> tuple[GpuReading, ...]:
    with installed(library), nvml_session():
        return read_gpus()


@pytest.mark.parametrize(
    ("call", "code", "said"),
    [
        ("nvmlDeviceGetHandleByIndex_v2", pynvml.NVML_ERROR_NO_PERMISSION, "Permissions"),
        ("nvmlDeviceGetMigMode", LOST, "GPU is lost"),
        ("nvmlDeviceGetGpuInstancePossiblePlacements_v2", pynvml.NVML_ERROR_NO_PERMISSION, "Perm"),
        ("nvmlDeviceGetGpuInstances", LOST, "GPU is lost"),
        ("nvmlGpuInstanceGetInfo", pynvml.NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument"),
        ("nvmlDeviceGetMigDeviceHandleByIndex", pynvml.NVML_ERROR_UNKNOWN, "Unknown Error"),
        ("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Sup"),
    ],
)
def test_one_gpu_nvml_cannot_read_is_marked_and_the_others_are_still_read(
    call: str, code: int, said: str
) -> None:
    library = two_a100s()
    library.errors[(call, 1)] = code
    good, bad = read_with(library)
    assert library.initialised == 0
    assert good.error == "" and [(i.start, i.busy) for i in good.instances] == [
        (0, True),
        (4, False),
    ]
    # the error names pynvml's function for the C symbol (nvmlDeviceGetHandleByIndex for _v2)
    assert bad.index == 1 and said in bad.error
    assert bad.error.startswith(call.removesuffix("_v2")), bad.error
    assert bad.instances == () and bad.profiles == ()  # nothing guessed (not busy=False)


def test_the_annotation_marks_the_gpu_and_the_extender_does_not_serve_the_layout() -> None:
    library = two_a100s()
    library.errors[("nvmlDeviceGetComputeRunningProcesses_v3", 1)] = pynvml.NVML_ERROR_NOT_SUPPORTED
    report = build_report(read_with(library), "2026-11-30T10:00:00Z")
    assert any("GPU 1: NVML could not read it" in w for w in report.warnings)
    assert report.layout.product == "NVIDIA-A100-SXM4-80GB"  # from the GPU that was read
    assert report.layout.pci_device_id == 0x20B2
    parsed = parse_layout_annotation(report.text())
    assert parsed == report.layout
    assert [bool(g.error) for g in parsed.gpus] == [False, True]
    raw_node = {
        "metadata": {
            "name": "gpu-1",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
            "annotations": {LAYOUT_ANNOTATION: report.text()},
        },
        # the device plugin, too, no longer advertises the 7g.80gb it cannot read
        "status": {"allocatable": {"nvidia.com/mig-3g.40gb": "2"}},
    }
    state = resolve_node(node_facts_from_raw(raw_node), [])
    assert state.source != LayoutSource.AGENT
    assert any("could not read GPU 1" in note for note in state.notes), state.notes


def test_a_gpu_lost_before_its_index_is_known_still_leaves_the_loop_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """nvmlDeviceGetCount itself failing is NVML unusable for this pass: logged, retried."""
    library = two_a100s()
    library.errors[("nvmlDeviceGetCount_v2", -1)] = pynvml.NVML_ERROR_UNKNOWN

    def read() -> tuple[GpuReading, ...]:
        with nvml_session():
            return read_gpus()

    class Store:
        def read_annotation(self, node: str, key: str) -> str | None:
            return None

        def write_annotation(self, node: str, key: str, value: str) -> None:
            raise AssertionError("nothing read, nothing written")

        def record_warning(self, node: str, reason: str, message: str) -> None:
            pass

    now = datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)
    publisher = Publisher("gpu-1", Store(), read, lambda: now)
    settings = AgentSettings(node_name="gpu-1", interval_s=30.0)
    with installed(library), caplog.at_level(logging.ERROR):
        assert _publish_pass(settings, publisher, 30.0) == 30.0
        with pytest.raises(NvmlUnavailableError, match="Unknown Error"):
            read()
    assert "NVML unavailable" in caplog.text
    assert library.initialised == 0


def test_the_agent_loop_outlives_a_gpu_lost_mid_read() -> None:
    """A GPU falling off the bus used to raise NVMLError_GPUIsLost out of the publish pass,
    which only catches NVML's init errors and API errors: the DaemonSet's pod exited."""
    library = two_a100s()
    library.errors[("nvmlDeviceGetGpuInstances", 0)] = LOST
    written: list[str] = []

    class Store:
        def read_annotation(self, node: str, key: str) -> str | None:
            return None

        def write_annotation(self, node: str, key: str, value: str) -> None:
            written.append(value)

        def record_warning(self, node: str, reason: str, message: str) -> None:
            pass

    def read() -> tuple[GpuReading, ...]:
        with nvml_session():
            return read_gpus()

    now = datetime.datetime(2026, 11, 30, tzinfo=datetime.UTC)
    publisher = Publisher("gpu-1", Store(), read, lambda: now)
    with installed(library):
        assert _publish_pass(AgentSettings(node_name="gpu-1"), publisher, 30.0) == 30.0
    (text,) = written
    gpus = parse_layout_annotation(text).gpus
    assert [(g.index, "GPU is lost" in g.error, len(g.instances)) for g in gpus] == [
        (0, True, 0),
        (1, False, 1),
    ]


def test_inspect_shows_a_gpu_it_could_not_read(capsys: pytest.CaptureFixture[str]) -> None:
    library = two_a100s()
    library.errors[("nvmlDeviceGetMigMode", 1)] = LOST
    with installed(library):
        assert main(["inspect"]) == 0
    captured = capsys.readouterr()
    assert "GPU is lost" in captured.out
    assert "|3g.40gb" in captured.out


def test_a_gpu_marked_unread_cannot_also_carry_a_layout() -> None:
    text = (
        '{"version":"v1","product":"NVIDIA-A100-SXM4-80GB","gpus":[{"index":0,'
        '"migEnabled":true,"error":"nvmlDeviceGetGpuInstances: GPU is lost","instances":[]}]}'
    )
    with pytest.raises(LayoutAnnotationError, match="has an error and a layout"):
        parse_layout_annotation(text)


def test_a_driver_before_r510_still_reads_profiles_and_busy_flags() -> None:
    """pynvml's nvmlDeviceGetComputeRunningProcesses calls the C symbol ``..._v3`` and, where
    the library lacks it (drivers before R510, which migslice serves: ``--pre-r510``), raises
    NVMLLibraryMismatchError (pynvml.py 4227-4229, throwOnVersionMismatch at 3130-3140), a
    plain Exception, not an NVMLError: it escaped the agent's read. ``..._v2`` (R470) answers
    the same processes in the same struct (c_nvmlProcessInfo_v3_t is c_nvmlProcessInfo_v2_t).
    Such a library lacks ``nvmlDeviceGetGpuInstanceProfileInfoV`` too (NVML 11.6 added both):
    pynvml's nvmlDeviceGetGpuInstanceProfileInfo (nvidia-ml-py 13.615.71, pynvml.py:6097)
    then raises NVMLError_FunctionNotFound, which lost every MIG GPU; its ``version=1`` (the
    unversioned symbol) answers the same profile without a name, which the catalog gives by
    the GPU's PCI device id and NVML's GI profile id."""
    library = two_a100s()
    library.missing.update(BEFORE_R510)
    good, other = read_with(library)
    assert (good.error, other.error) == ("", "")
    assert [(i.start, i.busy) for i in good.instances] == [(0, True), (4, False)]
    assert [(i.start, i.busy) for i in other.instances] == [(0, True)]
    model = CATALOG.get("A100-80GB")
    assert {p.name: (p.gi_profile_id, p.placements) for p in good.profiles} == {
        f"MIG {p.name}": (p.gi_profile_id, tuple((s, p.memory_slices) for s in p.placements))
        for p in model.profiles
    }


def test_a_driver_without_any_process_query_marks_the_gpus_instead_of_guessing_idle() -> None:
    library = two_a100s()
    library.missing.update(
        {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"}
    )
    gpus = read_with(library)
    assert all("Function Not Found" in gpu.error for gpu in gpus), gpus
    assert all(gpu.instances == () for gpu in gpus)


def test_a_carve_pass_the_api_server_does_not_answer_is_one_line_not_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: every carve pass (each 5 s) logged a traceback while the API server was away
    or shedding load, on every carving node; an error of our own still logs one."""

    def answer(request: Request) -> tuple[int, object]:
        return 503, {"kind": "Status", "code": 503, "message": "the server is shutting down"}

    settings = AgentSettings(node_name="gpu-1", carve=True)
    with local_api(answer) as transport, caplog.at_level(logging.ERROR):
        _carve_pass(settings, AgentService(settings, transport, None, None))  # type: ignore[arg-type]
    (record,) = caplog.records
    assert "HTTP 503" in record.getMessage() and not record.exc_info


def test_a_mig_gpu_whose_aggregate_memory_nvml_refuses_is_still_read() -> None:
    """nvml.h (NVIDIA/go-nvml ``gen/nvml/nvml.h``, NVML 13.3.29, ``nvmlDeviceGetMemoryInfo``):
    "In MIG mode, if device handle is provided, the API returns aggregate information, only
    if the caller has appropriate privileges" (NVML_ERROR_NO_PERMISSION otherwise, as
    NVIDIA/k8s-device-plugin#1683 and nvidia-container-toolkit#842 see in containers). The
    agent runs unprivileged and uses nothing of a GPU's total memory: the GPU is read."""
    library = two_a100s()
    library.errors[("nvmlDeviceGetMemoryInfo", 1)] = pynvml.NVML_ERROR_NO_PERMISSION
    first, second = read_with(library)
    assert first.error == "" and second.error == "", second.error
    assert [(i.start, i.busy) for i in second.instances] == [(0, True)]
    assert second.mig_enabled and len(second.profiles) == 7


def test_a_gpu_the_catalog_lacks_on_a_driver_before_r510_is_marked_not_misnamed() -> None:
    """Its unversioned profile query names no profile and the catalog cannot name them: the
    GPU is marked with the versioned query's error, the node's other GPUs read as usual."""
    library = two_a100s()
    library.gpus[1].pci_device_id = 0x1FFF  # a board the catalog lacks
    library.missing.update(BEFORE_R510)
    good, bad = read_with(library)
    assert good.error == "" and len(good.profiles) == 7
    assert bad.error == "nvmlDeviceGetGpuInstanceProfileInfo: Function Not Found", bad.error
    assert bad.profiles == () and bad.instances == ()


def test_the_fake_answers_mig_device_queries_on_the_wrong_handle_as_nvml_does() -> None:
    """nvml.h (NVML 13.3.29): nvmlDeviceGetGpuInstanceId on a handle that is no MIG device and
    nvmlDeviceGetMigDeviceHandleByIndex on a GPU with MIG off or on a MIG device answer
    NVML_ERROR_NOT_SUPPORTED ("if this query is not supported by the device"), which pynvml
    raises as NVMLError_NotSupported (pynvml.py:6254, 6275 in nvidia-ml-py 13.615.71)."""
    library = FakeNvmlLibrary(
        [a100(FakeInstance("7g.80gb", 0)), FakeGpu(A100, "A100-80GB", mig_enabled=False)]
    )
    with installed(library), nvml_session():
        parent = pynvml.nvmlDeviceGetHandleByIndex(0)
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
        assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == library.gpus[0].instances[0].gi_id
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetGpuInstanceId(parent)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0)
        mig_off = pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(mig_off) == 0
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(mig_off, 0)
