"""A Pod's identity, phase, node and product constraint, and the projection the placement
caches keep (:class:`PodFacts`). Its GPU requests are read by :mod:`migslice.objects.pod_gpus`.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from migslice import names
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.pod_gpus import RawPod, Requests, gpu_requests
from migslice.objects.pod_selection import required_terms
from migslice.objects.times import parse_time

# -- the other fields ----------------------------------------------------------------------------


def pod_key(raw_pod: RawPod) -> str:
    """``namespace/name``; a part that is not a string (in a body no API server validated) is
    left empty, the namespace ``default``."""
    metadata = metadata_of(raw_pod)
    return f"{text(metadata.get('namespace')) or 'default'}/{text(metadata.get('name')) or ''}"


def metadata_of(raw_pod: RawPod) -> JsonObject:
    metadata = raw_pod.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def annotations_of(raw_pod: RawPod) -> JsonObject:
    annotations = metadata_of(raw_pod).get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def phase_of(raw_pod: RawPod) -> str | None:
    status = raw_pod.get("status")
    phase = status.get("phase") if isinstance(status, Mapping) else None
    return phase if isinstance(phase, str) else None


def is_terminal(raw_pod: RawPod) -> bool:
    return phase_of(raw_pod) in names.TERMINAL_PHASES


def bound_node_of(raw_pod: RawPod) -> str | None:
    spec = raw_pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) and node else None


def nominated_node_of(raw_pod: RawPod) -> str | None:
    status = raw_pod.get("status")
    node = status.get("nominatedNodeName") if isinstance(status, Mapping) else None
    return node if isinstance(node, str) and node else None


def scheduler_name_of(raw_pod: RawPod) -> str | None:
    spec = raw_pod.get("spec")
    name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else None


def unschedulable_since(raw_pod: RawPod) -> datetime.datetime | None:
    """Since when the pod has waited for kube-scheduler: ``PodScheduled`` is ``False`` with
    reason ``Unschedulable``, counted from its last transition, or from the moment the
    migslice webhook admitted the pod through its gate (``migslice.io/Admitted=True``) if
    later: a gated pod's ``PodScheduled`` turned ``False`` (``SchedulingGated``) when it was
    created, and keeps that time when the reason becomes ``Unschedulable``. None when the
    pod is not unschedulable or the time cannot be read. (Another controller's scheduling
    gate leaves no such mark: such a pod counts from its creation.)"""
    status = raw_pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    found = [
        c for c in (conditions if isinstance(conditions, list) else ()) if isinstance(c, Mapping)
    ]
    scheduled = next((c for c in found if c.get("type") == "PodScheduled"), None)
    if scheduled is None:
        return None
    if scheduled.get("status") != "False" or scheduled.get("reason") != "Unschedulable":
        return None
    since = parse_time(scheduled.get("lastTransitionTime"))
    admitted = next((c for c in found if c.get("type") == names.ADMITTED_CONDITION), None)
    if since is None or admitted is None or admitted.get("status") != "True":
        return since
    at = parse_time(admitted.get("lastTransitionTime"))
    return since if at is None else max(since, at)


def scheduling_gates(raw_pod: RawPod) -> tuple[str, ...]:
    """The names in the pod's ``spec.schedulingGates``: kube-scheduler does not try a pod
    while it has any, and each is removed by the controller that set it (Kueue's
    ``kueue.x-k8s.io/admission``, migslice's own ``migslice.io/admission``, ...)."""
    spec = raw_pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    found = []
    for gate in items(gates):
        name = gate.get("name") if isinstance(gate, Mapping) else None
        if isinstance(name, str) and name:
            found.append(name)
    return tuple(found)


def is_admission_gated(raw_pod: RawPod) -> bool:
    """Whether the pod carries ``migslice.io/admission`` in ``spec.schedulingGates``: created
    in a fail-open namespace while the webhook could not be called, and not admitted yet. A
    gate is only ever removed after creation, never added, and only the webhook removes this
    one, so such a pod holds nothing and waits for the webhook's gate reconciler."""
    return names.ADMISSION_GATE in scheduling_gates(raw_pod)


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
    if isinstance(selector, Mapping) and isinstance(selector.get(names.PRODUCT_LABEL), str):
        allowed = frozenset({selector[names.PRODUCT_LABEL]})
    terms = required_terms(spec)
    if terms:
        union: set[str] = set()
        for term in terms:
            values = _product_values(term)
            if values is None:
                return allowed
            union |= values
        allowed = frozenset(union) if allowed is None else allowed & union
    return allowed


def _product_values(term: JsonObject) -> set[str] | None:
    values: set[str] | None = None
    expressions = term.get("matchExpressions")
    for expression in expressions if isinstance(expressions, list) else ():
        if not isinstance(expression, Mapping) or expression.get("key") != names.PRODUCT_LABEL:
            continue
        if expression.get("operator") != "In":
            continue
        listed = expression.get("values")
        found = {v for v in listed if isinstance(v, str)} if isinstance(listed, list) else set()
        values = found if values is None else values & found
    return values


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The ResourceClaims a pod uses, by ``namespace/name``: those its ``spec.resourceClaims``
    name (``resourceClaimName``, or for a ``resourceClaimTemplateName`` the claim the
    resourceclaim controller made, from ``status.resourceClaimStatuses``) and the one
    kube-scheduler made for its extended resources served by DRA
    (``status.extendedResourceClaimStatus``). ``waiting``: the pod's claim names whose claim
    does not exist yet (the controller has not made it)."""

    keys: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()


def pod_claims(raw_pod: RawPod) -> PodClaims:
    spec = mapping(raw_pod.get("spec"))
    status = mapping(raw_pod.get("status"))
    namespace = text(mapping(raw_pod.get("metadata")).get("namespace")) or "default"
    made: dict[str, str | None] = {}
    for raw in items(status.get("resourceClaimStatuses")):
        entry = mapping(raw)
        name = entry.get("name")
        if isinstance(name, str):
            claim = entry.get("resourceClaimName")
            made[name] = claim if isinstance(claim, str) and claim else None
    keys: list[str] = []
    waiting: list[str] = []
    for raw in items(spec.get("resourceClaims")):
        entry = mapping(raw)
        name = entry.get("name")
        claim = entry.get("resourceClaimName")
        if isinstance(claim, str) and claim:
            keys.append(f"{namespace}/{claim}")
        elif isinstance(name, str) and entry.get("resourceClaimTemplateName"):
            if name not in made:
                waiting.append(name)
            elif (made_name := made[name]) is not None:
                keys.append(f"{namespace}/{made_name}")
    extended = mapping(status.get("extendedResourceClaimStatus")).get("resourceClaimName")
    if isinstance(extended, str) and extended:
        keys.append(f"{namespace}/{extended}")
    return PodClaims(tuple(dict.fromkeys(keys)), tuple(waiting))


def has_resource_claims(raw_pod: RawPod) -> bool:
    """Whether the pod names ResourceClaims (its spec, not yet what became of them)."""
    spec = raw_pod.get("spec")
    return isinstance(spec, Mapping) and bool(items(spec.get("resourceClaims")))


def named_claims(raw_pod: RawPod, namespace: str) -> tuple[str, ...]:
    """``namespace/claim`` of every claim the pod names by ``resourceClaimName`` (what it
    uses besides the claims made for it, from a template or for its extended resources)."""
    found = []
    for raw in items(mapping(raw_pod.get("spec")).get("resourceClaims")):
        claim = mapping(raw).get("resourceClaimName")
        if isinstance(claim, str) and claim:
            found.append(f"{namespace}/{claim}")
    return tuple(found)


# -- the projection the placement caches keep --------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The part of a Pod that the inventory keeps: where it holds which GPU resources.

    A pod holds its requests on a node when it is bound (``spec.nodeName``) and not terminal.
    A pod the scheduler has nominated for a node (``status.nominatedNodeName``, set when
    preemption makes room) is counted there as assumed, so the room it waits for is not given
    to another pod.
    """

    key: str
    node_name: str | None
    nominated_node_name: str | None
    requests: Requests
    claims: tuple[str, ...] = ()
    """The ``namespace/name`` of the ResourceClaims it uses (:func:`pod_claims`)."""
    priority: int = 0
    """``spec.priority``: kube-scheduler counts a pod only nominated to a node for the pods
    of its priority or lower, never for itself (:meth:`counts_for`)."""

    def counts_for(self, key: str, priority: int) -> bool:
        """Whether kube-scheduler counts this pod's resources when it filters pod ``key`` of
        ``priority``: a bound pod always; one only nominated (a preemptor whose victims are
        leaving) only for another pod of at most its priority (``addGENominatedPods`` in
        kube-scheduler's framework runtime)."""
        return not self.is_assumed or (self.key != key and self.priority >= priority)

    @property
    def holding_node(self) -> str | None:
        """The node this pod's resources are counted on (bound, else nominated)."""
        return self.node_name or self.nominated_node_name

    @property
    def is_assumed(self) -> bool:
        return self.node_name is None and self.nominated_node_name is not None


def pod_facts_from_raw(raw_pod: RawPod) -> PodFacts | None:
    """Project a raw Pod for the cache; None when it holds no GPU resource and no
    ResourceClaim anywhere."""
    if is_terminal(raw_pod):
        return None
    node_name, nominated = bound_node_of(raw_pod), nominated_node_of(raw_pod)
    if node_name is None and nominated is None:
        return None
    requests = gpu_requests(raw_pod)
    claims = pod_claims(raw_pod).keys if has_resource_claims(raw_pod) or requests else ()
    if not requests and not claims:
        return None
    return PodFacts(
        key=pod_key(raw_pod),
        node_name=None if node_name is None else sys.intern(node_name),
        nominated_node_name=None if nominated is None else sys.intern(nominated),
        requests=requests,
        claims=claims,
        priority=pod_priority(raw_pod),
    )


def pod_priority(raw_pod: RawPod) -> int:
    """``spec.priority`` (the priority admission fills it in from the PriorityClass; 0 when
    absent)."""
    spec = raw_pod.get("spec")
    value = spec.get("priority") if isinstance(spec, Mapping) else None
    return value if type(value) is int else 0


# -- what the admission caches keep ---------------------------------------------------------------

_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")


def slim_pod(raw_pod: RawPod) -> dict[str, object]:
    """The parts of a Pod the webhook's state reads (identity and uid, migslice annotations,
    phase, node, the claims it names, the containers' names, resources and restart policy),
    for a watch cache of tens of thousands of pods: every reader of this module and of
    ``pod_gpus`` answers the same on the slim pod as on the whole one. Names are interned;
    anything malformed is kept as sent, so the readers report it as they would. A pod behind
    the admission gate is kept whole (less ``managedFields``): the gate reconciler decides it,
    and writes its patch, on this copy; such pods are few, and only while or after the webhook
    was unavailable."""
    metadata = raw_pod.get("metadata")
    spec = raw_pod.get("spec")
    status = raw_pod.get("status")
    if is_admission_gated(raw_pod) and isinstance(metadata, Mapping):
        whole = dict(raw_pod)
        whole["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
        return whole
    slim: dict[str, object] = {}
    if isinstance(metadata, Mapping):
        kept = {k: _interned(metadata[k]) for k in ("namespace", "name", "uid") if k in metadata}
        annotations = metadata.get("annotations")
        if isinstance(annotations, Mapping):
            kept["annotations"] = {
                k: v
                for k, v in annotations.items()
                if isinstance(k, str) and k.startswith(names.MIGSLICE_PREFIX)
            }
        elif annotations is not None:
            kept["annotations"] = annotations
        slim["metadata"] = kept
    elif metadata is not None:
        slim["metadata"] = metadata
    if isinstance(spec, Mapping):
        slim_spec: dict[str, object] = {}
        if "nodeName" in spec:
            slim_spec["nodeName"] = _interned(spec["nodeName"])
        if "resourceClaims" in spec:
            slim_spec["resourceClaims"] = spec["resourceClaims"]
        for field in ("containers", "initContainers"):
            listed = spec.get(field, _ABSENT)
            if isinstance(listed, list):
                slim_spec[field] = [_slim_container(c) for c in listed]
            elif listed is not _ABSENT:
                slim_spec[field] = listed
        slim["spec"] = slim_spec
    elif spec is not None:
        slim["spec"] = spec
    if isinstance(status, Mapping):
        slim["status"] = {
            k: _interned(status[k]) for k in ("phase", "nominatedNodeName") if k in status
        }
    elif status is not None:
        slim["status"] = status
    return slim


_ABSENT = object()


def _slim_container(container: object) -> object:
    if not isinstance(container, Mapping):
        return container
    return {k: container[k] for k in _CONTAINER_FIELDS if k in container}


def _interned(value: object) -> object:
    return sys.intern(value) if isinstance(value, str) else value
