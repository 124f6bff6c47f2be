"""Which nodes kube-scheduler's own filters leave for the extender to judge (pure, minimal).

kube-scheduler sends the extender only the nodes that pass its own filters, and places a pod
only on those. They drop a node that is cordoned (``spec.unschedulable``, unless the pod
tolerates ``node.kubernetes.io/unschedulable:NoSchedule``), one whose labels the pod's
``spec.nodeSelector`` or required node affinity (``matchExpressions`` with ``In``, ``NotIn``,
``Exists``, ``DoesNotExist``, ``Gt``, ``Lt``; ``matchFields`` on ``metadata.name``) excludes,
and one with a ``NoSchedule`` or ``NoExecute`` taint the pod does not tolerate; and a DRA node
for a pod's extended resource that no DeviceClass serves from DRA (NodeResourcesFit finds none
there: :func:`dra_unserved`). Resources other than GPUs, pod (anti-)affinity and topology
spread are not judged.

``migslice status`` and ``why`` leave those nodes out of a pod's reasons, with kube-scheduler's
reason; the repartition decision counts a free instance only on a node they leave
(:mod:`migslice.repartition.pending`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from migslice.inventory import NodeState
from migslice.objects.nodes import NodeFacts, NodeTaint
from migslice.objects.pod_selection import PodSelection, Requirement, SelectorTerm, Toleration
from migslice.scheduling.demand import DemandUnit

CORDONED = "node(s) were unschedulable (kube-scheduler)"
SELECTOR = "node(s) didn't match Pod's node affinity/selector (kube-scheduler)"
TAINT = "node(s) had untolerated taint (kube-scheduler)"
UNSCHEDULABLE_TAINT = NodeTaint("node.kubernetes.io/unschedulable", "", "NoSchedule")
"""What kube-scheduler's NodeUnschedulable filter lets a pod tolerate on a cordoned node."""


def scheduler_verdict(pod: PodSelection, node: NodeFacts) -> str | None:
    """Why kube-scheduler's filters drop ``node`` for the pod (see the module docstring);
    None when they leave it to the extender."""
    if node.unschedulable and not _tolerated(pod.tolerations, UNSCHEDULABLE_TAINT):
        return CORDONED
    if any(node.label(key) != value for key, value in pod.node_selector):
        return SELECTOR
    if pod.terms and not any(_term_matches(term, node) for term in pod.terms):
        return SELECTOR
    if any(not _tolerated(pod.tolerations, taint) for taint in node.taints):
        return TAINT
    return None


def dra_unserved(units: Iterable[DemandUnit], state: NodeState) -> str | None:
    """The first of the pod's extended resources (units not asked through a ResourceClaim)
    that ``state``, a DRA node, cannot give it: no DeviceClass's ``extendedResourceName``
    serves it from DRA (KEP-5004), so kube-scheduler's NodeResourcesFit finds none of it
    there. None on other nodes, and when every one is served."""
    dra = state.dra
    if dra is None:
        return None
    return next((u.resource for u in units if not u.claim and u.resource not in dra.extended), None)


def _term_matches(term: SelectorTerm, node: NodeFacts) -> bool:
    if not term.expressions and not term.fields:
        return False  # an empty term matches no node (kube-scheduler's rule)

    def field(key: str) -> str | None:
        return node.name if key == "metadata.name" else None

    return all(_matches(e, node.label) for e in term.expressions) and all(
        _matches(e, field) for e in term.fields
    )


def _matches(requirement: Requirement, value_of: Callable[[str], str | None]) -> bool:
    operator, values = requirement.operator, requirement.values
    value = value_of(requirement.key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            left, right = int(value), int(values[0])
        except ValueError:
            return False
        return left > right if operator == "Gt" else left < right
    return False


def _tolerated(tolerations: tuple[Toleration, ...], taint: NodeTaint) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Toleration, taint: NodeTaint) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``: an empty effect or key matches any."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value
