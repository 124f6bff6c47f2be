"""The catalog: lookups by product label, alias and PCI id; data sanity; NVML-built models."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from migslice.mig import (
    CATALOG,
    NvmlProfileInfo,
    UnknownModelError,
    UnknownProfileError,
    enumerate_maximal_layouts,
    model_from_nvml,
    parse_profile_name,
    profile_from_resource,
)
from migslice.mig.profiles import ProfileNameError


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("NVIDIA-A100-SXM4-80GB", "A100-80GB"),
        ("A100-80GB", "A100-80GB"),
        ("a100-80gb", "A100-80GB"),
        ("NVIDIA-H100-80GB-HBM3", "H100-80GB"),
        ("H100-80GB", "H100-80GB"),
        ("NVIDIA-H100-PCIe", "H100-PCIe"),
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-A30", "A30-24GB"),
        ("0x20B2", "A100-80GB"),
        ("0x20B210DE", "A100-80GB"),
        ("0x233010de", "H100-80GB"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition", "RTX-PRO-6000"),
    ],
)
def test_models_are_found_by_product_alias_and_pci_id(text: str, key: str) -> None:
    assert CATALOG.get(text).key == key


def test_gfd_suffixes_are_ignored_for_product_labels() -> None:
    assert CATALOG.by_product("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") is CATALOG.get("A100-40GB")
    assert CATALOG.by_product("NVIDIA-A100-SXM4-80GB-SHARED") is CATALOG.get("A100-80GB")
    assert CATALOG.by_product("Tesla-T4") is None


def test_an_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(UnknownModelError) as raised:
        CATALOG.get("X100")
    message = str(raised.value)
    assert "'X100'" in message
    for key in ("A30-24GB", "A100-80GB", "H200-141GB", "GB300", "RTX-PRO-6000"):
        assert key in message


def test_an_unknown_profile_lists_the_model_profiles() -> None:
    with pytest.raises(UnknownProfileError, match=r"its profiles are 1g\.10gb, 1g\.10gb\+me"):
        CATALOG.get("A100-80GB").profile("1g.5gb")


def test_the_catalog_covers_every_required_model() -> None:
    required = [
        "A30",
        "A100-40GB",
        "A100-80GB",
        "NVIDIA-A100-80GB-PCIe",
        "H100-80GB",
        "NVIDIA-H100-PCIe",
        "NVIDIA-H100-NVL",
        "NVIDIA-GH200-480GB",
        "NVIDIA-H20",
        "GH200-144GB",
        "NVIDIA-H200",
        "NVIDIA-H200-NVL",
        "B200",
        "GB200",
        "B300",
        "GB300",
        "RTX-PRO-6000",
        "RTX-PRO-5000",
        "NVIDIA-RTX-PRO-5000-Blackwell",
        "0x2BB3",
        "RTX-PRO-4500",
        "NVIDIA-RTX-PRO-4500-Blackwell",
        "0x2C31",
    ]
    for name in required:
        assert CATALOG.find(name) is not None, name


@pytest.mark.parametrize("model", CATALOG.models, ids=lambda m: m.key)
def test_catalog_data_is_consistent(model: object) -> None:
    from migslice.mig import GpuModel

    assert isinstance(model, GpuModel)
    assert model.source
    names = model.profile_names
    assert len(set(names)) == len(names)
    known = [p.gi_profile_id for p in model.profiles if p.gi_profile_id is not None]
    assert len(set(known)) == len(known)
    for profile in model.profiles:
        parsed = parse_profile_name(profile.name)
        assert parsed.compute_slices == profile.compute_slices
        assert all(s + profile.memory_slices <= model.memory_slices for s in profile.placements)
        assert 1 <= profile.max_count <= model.compute_slices
    widest = max(p.compute_slices for p in model.profiles)
    assert widest == model.compute_slices
    assert enumerate_maximal_layouts(model)


def test_eight_slice_models_share_the_lgipp_placement_table() -> None:
    for key in ("A100-40GB", "H100-80GB", "H200-141GB", "B200", "GB300"):
        model = CATALOG.get(key)
        table = {(p.gi_profile_id, p.placements, p.memory_slices) for p in model.profiles}
        assert table == {
            (19, (0, 1, 2, 3, 4, 5, 6), 1),
            (20, (0, 1, 2, 3, 4, 5, 6), 1),
            (15, (0, 2, 4, 6), 2),
            (14, (0, 2, 4), 2),
            (9, (0, 4), 4),
            (5, (0,), 4),
            (0, (0,), 8),
        }


@pytest.mark.parametrize(
    ("name", "resource"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
        ("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"),
        ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"),
        ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
        ("7g.141gb", "nvidia.com/mig-7g.141gb"),
    ],
)
def test_profile_names_map_to_mixed_strategy_resources_and_back(name: str, resource: str) -> None:
    assert parse_profile_name(name).resource_name == resource
    assert str(profile_from_resource(resource)) == name


@pytest.mark.parametrize("text", ["", "1g", "10gb", "1g.10", "0g.10gb", "1g.10gb+xx", "1g.10GB "])
def test_malformed_profile_names_are_rejected(text: str) -> None:
    if text == "1g.10GB ":
        with pytest.raises(ProfileNameError):
            parse_profile_name(text)
        return
    with pytest.raises(ProfileNameError, match="is not a MIG profile name"):
        parse_profile_name(text)


def test_a_models_plain_profiles_leave_out_those_with_a_media_attribute() -> None:
    assert CATALOG.get("A100-80GB").plain_profiles == {
        "1g.10gb",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    }


def test_non_mig_resources_have_no_profile() -> None:
    assert profile_from_resource("nvidia.com/gpu") is None
    assert profile_from_resource("nvidia.com/mig-bogus") is None


def test_a_model_built_from_nvml_data_matches_the_catalog() -> None:
    reference = CATALOG.get("H100-80GB")
    reported = [
        NvmlProfileInfo(
            name=f"MIG {p.name}",
            gi_profile_id=p.gi_profile_id,
            slice_count=p.compute_slices,
            instance_count=p.max_count,
            memory_mib=p.memory_mib or 0,
            sm_count=p.sm_count or 0,
            placements=tuple((s, p.memory_slices) for s in p.placements),
        )
        for p in reversed(reference.profiles)
    ]
    built = model_from_nvml("NVIDIA-H100-80GB-HBM3", 0x2330, reported)
    assert built.memory_slices == 8
    assert built.compute_slices == 7
    assert {p.name: p.placements for p in built.profiles} == {
        p.name: p.placements for p in reference.profiles
    }
    assert len(enumerate_maximal_layouts(built)) == len(enumerate_maximal_layouts(reference))


def test_nvml_data_with_no_profiles_is_an_error() -> None:
    with pytest.raises(ValueError, match="no MIG profiles"):
        model_from_nvml("NVIDIA-Future", 0x9999, [])


def test_the_rtx_pro_5000_has_the_user_guides_profiles_and_the_only_legal_placements() -> None:
    """MIG User Guide, RTX PRO 5000 Blackwell: 1g = 1/2 of memory and SMs (max 2, +me and
    +me.all max 1), 2g = all (max 1); at most 2 instances; PCI 0x2BB3. Two memory slices: a 1g
    starts at 0 or 1, a 2g at 0. No GI profile id is published, so none is made up."""
    model = CATALOG.get("NVIDIA-RTX-PRO-5000-Blackwell")
    assert (model.key, model.pci_device_ids) == ("RTX-PRO-5000", (0x2BB3,))
    assert (model.memory_slices, model.compute_slices) == (2, 2)
    table = {
        p.name: (p.compute_slices, p.memory_slices, p.max_count, p.placements)
        for p in model.profiles
    }
    assert table == {
        "1g.24gb": (1, 1, 2, (0, 1)),
        "1g.24gb+me": (1, 1, 1, (0, 1)),
        "1g.24gb+gfx": (1, 1, 2, (0, 1)),
        "1g.24gb+me.all": (1, 1, 1, (0, 1)),
        "1g.24gb-me": (1, 1, 2, (0, 1)),
        "2g.48gb": (2, 2, 1, (0,)),
        "2g.48gb+gfx": (2, 2, 1, (0,)),
    }
    assert {p.gi_profile_id for p in model.profiles} == {None}
    assert max(len(layout) for layout in enumerate_maximal_layouts(model)) == 2


def test_the_rtx_pro_4500_has_the_user_guides_profiles_and_the_only_legal_placements() -> None:
    """MIG User Guide, "RTX PRO 4500 Blackwell MIG Profiles": 1g.16gb, +gfx, -me = 1/2 of memory
    and SMs (max 2), 1g.16gb+me.all (1/2, max 1), 2g.32gb and +gfx = Full (max 1), no 1g+me;
    "Supported GPUs": GB203, 32GB, at most 2 instances. PCI 0x2C31 (open-gpu-kernel-modules
    README). Two memory slices: a 1g starts at 0 or 1, a 2g at 0. No GI profile id is
    published, so none is made up."""
    model = CATALOG.get("NVIDIA-RTX-PRO-4500-Blackwell")
    assert (model.key, model.pci_device_ids) == ("RTX-PRO-4500", (0x2C31,))
    assert (model.memory_slices, model.compute_slices, model.memory_mib) == (2, 2, 32768)
    table = {
        p.name: (p.compute_slices, p.memory_slices, p.max_count, p.placements)
        for p in model.profiles
    }
    assert table == {
        "1g.16gb": (1, 1, 2, (0, 1)),
        "1g.16gb+gfx": (1, 1, 2, (0, 1)),
        "1g.16gb+me.all": (1, 1, 1, (0, 1)),
        "1g.16gb-me": (1, 1, 2, (0, 1)),
        "2g.32gb": (2, 2, 1, (0,)),
        "2g.32gb+gfx": (2, 2, 1, (0,)),
    }
    assert {p.gi_profile_id for p in model.profiles} == {None}
    assert max(len(layout) for layout in enumerate_maximal_layouts(model)) == 2


@pytest.mark.parametrize(
    ("nvml_name", "pci_id", "model"),
    [
        # NVIDIA/open-gpu-kernel-modules@df1c9a3d README.md, the NVML name of each PCI id
        ("NVIDIA GH200 120GB", 0x2342, "H100-96GB"),
        ("NVIDIA GH200 480GB", 0x2342, "H100-96GB"),
        ("NVIDIA H100", 0x2339, "H100-94GB"),
        ("NVIDIA A800 40GB Active", 0x20F6, "A100-40GB"),
        ("NVIDIA H100 NVL", 0x2321, "H100-94GB"),
        ("NVIDIA H100 80GB HBM3", 0x2330, "H100-80GB"),
        ("NVIDIA RTX PRO 4500 Blackwell", 0x2C31, "RTX-PRO-4500"),
    ],
)
def test_the_label_gfd_writes_for_each_boards_nvml_name_finds_its_model(
    nvml_name: str, pci_id: int, model: str
) -> None:
    from migslice.mig.catalog import product_label_of
    from migslice.mig.migparted.apply import gpu_pci_ids

    label = product_label_of(nvml_name)
    found = CATALOG.by_product(label)
    assert found is not None and found.key == model, label
    assert pci_id in found.pci_device_ids
    assert gpu_pci_ids(found, label, None) == (pci_id,)


def test_the_gh200_of_nvidias_dra_demo_finds_its_model_by_the_name_it_reports() -> None:
    """kubernetes-sigs/dra-driver-nvidia-gpu@95932046
    demo/specs/extended-resources/mig-1g-12gb.yaml:31,39 shows ``nvidia-smi -L`` on two GH200
    (96GB HBM3), each with the mig-parted config's seven ``1g.12gb`` instances. The DRA driver
    publishes that NVML name as ``productName`` and GFD labels the node with its sanitised form,
    so both must find the catalog model whose profiles the demo creates."""
    from migslice.mig.catalog import product_label_of
    from tests import paths

    text = (paths.FIXTURES / "dra" / "demo-extended-resources-mig-1g-12gb.yaml").read_text()
    gpus: dict[str, Counter[str]] = {}
    current = ""
    for line in text.splitlines():
        if gpu := re.match(r"#\s+GPU (\d+): (.+?) \(UUID: GPU-", line):
            current = f"{gpu[1]}:{gpu[2]}"
            gpus[current] = Counter()
        elif mig := re.match(r"#\s+MIG (\S+)\s+Device\s+\d+: \(UUID: MIG-", line):
            gpus[current][mig[1]] += 1
    assert gpus == {
        "0:NVIDIA GH200 96GB HBM3": Counter({"1g.12gb": 7}),
        "1:NVIDIA GH200 96GB HBM3": Counter({"1g.12gb": 7}),
    }
    for key, instances in gpus.items():
        label = product_label_of(key.split(":", 1)[1])
        assert label == "NVIDIA-GH200-96GB-HBM3"
        model = CATALOG.by_product(label)
        assert model is not None and model.key == "H100-96GB", label
        assert 0x2342 in model.pci_device_ids  # GH200's device id (open-gpu-kernel-modules)
        for name, count in instances.items():
            assert count == model.profile(name).max_count
