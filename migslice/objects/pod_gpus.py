"""The one reader of a Pod's GPU requests.

Every part that counts GPU resources reads them here: the webhook's charge of an admitted pod
and of the pods it sees in its cache, the extender's placement counts, the planner's pending
demand and the simulator. So the webhook never charges a pod differently from how the
extender places it.

What a container holds of an extended resource is its ``limits`` entry, else its
``requests`` entry (Kubernetes copies a limit into requests and requires the two equal for
an extended resource, so for any pod the API server stored, they agree). A pod's effective
request follows the Kubernetes rule: per resource, the larger of (the sum over app containers
and restartable init containers, "sidecars") and (the largest single init container, plus the
sidecars started before it).

Values Kubernetes would refuse (``500m``, ``-1``, a request without a limit, a request that
differs from its limit) are reported in :attr:`PodGpu.problems` and held as nothing; an
object not shaped like a Pod, or a quantity that is no quantity, in :attr:`PodGpu.malformed`.
Callers decide what each means: admission denies or answers 400, the caches count what parses.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction

import orjson

from migslice import names
from migslice.objects.json import JsonObject
from migslice.quantity import QuantityError, parse_count, parse_quantity

RawPod = JsonObject
Requests = tuple[tuple[str, int], ...]
"""Counts per resource name, sorted by name, no zero entries."""


class ContainerKind(enum.StrEnum):
    APP = "app"
    INIT = "init"
    SIDECAR = "sidecar"  # an init container with restartPolicy: Always


def is_gpu_resource(resource: str) -> bool:
    """A resource migslice counts: whole GPUs, shared GPUs and MIG instances."""
    return (
        resource == names.WHOLE_GPU_RESOURCE
        or resource == names.SHARED_GPU_RESOURCE
        or resource.startswith(names.MIG_RESOURCE_PREFIX)
    )


IMPLICIT_CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"
"""KEP-5004: every DeviceClass also serves the extended resource ``<prefix><class name>``."""


def implicit_gpu_asks(
    raw_pod: RawPod, classes: Mapping[str, str] | None = None
) -> tuple[tuple[str, str], ...]:
    """The resources a pod's containers ask by the implicit extended-resource name of an
    NVIDIA GPU DeviceClass (NVIDIA's ``gpu.nvidia.com`` and ``mig.nvidia.com``, migslice's
    ``migslice-mig-<profile>``, and any of ``classes``), each with the resource that names
    the same devices explicitly (its ``extendedResourceName``; ``""`` for ``mig.nvidia.com``,
    which has none). ``classes``: the other DeviceClasses that may give NVIDIA's GPU devices
    (KEP-5004 serves every class's implicit resource), each with its GPU extended resource
    (``""``: none)."""
    spec = raw_pod.get("spec")
    found: dict[str, str] = {}
    for field in ("containers", "initContainers"):
        listed = spec.get(field) if isinstance(spec, Mapping) else None
        for container in listed if isinstance(listed, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            for kind in ("limits", "requests"):
                asked = resources.get(kind) if isinstance(resources, Mapping) else None
                for name in asked if isinstance(asked, Mapping) else ():
                    explicit = _explicit(str(name))
                    if explicit is None and classes and str(name).startswith(IMPLICIT_CLASS_PREFIX):
                        explicit = classes.get(str(name).removeprefix(IMPLICIT_CLASS_PREFIX))
                    if explicit is not None:
                        found[str(name)] = explicit
    return tuple(sorted(found.items()))


def _explicit(resource: str) -> str | None:
    if not resource.startswith(IMPLICIT_CLASS_PREFIX):
        return None
    device_class = resource.removeprefix(IMPLICIT_CLASS_PREFIX)
    if device_class == names.GPU_DEVICE_CLASS:
        return names.WHOLE_GPU_RESOURCE
    if device_class == names.MIG_DEVICE_CLASS:
        return ""
    if device_class.startswith(names.MIG_DEVICE_CLASS_PREFIX):
        return names.MIG_RESOURCE_PREFIX + device_class.removeprefix(names.MIG_DEVICE_CLASS_PREFIX)
    return None


MAX_UNITS = 1024
"""The most units of one GPU resource a pod is read to hold (a node of 16 GPUs has 112 MIG
instances at most; shared replicas a few hundred): a count above it is a problem of the pod,
never a loop of that many steps (a bound pod asking 1e30 hung status and plan)."""


@dataclass(frozen=True, slots=True)
class Quantity:
    """One ``requests`` or ``limits`` entry as written, and its value if it is a quantity."""

    path: str  # spec.containers[0].resources.limits[nvidia.com/mig-1g.10gb]
    raw: object
    value: Fraction | None
    error: str = ""  # why ``raw`` is no quantity

    @property
    def text(self) -> str:
        return self.raw if isinstance(self.raw, str) else repr(self.raw)


@dataclass(frozen=True, slots=True)
class ContainerGpu:
    """One GPU resource of one container: where it is written, its request and limit, and the
    whole count the container holds (None when the value is not a whole count)."""

    field: str  # containers | initContainers
    index: int
    container: str  # the container's name, or #<index> when it has none
    kind: ContainerKind
    resource: str
    request: Quantity | None
    limit: Quantity | None
    count: int | None
    problem: str = ""

    @property
    def sidecar(self) -> bool:
        return self.kind is ContainerKind.SIDECAR

    @property
    def who(self) -> str:
        kind = "init container" if self.field == "initContainers" else "container"
        return f'{kind} "{self.container}"'


@dataclass(frozen=True, slots=True)
class PodGpu:
    """Everything GPU about a pod (see the module docstring)."""

    entries: tuple[ContainerGpu, ...] = ()
    containers: tuple[str, ...] = ()
    malformed: tuple[str, ...] = ()

    @property
    def requests(self) -> Requests:
        return effective_requests(self.entries)

    @property
    def problems(self) -> tuple[str, ...]:
        return tuple(entry.problem for entry in self.entries if entry.problem)

    @property
    def count_error(self) -> str:
        """The first reason a GPU count of this pod cannot be read, worded for a count."""
        for entry in self.entries:
            for quantity in (entry.limit, entry.request):
                if quantity is not None:
                    try:
                        parse_count(quantity.raw, quantity.path)
                    except QuantityError as error:
                        return str(error)
            if entry.count is None and entry.problem:  # a count, but more than a node holds
                return entry.problem
        return self.malformed[0] if self.malformed else ""


def read_pod_gpu(raw_pod: RawPod) -> PodGpu:
    """The pod's GPU requests and what is wrong with them; never raises."""
    malformed: list[str] = []
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        return PodGpu(malformed=("spec must be an object",))
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        malformed.append("spec.containers must be a non-empty list")
    entries: list[ContainerGpu] = []
    app_names: list[str] = []
    for field in ("containers", "initContainers"):
        listed = spec.get(field)
        if listed is None or (field == "containers" and not isinstance(listed, list)):
            continue
        if not isinstance(listed, list):
            malformed.append(f"spec.{field} must be a list")
            continue
        for index, container in enumerate(listed):
            if type(container) is not dict and not isinstance(container, Mapping):
                malformed.append(f"spec.{field}[{index}] must be an object")
                continue
            name = container.get("name")
            name = name if isinstance(name, str) else f"#{index}"
            if field == "containers":
                app_names.append(name)
                kind = ContainerKind.APP
            elif container.get("restartPolicy") == "Always":
                kind = ContainerKind.SIDECAR
            else:
                kind = ContainerKind.INIT
            entries.extend(_container_entries(container, field, index, name, kind, malformed))
    return PodGpu(tuple(entries), tuple(app_names), tuple(malformed))


def shape_problems(raw_pod: RawPod) -> tuple[str, ...]:
    """Every part of the pod that is not shaped as the API server stores a Pod, each with its
    field path: what :func:`read_pod_gpu` reports malformed, a ``spec.nodeName`` that is not a
    string, and a ``requests`` or ``limits`` entry of any resource that is no quantity. The API
    server refuses such a pod; a cluster file is checked with this instead."""
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        return read_pod_gpu(raw_pod).malformed
    malformed, quantities = _container_shape_problems(raw_pod, spec)
    return malformed + _node_name_problems(spec) + quantities


def _node_name_problems(spec: Mapping[str, object]) -> tuple[str, ...]:
    if "nodeName" in spec and not isinstance(spec["nodeName"], str):
        return (f"spec.nodeName={spec['nodeName']!r} must be a string",)
    return ()


def _container_shape_problems(
    raw_pod: RawPod, spec: Mapping[str, object]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """:func:`shape_problems` of the containers (what the rest of the pod does not change):
    what :func:`read_pod_gpu` finds malformed, and the other resources' quantities."""
    found: list[str] = []
    for field in ("containers", "initContainers"):
        listed = spec.get(field)
        for index, container in enumerate(listed if isinstance(listed, list) else ()):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            for section in ("requests", "limits"):
                values = resources.get(section) if isinstance(resources, Mapping) else None
                for resource, raw in values.items() if isinstance(values, Mapping) else ():
                    if isinstance(resource, str) and is_gpu_resource(resource):
                        continue  # read_pod_gpu has judged it
                    path = f"spec.{field}[{index}].resources.{section}[{resource}]"
                    try:
                        parse_quantity(raw)
                    except QuantityError as error:
                        found.append(f"{path}: {error}")
    return read_pod_gpu(raw_pod).malformed, tuple(found)


class PodGpuMemo:
    """:func:`read_pod_gpu` and :func:`shape_problems` over many pods, each distinct set of
    containers read once: the pods of one controller share their containers, and what both
    say of a pod depends on its ``spec.containers`` and ``spec.initContainers`` alone
    (besides ``spec.nodeName``'s type, checked per pod); the key is their JSON
    (:func:`_containers_key`). Values are immutable; a memo lives as long as its caller keeps
    it (one command's read)."""

    def __init__(self) -> None:
        self._read: dict[bytes | str, tuple[PodGpu, Requests]] = {}
        self._shape: dict[bytes | str, tuple[tuple[str, ...], tuple[str, ...]]] = {}

    def read(self, raw_pod: RawPod) -> PodGpu:
        return self._entry(raw_pod)[0]

    def requests(self, raw_pod: RawPod) -> Requests:
        """``read(raw_pod).requests``, summed once per shape."""
        return self._entry(raw_pod)[1]

    def _entry(self, raw_pod: RawPod) -> tuple[PodGpu, Requests]:
        key = _containers_key(raw_pod)
        found = None if key is None else self._read.get(key)
        if found is None:
            gpu = read_pod_gpu(raw_pod)
            found = (gpu, gpu.requests)
            if key is not None:
                self._read[key] = found
        return found

    def shape_problems(self, raw_pod: RawPod) -> tuple[str, ...]:
        spec = raw_pod.get("spec")
        key = _containers_key(raw_pod)
        if key is None or not isinstance(spec, Mapping):
            return shape_problems(raw_pod)
        found = self._shape.get(key)
        if found is None:
            found = self._shape[key] = _container_shape_problems(raw_pod, spec)
        return found[0] + _node_name_problems(spec) + found[1]


def _containers_key(raw_pod: RawPod) -> bytes | str | None:
    """The containers' JSON (orjson: fast, and it tells ``"1"``, ``1``, ``1.0`` and ``true``
    apart); their ``repr`` where JSON would not tell them apart (``null``: orjson writes NaN
    and infinities so too) or cannot write them (a YAML date, a key that is no string)."""
    spec = raw_pod.get("spec")
    if type(spec) is not dict:
        return None
    containers, init = spec.get("containers"), spec.get("initContainers")
    try:
        key = orjson.dumps(containers)
        if init is not None:  # absent and null read alike
            key += b"|" + orjson.dumps(init)
    except TypeError:  # orjson.JSONEncodeError
        return repr((containers, init))
    return repr((containers, init)) if b"null" in key else key


def _container_entries(
    container: JsonObject,
    field: str,
    index: int,
    name: str,
    kind: ContainerKind,
    malformed: list[str],
) -> list[ContainerGpu]:
    resources = container.get("resources")
    if resources is None:
        return []
    where = f"spec.{field}[{index}]"
    if type(resources) is not dict and not isinstance(resources, Mapping):
        malformed.append(f"{where}.resources must be an object")
        return []
    if not _names_a_gpu_resource(resources):
        return []
    sections: dict[str, dict[str, Quantity]] = {}
    for section in ("requests", "limits"):
        values = resources.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            malformed.append(f"{where}.resources.{section} must be a map")
            continue
        found: dict[str, Quantity] = {}
        for resource, raw in values.items():
            if isinstance(resource, str) and is_gpu_resource(resource):
                quantity = _quantity(f"{where}.resources.{section}[{resource}]", raw)
                if quantity.error:
                    malformed.append(f"{quantity.path}: {quantity.error}")
                found[resource] = quantity
        sections[section] = found
    requested, limited = sections.get("requests", {}), sections.get("limits", {})
    entries = []
    for resource in sorted(requested.keys() | limited.keys()):
        request, limit = requested.get(resource), limited.get(resource)
        who = f'{"init container" if field == "initContainers" else "container"} "{name}"'
        count, problem = _count_and_problem(who, resource, request, limit)
        entries.append(
            ContainerGpu(
                field, index, name, kind, sys.intern(resource), request, limit, count, problem
            )
        )
    return entries


def _names_a_gpu_resource(resources: Mapping[str, object]) -> bool:
    """Whether ``requests`` or ``limits`` may name a GPU resource (or is malformed), for the
    full reading to decide: most containers of a GPU pod name none (every GPU resource is an
    ``nvidia.com/`` one, ``names.GPU_RESOURCE_PREFIX``)."""
    for section in ("requests", "limits"):
        values = resources.get(section)
        if values is None:
            continue
        if type(values) is not dict and not isinstance(values, Mapping):
            return True
        for resource in values:
            if type(resource) is not str or resource.startswith(names.GPU_RESOURCE_PREFIX):
                return True
    return False


def _quantity(path: str, raw: object) -> Quantity:
    try:
        return Quantity(path, raw, parse_quantity(raw))
    except QuantityError as error:
        return Quantity(path, raw, None, str(error))


def _count_and_problem(
    who: str, resource: str, request: Quantity | None, limit: Quantity | None
) -> tuple[int | None, str]:
    """The whole count a container holds of ``resource``, and what Kubernetes would refuse."""
    held = limit if limit is not None and limit.value is not None else request
    if held is None or held.value is None:
        return None, ""  # no quantity at all: malformed, reported there
    value = held.value
    section = "limits" if held is limit else "requests"
    if value.denominator != 1 or value < 0:
        return None, (
            f"{who} sets {resource}: {held.text}; GPU resources are whole units "
            f"(resources.{section})"
        )
    if value > MAX_UNITS:
        return None, (
            f"{who} sets {resource}: {held.text}; no node holds more than {MAX_UNITS} units "
            f"of one GPU resource (resources.{section})"
        )
    count = int(value)
    if limit is None and request is not None and count > 0:
        return count, (
            f"{who} requests {resource}: {request.text} but sets no limit for it; "
            "Kubernetes needs a limit, equal to the request, for a GPU resource "
            "(resources.limits)"
        )
    if (
        limit is not None
        and request is not None
        and limit.value is not None
        and request.value is not None
        and request.value != limit.value
    ):
        return count, (
            f"{who} requests {resource}: {request.text} but limits it to "
            f"{limit.text}; Kubernetes needs the two equal for a GPU resource "
            "(resources.requests, resources.limits)"
        )
    return count, ""


def effective_counts(entries: Iterable[tuple[ContainerKind, str, int]]) -> dict[str, int]:
    """Per resource, what a pod holds: max(sum of app and sidecar containers, init peak).

    ``entries`` are (kind, resource, count) in pod order, init containers first. An init
    container's peak adds the sidecars started before it, as kube-scheduler and the kubelet
    count it.
    """
    total: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    for kind, resource, count in entries:
        if kind is ContainerKind.APP:
            total[resource] = total.get(resource, 0) + count
        elif kind is ContainerKind.SIDECAR:
            sidecars[resource] = sidecars.get(resource, 0) + count
        else:
            peak[resource] = max(peak.get(resource, 0), count + sidecars.get(resource, 0))
    for resource, count in sidecars.items():
        total[resource] = total.get(resource, 0) + count
    for resource, count in peak.items():
        total[resource] = max(total.get(resource, 0), count)
    return {r: c for r, c in sorted(total.items()) if c > 0}


def effective_requests(entries: Iterable[ContainerGpu]) -> Requests:
    """The pod's effective counts from its entries (those without a whole count hold nothing)."""
    in_pod_order = sorted(entries, key=lambda e: (e.field != "initContainers", e.index))
    counts = effective_counts(
        (e.kind, e.resource, e.count) for e in in_pod_order if e.count is not None
    )
    return tuple((sys.intern(r), c) for r, c in counts.items())


def gpu_requests(raw_pod: RawPod) -> Requests:
    """The pod's effective GPU requests (what parses; see :func:`read_pod_gpu`)."""
    return read_pod_gpu(raw_pod).requests
