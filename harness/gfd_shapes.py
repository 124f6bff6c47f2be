"""The shapes GPU Feature Discovery gives a node with NVIDIA's device plugin: MIG mixed, single,
single with MIG-INVALID, none; time-sliced with and without renaming; MIG mixed with a MIG
resource time-sliced under its own name; MIG single time-sliced.
Each as GFD labels it (NVIDIA/k8s-device-plugin at 1b826acc: ``tests/expected-output-mig-
{mixed,single,none}.txt``, copied to ``tests/fixtures/gfd/``; the product suffixes from
``internal/lm/resource.go`` and ``mig-strategy.go``) with the allocatable its device plugin
advertises in that mode; and the dedicated, shared and MIG TenantPolicy specs whose pods must
never land on a slice, a replica, or (MIG) a replica of a slice
(``tests/webhook/test_gfd_shapes.py``, ``e2e/test_gfd_shapes_e2e.py``).
"""

from __future__ import annotations

MODEL = "NVIDIA-A100-SXM4-40GB"

# name -> (GFD expected-output file, labels beyond the product, the product, allocatable)
SHAPES: dict[str, tuple[str, dict[str, str], str, dict[str, str]]] = {
    "mixed": (
        "mig-mixed",
        {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.sharing-strategy": "none"},
        MODEL,
        {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.20gb": "2"},
    ),
    "single": (
        "mig-single",
        {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.sharing-strategy": "none"},
        f"{MODEL}-MIG-3g.20gb",
        {"nvidia.com/gpu": "2"},
    ),
    "invalid": (
        "mig-single",
        {"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.sharing-strategy": ""},
        f"{MODEL}-MIG-INVALID",
        {"nvidia.com/gpu": "0"},
    ),
    "none": (
        "mig-none",
        {"nvidia.com/gpu.sharing-strategy": "none"},
        MODEL,
        {"nvidia.com/gpu": "1"},
    ),
    "time-sliced": (
        "mig-none",
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
        f"{MODEL}-SHARED",
        {"nvidia.com/gpu": "4"},
    ),
    "time-sliced-renamed": (
        "mig-none",
        {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"},
        MODEL,
        {"nvidia.com/gpu.shared": "4"},
    ),
    "mixed-time-sliced": (
        "mig-mixed",
        {
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig-3g.20gb.count": "2",
            "nvidia.com/mig-3g.20gb.replicas": "2",
            "nvidia.com/mig-3g.20gb.sharing-strategy": "time-slicing",
            "nvidia.com/mig-3g.20gb.product": f"{MODEL}-MIG-3g.20gb-SHARED",
        },
        MODEL,
        {"nvidia.com/mig-3g.20gb": "4"},
    ),
    "single-time-sliced": (
        "mig-single",
        {
            "nvidia.com/mig.strategy": "single",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
            "nvidia.com/gpu.replicas": "2",
        },
        f"{MODEL}-MIG-3g.20gb",
        {"nvidia.com/gpu.shared": "4"},
    ),
}

DEDICATED = {"tiers": ["dedicated"], "sizes": {"full": {"memory": "40Gi", "tier": "dedicated"}}}
MIG = {"sizes": {"medium": {"memory": "20Gi"}}}
SHARED = {
    "isolation": "process",
    "tiers": ["shared"],
    "sizes": {"notebook": {"memory": "8Gi", "tier": "shared"}},
}
