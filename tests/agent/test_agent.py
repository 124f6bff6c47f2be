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
from migslice.mig import CATALOG, GpuModel, Placed, is_legal
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
    assert off.profiles == ()  # NVML answers no profile while MIG mode is off
    assert not unsupported.mig_capable and unsupported.profiles == ()


def test_a_gpu_with_mig_off_reads_an_empty_profile_table_and_reports_without_it() -> None:
    """nvmlDeviceGetGpuInstanceProfileInfoV answers NVML_ERROR_NOT_SUPPORTED for every profile
    while MIG mode is off (nvml.h): the reading has no table, the report no warning about it,
    and the annotation takes its table from a GPU with MIG on."""
    (alone,) = read(FakeGpu("NVIDIA A30", "A30-24GB", mig_enabled=False))
    assert alone.mig_capable and not alone.mig_enabled
    assert alone.profiles == () and alone.instances == ()
    report = build_report([alone], "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    assert report.layout.profiles == ()
    assert parse_layout_annotation(report.text()) == report.layout
    assert [(g.mig_enabled, g.instances) for g in report.layout.gpus] == [(False, ())]

    off, on = read(
        FakeGpu("NVIDIA A30", "A30-24GB", mig_enabled=False),
        FakeGpu("NVIDIA A30", "A30-24GB", instances=[FakeInstance("4g.24gb", 0)]),
    )
    report = build_report([off, on], "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    assert report.layout.profiles == on.profiles != ()


def test_an_a30_reads_nvmls_own_profile_table_with_its_instances() -> None:
    """NVML answers each A30 profile at its own profile index (1_SLICE is 1g.6gb, not an
    A100's 1g double-memory index): the agent read only 1g.6gb and no instances before."""
    (gpu,) = read(
        FakeGpu(
            "NVIDIA A30",
            "A30-24GB",
            instances=[
                FakeInstance("2g.12gb", 0, processes=1),
                FakeInstance("1g.6gb", 2),
                FakeInstance("1g.6gb+me", 3),
            ],
        )
    )
    assert gpu.pci_device_id == 0x20B7
    table = {p.profile_name: (p.gi_profile_id, p.slice_count, p.placements) for p in gpu.profiles}
    assert table == {
        "1g.6gb": (14, 1, ((0, 1), (1, 1), (2, 1), (3, 1))),
        "1g.6gb+me": (21, 1, ((0, 1), (1, 1), (2, 1), (3, 1))),
        "2g.12gb": (5, 2, ((0, 2), (2, 2))),
        "2g.12gb+me": (6, 2, ((0, 2), (2, 2))),
        "4g.24gb": (0, 4, ((0, 4),)),
    }
    assert [(i.gi_profile_id, i.start, i.size, i.busy) for i in gpu.instances] == [
        (5, 0, 2, True),
        (14, 2, 1, False),
        (21, 3, 1, False),
    ]
    report = build_report([gpu], "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    parsed = parse_layout_annotation(report.text())
    assert parsed == report.layout and parsed.product == "NVIDIA-A30"
    assert [(i.profile, i.start, i.size, i.busy) for i in parsed.gpus[0].instances] == [
        ("2g.12gb", 0, 2, True),
        ("1g.6gb", 2, 1, False),
        ("1g.6gb+me", 3, 1, False),
    ]
    layout = [Placed(i.start, i.profile, i.size) for i in parsed.gpus[0].instances]
    assert is_legal(CATALOG.get("A30-24GB"), layout)

    (whole,) = read(FakeGpu("NVIDIA A30", "A30-24GB", instances=[FakeInstance("4g.24gb", 0)]))
    report = build_report([whole], "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    assert [(i.profile, i.start, i.size) for i in report.layout.gpus[0].instances] == [
        ("4g.24gb", 0, 4)
    ]


RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_an_rtx_pro_6000_reads_every_variant_profile_and_its_instances() -> None:
    """The +gfx, -me and +me.all profiles have NVML indices of their own (1_SLICE_GFX,
    1_SLICE_NO_ME, 1_SLICE_ALL_ME, ...); only some were read before."""
    gpus = read(
        FakeGpu(
            RTX_PRO_6000,
            "RTX-PRO-6000",
            instances=[
                FakeInstance("1g.24gb+me.all", 0, processes=1),
                FakeInstance("1g.24gb-me", 1),
                FakeInstance("2g.48gb-me", 2),
            ],
        ),
        FakeGpu(RTX_PRO_6000, "RTX-PRO-6000", instances=[FakeInstance("4g.96gb+gfx", 0)]),
        FakeGpu(
            RTX_PRO_6000,
            "RTX-PRO-6000",
            instances=[FakeInstance("2g.48gb+gfx", 0), FakeInstance("1g.24gb+gfx", 3)],
        ),
    )
    model = CATALOG.get("RTX-PRO-6000")
    for gpu in gpus:
        assert gpu.pci_device_id == 0x2BB5
        ids = {p.profile_name: p.gi_profile_id for p in gpu.profiles}
        assert ids == {p.name: p.gi_profile_id for p in model.profiles}
        assert ids["1g.24gb+gfx"] == 47 and ids["2g.48gb+me.all"] == 64 and ids["4g.96gb"] == 0
        for profile in gpu.profiles:
            known = model.profile(profile.profile_name)
            assert profile.placements == tuple((s, known.memory_slices) for s in known.placements)
    assert [(i.gi_profile_id, i.start, i.size, i.busy) for i in gpus[0].instances] == [
        (65, 0, 1, True),
        (67, 1, 1, False),
        (66, 2, 2, False),
    ]
    report = build_report(gpus, "2026-11-30T10:00:00Z")
    assert report.warnings == ()
    parsed = parse_layout_annotation(report.text())
    assert parsed == report.layout
    assert parsed.product == "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"
    assert parsed.pci_device_id == 0x2BB5
    assert len(parsed.profiles) == 11
    assert [[(i.profile, i.start) for i in g.instances] for g in parsed.gpus] == [
        [("1g.24gb+me.all", 0), ("1g.24gb-me", 1), ("2g.48gb-me", 2)],
        [("4g.96gb+gfx", 0)],
        [("2g.48gb+gfx", 0), ("1g.24gb+gfx", 3)],
    ]
    for entry in parsed.gpus:
        assert is_legal(model, [Placed(i.start, i.profile, i.size) for i in entry.instances])


@pytest.mark.parametrize("model", CATALOG.models, ids=lambda m: m.key)
def test_every_catalog_model_reads_back_its_whole_profile_table(model: GpuModel) -> None:
    """The fake answers every catalog profile, at one NVML profile index each."""
    nvml_name = model.product_names[0].replace("-", " ")
    (gpu,) = read(FakeGpu(nvml_name, model.key))
    assert sorted(p.profile_name for p in gpu.profiles) == sorted(model.profile_names)
    report = build_report([gpu], "2026-11-30T10:00:00Z")
    assert [w for w in report.warnings if "no instances" not in w] == []


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


def test_each_gpu_is_published_with_its_own_pci_device_id() -> None:
    """An H100 SXM5 (0x2330) beside an H800 (0x2324), one catalog model: mig-parted selects
    each GPU by its own id, so each is published; the node-level id stays GPU 0's."""
    h100 = FakeGpu("NVIDIA H100 80GB HBM3", "H100-80GB", pci_device_id=0x2330)
    h800 = FakeGpu("NVIDIA H800", "H100-80GB", pci_device_id=0x2324)
    report = build_report(read(h100, h800), "2026-11-30T10:00:00Z")
    parsed = parse_layout_annotation(report.text())
    assert parsed == report.layout
    assert parsed.pci_device_id == 0x2330
    assert parsed.gpu_pci_ids() == {0: 0x2330, 1: 0x2324}


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


def test_inspect_draws_a_gpu_the_catalog_lacks_from_its_own_profile_table(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """inspect drew such a GPU from the annotation's profile table, which is the first GPU's
    model's: beside an A30 its 3g.40gb at 4 fell off a 4-slice bar, the GPU shown empty, and
    beside a GPU with MIG off (no table) it was a traceback."""
    future = FakeGpu(
        "NVIDIA Future GPU",
        "H100-80GB",
        pci_device_id=0x1234,
        instances=[FakeInstance("3g.40gb", 4, processes=1)],
    )
    for first in (
        FakeGpu("NVIDIA A30", "A30-24GB", instances=[FakeInstance("4g.24gb", 0)]),
        FakeGpu(A100, "A100-80GB", mig_enabled=False),
    ):
        with installed(FakeNvmlLibrary([first, future])):
            assert main(["inspect"]) == 0
        (row,) = [line for line in capsys.readouterr().out.splitlines() if "Future" in line]
        *free, used = row.split("|")[1:-1]  # 8 memory slices: 4 free, then the 3g.40gb
        assert len(free) == 4 and all(set(cell) == {"."} for cell in free), row
        assert used.strip() == "3g.40gb", row
        assert row.endswith("3g.40gb@4")


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


def test_a_node_clock_stepped_back_does_not_stop_the_heartbeat() -> None:
    """The heartbeat was due once time.time() passed the last write + 300 s: after NTP stepped
    the node's clock back an hour, an unchanged layout was not written again for an hour and
    5 min, and doctor (judging observedAt) said the agent's layout was stale all that time."""
    store, clock = MemoryNodeStore(), Clock()
    gpus = read(balanced_a100())
    publisher = Publisher("gpu-1", store, lambda: gpus, clock, heartbeat_s=300)
    assert publisher.publish_once()[0] is True
    clock.advance(-3600)  # NTP steps the node's clock back an hour
    clock.advance(301)
    assert publisher.publish_once()[0] is True
    assert store.writes == 2


def test_profile_indices_past_the_installed_pynvmls_count_are_still_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """nvidia-ml-py 12.535 (pyproject.toml's lowest) has NVML 12.2's
    NVML_GPU_INSTANCE_PROFILE_COUNT, 0xA (go-nvml ``gen/nvml/nvml.h`` at NVML 12.2.140); an
    R575 driver answers 1_SLICE_GFX (0xA) to 2_SLICE_ALL_ME (0x10) as well, and 13.x adds
    3_SLICE_GFX (0x11). The table is read until the driver says no more (INVALID_ARGUMENT),
    not until the bindings' count: else an RTX PRO 6000 lost its +gfx, -me and +me.all."""
    monkeypatch.setattr(pynvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0xA)
    (gpu,) = read(FakeGpu(RTX_PRO_6000, "RTX-PRO-6000", instances=[FakeInstance("1g.24gb-me", 1)]))
    model = CATALOG.get("RTX-PRO-6000")
    assert sorted(p.profile_name for p in gpu.profiles) == sorted(model.profile_names)
    assert [(i.gi_profile_id, i.start) for i in gpu.instances] == [(67, 1)]
