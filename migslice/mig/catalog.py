"""The MIG catalog: GPU models, their GPU-instance profiles and legal placements.

The facts are data (``catalog_data``), each model with its source. A model is found by the GPU
Feature Discovery product label (``nvidia.com/gpu.product``), by a short alias, or by PCI
device id. A model the catalog does not know can be built from NVML-reported profile data
(:func:`model_from_nvml`), which is what the node agent does on new hardware.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migslice.errors import NotFoundError
from migslice.mig.profiles import ProfileName, parse_profile_name


class UnknownModelError(NotFoundError):
    """A GPU model that the catalog does not know."""


class UnknownProfileError(NotFoundError):
    """A profile name that a GPU model does not offer."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One GPU-instance profile of one GPU model.

    ``placements`` are the legal start indices in memory-slice units; every placement of the
    profile occupies ``memory_slices`` consecutive memory slices from its start.
    ``gi_profile_id`` is None where NVIDIA publishes no id for the model (the node agent
    reports NVML's own; nvidia-smi takes the profile name instead).
    """

    name: str
    gi_profile_id: int | None
    compute_slices: int
    memory_slices: int
    max_count: int
    placements: tuple[int, ...]
    memory_mib: int | None = None
    sm_count: int | None = None
    resource_name: str = field(default="", init=False, compare=False, repr=False)
    """The mixed-strategy extended resource name, e.g. ``nvidia.com/mig-1g.10gb.me`` (made
    once: the planners ask for it per profile per plan)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_name", self.parsed.resource_name)

    @property
    def parsed(self) -> ProfileName:
        return parse_profile_name(self.name)

    @property
    def nominal_memory_mib(self) -> int:
        """The memory the name promises (``10gb`` -> 10240 MiB); see docs/policy.md."""
        return self.parsed.memory_gb * 1024

    @property
    def is_media_extended(self) -> bool:
        return self.parsed.has_media_extension

    @property
    def has_all_media(self) -> bool:
        return self.parsed.has_all_media

    @property
    def has_no_media(self) -> bool:
        return self.parsed.has_no_media


@dataclass(frozen=True, slots=True)
class GpuModel:
    """A GPU model with MIG support: its slices and profiles."""

    key: str
    description: str
    product_names: tuple[str, ...]
    pci_device_ids: tuple[int, ...]
    memory_slices: int
    compute_slices: int
    profiles: tuple[Profile, ...]
    source: str
    aliases: tuple[str, ...] = ()
    memory_mib: int | None = None
    _by_name: Mapping[str, Profile] = field(default_factory=dict, compare=False, repr=False)
    _by_resource: Mapping[str, Profile] = field(default_factory=dict, compare=False, repr=False)
    mig_resources: frozenset[str] = field(
        default=frozenset(), init=False, compare=False, repr=False
    )
    """The mixed-strategy resource names of its profiles (``nvidia.com/mig-1g.10gb``)."""
    pci_filters: tuple[str, ...] = field(default=(), init=False, compare=False, repr=False)
    """mig-parted device-filter strings (``0xDDDDVVVV``: device id, then NVIDIA's 10DE)."""
    plain_profiles: frozenset[str] = field(
        default=frozenset(), init=False, compare=False, repr=False
    )
    """The names of its profiles without a media attribute (``1g.10gb``, not ``1g.10gb+me``):
    those a re-planned GPU's layout is made of."""

    def __hash__(self) -> int:
        # Equal models share a key; hashing every profile each time cost the caches more
        # than their work saved.
        return hash(self.key)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {p.name: p for p in self.profiles})
        first = {p.resource_name: p for p in reversed(self.profiles)}  # the first one wins
        object.__setattr__(self, "_by_resource", first)
        object.__setattr__(self, "mig_resources", frozenset(first))
        filters = tuple(f"0x{device:04X}10DE" for device in self.pci_device_ids)
        object.__setattr__(self, "pci_filters", filters)
        plain = frozenset(p.name for p in self.profiles if not p.parsed.attribute)
        object.__setattr__(self, "plain_profiles", plain)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def has_profile(self, name: str) -> bool:
        return name in self._by_name

    def profile(self, name: str) -> Profile:
        """The profile called ``name``; UnknownProfileError lists the ones that exist."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownProfileError(
                f"GPU model {self.key} has no MIG profile {name!r}; "
                f"its profiles are {', '.join(self.profile_names)}"
            ) from None

    def profile_by_resource(self, resource: str) -> Profile | None:
        return self._by_resource.get(resource)


@dataclass(frozen=True, slots=True)
class Catalog:
    """A set of GPU models with lookups by product label, alias and PCI id."""

    models: tuple[GpuModel, ...]

    def keys(self) -> tuple[str, ...]:
        return tuple(m.key for m in self.models)

    def find(self, text: str) -> GpuModel | None:
        """Look a model up by product label, key, alias or PCI id; None if unknown."""
        wanted = _normalise(text)
        if not wanted:
            return None
        pci = _parse_pci(text)
        for model in self.models:
            names = (model.key, *model.product_names, *model.aliases)
            if any(_normalise(n) == wanted for n in names):
                return model
            if pci is not None and pci in model.pci_device_ids:
                return model
        return None

    def get(self, text: str) -> GpuModel:
        """Like :meth:`find`, but an unknown model raises an error listing the known ones."""
        model = self.find(text)
        if model is None:
            raise UnknownModelError(
                f"unknown GPU model {text!r}; known models: {', '.join(self.keys())} "
                "(a GFD product label such as NVIDIA-A100-SXM4-80GB or a PCI id such as "
                "0x20B2 also works; run `migslice models`)"
            )
        return model

    def by_product(self, product_label: str) -> GpuModel | None:
        """Model for a ``nvidia.com/gpu.product`` label value (``-SHARED``/``-MIG-..`` dropped)."""
        return self.find(strip_product_suffix(product_label))


def product_label_of(nvml_name: str) -> str:
    """The GPU Feature Discovery product label of an NVML device name: ``NVIDIA A100-SXM4-80GB``
    -> ``NVIDIA-A100-SXM4-80GB``, ``NVIDIA H100 80GB HBM3`` -> ``NVIDIA-H100-80GB-HBM3``.

    GFD splits the name at whitespace, removes every character outside ``[A-Za-z0-9-_.]`` from
    each part and joins the parts with ``-`` (NVIDIA/k8s-device-plugin ``internal/lm/
    resource.go``, ``getProductName`` and ``sanitise``). NVIDIA's DRA driver publishes the NVML
    name itself as the ``productName`` attribute (``cmd/gpu-kubelet-plugin/nvlib.go``), so a
    DRA device finds its model by the same key as a device-plugin node's label."""
    parts = (re.sub(r"[^A-Za-z0-9_.-]", "", part) for part in nvml_name.split())
    return "-".join(part for part in parts if part)


