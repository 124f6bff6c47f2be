"""What GPU capacity a pod holds, in slice units, and the GPU resources it requests.

Charges (docs/policy.md, "Quota"): a MIG slice of profile ``<G>g.<M>gb`` counts as one
instance, G compute slices and its memory slices on the pod's GPU model (the node's model for
a bound pod, else the largest among the cluster's models with the profile); a whole GPU
(``nvidia.com/gpu``) as one instance of 7 compute and 8 memory slices; a shared or MPS GPU
(``nvidia.com/gpu.shared``) as one instance and no slices.

A ResourceClaim is charged as the extended resources its asks amount to (:func:`claim_asks`:
``count`` MIG devices of ``1g.10gb`` as ``nvidia.com/mig-1g.10gb: count``, whole GPUs as
``nvidia.com/gpu``), each priced on the model its ``productName`` selector names, if any.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from migslice.mig import CATALOG, profile_from_resource
from migslice.mig.catalog import product_label_of
from migslice.names import DRA_DRIVER, SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE, mig_resource_name
from migslice.objects.resource_claims import GpuAsk
from migslice.objects.resource_slices import DeviceKind

PRODUCT_NAME = f"{DRA_DRIVER}/productName"
ClaimAsk = tuple[str, int, str | None]
"""What one request of a claim holds: the extended resource it amounts to, how many, and the
catalog model its ``productName`` selector names (None: any)."""

WHOLE_GPU_COMPUTE_SLICES = 7
WHOLE_GPU_MEMORY_SLICES = 8


@dataclass(frozen=True, slots=True)
class SliceUsage:
    """Instances, compute slices and memory slices, plus instances per MIG profile."""

    instances: int = 0
    compute_slices: int = 0
    memory_slices: int = 0
    profiles: tuple[tuple[str, int], ...] = ()

    def __add__(self, other: SliceUsage) -> SliceUsage:
        return SliceUsage(
            self.instances + other.instances,
            self.compute_slices + other.compute_slices,
            self.memory_slices + other.memory_slices,
            _merge(self.profiles, other.profiles, 1),
        )

    def __sub__(self, other: SliceUsage) -> SliceUsage:
        return SliceUsage(
            self.instances - other.instances,
            self.compute_slices - other.compute_slices,
            self.memory_slices - other.memory_slices,
            _merge(self.profiles, other.profiles, -1),
        )

    def of_profile(self, name: str) -> int:
        for profile, count in self.profiles:
            if profile == name:
                return count
        return 0

    @property
    def is_zero(self) -> bool:
        return self.instances == 0 and self.compute_slices == 0 and self.memory_slices == 0


ZERO = SliceUsage()


def _merge(
    left: tuple[tuple[str, int], ...], right: tuple[tuple[str, int], ...], sign: int
) -> tuple[tuple[str, int], ...]:
    if not right:
        return left
    counts = dict(left)
    for name, count in right:
        counts[name] = counts.get(name, 0) + sign * count
    return tuple(sorted((n, c) for n, c in counts.items() if c != 0))


@lru_cache(maxsize=1024)
def charge_of(resource: str, model_keys: tuple[str, ...] = ()) -> SliceUsage | None:
    """The charge of one unit of ``resource``; None for a MIG resource no model knows.

    Memory slices come from the models ``model_keys`` (the node's model for a bound pod, the
    cluster's models otherwise) and fall back to every catalog model with the profile.
    """
    if resource == WHOLE_GPU_RESOURCE:
        return SliceUsage(1, WHOLE_GPU_COMPUTE_SLICES, WHOLE_GPU_MEMORY_SLICES)
    if resource == SHARED_GPU_RESOURCE:
        return SliceUsage(1, 0, 0)
    name = profile_from_resource(resource)
    if name is None:
        return None
    wanted = str(name)
    memory = [
        p.memory_slices
        for m in CATALOG.models
        if m.key in model_keys
        for p in m.profiles
        if p.name == wanted
    ]
    if not memory:
        memory = [p.memory_slices for m in CATALOG.models for p in m.profiles if p.name == wanted]
    if not memory:
        return None
    return SliceUsage(1, name.compute_slices, max(memory), ((str(name), 1),))


def charge(resource: str, count: int, model_keys: tuple[str, ...] = ()) -> SliceUsage:
    """The charge of ``count`` units of ``resource`` (zero for resources we cannot price)."""
    unit = charge_of(resource, model_keys)
    if unit is None or count <= 0:
        return ZERO
    return SliceUsage(
        unit.instances * count,
        unit.compute_slices * count,
        unit.memory_slices * count,
        tuple((n, c * count) for n, c in unit.profiles),
    )


def pricing_models(node_product: str | None, cluster_models: tuple[str, ...]) -> tuple[str, ...]:
    """The GPU model keys a pod's slices are priced on: the model of its node's product
    (``node_product``: the node it is bound to, when that node is known) when the catalog knows
    it, else the cluster's models (``cluster_models``)."""
    if node_product is not None:
        model = CATALOG.by_product(node_product)
        if model is not None:
            return (model.key,)
    return cluster_models


def usage_of(requests: Mapping[str, int], model_keys: tuple[str, ...] = ()) -> SliceUsage:
    result = ZERO
    for resource, count in sorted(requests.items()):
        result = result + charge(resource, count, model_keys)
    return result


def claim_asks(asks: tuple[GpuAsk, ...]) -> tuple[ClaimAsk, ...]:
    """A claim's GPU asks as the extended resources they amount to (see the module docstring)."""
    found: list[ClaimAsk] = []
    for ask in asks:
        resource = (
            mig_resource_name(ask.profile)
            if ask.kind == DeviceKind.MIG and ask.profile
            else WHOLE_GPU_RESOURCE
        )
        found.append((resource, ask.count, ask_model(ask)))
    return tuple(found)


def ask_model(ask: GpuAsk) -> str | None:
    """The catalog key of the model the ask's ``productName`` selector names (None: none, or
    a product the catalog does not know)."""
    product = ask.selection.value(PRODUCT_NAME)
    if product is None:
        return None
    model = CATALOG.by_product(product_label_of(product))
    return None if model is None else model.key


def claim_usage(asks: tuple[ClaimAsk, ...], model_keys: tuple[str, ...] = ()) -> SliceUsage:
    """What a claim holds: each ask priced on its own model, else on ``model_keys``."""
    result = ZERO
    for resource, count, model in asks:
        result = result + charge(resource, count, (model,) if model else model_keys)
    return result


def claim_requests(asks: tuple[ClaimAsk, ...]) -> dict[str, int]:
    """The extended resources a claim's asks amount to, summed per resource."""
    totals: dict[str, int] = {}
    for resource, count, _ in asks:
        totals[resource] = totals.get(resource, 0) + count
    return totals
