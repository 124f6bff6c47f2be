"""Which nodes kube-scheduler's own filters leave for the extender to judge (pure, minimal).

kube-scheduler sends the extender only the nodes that pass its own filters. To give a pod's
reasons as the extender would give them, status and why first leave out the nodes those
filters drop, with kube-scheduler's reason: a node that is cordoned
(``spec.unschedulable``), one whose labels the pod's ``spec.nodeSelector`` or required node
affinity (``matchExpressions`` with ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
``Lt``; ``matchFields`` on ``metadata.name``) excludes, and one with a ``NoSchedule`` or
``NoExecute`` taint the pod does not tolerate. Resources other than GPUs, pod (anti-)affinity
and topology spread are not judged.
"""

from __future__ import annotations

from collections.abc import Mapping

from migslice.objects.json import JsonObject, items, mapping

CORDONED = "node(s) were unschedulable (kube-scheduler)"
SELECTOR = "node(s) didn't match Pod's node affinity/selector (kube-scheduler)"
TAINT = "node(s) had untolerated taint (kube-scheduler)"


def scheduler_verdict(raw_pod: JsonObject, raw_node: JsonObject) -> str | None:
    """Why kube-scheduler's filters drop the node for the pod (see the module docstring);
    None when they leave it to the extender."""
    spec = mapping(raw_pod.get("spec"))
    node_spec = mapping(raw_node.get("spec"))
    metadata = mapping(raw_node.get("metadata"))
    labels = {str(k): str(v) for k, v in mapping(metadata.get("labels")).items()}
    if node_spec.get("unschedulable") is True:
        return CORDONED
    selector = mapping(spec.get("nodeSelector"))
    if any(labels.get(str(k)) != v for k, v in selector.items()):
        return SELECTOR
    affinity = mapping(mapping(spec.get("affinity")).get("nodeAffinity"))
    required = mapping(affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = [t for t in items(required.get("nodeSelectorTerms")) if isinstance(t, Mapping)]
    name = str(metadata.get("name") or "")
    if terms and not any(_term_matches(term, labels, name) for term in terms):
        return SELECTOR
    tolerations = [t for t in items(spec.get("tolerations")) if isinstance(t, Mapping)]
    for taint in items(node_spec.get("taints")):
        if not isinstance(taint, Mapping):
            continue
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return TAINT
    return None


def _term_matches(term: JsonObject, labels: Mapping[str, str], name: str) -> bool:
    expressions = [e for e in items(term.get("matchExpressions")) if isinstance(e, Mapping)]
    fields = [e for e in items(term.get("matchFields")) if isinstance(e, Mapping)]
    if not expressions and not fields:
        return False  # an empty term matches no node (kube-scheduler's rule)
    by_field = {"metadata.name": name}
    return all(_matches(e, labels) for e in expressions) and all(
        _matches(e, by_field) for e in fields
    )


def _matches(expression: JsonObject, labels: Mapping[str, str]) -> bool:
    key = str(expression.get("key") or "")
    operator = expression.get("operator")
    values = [str(v) for v in items(expression.get("values"))]
    value = labels.get(key)
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


def _tolerates(toleration: JsonObject, taint: JsonObject) -> bool:
    effect = toleration.get("effect")
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key")
    if toleration.get("operator") == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")
