"""What GPU a pod asks for: migslice annotations, or GPU resources requested directly.

:func:`read_intent` only reads; it does not judge values (a malformed ``gpu-memory`` is the
decision's business, so that the user gets a denial that names the annotation). A pod whose
*shape* is wrong (containers not a list, a quantity that is no quantity, ...) raises
:class:`MalformedPodError`: the apiserver never sends one, so the review is malformed (HTTP
400). GPU resources that the apiserver decodes but its validation (which runs after
admission) refuses are listed in :attr:`PodIntent.problems`, for a denial that names the
field: a count that is not a whole number (``500m``, ``-1``), a request without a limit, a
request that differs from its limit (Kubernetes requires extended-resource requests to equal
limits; limits alone are fine, the apiserver copies them into requests).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from migslice.admission import annotations as names
from migslice.admission.usage import is_gpu_resource
from migslice.quantity import QuantityError, parse_quantity


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
    sidecar: bool = False  # an init container with restartPolicy: Always


@dataclass(frozen=True, slots=True)
class PodIntent:
    """The pod's GPU intent. Annotation values are raw strings, not yet checked."""

    annotations: tuple[tuple[str, str], ...]
    direct: tuple[ContainerRequest, ...]
    containers: tuple[str, ...]
    reservation: str | None = None
    problems: tuple[str, ...] = ()

    def annotation(self, key: str) -> str | None:
        for name, value in self.annotations:
            if name == key:
                return value
        return None

    @property
    def has_gpu_intent(self) -> bool:
        return bool(self.annotations or self.direct or self.problems)


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
    problems: list[str] = []
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
            sidecar = field == "initContainers" and container.get("restartPolicy") == "Always"
            who = f'{"init container" if field == "initContainers" else "container"} "{name}"'
            counts = _gpu_requests(container, f"{field}[{index}]", who, problems)
            for resource, count in sorted(counts.items()):
                direct.append(ContainerRequest(field, index, name, resource, count, sidecar))
    return PodIntent(
        tuple(sorted(found)), tuple(direct), tuple(container_names), reservation, tuple(problems)
    )


def _gpu_requests(
    container: Mapping[str, object], where: str, who: str, problems: list[str]
) -> dict[str, int]:
    """A container's GPU counts (its limits); what Kubernetes would refuse goes to ``problems``."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return {}
    sections: dict[str, dict[str, tuple[str, Fraction]]] = {}
    for section in ("requests", "limits"):
        values = resources.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            raise MalformedPodError(f"object.spec.{where}.resources.{section} must be a map")
        parsed: dict[str, tuple[str, Fraction]] = {}
        for resource, raw_value in values.items():
            if isinstance(resource, str) and is_gpu_resource(resource):
                try:
                    parsed[resource] = (str(raw_value), parse_quantity(raw_value))
                except QuantityError as error:
                    raise MalformedPodError(
                        f"object.spec.{where}.resources.{section}[{resource!r}]: {error}"
                    ) from None
        sections[section] = parsed
    requested, limited = sections.get("requests", {}), sections.get("limits", {})
    found: dict[str, int] = {}
    for resource in sorted(requested.keys() | limited.keys()):
        request, limit = requested.get(resource), limited.get(resource)
        text, value = limit or request or ("0", Fraction(0))
        if value.denominator != 1 or value < 0:
            section = "limits" if limit is not None else "requests"
            problems.append(
                f"{who} sets {resource}: {text}; GPU resources are whole units "
                f"(resources.{section})"
            )
        elif limit is None and request is not None and value > 0:
            problems.append(
                f"{who} requests {resource}: {text} but sets no limit for it; Kubernetes needs "
                "a limit, equal to the request, for a GPU resource (resources.limits)"
            )
        elif limit is not None and request is not None and request[1] != limit[1]:
            problems.append(
                f"{who} requests {resource}: {request[0]} but limits it to {limit[0]}; "
                "Kubernetes needs the two equal for a GPU resource (resources.requests, "
                "resources.limits)"
            )
        elif value > 0:
            found[resource] = int(value)
    return found


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
