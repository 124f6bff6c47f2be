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

from migslice import names
from migslice.errors import InvalidInputError
from migslice.objects.pod_gpus import ContainerGpu, read_pod_gpu


class MalformedPodError(InvalidInputError):
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

    @staticmethod
    def of(entry: ContainerGpu) -> ContainerRequest:
        assert entry.count is not None
        return ContainerRequest(
            entry.field, entry.index, entry.container, entry.resource, entry.count, entry.sidecar
        )


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of the pod's ``spec.resourceClaims``: its name and the claim it names
    (``resourceClaimName``) or the template the claim is made from."""

    name: str
    claim: str | None = None
    template: str | None = None


@dataclass(frozen=True, slots=True)
class PodIntent:
    """The pod's GPU intent. Annotation values are raw strings, not yet checked."""

    annotations: tuple[tuple[str, str], ...]
    direct: tuple[ContainerRequest, ...]
    containers: tuple[str, ...]
    problems: tuple[str, ...] = ()
    claims: tuple[PodClaimRef, ...] = ()

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
    for key, value in (raw_annotations or {}).items():
        if key in names.INPUT_ANNOTATIONS or key == names.RESERVATION:
            if not isinstance(value, str):
                raise MalformedPodError(f"object.metadata.annotations[{key!r}] must be a string")
            if key != names.RESERVATION:
                found.append((key, value))
    gpu = read_pod_gpu(raw_pod)
    if gpu.malformed:
        raise MalformedPodError(f"object.{gpu.malformed[0]}")
    direct = [
        ContainerRequest.of(entry)
        for entry in gpu.entries
        if entry.count is not None and entry.count > 0 and not entry.problem
    ]
    return PodIntent(
        tuple(sorted(found)), tuple(direct), gpu.containers, gpu.problems, _claims(raw_pod)
    )


def _claims(raw_pod: Mapping[str, object]) -> tuple[PodClaimRef, ...]:
    spec = raw_pod.get("spec")
    listed = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    found: list[PodClaimRef] = []
    for entry in listed if isinstance(listed, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        found.append(
            PodClaimRef(
                str(entry["name"]),
                claim if isinstance(claim, str) and claim else None,
                template if isinstance(template, str) and template else None,
            )
        )
    return tuple(found)


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
