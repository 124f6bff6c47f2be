"""What GPU a pod asks for: migslice annotations, or GPU resources requested directly.

:func:`read_intent` only reads; it does not judge values (a malformed ``gpu-memory`` is the
decision's business, so that the user gets a denial that names the annotation). A pod whose
*shape* is wrong (containers not a list, ...) raises :class:`MalformedPodError`: the apiserver never
sends one, so the review is malformed (HTTP 400).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from migslice.admission import annotations as names
from migslice.admission.usage import is_gpu_resource
from migslice.quantity import QuantityError, parse_count


class MalformedPodError(ValueError):
    """An object that is not shaped like a Pod."""


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    """A GPU resource a container requests directly (``nvidia.com/mig-1g.10gb: 2``)."""

    field: str  # containers | initContainers
    index: int
    container: str
    resource: str
    count: int


@dataclass(frozen=True, slots=True)
class PodIntent:
    """The pod's GPU intent. Annotation values are raw strings, not yet checked."""

    annotations: tuple[tuple[str, str], ...]
    direct: tuple[ContainerRequest, ...]
    containers: tuple[str, ...]
    reservation: str | None = None

    def annotation(self, key: str) -> str | None:
        for name, value in self.annotations:
            if name == key:
                return value
        return None

    @property
    def has_gpu_intent(self) -> bool:
        return bool(self.annotations or self.direct)


def read_intent(raw_pod: Mapping[str, object]) -> PodIntent:
    """The GPU intent of a pod; MalformedPodError if the object is not shaped like a Pod."""
    metadata = raw_pod.get("metadata")
    if metadata is not None and not isinstance(metadata, Mapping):
        raise MalformedPodError("object.metadata must be an object")
    raw_annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    if raw_annotations is not None and not isinstance(raw_annotations, Mapping):
        raise MalformedPodError("object.metadata.annotations must be a map of strings")
    found: list[tuple[str, str]] = []
    reservation = None
    for key, value in (raw_annotations or {}).items():
        if key in names.INPUT_ANNOTATIONS or key == names.RESERVATION:
            if not isinstance(value, str):
                raise MalformedPodError(f"object.metadata.annotations[{key!r}] must be a string")
            if key == names.RESERVATION:
                reservation = value
            else:
                found.append((key, value))
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        raise MalformedPodError("object.spec must be an object")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise MalformedPodError("object.spec.containers must be a non-empty list")
    direct: list[ContainerRequest] = []
    container_names: list[str] = []
    for field in ("containers", "initContainers"):
        listed = spec.get(field)
        if listed is None:
            continue
        if not isinstance(listed, list):
            raise MalformedPodError(f"object.spec.{field} must be a list")
        for index, container in enumerate(listed):
            if not isinstance(container, Mapping):
                raise MalformedPodError(f"object.spec.{field}[{index}] must be an object")
            name = container.get("name")
            name = name if isinstance(name, str) else f"#{index}"
            resources = container.get("resources")
            if resources is not None and not isinstance(resources, Mapping):
                raise MalformedPodError(f"object.spec.{field}[{index}].resources must be an object")
            if field == "containers":
                container_names.append(name)
            for resource, count in sorted(_gpu_requests(container, f"{field}[{index}]").items()):
                direct.append(ContainerRequest(field, index, name, resource, count))
    return PodIntent(tuple(sorted(found)), tuple(direct), tuple(container_names), reservation)


def _gpu_requests(container: Mapping[str, object], where: str) -> dict[str, int]:
    resources = container.get("resources")
    found: dict[str, int] = {}
    if not isinstance(resources, Mapping):
        return found
    for section in ("requests", "limits"):
        values = resources.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise MalformedPodError(f"object.spec.{where}.resources.{section} must be a map")
        for resource, raw_value in values.items():
            if isinstance(resource, str) and is_gpu_resource(resource):
                try:
                    found[resource] = parse_count(raw_value)
                except QuantityError as error:
                    raise MalformedPodError(
                        f"object.spec.{where}.resources.{section}[{resource!r}]: {error}"
                    ) from None
    return {r: c for r, c in found.items() if c > 0}


def pod_label(namespace: str, raw_pod: Mapping[str, object]) -> str:
    """``team-a/train-x7k2`` or, before the name is generated, ``team-a/train-*``."""
    metadata = raw_pod.get("metadata")
    name = None
    if isinstance(metadata, Mapping):
        name = metadata.get("name")
        if not isinstance(name, str) or not name:
            generate = metadata.get("generateName")
            name = f"{generate}*" if isinstance(generate, str) and generate else None
    return f"{namespace}/{name or '<unnamed>'}"
