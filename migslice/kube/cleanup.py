"""What migslice's running components wrote into the cluster, which uninstalling the chart does
not remove: found, and removed where it is migslice's alone (``migslice cleanup``, the chart's
post-delete hook; docs/operate.md, "Uninstalling").

* The DRA steer's DeviceTaintRules: each named ``migslice-steer-*``
  (:func:`migslice.objects.device_taint_rules.steer_rule_name`) and labelled
  ``app.kubernetes.io/managed-by=migslice``, as :func:`~migslice.objects.device_taint_rules.
  steer_rule` writes them. A rule lacking either is not the steer's and is never touched.
* The node keys the repartition controller and the node agent write that would keep a node
  off-limits to a later install or mislead it: the quarantine label and annotation, the carve
  request, the agent's layout and carve journal (:data:`NODE_LABELS`, :data:`NODE_ANNOTATIONS`).
  Not the keys MIG Manager and NVIDIA own (``nvidia.com/mig.config`` and its state: MIG
  Manager acts on them), nor the admin's own (``migslice.io/repartition-mode``,
  ``migslice.io/dra-steer``).
* Pods not yet bound that nothing will ever schedule once migslice is gone: behind the
  admission gate ``migslice.io/admission``, or naming ``migslice-scheduler``. Listed with the
  command that deletes each, never deleted here: their controllers make them again, and
  whether to is the admin's call (docs/operate.md).

Its writers, found first (:meth:`Leftovers.writers`): the pods of migslice's extender and
agent (labelled ``app.kubernetes.io/name=migslice`` with component ``extender`` or ``agent``),
in any namespace; while one runs, what it wrote comes back. A read or write the API server
does not answer or answers with a passing error (0, 408, 429, 5xx) is tried again
(:data:`TRIES`); a list whose continue token expired (410 Gone) is started again.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from migslice import names
from migslice.kube.device_taints import RULES, KubeSteerApi
from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.objects.device_taint_rules import STEER_RULE_SELECTOR, is_steer_rule
from migslice.objects.times import parse_time

T = TypeVar("T")

NODE_LABELS = (names.QUARANTINE_LABEL,)
"""Node labels migslice writes and removes here: the repartition controller's quarantine."""
NODE_ANNOTATIONS = (
    names.QUARANTINE_ANNOTATION,
    names.CARVE_ANNOTATION,
    names.LAYOUT_ANNOTATION,
    names.CARVE_STATE_ANNOTATION,
)
"""Node annotations migslice writes and removes here: the controller's quarantine note and
carve request, the agent's layout and carve journal."""
PAGE = "500"
WRITERS_SELECTOR = "app.kubernetes.io/name=migslice,app.kubernetes.io/component in (agent,extender)"
"""The pods that write what this removes: the extender (steer rules, quarantine, carve
requests) and the node agent (layout, carve journal), as the chart and manifests label them."""
TRIES = 5
"""Tries of a request the API server does not answer or answers with a passing error."""
FIRST_PAUSE_S = 0.2
"""The pause before the second try; it doubles for each further one (0.2 + ... + 1.6 s)."""
PASSING = frozenset({0, 408, 429, 500, 502, 503, 504})
RESTARTS = 3
"""Times a list is started again after its continue token expired."""
WORKERS = 8
"""Nodes patched at once: thousands of GPU nodes fit helm uninstall's 5-minute hook timeout."""
KILL_MARGIN_S = 5.0
"""How long past its deletion time a pod may take to leave before its node is taken as not
answering (its kubelet has been told to kill it by then)."""


