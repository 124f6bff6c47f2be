"""The node agent: NVML readings (through pynvml and a fake libnvidia-ml), the annotation,
publishing on change, and ``migslice inspect``."""

from __future__ import annotations

import datetime
from collections.abc import Sequence

import pynvml
import pytest

from agent.nvml import NvmlUnavailableError, nvml_session, read_gpus
from agent.publisher import Publisher
from agent.readings import GpuReading
from agent.report import build_report, gfd_product_name
from migslice.cli import main
from migslice.inventory.layouts import LayoutSource, resolve_node
from migslice.mig import CATALOG, Placed, is_legal
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects.gpu_layout import parse_layout_annotation
from migslice.objects.nodes import node_facts_from_raw
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary, installed

A100 = "NVIDIA A100-SXM4-80GB"


def read(*gpus: FakeGpu) -> tuple[GpuReading, ...]:
    with installed(FakeNvmlLibrary(gpus)):
        with nvml_session():
            return read_gpus()


def balanced_a100() -> FakeGpu:
    return FakeGpu(
        A100,
        "A100-80GB",
        instances=[
            FakeInstance("3g.40gb", 4, processes=2),
            FakeInstance("2g.20gb", 0),
            FakeInstance("1g.10gb", 2),
            FakeInstance("1g.10gb", 3, processes=1),
        ],
    )


def test_readings_carry_nvml_placements_uuids_and_busy_flags() -> None:
    (gpu,) = read(balanced_a100())
    assert gpu.name == A100
    assert gpu.pci_device_id == 0x20B2
    assert gpu.mig_enabled and not gpu.mig_pending
    assert [(i.start, i.size, i.busy) for i in gpu.instances] == [
        (0, 2, False),
        (2, 1, False),
        (3, 1, True),
        (4, 4, True),
    ]
    assert all(i.uuid.startswith("MIG-") for i in gpu.instances)
    assert len({i.uuid for i in gpu.instances}) == 4
    table = {p.profile_name: p for p in gpu.profiles}
    model = CATALOG.get("A100-80GB")
    assert set(table) == set(model.profile_names)
    for name, profile in table.items():
        assert tuple(start for start, _ in profile.placements) == model.profile(name).placements


def test_a_gpu_with_mig_off_or_unsupported_has_no_instances() -> None:
    off, unsupported = read(
        FakeGpu(A100, "A100-80GB", mig_enabled=False),
        FakeGpu("NVIDIA L4", "A100-80GB", mig_capable=False, pci_device_id=0x27B8),
    )
    assert off.mig_capable and not off.mig_enabled and off.instances == ()
    assert not unsupported.mig_capable and unsupported.profiles == ()


def test_the_annotation_round_trips_and_the_inventory_uses_it() -> None:
    gpus = read(balanced_a100(), FakeGpu(A100, "A100-80GB", instances=[FakeInstance("7g.80gb", 0)]))
    report = build_report(gpus, "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    parsed = parse_layout_annotation(report.text())
    assert parsed == report.layout
    assert parsed.product == "NVIDIA-A100-SXM4-80GB"
    assert parsed.pci_device_id == 0x20B2
    layout = [Placed(i.start, i.profile, i.size) for i in parsed.gpus[0].instances]
    assert is_legal(CATALOG.get("A100-80GB"), layout)

    raw_node = {
        "metadata": {
            "name": "gpu-1",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": "2",
                "nvidia.com/mig.capable": "true",
                "nvidia.com/mig.strategy": "mixed",
            },
            "annotations": {LAYOUT_ANNOTATION: report.text()},
        },
        "status": {
            "allocatable": {
                "nvidia.com/mig-3g.40gb": "1",
                "nvidia.com/mig-2g.20gb": "1",
                "nvidia.com/mig-1g.10gb": "2",
                "nvidia.com/mig-7g.80gb": "1",
            }
        },
    }
    state = resolve_node(node_facts_from_raw(raw_node), [])
    assert state.source == LayoutSource.AGENT
    assert [len(gpu.instances) for gpu in state.gpus] == [4, 1]


def test_a_model_the_catalog_lacks_is_reported_loudly_with_nvml_profiles() -> None:
    (gpu,) = read(FakeGpu("NVIDIA X300 Future", "H100-80GB", pci_device_id=0x9999, instances=[]))
    report = build_report([gpu], "2026-11-30T10:00:00Z")
    assert any("is not in the migslice catalog" in w for w in report.warnings)
    assert any("MIG is enabled but the GPU has no instances" in w for w in report.warnings)
    assert report.layout.product == "NVIDIA-X300-Future"
    assert {p.name for p in report.layout.profiles} >= {"MIG 1g.10gb", "MIG 7g.80gb"}


def test_nvml_profiles_the_catalog_disagrees_with_are_reported() -> None:
    # NVML on this board names its profiles like an 80GB part, the catalog's H200 does not.
    (gpu,) = read(FakeGpu("NVIDIA H200", "A100-80GB", pci_device_id=0x2335))
    report = build_report([gpu], "2026-11-30T10:00:00Z")
    assert any(
        "NVML offers 1g.10gb, the catalog of H200-141GB does not" in w for w in report.warnings
    )


def test_a_pending_mig_mode_change_is_reported() -> None:
    (gpu,) = read(FakeGpu(A100, "A100-80GB", mig_enabled=False, mig_pending_enabled=True))
    assert gpu.mig_pending
    assert any("pending" in w for w in build_report([gpu], "t").warnings)


