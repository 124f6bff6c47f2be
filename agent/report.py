"""Turn NVML readings into the ``migslice.io/gpu-layout`` annotation (schema v1).

What NVML says is published as it is: the profile table with its placements, every instance
with its placement, MIG device UUID and busy flag. The catalog is only consulted to say loudly
when NVML and the catalog disagree (or the model is unknown), never to fill anything in.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass

from agent.readings import GpuReading
from migslice.mig import CATALOG, Catalog, NvmlProfileInfo
from migslice.objects.gpu_layout import (
    AgentGpu,
    AgentInstance,
    AgentReport,
    render_layout_annotation,
)

_GFD_DROP = re.compile(r"[^A-Za-z0-9\-_. ]")


def gfd_product_name(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` spelling of an NVML device name (as GPU Feature
    Discovery writes it: characters outside ``[A-Za-z0-9-_. ]`` dropped, spaces to ``-``)."""
    return _GFD_DROP.sub("", nvml_name).strip().replace(" ", "-")


@dataclass(frozen=True, slots=True)
class Report:
    """The annotation's content, and what an admin should hear about."""

    layout: AgentReport
    warnings: tuple[str, ...]

    def text(self) -> str:
        """The annotation value, as written on the Node."""
        return render_layout_annotation(self.layout)

    def content_key(self) -> str:
        """The annotation without its timestamp: equal keys mean nothing changed."""
        return render_layout_annotation(dataclasses.replace(self.layout, observed_at=""))


def _catalog_warnings(gpu: GpuReading, product: str, catalog: Catalog) -> list[str]:
    model = catalog.by_product(product) or catalog.find(f"0x{gpu.pci_device_id:04X}")
    if model is None:
        return [
            f"GPU {gpu.index} ({product}, PCI 0x{gpu.pci_device_id:04X}) is not in the migslice "
            "catalog; publishing NVML's own profile table for it"
        ]
    problems = []
    for profile in gpu.profiles:
        name = profile.profile_name
        if not model.has_profile(name):
            problems.append(f"NVML offers {name}, the catalog of {model.key} does not")
            continue
        known = model.profile(name)
        starts = tuple(start for start, _ in profile.placements)
        sizes = {size for _, size in profile.placements}
        if starts != known.placements or sizes - {known.memory_slices}:
            problems.append(
                f"{name}: NVML placements {list(profile.placements)} differ from the "
                f"catalog's starts {list(known.placements)} of size {known.memory_slices}"
            )
    return [f"GPU {gpu.index} ({model.key}): {problem}" for problem in problems]


def build_report(
    gpus: Sequence[GpuReading], observed_at: str, catalog: Catalog = CATALOG
) -> Report:
    """The annotation for a node's GPUs; warnings for anything an admin should know."""
    warnings: list[str] = []
    read = [gpu for gpu in gpus if not gpu.error]
    products = {gpu.index: gfd_product_name(gpu.name) for gpu in read}
    product = products[read[0].index] if read else ""
    if len(set(products.values())) > 1:
        warnings.append(
            f"the node mixes GPU models {sorted(set(products.values()))}; the annotation "
            f"names {product}, and each GPU's pciDeviceId says which it is (migslice "
            "re-partitions only the GPUs of the node's model)"
        )
    entries: list[AgentGpu] = []
    profile_table: tuple[NvmlProfileInfo, ...] = ()
    for gpu in gpus:
        if gpu.error:
            entries.append(AgentGpu(gpu.index, False, (), gpu.uuid, gpu.error))
            warnings.append(
                f"GPU {gpu.index}: NVML could not read it ({gpu.error}); it is published "
                "with that error and no layout, and the extender does not use the node's "
                "annotation until it is read"
            )
            continue
        gpu_product = products[gpu.index]
        by_id = {p.gi_profile_id: p.profile_name for p in gpu.profiles}
        instances: list[AgentInstance] = []
        for instance in gpu.instances:
            name = by_id.get(instance.gi_profile_id)
            if name is None:
                warnings.append(
                    f"GPU {gpu.index}: instance {instance.gi_id} has GI profile id "
                    f"{instance.gi_profile_id}, which NVML's profile table lacks; left out"
                )
                continue
            instances.append(
                AgentInstance(name, instance.start, instance.size, instance.busy, instance.uuid)
            )
        entries.append(
            AgentGpu(gpu.index, gpu.mig_enabled, tuple(instances), gpu.uuid, "", gpu.pci_device_id)
        )
        if gpu.mig_capable:
            warnings.extend(_catalog_warnings(gpu, gpu_product, catalog))
            if not profile_table and gpu_product == product:
                profile_table = gpu.profiles
        if gpu.mig_pending:
            warnings.append(f"GPU {gpu.index}: a MIG mode change is pending (reset required)")
        if gpu.mig_enabled and not gpu.instances:
            warnings.append(
                f"GPU {gpu.index}: MIG is enabled but the GPU has no instances, so it serves "
                "no pods until it is partitioned"
            )
    layout = AgentReport(
        product=product,
        gpus=tuple(entries),
        pci_device_id=read[0].pci_device_id if read else None,
        observed_at=observed_at,
        profiles=profile_table,
    )
    return Report(layout, tuple(warnings))