class CleanupError(ApiError):
    """A read or write the API server refused (or could not be sent), said with what it was;
    the message holds the API's error, its status with it, so it is not said again first."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(0, message)
        self.status = status


@dataclass(frozen=True, slots=True)
class NodeMarks:
    """The keys of :data:`NODE_LABELS` and :data:`NODE_ANNOTATIONS` one Node carries."""

    node: str
    labels: tuple[str, ...]
    annotations: tuple[str, ...]

    def patch(self) -> RawObject:
        """The merge patch that removes them (a key already gone is no change)."""
        metadata: RawObject = {}
        if self.labels:
            metadata["labels"] = dict.fromkeys(self.labels)
        if self.annotations:
            metadata["annotations"] = dict.fromkeys(self.annotations)
        return {"metadata": metadata}

    def describe(self) -> str:
        parts = []
        if self.labels:
            parts.append(f"label {', '.join(self.labels)}")
        if self.annotations:
            parts.append(f"annotations {', '.join(self.annotations)}")
        return "; ".join(parts)


def node_marks(raw_node: Mapping[str, object]) -> NodeMarks | None:
    """migslice's keys on a Node, or None when it carries none."""
    metadata = raw_node.get("metadata")
    if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
        return None
    labels = metadata.get("labels")
    annotations = metadata.get("annotations")
    found = NodeMarks(
        str(metadata["name"]),
        tuple(k for k in NODE_LABELS if isinstance(labels, Mapping) and k in labels),
        tuple(k for k in NODE_ANNOTATIONS if isinstance(annotations, Mapping) and k in annotations),
    )
    return found if found.labels or found.annotations else None


@dataclass(frozen=True, slots=True)
class StrandedPod:
    """A pod not bound to a node that only migslice would ever have moved on."""

    namespace: str
    name: str
    reason: str

    def command(self) -> str:
        """The kubectl command that deletes it (its controller, if any, makes it again)."""
        return f"kubectl -n {self.namespace} delete pod {self.name} --wait=false"


def stranded_pod(raw_pod: Mapping[str, object]) -> StrandedPod | None:
    """The pod, if nothing will schedule it without migslice: not on a node, not finished or
    going, and behind the admission gate or naming migslice-scheduler."""
    metadata = raw_pod.get("metadata")
    spec = raw_pod.get("spec")
    status = raw_pod.get("status")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    if spec.get("nodeName") or metadata.get("deletionTimestamp"):
        return None
    if isinstance(status, Mapping) and status.get("phase") in names.TERMINAL_PHASES:
        return None
    gates = spec.get("schedulingGates")
    gated = isinstance(gates, list) and any(
        isinstance(g, Mapping) and g.get("name") == names.ADMISSION_GATE for g in gates
    )
    if gated:
        reason = f"behind the scheduling gate {names.ADMISSION_GATE}, which nothing removes now"
    elif spec.get("schedulerName") == names.SCHEDULER_NAME:
        reason = f"waits for {names.SCHEDULER_NAME}, which no longer runs"
    else:
        return None
    return StrandedPod(
        str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), reason
    )


@dataclass(frozen=True, slots=True)
class Writer:
    """A pod of migslice's extender or agent; ``deletion_at``: when its kubelet is to have
    killed it (None: not being deleted)."""

    namespace: str
    name: str
    component: str
    node: str
    deletion_at: datetime.datetime | None

    def describe(self) -> str:
        return f"{self.namespace}/{self.name} ({self.component})"

    def is_lost(self, now: datetime.datetime) -> bool:
        """Past its deletion time (and a margin) yet listed: its node does not answer, so its
        kubelet cannot say it stopped."""
        if self.deletion_at is None:
            return False
        return now > self.deletion_at + datetime.timedelta(seconds=KILL_MARGIN_S)


def writer_of(raw_pod: Mapping[str, object]) -> Writer | None:
    metadata = raw_pod.get("metadata")
    spec = raw_pod.get("spec")
    if not isinstance(metadata, Mapping):
        return None
    labels = metadata.get("labels")
    component = labels.get("app.kubernetes.io/component") if isinstance(labels, Mapping) else None
    return Writer(
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
        str(component or ""),
        str(spec.get("nodeName") or "") if isinstance(spec, Mapping) else "",
        parse_time(metadata.get("deletionTimestamp")),
    )


