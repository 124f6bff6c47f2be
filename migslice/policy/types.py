"""TenantPolicy as values: what one tenant may use and what its GPU sizes mean.

The wire form is the ``migslice.io/v1alpha1`` ``TenantPolicy`` custom resource
(``charts/migslice/templates/crd/tenantpolicies.yaml``, reference in ``docs/policy.md``);
:mod:`.parsing` turns it into these values. The tenant's name is the policy's ``metadata.name``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Isolation(StrEnum):
    """How strongly a tenant's GPU work must be separated from other tenants'."""

    HARDWARE = "hardware"  # MIG slices or whole GPUs only
    PROCESS = "process"  # also time-slicing (separate CUDA contexts)
    NONE = "none"  # also MPS (one shared MPS server)


class Tier(StrEnum):
    """A way to get GPU capacity (ARCHITECTURE §5)."""

    MIG = "mig"  # a MIG slice, nvidia.com/mig-<profile>
    DEDICATED = "dedicated"  # a whole GPU, nvidia.com/gpu
    SHARED = "shared"  # time-sliced, nvidia.com/gpu.shared
    MPS = "mps"  # CUDA MPS, nvidia.com/gpu.shared on an MPS node


class DeviceApi(StrEnum):
    """How the webhook gives a sized pod its GPU (``spec.deviceAPI``)."""

    EXTENDED_RESOURCE = "ExtendedResource"  # nvidia.com/mig-<profile> in the container's limits
    RESOURCE_CLAIM = "ResourceClaim"  # a ResourceClaim from migslice's template of the profile


DRA_TIERS = frozenset({Tier.MIG})
"""The tiers a ResourceClaim tenant may have: migslice's templates each ask for one MIG device."""


TIERS_BY_ISOLATION: Mapping[Isolation, frozenset[Tier]] = {
    Isolation.HARDWARE: frozenset({Tier.MIG, Tier.DEDICATED}),
    Isolation.PROCESS: frozenset({Tier.MIG, Tier.DEDICATED, Tier.SHARED}),
    Isolation.NONE: frozenset(Tier),
}


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One ``matchExpressions`` entry of a label selector."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector; an empty one selects everything."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class SizeClass:
    """An abstract GPU size (``small``, ``medium``) and what it needs.

    ``preferred_profiles`` maps a GPU model key (catalog key, e.g. ``A100-80GB``) to the profile
    this size should use on that model instead of the smallest one that fits.
    """

    name: str
    memory_mib: int
    compute_slices: int | None = None
    tier: Tier = Tier.MIG
    preferred_profiles: tuple[tuple[str, str], ...] = ()

    def preferred_on(self, model_key: str) -> str | None:
        for key, profile in self.preferred_profiles:
            if key == model_key:
                return profile
        return None


@dataclass(frozen=True, slots=True)
class Quota:
    """Limits in slice units; ``None`` means unlimited. ``profiles``: instances per profile."""

    instances: int | None = None
    compute_slices: int | None = None
    memory_slices: int | None = None
    profiles: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """One tenant's policy. Empty ``allowed_profiles``/``allowed_products`` allow all."""

    name: str
    generation: int = 1
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    isolation: Isolation = Isolation.HARDWARE
    tiers: tuple[Tier, ...] = (Tier.MIG,)
    sizes: tuple[SizeClass, ...] = ()
    default_size: str | None = None
    allowed_profiles: tuple[str, ...] = ()
    denied_profiles: tuple[str, ...] = ()
    allowed_products: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    quota: Quota = Quota()
    max_slices_per_pod: int | None = None
    device_api: DeviceApi = DeviceApi.EXTENDED_RESOURCE

    @property
    def ref(self) -> str:
        """``name@generation``, the value of the ``migslice.io/policy`` annotation."""
        return f"{self.name}@{self.generation}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether this policy covers ``namespace`` (by name or by its labels)."""
        if namespace in self.namespaces:
            return True
        return self.namespace_selector is not None and self.namespace_selector.matches(labels)

    def size(self, name: str) -> SizeClass | None:
        for size in self.sizes:
            if size.name == name:
                return size
        return None

    def allows_tier(self, tier: Tier) -> bool:
        return tier in self.tiers and tier in TIERS_BY_ISOLATION[self.isolation]

    def allows_profile(self, profile: str) -> bool:
        if profile in self.denied_profiles:
            return False
        if self.allowed_profiles:
            return profile in self.allowed_profiles
        # Media and graphics variants are scarce (one per GPU); only an explicit allow gets them.
        return "+" not in profile and "-" not in profile
