"""Pods as the inventory needs them: which GPU resources they request and where they hold them.

Only ``nvidia.com/*`` extended resources matter here. A container's request for an extended
resource is its ``requests`` entry, or its ``limits`` entry when requests omit it (Kubernetes
defaults one to the other and requires them equal). The pod's effective request follows the
Kubernetes rule: the larger of (the sum over app containers and restartable init containers)
and (the largest single init container).

A pod holds its request on a node when it is bound (``spec.nodeName``) and not terminal
(``status.phase`` not Succeeded/Failed). A pod the scheduler has nominated for a node
(``status.nominatedNodeName``, set when preemption makes room) is counted there as assumed,
so the room it is waiting for is not given to another pod.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migslice.inventory.quantities import QuantityError, parse_count

GPU_RESOURCE_PREFIX = "nvidia.com/"
PRODUCT_LABEL = "nvidia.com/gpu.product"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

RawPod = Mapping[str, Any]
Requests = tuple[tuple[str, int], ...]
"""Counts per resource name, sorted by name, no zero entries."""


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The part of a Pod that the inventory keeps: where it holds which GPU resources."""

    key: str
    node_name: str | None
    nominated_node_name: str | None
    requests: Requests

    @property
    def holding_node(self) -> str | None:
        """The node this pod's resources are counted on (bound, else nominated)."""
        return self.node_name or self.nominated_node_name

    @property
    def is_assumed(self) -> bool:
        return self.node_name is None and self.nominated_node_name is not None


def pod_key(raw_pod: RawPod) -> str:
    metadata = raw_pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name') or ''}"


def gpu_requests(raw_pod: RawPod) -> Requests:
    """The pod's effective ``nvidia.com/*`` requests; QuantityError names the bad field."""
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    total: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for field in ("initContainers", "containers"):
        containers = spec.get(field) or []
        if not isinstance(containers, list):
            raise QuantityError(f"spec.{field} is {type(containers).__name__}; expected a list")
        for index, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            own = _container_requests(container, f"spec.{field}[{index}]")
            if field == "containers":
                _add(total, own)
            elif container.get("restartPolicy") == "Always":
                _add(sidecars, own)
            else:
                for name, count in own.items():
                    init_peak[name] = max(init_peak.get(name, 0), count + sidecars.get(name, 0))
    _add(total, sidecars)
    for name, count in init_peak.items():
        total[name] = max(total.get(name, 0), count)
    return tuple(sorted((sys.intern(n), c) for n, c in total.items() if c > 0))


def _container_requests(container: Mapping[str, Any], path: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        return {}
    found: dict[str, int] = {}
    for kind in ("limits", "requests"):  # requests win where both are present
        values = resources.get(kind) or {}
        if not isinstance(values, Mapping):
            raise QuantityError(f"{path}.resources.{kind} is not a mapping")
        for name, value in values.items():
            if isinstance(name, str) and name.startswith(GPU_RESOURCE_PREFIX):
                found[name] = parse_count(value, f"{path}.resources.{kind}[{name}]")
    return found


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for name, count in more.items():
        into[name] = into.get(name, 0) + count


def is_terminal(raw_pod: RawPod) -> bool:
    status = raw_pod.get("status") or {}
    return isinstance(status, Mapping) and status.get("phase") in TERMINAL_PHASES


def pod_facts_from_raw(raw_pod: RawPod) -> PodFacts | None:
    """Project a raw Pod for the cache; None when it holds no GPU resource anywhere.

    A pod whose quantities do not parse (the API server would have refused it) is kept
    without the unparsable entries rather than dropped, so its other holdings still count.
    """
    if is_terminal(raw_pod):
        return None
    spec = raw_pod.get("spec") or {}
    status = raw_pod.get("status") or {}
    node_name = spec.get("nodeName") if isinstance(spec, Mapping) else None
    nominated = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    if not node_name and not nominated:
        return None
    try:
        requests = gpu_requests(raw_pod)
    except QuantityError:
        requests = _lenient_requests(raw_pod)
    if not requests:
        return None
    return PodFacts(
        key=pod_key(raw_pod),
        node_name=sys.intern(node_name) if isinstance(node_name, str) and node_name else None,
        nominated_node_name=(
            sys.intern(nominated) if isinstance(nominated, str) and nominated else None
        ),
        requests=requests,
    )


def _lenient_requests(raw_pod: RawPod) -> Requests:
    found: dict[str, int] = {}
    for container in (raw_pod.get("spec") or {}).get("containers") or ():
        if not isinstance(container, Mapping):
            continue
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            for name, value in (resources.get(kind) or {}).items():
                if not str(name).startswith(GPU_RESOURCE_PREFIX):
                    continue
                try:
                    found[name] = found.get(name, 0) + parse_count(value, name)
                except QuantityError:
                    continue
    return tuple(sorted((sys.intern(n), c) for n, c in found.items() if c > 0))


def product_constraint(raw_pod: RawPod) -> frozenset[str] | None:
    """GPU products the pod's node selection allows, or None when it does not restrict them.

    Read from ``spec.nodeSelector[nvidia.com/gpu.product]`` and from required node affinity
    terms whose every term has an ``In`` expression on that label (terms are ORed, so one
    unconstrained term means no constraint). kube-scheduler enforces these itself; the
    extender repeats the check only to give a precise reason for nodes it sees anyway.
    """
    spec = raw_pod.get("spec")
    if not isinstance(spec, Mapping):
        return None
    allowed: frozenset[str] | None = None
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping) and isinstance(selector.get(PRODUCT_LABEL), str):
        allowed = frozenset({selector[PRODUCT_LABEL]})
    terms = _required_terms(spec)
    if terms:
        union: set[str] = set()
        for term in terms:
            values = _product_values(term)
            if values is None:
                return allowed
            union |= values
        allowed = frozenset(union) if allowed is None else allowed & union
    return allowed


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    try:
        terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
    except (KeyError, TypeError):
        return []
    return [t for t in terms if isinstance(t, Mapping)] if isinstance(terms, list) else []


def _product_values(term: Mapping[str, Any]) -> set[str] | None:
    values: set[str] | None = None
    for expression in term.get("matchExpressions") or ():
        if not isinstance(expression, Mapping) or expression.get("key") != PRODUCT_LABEL:
            continue
        if expression.get("operator") != "In":
            continue
        found = {v for v in expression.get("values") or () if isinstance(v, str)}
        values = found if values is None else values & found
    return values
