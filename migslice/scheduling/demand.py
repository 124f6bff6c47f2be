"""What a pod asks of the GPU side of a node."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import orjson

from migslice.mig import MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, profile_from_resource
from migslice.objects.json import JsonObject
from migslice.objects.pod_gpus import read_pod_gpu
from migslice.objects.pods import pod_key, product_constraint


class UnitKind(enum.Enum):
    MIG = "mig"
    WHOLE_GPU = "whole-gpu"


@dataclass(frozen=True, slots=True)
class DemandUnit:
    """``count`` of one resource: a MIG profile (``profile`` set) or whole GPUs."""

    resource: str
    count: int
    kind: UnitKind
    profile: str | None


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

    @property
    def is_single_unit(self) -> bool:
        return len(self.units) == 1 and self.units[0].count == 1


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