@pytest.mark.parametrize(
    ("nvml", "gfd"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100 80GB PCIe", "NVIDIA-A100-80GB-PCIe"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        ),
        ("NVIDIA GH200 144G HBM3e", "NVIDIA-GH200-144G-HBM3e"),
    ],
)
def test_nvml_names_become_gfd_product_labels(nvml: str, gfd: str) -> None:
    assert gfd_product_name(nvml) == gfd
    assert CATALOG.by_product(gfd) is not None


def test_without_a_driver_nvml_is_reported_unavailable() -> None:
    with installed(None):
        try:
            with nvml_session():
                pytest.skip("this machine has a real libnvidia-ml")
        except NvmlUnavailableError as error:
            assert "NVML Shared Library Not Found" in str(error)
            assert "NVIDIA driver" in str(error)


class FailingNvml:
    """A libnvidia-ml.so.1 whose nvmlInit answers ``code`` (NVML's return codes)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def nvmlInitWithFlags(self, flags: object) -> int:  # noqa: N802 (the C symbol)
        return self.code

    def nvmlInit_v2(self) -> int:  # noqa: N802 (the C symbol)
        return self.code


@pytest.mark.parametrize(
    ("code", "meaning"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "the NVIDIA kernel driver is not loaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "this user may not open the NVIDIA devices"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "of different versions"),
        (pynvml.NVML_ERROR_UNKNOWN, "NVML could not be initialised on this machine (Unknown"),
    ],
    ids=["driver-not-loaded", "no-permission", "version-mismatch", "unknown"],
)
def test_inspect_says_why_nvml_fails_on_this_machine_without_naming_the_agent(
    code: int, meaning: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """inspect without a driver blamed "the agent"."""
    with installed(FailingNvml(code)):  # type: ignore[arg-type]
        assert main(["inspect"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("migslice: error: NVML could not be "), err
    assert meaning in err and err.count("\n") == 1, err
    assert "agent" not in err


class MemoryNodeStore:
    """A NodeStore kept in memory (satisfies agent.publisher.NodeStore)."""

    def __init__(self) -> None:
        self.annotations: dict[tuple[str, str], str] = {}
        self.writes = 0
        self.events: list[tuple[str, str, str]] = []

    def read_annotation(self, node: str, key: str) -> str | None:
        return self.annotations.get((node, key))

    def write_annotation(self, node: str, key: str, value: str) -> None:
        self.annotations[(node, key)] = value
        self.writes += 1

    def record_warning(self, node: str, reason: str, message: str) -> None:
        self.events.append((node, reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime(2026, 11, 30, 10, 0, tzinfo=datetime.UTC)

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += datetime.timedelta(seconds=seconds)


def test_the_publisher_writes_on_change_and_on_heartbeat_only() -> None:
    store, clock = MemoryNodeStore(), Clock()
    state: list[Sequence[GpuReading]] = [read(balanced_a100())]
    publisher = Publisher("gpu-1", store, lambda: state[0], clock, heartbeat_s=300)

    assert publisher.publish_once()[0] is True
    clock.advance(30)
    assert publisher.publish_once()[0] is False
    assert store.writes == 1

    state[0] = read(FakeGpu(A100, "A100-80GB", instances=[FakeInstance("7g.80gb", 0)]))
    clock.advance(30)
    assert publisher.publish_once()[0] is True
    clock.advance(301)
    assert publisher.publish_once()[0] is True
    assert store.writes == 3
    published = parse_layout_annotation(store.annotations[("gpu-1", LAYOUT_ANNOTATION)])
    assert published.observed_at == "2026-11-30T10:06:01Z"


def test_a_restarted_publisher_does_not_rewrite_an_unchanged_layout_at_once() -> None:
    store, clock = MemoryNodeStore(), Clock()
    gpus = read(balanced_a100())
    Publisher("gpu-1", store, lambda: gpus, clock).publish_once()
    clock.advance(10)
    restarted = Publisher("gpu-1", store, lambda: gpus, clock, heartbeat_s=300)
    assert restarted.publish_once()[0] is False
    clock.advance(300)
    assert restarted.publish_once()[0] is True
    assert store.writes == 2


def test_warnings_become_node_events_once_each() -> None:
    store, clock = MemoryNodeStore(), Clock()
    gpus = read(FakeGpu(A100, "A100-80GB", instances=[]))
    publisher = Publisher("gpu-1", store, lambda: gpus, clock)
    publisher.publish_once()
    publisher.publish_once()
    assert [(node, reason) for node, reason, _ in store.events] == [("gpu-1", "MigLayoutWarning")]


def test_inspect_shows_each_gpu_as_a_bar(capsys: pytest.CaptureFixture[str]) -> None:
    library = FakeNvmlLibrary([balanced_a100(), FakeGpu(A100, "A100-80GB", mig_enabled=False)])
    with installed(library):
        assert main(["inspect"]) == 0
    out = capsys.readouterr().out
    assert "|2g.20gb              |1g.10gb   |1g.10gb   |3g.40gb" in out
    assert "1g.10gb@3,3g.40gb@4" in out
    assert "disabled" in out
    assert library.initialised == 0, "nvmlShutdown must follow nvmlInit"


def test_inspect_without_a_driver_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    with installed(None):
        code = main(["inspect"])
    if code == 0:
        pytest.skip("this machine has a real libnvidia-ml")
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("migslice: error: NVML could not be loaded on this machine")
    assert "so this machine has no NVIDIA driver" in err and "agent" not in err
    assert err.count("\n") == 1
