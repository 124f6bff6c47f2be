"""The built-in MIG catalog, as data.

Sources (see docs/catalog.md for the evidence behind each row):

* Placements and GI profile ids of the 7-compute / 8-memory-slice GPUs: ``nvidia-smi mig -lgipp``
  on A100-40GB, H100 PCIe, H100 SXM5 and H100 NVL (NVIDIA MIG User Guide and public outputs);
  the same ids appear in ``-lgip`` of A100-80GB, H200, GH200, B200 and GB200, whose placements
  are taken to be the same.
* 4-memory-slice GPUs (A30, RTX PRO 6000 Blackwell): A30 ``-lgipp``; RTX PRO 6000 shares the
  profile ids and is taken to share the placement shape.
* RTX PRO 5000 and RTX PRO 4500 Blackwell (2 memory slices): profiles, fractions and counts
  from the MIG User Guide; placements derived from them, GI profile ids unpublished (``None``).
* Profile memory (MiB = GiB x 1024 from ``nvidia-smi mig -lgip``) and SM counts where a public
  ``-lgip`` output shows them; ``None`` where none was seen.
* Product labels follow GPU Feature Discovery (NVML name, spaces to ``-``); PCI ids from the
  PCI id database and mig-parted's default config.

Memory and names drift with driver and board; the node agent reports NVML's own values, and a
model missing here is built from them (``catalog.model_from_nvml``).
"""

from __future__ import annotations

from migslice.mig.catalog import Catalog, GpuModel, Profile

# (kind, gi profile id, compute slices, memory slices, max count, legal starts)
_EIGHT_SLICE_KINDS: dict[str, tuple[int, int, int, int, tuple[int, ...]]] = {
    "1g": (19, 1, 1, 7, (0, 1, 2, 3, 4, 5, 6)),
    "1g+me": (20, 1, 1, 1, (0, 1, 2, 3, 4, 5, 6)),
    "1g2x": (15, 1, 2, 4, (0, 2, 4, 6)),
    "2g": (14, 2, 2, 3, (0, 2, 4)),
    "3g": (9, 3, 4, 2, (0, 4)),
    "4g": (5, 4, 4, 1, (0,)),
    "7g": (0, 7, 8, 1, (0,)),
}

_A30_KINDS: dict[str, tuple[int, int, int, int, tuple[int, ...]]] = {
    "1g": (14, 1, 1, 4, (0, 1, 2, 3)),
    "1g+me": (21, 1, 1, 1, (0, 1, 2, 3)),
    "2g": (5, 2, 2, 2, (0, 2)),
    "2g+me": (6, 2, 2, 1, (0, 2)),
    "4g": (0, 4, 4, 1, (0,)),
}

_RTX_PRO_KINDS: dict[str, tuple[int, int, int, int, tuple[int, ...]]] = {
    "1g": (14, 1, 1, 4, (0, 1, 2, 3)),
    "1g+me": (21, 1, 1, 1, (0, 1, 2, 3)),
    "1g+gfx": (47, 1, 1, 4, (0, 1, 2, 3)),
    "1g+me.all": (65, 1, 1, 1, (0, 1, 2, 3)),
    "1g-me": (67, 1, 1, 4, (0, 1, 2, 3)),
    "2g": (5, 2, 2, 2, (0, 2)),
    "2g+gfx": (35, 2, 2, 2, (0, 2)),
    "2g+me.all": (64, 2, 2, 1, (0, 2)),
    "2g-me": (66, 2, 2, 2, (0, 2)),
    "4g": (0, 4, 4, 1, (0,)),
    "4g+gfx": (32, 4, 4, 1, (0,)),
}

