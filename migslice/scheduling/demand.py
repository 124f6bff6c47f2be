"""What a pod asks of the GPU side of a node."""

from __future__ import annotations

import enum
from dataclasses import dataclass

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