class Leftovers:
    """Finds and removes what migslice's components left, through the API server;
    ``pause``: sleeps between tries of a request that met a passing error."""

    def __init__(
        self, transport: KubernetesTransport, pause: Callable[[float], None] = time.sleep
    ) -> None:
        self._transport = transport
        self._pause = pause

    def _tried(self, call: Callable[[], T]) -> T:
        """``call``, tried again (:data:`TRIES` in all) while its error is a passing one."""
        pause_s = FIRST_PAUSE_S
        for tried in range(1, TRIES + 1):
            try:
                return call()
            except ApiError as error:
                if error.status not in PASSING or tried == TRIES:
                    raise
            self._pause(pause_s)
            pause_s *= 2
        raise AssertionError("unreachable")

    def _list(
        self, path: str, what: str, query: Mapping[str, str] | None = None
    ) -> list[RawObject]:
        for restart in range(RESTARTS + 1):
            try:
                return list(self._pages(path, query))
            except ApiError as error:
                if error.status == 410 and restart < RESTARTS:
                    continue  # the continue token expired: a new list from the start
                raise CleanupError(error.status, f"cannot list {what}: {error}") from None
        raise AssertionError("unreachable")

    def _pages(self, path: str, query: Mapping[str, str] | None) -> Iterator[RawObject]:
        token = ""
        while True:
            page_query = {**(query or {}), "limit": PAGE}
            if token:
                page_query["continue"] = token
            page = self._tried(partial(self._transport.get_json, path, page_query))
            yield from (i for i in page.get("items") or () if isinstance(i, dict))
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return

    def writers(self) -> list[Writer]:
        """The pods of migslice's extender and agent, in any namespace."""
        pods = self._list("/api/v1/pods", "Pods", {"labelSelector": WRITERS_SELECTOR})
        found = [w for raw in pods if (w := writer_of(raw)) is not None]
        return sorted(found, key=lambda w: (w.namespace, w.name))

    def steer_rules(self) -> list[str] | None:
        """The names of the steer's rules; None when the API server serves no DeviceTaintRules
        (before Kubernetes 1.37, or with its feature gates off: there are none)."""
        try:
            found = [
                str(rule["metadata"]["name"])
                for rule in self._list(
                    RULES, "DeviceTaintRules", {"labelSelector": STEER_RULE_SELECTOR}
                )
                if is_steer_rule(rule)
            ]
        except CleanupError as error:
            if error.status == 404:
                return None
            raise
        return sorted(found)

    def delete_rule(self, name: str) -> bool:
        """Delete a steer rule (as the steer deletes one); False when it is gone already."""
        try:
            return self._tried(lambda: KubeSteerApi(self._transport).delete_rule(name))
        except ApiError as error:
            raise CleanupError(
                error.status, f"cannot delete DeviceTaintRule {name}: {error}"
            ) from None

    def marked_nodes(self) -> list[NodeMarks]:
        found = [m for node in self._list("/api/v1/nodes", "Nodes") if (m := node_marks(node))]
        return sorted(found, key=lambda m: m.node)

    def unmark(self, marks: NodeMarks) -> bool:
        """Remove the keys from the Node; False when the Node is gone."""
        try:
            self._tried(
                lambda: self._transport.patch_json(f"/api/v1/nodes/{marks.node}", marks.patch())
            )
        except ApiError as error:
            if error.status == 404:
                return False
            raise CleanupError(
                error.status, f"cannot remove migslice's keys from Node {marks.node}: {error}"
            ) from None
        return True

    def unmark_all(self, found: Sequence[NodeMarks]) -> list[bool | CleanupError]:
        """:meth:`unmark` each, :data:`WORKERS` at once; each one's answer, in order."""

        def one(marks: NodeMarks) -> bool | CleanupError:
            try:
                return self.unmark(marks)
            except CleanupError as error:
                return error

        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(one, found))

    def stranded_pods(self) -> list[StrandedPod]:
        pods = self._list("/api/v1/pods", "Pods", {"fieldSelector": "spec.nodeName="})
        found = [p for raw in pods if (p := stranded_pod(raw))]
        return sorted(found, key=lambda p: (p.namespace, p.name))
