"""What GPU capacity a pod holds, in slice units, and the GPU resources it requests.

Charges (docs/policy.md, "Quota"): a MIG slice of profile ``<G>g.<M>gb`` counts as one
instance, G compute slices and its memory slices on the pod's GPU model (the node's model for
a bound pod, else the largest among the cluster's models with the profile); a whole GPU
(``nvidia.com/gpu``) as one instance of 7 compute and 8 memory slices; a shared or MPS GPU
(``nvidia.com/gpu.shared``) as one instance and no slices.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from migslice.mig import CATALOG, MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, profile_from_resource
from migslice.mig.profiles import SHARED_GPU_RESOURCE
from migslice.quantity import QuantityError, parse_count

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


def is_gpu_resource(resource: str) -> bool:
    return (
        resource == WHOLE_GPU_RESOURCE
        or resource == SHARED_GPU_RESOURCE
        or resource.startswith(MIG_RESOURCE_PREFIX)
    )


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


def container_gpu_requests(raw_container: Mapping[str, object]) -> dict[str, int]:
    """GPU resources of one container: its limits, else its requests; bad values are skipped."""
    resources = raw_container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    found: dict[str, int] = {}
    for section in ("requests", "limits"):
        values = resources.get(section)
        if not isinstance(values, Mapping):
            continue
        for resource, raw_value in values.items():
            if isinstance(resource, str) and is_gpu_resource(resource):
                try:
                    found[resource] = parse_count(raw_value)
                except QuantityError:
                    continue
    return found


def pod_gpu_requests(raw_pod: Mapping[str, object]) -> dict[str, int]:
    """Effective GPU requests of a pod, by the Kubernetes rule (see :func:`effective_counts`)."""
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        return {}
    entries: list[tuple[ContainerKind, str, int]] = []
    for container in _containers(spec.get("initContainers")):
        kind: ContainerKind = "sidecar" if container.get("restartPolicy") == "Always" else "init"
        entries += [(kind, r, c) for r, c in container_gpu_requests(container).items()]
    for container in _containers(spec.get("containers")):
        entries += [("app", r, c) for r, c in container_gpu_requests(container).items()]
    return effective_counts(entries)


ContainerKind = Literal["init", "sidecar", "app"]


def effective_counts(entries: Iterable[tuple[ContainerKind, str, int]]) -> dict[str, int]:
    """Per resource, what a pod holds: max(sum of app and sidecar containers, init peak).

    ``entries`` are (kind, resource, count) in pod order, init containers first. An init
    container's peak adds the sidecars (init containers with ``restartPolicy: Always``)
    started before it, as kube-scheduler and the kubelet count it.
    """
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for kind, resource, count in entries:
        if kind == "app":
            total[resource] = total.get(resource, 0) + count
        elif kind == "sidecar":
            sidecars[resource] = sidecars.get(resource, 0) + count
        else:
            peak[resource] = max(peak.get(resource, 0), count + sidecars.get(resource, 0))
    for resource, count in sidecars.items():
        total[resource] = total.get(resource, 0) + count
    for resource, count in peak.items():
        total[resource] = max(total.get(resource, 0), count)
    return {r: c for r, c in sorted(total.items()) if c > 0}


def usage_of(requests: Mapping[str, int], model_keys: tuple[str, ...] = ()) -> SliceUsage:
    result = ZERO
    for resource, count in sorted(requests.items()):
        result = result + charge(resource, count, model_keys)
    return result


def _containers(value: object) -> Iterable[Mapping[str, object]]:
    if isinstance(value, list):
        return [c for c in value if isinstance(c, Mapping)]
    return ()