# RTX PRO 5000 Blackwell 48GB: no GI profile id and no -lgipp placement is published (see
# docs/catalog.md, "RTX PRO 5000 Blackwell"). Memory fractions 1/2 and Full and the counts are
# the MIG User Guide's; on a GPU of two memory slices the starts follow: two 1g fit (max 2), so
# a 1g starts at 0 and at 1; a 2g fills the GPU, so it starts at 0 only.
_RTX_PRO_5000_KINDS: dict[str, tuple[int | None, int, int, int, tuple[int, ...]]] = {
    "1g": (None, 1, 1, 2, (0, 1)),
    "1g+me": (None, 1, 1, 1, (0, 1)),
    "1g+gfx": (None, 1, 1, 2, (0, 1)),
    "1g+me.all": (None, 1, 1, 1, (0, 1)),
    "1g-me": (None, 1, 1, 2, (0, 1)),
    "2g": (None, 2, 2, 1, (0,)),
    "2g+gfx": (None, 2, 2, 1, (0,)),
}

# RTX PRO 4500 Blackwell 32GB: the same two-slice shape, from the MIG User Guide's RTX PRO 4500
# table (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html, "RTX PRO
# 4500 Blackwell MIG Profiles"): 1g.16gb, +gfx and -me (1/2, max 2), +me.all (1/2, max 1),
# 2g.32gb and +gfx (Full, max 1). It lists no 1g+me, so none is here. No GI profile id or
# -lgipp placement is published; the starts follow as for the 5000.
_RTX_PRO_4500_KINDS: dict[str, tuple[int | None, int, int, int, tuple[int, ...]]] = {
    "1g": (None, 1, 1, 2, (0, 1)),
    "1g+gfx": (None, 1, 1, 2, (0, 1)),
    "1g+me.all": (None, 1, 1, 1, (0, 1)),
    "1g-me": (None, 1, 1, 2, (0, 1)),
    "2g": (None, 2, 2, 1, (0,)),
    "2g+gfx": (None, 2, 2, 1, (0,)),
}

Row = tuple[str, str, int | None, int | None]  # kind, profile name, memory MiB, SM count


def _profiles(
    kinds: dict[str, tuple[int, int, int, int, tuple[int, ...]]]
    | dict[str, tuple[int | None, int, int, int, tuple[int, ...]]],
    rows: list[Row],
) -> tuple[Profile, ...]:
    built = []
    for kind, name, memory_mib, sm_count in rows:
        gi_id, compute, memory, max_count, starts = kinds[kind]
        built.append(Profile(name, gi_id, compute, memory, max_count, starts, memory_mib, sm_count))
    return tuple(built)


def _eight(
    gb1: int, gb2: int, gb4: int, gb7: int, mib: tuple[int | None, ...], sms: tuple[int | None, ...]
) -> tuple[Profile, ...]:
    """The standard 7/8-slice table: 1g, 1g+me, 1g (double memory), 2g, 3g, 4g, 7g."""
    rows: list[Row] = [
        ("1g", f"1g.{gb1}gb", mib[0], sms[0]),
        ("1g+me", f"1g.{gb1}gb+me", mib[0], sms[0]),
        ("1g2x", f"1g.{gb2}gb", mib[1], sms[1]),
        ("2g", f"2g.{gb2}gb", mib[2], sms[2]),
        ("3g", f"3g.{gb4}gb", mib[3], sms[3]),
        ("4g", f"4g.{gb4}gb", mib[4], sms[4]),
        ("7g", f"7g.{gb7}gb", mib[5], sms[5]),
    ]
    return _profiles(_EIGHT_SLICE_KINDS, rows)


_LGIPP = "nvidia-smi mig -lgipp placements (MIG User Guide; public outputs)"

