"""How a GPU size resolves to one MIG profile for one tenant (docs/policy.md, "How sizes resolve").

1. The GPU models considered are those of the products present in the cluster (GFD label
   ``nvidia.com/gpu.product``) that the policy allows (``spec.allowedProducts``; empty = all).
2. On each model the candidates are its profiles that the policy allows and that *meet* the
   request: nominal memory >= requested memory, and compute slices >= requested compute.
   Nominal memory is the memory in the profile name taken as GiB (``1g.10gb`` -> 10240 MiB),
   not NVML's figure (9728 MiB on an A100), so ``10Gi`` and ``10G`` both get ``1g.10gb``.
   If the size names a preferred profile for a model, that profile is the model's only
   candidate.
3. The smallest candidate wins: least nominal memory, then fewest compute slices. Ties break
   by policy preference, then by least waste (the smaller share of its GPU's memory slices),
   then by more products offering it, then by name.
4. The pod is steered (node affinity) to every allowed product whose model offers the winner.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from migslice.mig import CATALOG, GpuModel, Profile
from migslice.mig.catalog import strip_product_suffix
from migslice.policy.types import SizeClass, TenantPolicy, Tier
from migslice.quantity import format_mib
from migslice.whynot import WhyNot


@dataclass(frozen=True, slots=True)
class Offer:
    """A GPU product present in the cluster (its GFD label) and its catalog model."""

    product: str
    model: GpuModel

    @property
    def is_whole(self) -> bool:
        """The label names whole, unshared GPUs: no ``-MIG-<profile>`` (GFD's single strategy:
        ``nvidia.com/gpu`` is a MIG slice there; ``-MIG-INVALID``: MIG on without a strategy)
        and no ``-SHARED`` (time-sliced or MPS replicas) suffix (NVIDIA/k8s-device-plugin
        ``internal/lm/resource.go`` getProductName, at 1b826acc)."""
        return self.product == strip_product_suffix(self.product)

    @property
    def is_sliced(self) -> bool:
        """The label says ``nvidia.com/gpu`` is a MIG slice (``-MIG-...``, single strategy)."""
        return "-MIG-" in self.product


@dataclass(frozen=True, slots=True)
class Need:
    """What a pod asks for one slice: memory, optionally compute, optionally via a size."""

    memory_mib: int
    compute_slices: int | None = None
    size: SizeClass | None = None

    def describe(self) -> str:
        what = f"{format_mib(self.memory_mib)} of GPU memory"
        if self.compute_slices is not None:
            what += f" and {self.compute_slices} compute slices"
        return f'size "{self.size.name}" ({what})' if self.size is not None else what


@dataclass(frozen=True, slots=True)
class Resolution:
    """The winning profile and the products that offer it."""

    profile: str
    resource: str
    compute_slices: int
    memory_slices: int
    products: tuple[str, ...]


@lru_cache(maxsize=512)
def model_key_of(text: str) -> str | None:
    """The catalog key for a product label, key or alias (cached: the catalog is static)."""
    model = CATALOG.by_product(text)
    return model.key if model is not None else None


def allows_product(policy: TenantPolicy, offer: Offer) -> bool:
    if not policy.allowed_products:
        return True
    return any(
        allowed == offer.product or model_key_of(allowed) == offer.model.key
        for allowed in policy.allowed_products
    )


def usable_offers(policy: TenantPolicy, offers: Iterable[Offer]) -> tuple[Offer, ...]:
    return tuple(o for o in offers if allows_product(policy, o))


def meets(profile: Profile, need: Need) -> bool:
    if profile.nominal_memory_mib < need.memory_mib:
        return False
    return need.compute_slices is None or profile.compute_slices >= need.compute_slices


def candidates_on(policy: TenantPolicy, model: GpuModel, need: Need) -> tuple[Profile, ...]:
    """The profiles of ``model`` that the policy allows and that meet ``need``."""
    preferred = need.size.preferred_on(model.key) if need.size is not None else None
    if preferred is not None and model.has_profile(preferred):
        pool: Sequence[Profile] = (model.profile(preferred),)
    else:
        pool = model.profiles
    return tuple(p for p in pool if policy.allows_profile(p.name) and meets(p, need))


def resolve_profile(
    policy: TenantPolicy, need: Need, offers: Sequence[Offer]
) -> Resolution | WhyNot:
    """The profile a pod of this tenant gets for ``need`` on this cluster, or why none."""
    usable = usable_offers(policy, offers)
    if not usable:
        present = ", ".join(sorted({o.product for o in offers})) or "none"
        return WhyNot(
            "no-model",
            f'no GPU product that policy "{policy.name}" allows is in the cluster '
            f"(spec.allowedProducts: {', '.join(policy.allowed_products) or 'all'}; "
            f"products in the cluster: {present})",
        )
    groups: dict[str, list[tuple[Offer, Profile]]] = {}
    models: dict[str, GpuModel] = {}
    for offer in usable:
        models[offer.model.key] = offer.model
    candidates_by_model = {key: candidates_on(policy, m, need) for key, m in models.items()}
    for offer in usable:
        for profile in candidates_by_model[offer.model.key]:
            groups.setdefault(profile.name, []).append((offer, profile))
    if not groups:
        return WhyNot("no-profile", _no_fit_message(policy, need, tuple(models.values())))

    def rank(name: str) -> tuple[int, int, int, float, int, str]:
        members = groups[name]
        profile = members[0][1]
        preferred = any(
            need.size is not None and need.size.preferred_on(o.model.key) == name
            for o, _ in members
        )
        waste = min(p.memory_slices / o.model.memory_slices for o, p in members)
        return (
            profile.nominal_memory_mib,
            profile.compute_slices,
            0 if preferred else 1,
            waste,
            -len(members),
            name,
        )

    best = min(groups, key=rank)
    members = groups[best]
    return Resolution(
        profile=best,
        resource=members[0][1].resource_name,
        compute_slices=max(p.compute_slices for _, p in members),
        memory_slices=max(p.memory_slices for _, p in members),
        products=tuple(sorted({o.product for o, _ in members})),
    )


def _no_fit_message(policy: TenantPolicy, need: Need, models: tuple[GpuModel, ...]) -> str:
    allowed = [p for m in models for p in m.profiles if policy.allows_profile(p.name)]
    keys = ", ".join(sorted(m.key for m in models))
    if not allowed:
        return (
            f'{need.describe()}: policy "{policy.name}" allows no MIG profile of the GPU models '
            f"in the cluster ({keys}); check spec.allowedProfiles and spec.deniedProfiles"
        )
    largest = max(allowed, key=lambda p: (p.nominal_memory_mib, p.compute_slices))
    hint = (
        f"the largest allowed is {largest.name} ({format_mib(largest.nominal_memory_mib)}, "
        f"{largest.compute_slices} compute slices)"
    )
    return (
        f'{need.describe()} does not fit any MIG profile that policy "{policy.name}" allows on '
        f"the GPU models in the cluster ({keys}); {hint}; ask for less, or ask an admin to "
        "allow a larger profile (spec.allowedProfiles) or GPU model (spec.allowedProducts)"
    )


def whole_gpu_memory_mib(model: GpuModel) -> int:
    """The memory of one whole GPU of ``model`` (the catalog's, else its largest profile's)."""
    if model.memory_mib is not None:
        return model.memory_mib
    return max(p.nominal_memory_mib for p in model.profiles)


def servable_models(
    policy: TenantPolicy, size: SizeClass, models: Iterable[GpuModel]
) -> tuple[str, ...]:
    """Keys of the catalog models (among ``models``) on which ``size`` resolves to some
    profile, or, for a ``dedicated`` size, whose whole GPU has its memory."""
    need = Need(size.memory_mib, size.compute_slices, size)
    allowed = [
        m
        for m in models
        if not policy.allowed_products
        or any(a in m.product_names or model_key_of(a) == m.key for a in policy.allowed_products)
    ]
    if size.tier is Tier.DEDICATED:
        return tuple(m.key for m in allowed if whole_gpu_memory_mib(m) >= size.memory_mib)
    return tuple(m.key for m in allowed if candidates_on(policy, m, need))