def strip_product_suffix(product_label: str) -> str:
    """GFD appends ``-SHARED`` (time-slicing) or ``-MIG-<profile>`` (single strategy)."""
    base = product_label
    if base.endswith("-SHARED"):
        base = base[: -len("-SHARED")]
    marker = base.find("-MIG-")
    if marker > 0:
        base = base[:marker]
    return base


def _normalise(text: str) -> str:
    return text.strip().upper().replace(" ", "-").replace("_", "-")


def _parse_pci(text: str) -> int | None:
    value = text.strip().lower()
    if not value.startswith("0x"):
        return None
    try:
        number = int(value, 16)
    except ValueError:
        return None
    if number > 0xFFFF:
        if number & 0xFFFF != 0x10DE:
            return None
        number >>= 16
    return number


@dataclass(frozen=True, slots=True)
class NvmlProfileInfo:
    """What ``nvmlDeviceGetGpuInstanceProfileInfoV`` and ``...PossiblePlacements`` report."""

    name: str
    gi_profile_id: int
    slice_count: int
    instance_count: int
    memory_mib: int
    sm_count: int
    placements: tuple[tuple[int, int], ...]

    @property
    def profile_name(self) -> str:
        """The profile name without NVML's ``MIG`` prefix (``MIG 1g.10gb`` -> ``1g.10gb``)."""
        return self.name.removeprefix("MIG ").strip()


def model_from_nvml(
    product_name: str,
    pci_device_id: int,
    profiles: Sequence[NvmlProfileInfo],
    *,
    memory_mib: int | None = None,
) -> GpuModel:
    """Build a model from NVML-reported profile data for a GPU the catalog lacks.

    NVML names profiles ``MIG 1g.10gb``; the prefix is dropped. Memory slices come from the
    placement sizes, the GPU's slice totals from the largest profile.
    """
    if not profiles:
        raise ValueError(f"NVML reported no MIG profiles for {product_name}")
    built: list[Profile] = []
    for info in profiles:
        name = info.profile_name
        parse_profile_name(name)
        sizes = {size for _, size in info.placements}
        if len(sizes) != 1:
            raise ValueError(f"profile {name} of {product_name} has placements of sizes {sizes}")
        built.append(
            Profile(
                name=name,
                gi_profile_id=info.gi_profile_id,
                compute_slices=info.slice_count,
                memory_slices=sizes.pop(),
                max_count=info.instance_count,
                placements=tuple(sorted(start for start, _ in info.placements)),
                memory_mib=info.memory_mib,
                sm_count=info.sm_count,
            )
        )
    built.sort(key=lambda p: (p.compute_slices, p.memory_slices, p.name))
    widest = max(built, key=lambda p: (p.memory_slices, p.compute_slices))
    return GpuModel(
        key=product_name,
        description=f"{product_name} (from NVML)",
        product_names=(product_name,),
        pci_device_ids=(pci_device_id,),
        memory_slices=max(start + p.memory_slices for p in built for start in p.placements),
        compute_slices=widest.compute_slices,
        profiles=tuple(built),
        source="NVML on the node",
        memory_mib=memory_mib,
    )
