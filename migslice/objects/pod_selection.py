"""What a Pod asks of a node's labels and taints: ``spec.nodeSelector``, required node affinity
and ``spec.tolerations``, the fields kube-scheduler's NodeAffinity, NodeUnschedulable and
TaintToleration filters read (judged by :mod:`migslice.scheduling.selection`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from migslice.objects.json import JsonObject, items, mapping


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` or ``matchFields`` entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """One of ``nodeSelectorTerms``: all of its requirements must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""


@dataclass(frozen=True, slots=True)
class PodSelection:
    """The pod's node selection; the default asks nothing of a node. ``terms``: the required
    node affinity's terms (ORed; none: no such affinity).

    A key of the planners' memos, looked up per node and pod: its hash is computed once, and
    :func:`pod_selection_of` gives equal selections as one object (the pods of a workload all
    carry the same tolerations and affinity), so a lookup compares by identity."""

    node_selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[SelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.node_selector, self.terms, self.tolerations)))

    def __hash__(self) -> int:
        return self._hash


ANY_NODE = PodSelection()


def pod_selection_of(raw_pod: JsonObject) -> PodSelection:
    spec = mapping(raw_pod.get("spec"))
    selector = tuple(sorted((str(k), str(v)) for k, v in mapping(spec.get("nodeSelector")).items()))
    terms = tuple(
        SelectorTerm(_requirements(t.get("matchExpressions")), _requirements(t.get("matchFields")))
        for t in required_terms(spec)
    )
    tolerations = tuple(
        Toleration(
            _text(raw.get("key")),
            _text(raw.get("operator")),
            _text(raw.get("value")),
            _text(raw.get("effect")),
        )
        for raw in items(spec.get("tolerations"))
        if isinstance(raw, Mapping)
    )
    if not (selector or terms or tolerations):
        return ANY_NODE
    return _interned(PodSelection(selector, terms, tolerations))


@functools.lru_cache(maxsize=4096)
def _interned(selection: PodSelection) -> PodSelection:
    """One object per selection (bounded: kept while in use, as the other interned facts)."""
    return selection


def required_terms(spec: JsonObject) -> list[JsonObject]:
    """The ``nodeSelectorTerms`` of the pod spec's required node affinity, as sent."""
    affinity = mapping(mapping(spec.get("affinity")).get("nodeAffinity"))
    required = mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    return [t for t in items(required.get("nodeSelectorTerms")) if isinstance(t, Mapping)]


def _requirements(listed: object) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            _text(raw.get("key")),
            _text(raw.get("operator")),
            tuple(str(v) for v in items(raw.get("values"))),
        )
        for raw in items(listed)
        if isinstance(raw, Mapping)
    )


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
