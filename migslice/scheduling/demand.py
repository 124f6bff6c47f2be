"""What a pod asks of the GPU side of a node: its extended resources (``nvidia.com/mig-*``,
``nvidia.com/gpu``) and, through :func:`with_claims`, its ResourceClaims' requests of NVIDIA's
DRA devices."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import orjson

from migslice.inventory.first_fit import Wanted, wanted_of
from migslice.mig import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, profile_from_resource
from migslice.mig.catalog import product_label_of
from migslice.names import mig_resource_name
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.json import JsonObject
from migslice.objects.pod_gpus import read_pod_gpu
from migslice.objects.pods import has_resource_claims, pod_claims, pod_key, product_constraint
from migslice.objects.resource_claims import ClaimFacts, gpu_asks, profiles_asked
from migslice.objects.resource_slices import DeviceKind
from migslice.scheduling import reasons


class UnitKind(enum.Enum):
    MIG = "mig"
    WHOLE_GPU = "whole-gpu"


@dataclass(frozen=True, slots=True)
class DemandUnit:
    """``count`` of one resource: a MIG profile (``profile`` set) or whole GPUs.

    ``claim``: asked through a ResourceClaim, so only a DRA node can serve it (an extended
    resource is served by the device plugin or, where allocatable lacks it, by DRA).
    ``select``: the device a claim's selectors pin beyond the profile (a GPU by UUID or PCI
    bus id, static memory slices), else None. The unit's resource is the profile's
    ``nvidia.com/mig-*`` name either way, so counts and scores are read alike."""

    resource: str
    count: int
    kind: UnitKind
    profile: str | None
    claim: bool = False
    select: Wanted | None = None


@dataclass(frozen=True, slots=True)
class PodDemand:
    """The pod's GPU requests that placement decides on, its product constraint, or its error.

    ``units`` holds the ``nvidia.com/mig-*`` and ``nvidia.com/gpu`` requests, sorted by
    resource name; other ``nvidia.com/*`` resources (time-sliced ``nvidia.com/gpu.shared``)
    are left to kube-scheduler's own resource fit.
    """

    key: str
    units: tuple[DemandUnit, ...] = ()
    products: frozenset[str] | None = None
    error: str = ""
    wait: str = ""
    """Why no node can be judged yet (a claim the pod names is not seen yet): the extender
    answers an Error, which kube-scheduler retries after its backoff."""

    @property
    def is_single_unit(self) -> bool:
        return len(self.units) == 1 and self.units[0].count == 1 and self.units[0].select is None


def demand_of(raw_pod: JsonObject) -> PodDemand:
    """Read a pod's GPU demand; a quantity that is no whole count becomes ``error``."""
    key = pod_key(raw_pod)
    gpu = read_pod_gpu(raw_pod)
    if gpu.count_error:
        return PodDemand(key, error=gpu.count_error)
    units: list[DemandUnit] = []
    for resource, count in gpu.requests:
        if resource == WHOLE_GPU_RESOURCE:
            units.append(DemandUnit(resource, count, UnitKind.WHOLE_GPU, None))
        elif resource.startswith(MIG_RESOURCE_PREFIX):
            parsed = profile_from_resource(resource)
            units.append(
                DemandUnit(resource, count, UnitKind.MIG, None if parsed is None else str(parsed))
            )
    return PodDemand(key, tuple(units), product_constraint(raw_pod))


def with_claims(
    demand: PodDemand,
    raw_pod: JsonObject,
    claim_of: Callable[[str], ClaimFacts | None],
    classes: Mapping[str, DeviceClassFacts],
) -> PodDemand:
    """``demand`` with the pod's ResourceClaims' requests of NVIDIA's GPUs added.

    An allocated claim adds nothing (its devices are held, and kube-scheduler keeps the pod on
    the allocation's node); nor does the claim kube-scheduler made for the pod's extended
    resources (its units are the pod's requests). A claim not seen yet makes the pod
    wait (``wait``).
    A claim migslice cannot read (:func:`migslice.objects.resource_claims.gpu_asks`) leaves
    the claims out: kube-scheduler's own DRA filter, which runs before the extender, decides
    them; so does a claim whose request tolerates device taints (the allocator may give it a
    device migslice reads as tainted). A request's ``productName`` selector narrows the
    products as a node selector on ``nvidia.com/gpu.product`` does."""
    if not has_resource_claims(raw_pod):
        return demand
    found = pod_claims(raw_pod)
    if found.waiting:
        return replace(demand, wait=reasons.CLAIM_NOT_SEEN)
    units: dict[tuple[str, Wanted | None], DemandUnit] = {}
    products = demand.products
    for key in found.keys:
        claim = claim_of(key)
        if claim is None:
            return replace(demand, wait=reasons.CLAIM_NOT_SEEN)
        if claim.allocated or claim.extended_resource:
            continue
        asks = gpu_asks(claim, classes)
        if asks.unread or any(ask.tolerates for ask in asks.asks):
            return demand
        for ask in asks.asks:
            wanted = wanted_of(ask)
            if wanted is None:
                return demand
            if wanted.product is not None:
                label = frozenset({product_label_of(wanted.product)})
                products = label if products is None else products & label
            pinned = wanted.gpu_uuid or wanted.pci_bus_id or wanted.slices
            select = Wanted(ask.kind, ask.profile, None, *_pins(wanted)) if pinned else None
            if ask.kind is DeviceKind.GPU:
                unit = DemandUnit(
                    WHOLE_GPU_RESOURCE, ask.count, UnitKind.WHOLE_GPU, None, True, select
                )
            else:
                resource = mig_resource_name(ask.profile or "")
                unit = DemandUnit(resource, ask.count, UnitKind.MIG, ask.profile, True, select)
            kept = units.get((unit.resource, select))
            units[(unit.resource, select)] = (
                unit if kept is None else replace(kept, count=kept.count + unit.count)
            )
    if not units and products is demand.products:
        return demand
    merged = sorted((*demand.units, *units.values()), key=lambda u: (u.resource, u.claim))
    return replace(demand, units=tuple(merged), products=products)


def left_to_scheduler(
    raw_pod: JsonObject,
    claim_of: Callable[[str], ClaimFacts | None],
    classes: Mapping[str, DeviceClassFacts],
) -> frozenset[str] | None:
    """The MIG profiles the pod's claims may be given when :func:`with_claims` leaves them to
    kube-scheduler (a claim migslice cannot read or predict, or one that tolerates taints);
    empty when it leaves none (every claim read, allocated or not seen yet), None when they
    may be given a MIG device of any profile (:func:`profiles_asked`)."""
    if not has_resource_claims(raw_pod):
        return frozenset()
    found = pod_claims(raw_pod)
    if found.waiting:
        return frozenset()
    pending = []
    left = False
    for key in found.keys:
        claim = claim_of(key)
        if claim is None:
            return frozenset()
        if claim.allocated or claim.extended_resource:
            continue
        pending.append(claim)
        asks = gpu_asks(claim, classes)
        left = (
            left
            or bool(asks.unread)
            or any(ask.tolerates or wanted_of(ask) is None for ask in asks.asks)
        )
    if not left:
        return frozenset()
    profiles: set[str] = set()
    for claim in pending:
        asked = profiles_asked(claim, classes)
        if asked is None:
            return None
        profiles |= asked
    return frozenset(profiles)


def _pins(wanted: Wanted) -> tuple[str | None, str | None, int]:
    return wanted.gpu_uuid, wanted.pci_bus_id, wanted.slices


MAX_SHAPES = 1024
"""Pod shapes a :class:`DemandReader` remembers (a cluster's workloads repeat a few dozen);
past it, it starts over."""


class DemandReader:
    """:func:`demand_of`, remembered per pod shape: what the demand is read from (each
    container's name, restart policy and resources, in order, init containers too; the node
    selector; the affinity). Pods of one workload share their shape, so an extender call reads
    its pod's demand with one small encoding and a lookup instead of walking every container's
    resources again. Equal by construction: a shape is the whole of what :func:`demand_of`
    reads besides the pod's name, and a pod whose shape cannot be taken (a spec that is not an
    object, a container that is not one) is read by :func:`demand_of` itself."""

    def __init__(self, capacity: int = MAX_SHAPES) -> None:
        self._capacity = capacity
        self._known: dict[bytes, PodDemand] = {}

    def __len__(self) -> int:
        return len(self._known)

    def read(self, raw_pod: JsonObject) -> PodDemand:
        shape = _shape(raw_pod)
        if shape is None:
            return demand_of(raw_pod)
        known = self._known.get(shape)
        if known is None:
            known = demand_of(raw_pod)
            if len(self._known) >= self._capacity:
                self._known = {}
            self._known[shape] = known
            return known
        return PodDemand(pod_key(raw_pod), known.units, known.products, known.error)


def _shape(raw_pod: JsonObject) -> bytes | None:
    spec = raw_pod.get("spec")
    if type(spec) is not dict:
        return None
    try:
        return orjson.dumps(
            (
                _containers_shape(spec.get("containers")),
                _containers_shape(spec.get("initContainers")),
                spec.get("nodeSelector"),
                spec.get("affinity"),
            )
        )
    except TypeError:  # not a list of container objects, or not JSON (orjson's error is one)
        return None


def _containers_shape(listed: object) -> list[tuple[object, object, object]] | None:
    if listed is None:
        return None
    if type(listed) is not list:
        raise TypeError("not a list of containers")
    return [_container_shape(container) for container in listed]


def _container_shape(container: object) -> tuple[object, object, object]:
    if type(container) is not dict:
        raise TypeError("not a container object")
    return (container.get("name"), container.get("restartPolicy"), container.get("resources"))