MODELS: tuple[GpuModel, ...] = (
    GpuModel(
        key="A30-24GB",
        description="NVIDIA A30 24GB",
        product_names=("NVIDIA-A30",),
        pci_device_ids=(0x20B7,),
        memory_slices=4,
        compute_slices=4,
        profiles=_profiles(
            _A30_KINDS,
            [
                ("1g", "1g.6gb", 5952, 14),
                ("1g+me", "1g.6gb+me", 5952, 14),
                ("2g", "2g.12gb", 11968, 28),
                ("2g+me", "2g.12gb+me", 11968, 28),
                ("4g", "4g.24gb", 24000, 56),
            ],
        ),
        source="MIG User Guide A30 table; public A30 -lgip/-lgipp outputs",
        aliases=("A30",),
        memory_mib=24576,
    ),
    GpuModel(
        key="A100-40GB",
        description="NVIDIA A100 40GB (SXM4, PCIe; A800 40GB)",
        product_names=(
            "NVIDIA-A100-SXM4-40GB",
            "NVIDIA-A100-PCIE-40GB",
            "NVIDIA-A800-SXM4-40GB",
            "NVIDIA-A800-40GB-Active",
        ),
        pci_device_ids=(0x20B0, 0x20B1, 0x20F1, 0x20BD, 0x20F6),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            5, 10, 20, 40, (4864, None, 9984, 20096, 20096, 40448), (14, None, 28, 42, 56, 98)
        ),
        source=f"MIG User Guide A100 table; A100-40GB -lgip; {_LGIPP}",
        aliases=("A100-SXM4-40GB", "A100-PCIE-40GB", "A100"),
        memory_mib=40960,
    ),
    GpuModel(
        key="A100-80GB",
        description="NVIDIA A100 80GB (SXM4, PCIe; A800 80GB)",
        product_names=(
            "NVIDIA-A100-SXM4-80GB",
            "NVIDIA-A100-80GB-PCIe",
            "NVIDIA-A800-SXM4-80GB",
            "NVIDIA-A800-80GB-PCIe",
        ),
        pci_device_ids=(0x20B2, 0x20B5, 0x20F3, 0x20F5),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            10, 20, 40, 80, (9728, None, 19968, 40192, 40192, 80896), (14, None, 28, 42, 56, 98)
        ),
        source=f"two public A100-80GB -lgip outputs; mig-parted default config; {_LGIPP}",
        aliases=("A100-SXM4-80GB", "A100-80GB-PCIE"),
        memory_mib=81920,
    ),
    GpuModel(
        key="H100-80GB",
        description="NVIDIA H100 80GB SXM5 HBM3 (H800)",
        product_names=("NVIDIA-H100-80GB-HBM3", "NVIDIA-H800"),
        pci_device_ids=(0x2330, 0x2324),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            10, 20, 40, 80, (9984, 20096, 20096, 40448, 40448, 81152), (16, 26, 32, 60, 64, 132)
        ),
        source=f"public H100 SXM5 -lgip/-lgipp output; MIG User Guide H100 table; {_LGIPP}",
        aliases=("H100-SXM5-80GB", "H100-80GB-HBM3", "H100"),
        memory_mib=81920,
    ),
    GpuModel(
        key="H100-PCIe",
        description="NVIDIA H100 80GB PCIe (H800 PCIe)",
        product_names=("NVIDIA-H100-PCIe", "NVIDIA-H800-PCIe"),
        pci_device_ids=(0x2331, 0x2322),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            10, 20, 40, 80, (9856, 19968, 19968, 40192, 40192, 80896), (14, 14, 30, 46, 62, 114)
        ),
        source=f"H100 PCIe -lgip/-lgipp, driver 525.125.06 (public how-to); {_LGIPP}",
        aliases=("H100-80GB-PCIE",),
        memory_mib=81920,
    ),
    GpuModel(
        key="H100-94GB",
        description="NVIDIA H100 NVL / H100 94GB (PCIe, SXM5; H800 NVL)",
        # 0x2339's NVML name is plain "NVIDIA H100" (open-gpu-kernel-modules README)
        product_names=("NVIDIA-H100-NVL", "NVIDIA-H100", "NVIDIA-H800-NVL"),
        pci_device_ids=(0x2321, 0x2339, 0x233A),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            12, 24, 47, 94, (11008, 22144, 22144, 47488, 47488, 95360), (16, 26, 32, 60, 64, 132)
        ),
        source=f"gpu-operator and mig-parted H100 NVL -lgip excerpts; Azure walkthrough; {_LGIPP}",
        aliases=("H100-NVL",),
        memory_mib=96256,
    ),
    GpuModel(
        key="H100-96GB",
        description="NVIDIA H100 96GB / GH200 96GB / H20",
        # "NVIDIA GH200 96GB HBM3": nvidia-smi -L of two GH200 with 7 x 1g.12gb each in
        # kubernetes-sigs/dra-driver-nvidia-gpu demo/specs/extended-resources/mig-1g-12gb.yaml
        product_names=(
            "NVIDIA-GH200-480GB",
            "NVIDIA-GH200-120GB",
            "NVIDIA-GH200-96GB-HBM3",
            "NVIDIA-H100-96GB-HBM3",
            "NVIDIA-H20",
        ),
        pci_device_ids=(0x2342, 0x233D, 0x20B6, 0x2329),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            12, 24, 48, 96, (11264, 23552, 23552, 47616, 47616, 95232), (16, 26, 32, 60, 64, 132)
        ),
        source=f"public GH200 -lgip log; MIG User Guide H100-96GB table; {_LGIPP}",
        aliases=("GH200-96GB", "H20"),
        memory_mib=98304,
    ),
    GpuModel(
        key="GH200-144GB",
        description="NVIDIA GH200 144GB HBM3e",
        product_names=("NVIDIA-GH200-144G-HBM3e",),
        pci_device_ids=(0x2348,),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            18, 36, 72, 144, (17920, 36096, 36096, None, None, None), (16, 26, 32, None, None, None)
        ),
        source=f"mig-parted default config names; partial -lgip (mig-parted PR #139); {_LGIPP}",
        aliases=("GH200",),
        memory_mib=147456,
    ),
    GpuModel(
        key="H200-141GB",
        description="NVIDIA H200 141GB (SXM, NVL)",
        product_names=("NVIDIA-H200", "NVIDIA-H200-NVL"),
        pci_device_ids=(0x2335, 0x233B),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            18,
            35,
            71,
            141,
            (16384, 33024, 33024, 71168, 71168, 143104),
            (16, 26, 32, 60, 64, 132),
        ),
        source=f"H200 -lgip (mig-parted issue #120); MIG User Guide H200 table; {_LGIPP}",
        aliases=("H200", "H200-NVL"),
        memory_mib=144384,
    ),
    GpuModel(
        key="B200",
        description="NVIDIA B200 180GB",
        product_names=("NVIDIA-B200",),
        pci_device_ids=(0x2901,),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            23, 45, 90, 180, (20992, 45312, 45312, None, None, None), (18, 30, 36, None, None, None)
        ),
        source=f"MIG User Guide B200 table; partial -lgip (mig-parted PR #166, #187); {_LGIPP}",
        aliases=("B200-180GB",),
        memory_mib=184320,
    ),
    GpuModel(
        key="GB200",
        description="NVIDIA GB200 186GB",
        product_names=("NVIDIA-GB200",),
        pci_device_ids=(0x2941,),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(
            23, 47, 93, 186, (22528, 46592, 46592, None, None, None), (18, 32, 38, None, None, None)
        ),
        source=f"mig-parted default config (PR #228); partial -lgip (issue #227); {_LGIPP}",
        aliases=("GB200-186GB",),
        memory_mib=190464,
    ),
    GpuModel(
        key="B300",
        description="NVIDIA B300 269GB",
        product_names=("NVIDIA-B300-SXM6-AC", "NVIDIA-B300"),
        pci_device_ids=(0x3182,),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(34, 67, 135, 269, (None,) * 6, (None,) * 6),
        source=f"mig-parted default config names only; {_LGIPP} (assumed)",
        aliases=("B300-269GB",),
    ),
    GpuModel(
        key="GB300",
        description="NVIDIA GB300 278GB",
        product_names=("NVIDIA-GB300",),
        pci_device_ids=(0x31C2,),
        memory_slices=8,
        compute_slices=7,
        profiles=_eight(35, 70, 139, 278, (None,) * 6, (None,) * 6),
        source=f"mig-parted default config names only; {_LGIPP} (assumed)",
        aliases=("GB300-278GB",),
    ),
    GpuModel(
        key="RTX-PRO-6000",
        description="NVIDIA RTX PRO 6000 Blackwell (Server, Workstation, Max-Q) 96GB",
        product_names=(
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
        ),
        pci_device_ids=(0x2BB5, 0x2BB1, 0x2BB4),
        memory_slices=4,
        compute_slices=4,
        profiles=_profiles(
            _RTX_PRO_KINDS,
            [
                ("1g", "1g.24gb", 24192, 46),
                ("1g+me", "1g.24gb+me", 24192, 46),
                ("1g+gfx", "1g.24gb+gfx", 24192, 46),
                ("1g+me.all", "1g.24gb+me.all", 24192, 46),
                ("1g-me", "1g.24gb-me", 23680, 46),
                ("2g", "2g.48gb", 47616, 94),
                ("2g+gfx", "2g.48gb+gfx", 47616, 94),
                ("2g+me.all", "2g.48gb+me.all", 47616, 94),
                ("2g-me", "2g.48gb-me", 47616, 94),
                ("4g", "4g.96gb", None, None),
                ("4g+gfx", "4g.96gb+gfx", None, None),
            ],
        ),
        source=(
            "profile ids and max counts: GKE partition_gpu; -lgip from GKE, Bottlerocket and "
            "cubecos outputs; MIG User Guide RTX PRO 6000 table; placements assumed as A30"
        ),
        aliases=("RTX-PRO-6000-Blackwell", "RTXPRO6000"),
        memory_mib=98304,
    ),
    GpuModel(
        key="RTX-PRO-5000",
        description="NVIDIA RTX PRO 5000 Blackwell 48GB",
        product_names=("NVIDIA-RTX-PRO-5000-Blackwell",),
        pci_device_ids=(0x2BB3,),
        memory_slices=2,
        compute_slices=2,
        profiles=_profiles(
            _RTX_PRO_5000_KINDS,
            [
                ("1g", "1g.24gb", None, None),
                ("1g+me", "1g.24gb+me", None, None),
                ("1g+gfx", "1g.24gb+gfx", None, None),
                ("1g+me.all", "1g.24gb+me.all", None, None),
                ("1g-me", "1g.24gb-me", None, None),
                ("2g", "2g.48gb", None, None),
                ("2g+gfx", "2g.48gb+gfx", None, None),
            ],
        ),
        source=(
            "profiles, memory fractions and max counts: MIG User Guide RTX PRO 5000 table; max 2 "
            "instances: MIG User Guide supported GPUs; PCI id 0x2BB3 and NVML name: NVIDIA "
            "open-gpu-kernel-modules README; placements derived (2 memory slices), GI profile "
            "ids unpublished"
        ),
        aliases=("RTX-PRO-5000-Blackwell", "RTXPRO5000"),
        memory_mib=49152,
    ),
    GpuModel(
        key="RTX-PRO-4500",
        description="NVIDIA RTX PRO 4500 Blackwell 32GB",
        # NVML name "NVIDIA RTX PRO 4500 Blackwell" for 0x2C31 (subsystem 2051):
        # NVIDIA/open-gpu-kernel-modules@df1c9a3d README.md:981-984; pci.ids 2c31
        product_names=("NVIDIA-RTX-PRO-4500-Blackwell",),
        pci_device_ids=(0x2C31,),
        memory_slices=2,
        compute_slices=2,
        profiles=_profiles(
            _RTX_PRO_4500_KINDS,
            [
                ("1g", "1g.16gb", None, None),
                ("1g+gfx", "1g.16gb+gfx", None, None),
                ("1g+me.all", "1g.16gb+me.all", None, None),
                ("1g-me", "1g.16gb-me", None, None),
                ("2g", "2g.32gb", None, None),
                ("2g+gfx", "2g.32gb+gfx", None, None),
            ],
        ),
        source=(
            "profiles, memory fractions and max counts: MIG User Guide RTX PRO 4500 table; max 2 "
            "instances, GB203, 32GB: MIG User Guide supported GPUs (610); PCI id 0x2C31 and NVML "
            "name: NVIDIA open-gpu-kernel-modules README; placements derived (2 memory slices), "
            "GI profile ids unpublished"
        ),
        aliases=("RTX-PRO-4500-Blackwell", "RTXPRO4500"),
        memory_mib=32768,
    ),
)

CATALOG = Catalog(MODELS)
