"""Nodes as the inventory needs them: GFD labels, MIG Manager labels, GPU allocatable, agent
report; and what kube-scheduler's own node filters read (cordon, taints, labels).

:func:`node_facts_from_raw` keeps only what placement decisions read, so a cache of thousands
of Nodes stays small (``managedFields``, images, conditions and the rest are dropped).
"""

from __future__ import annotations

import bisect
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from migslice import names
from migslice.objects.carve_handshake import (
    CarveAnnotationError,
    CarveRequest,
    CarveStatus,
    parse_carve_request,
    parse_carve_status,
)
from migslice.objects.gpu_layout import (
    AgentReport,
    LayoutAnnotationError,
    parse_layout_annotation,
)
from migslice.objects.json import JsonObject, items
from migslice.quantity import QuantityError, parse_count

RawNode = JsonObject
GFD_COUNT_SUFFIX = ".count"
"""GPU Feature Discovery labels ``nvidia.com/mig-<profile>.count`` (k8s-device-plugin
``internal/lm/resource.go``, ``baseLabeler``: ``<resource>.count``)."""
GFD_SHARING_SUFFIX = ".sharing-strategy"
GFD_REPLICAS_SUFFIX = ".replicas"
"""With the device plugin's time-slicing (or MPS) of a MIG resource, ``baseLabeler`` labels it
``<resource>.replicas: <n>`` (n > 1) and ``<resource>.sharing-strategy: time-slicing``
(``mps``); without it, ``1`` and ``none``. Unless renamed (``<resource>.shared``), the
replicas are advertised under the resource's own name."""
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
"""The taint effects kube-scheduler's TaintToleration filter reads (``PreferNoSchedule`` only
scores)."""


@dataclass(frozen=True, slots=True)
class NodeTaint:
    """A ``spec.taints`` entry whose effect keeps pods off (:data:`SCHEDULING_EFFECTS`)."""

    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """The decision-relevant part of a Node.

    ``allocatable`` holds only ``nvidia.com/*`` resources, sorted by name. ``agent`` is the
    parsed ``migslice.io/gpu-layout`` annotation, ``agent_error`` why it could not be parsed.
    ``problems`` lists labels or quantities that were present but unreadable.
    ``quarantine_label`` and ``quarantine_note``: the repartition quarantine's label value and
    annotation (``migslice.repartition.migmanager.quarantine``).
    ``unschedulable`` (cordoned, ``spec.unschedulable``), ``taints`` and ``labels``: what
    kube-scheduler's own node filters read (:mod:`migslice.scheduling.selection`).
    """

    name: str
    resource_version: str = ""
    product: str | None = None
    gpu_count: int | None = None
    mig_capable: bool | None = None
    mig_strategy: str | None = None
    mig_config: str | None = None
    mig_config_state: str | None = None
    allocatable: tuple[tuple[str, int], ...] = ()
    agent: AgentReport | None = None
    agent_error: str = ""
    problems: tuple[str, ...] = ()
    repartition_mode: str | None = None
    carve_request: CarveRequest | None = None
    carve_status: CarveStatus | None = None
    quarantine_label: str | None = None
    quarantine_note: str | None = None
    steer_off: bool = False
    """Label ``migslice.io/dra-steer: off``: its DRA devices are not steered."""
    labelled_mig: tuple[tuple[str, int], ...] = ()
    """MIG devices GPU Feature Discovery counts (labels ``nvidia.com/mig-<profile>.count``,
    keyed by the resource the device plugin advertises them as), sorted by name: right after
    a re-partition they are labelled before the device plugin advertises them."""
    shared_mig: tuple[str, ...] = ()
    """MIG resources GPU Feature Discovery labels as shared (time-slicing or MPS replicas of
    each instance, under the resource's own name), sorted: none of them is a MIG instance of
    a pod's own."""
    unschedulable: bool = False
    taints: tuple[NodeTaint, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    """Every label as (key, value), sorted by key (:meth:`label` reads one)."""

    def label(self, key: str) -> str | None:
        """The value of label ``key``, or None when the node lacks it."""
        labels = self.labels
        at = bisect.bisect_left(labels, key, key=_label_key)
        if at < len(labels) and labels[at][0] == key:
            return labels[at][1]
        return None

    def allocatable_of(self, resource: str) -> int:
        for name, count in self.allocatable:
            if name == resource:
                return count
        return 0

    def unread_carve_request(self) -> str:
        """Why the node's ``migslice.io/carve`` could not be read ("" when absent or read): a
        request of another release's version, or edited by hand."""
        if self.carve_request is not None:
            return ""
        return next(
            (
                p
                for p in self.problems
                if p.startswith(names.CARVE_ANNOTATION)
                and not p.startswith(names.CARVE_STATE_ANNOTATION)
            ),
            "",
        )

    def unread_carve_state(self) -> str:
        """Why the node's ``migslice.io/carve-state``, the node agent's carve journal, could
        not be read ("" when absent or read)."""
        if self.carve_status is not None:
            return ""
        return next((p for p in self.problems if p.startswith(names.CARVE_STATE_ANNOTATION)), "")

    @property
    def is_carving(self) -> bool:
        """A carve is asked for and not yet answered, or the node agent is in the middle of
        one (``migslice.io/carve``, ``migslice.io/carve-state``): no new GPU pod may use the
        node, and no other re-partition may touch it."""
        status = self.carve_status
        if status is not None and status.phase.is_open:
            return True
        request = self.carve_request
        return request is not None and (status is None or status.plan_id != request.plan_id)


def node_facts_from_raw(raw_node: RawNode) -> NodeFacts:
    """Project a raw Node (as the API or kube-scheduler sends it) to :class:`NodeFacts`."""
    metadata = _mapping(raw_node.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    annotations = _mapping(metadata.get("annotations"))
    allocatable_raw = _mapping(_mapping(raw_node.get("status")).get("allocatable"))
    problems: list[str] = []
    allocatable: list[tuple[str, int]] = []
    for resource, value in allocatable_raw.items():
        if not (isinstance(resource, str) and resource.startswith(names.GPU_RESOURCE_PREFIX)):
            continue
        try:
            count = parse_count(value, f"status.allocatable[{resource}]")
        except QuantityError as error:
            problems.append(str(error))
            continue
        allocatable.append((sys.intern(resource), count))
    gpu_count: int | None = None
    count_text = _label(labels, names.GPU_COUNT_LABEL)
    if count_text is not None:
        try:
            gpu_count = parse_count(count_text, f"label {names.GPU_COUNT_LABEL}")
        except QuantityError as error:
            problems.append(str(error))
    labelled_mig = _labelled_mig(labels, problems)
    capable_text = _label(labels, names.MIG_CAPABLE_LABEL)
    agent: AgentReport | None = None
    agent_error = ""
    annotation = annotations.get(names.LAYOUT_ANNOTATION)
    if isinstance(annotation, str):
        try:
            agent = parse_layout_annotation(annotation)
        except LayoutAnnotationError as error:
            agent_error = str(error)
    request, status = _carve(annotations, problems)
    name, version = metadata.get("name"), metadata.get("resourceVersion")
    spec = _mapping(raw_node.get("spec"))
    return NodeFacts(
        name=sys.intern(name) if isinstance(name, str) else "",
        resource_version=version if isinstance(version, str) else "",
        product=_interned(_label(labels, names.PRODUCT_LABEL)),
        gpu_count=gpu_count,
        mig_capable=None if capable_text is None else capable_text.lower() == "true",
        mig_strategy=_interned(_label(labels, names.MIG_STRATEGY_LABEL)),
        mig_config=_interned(_label(labels, names.MIG_CONFIG_LABEL)),
        mig_config_state=_interned(_label(labels, names.MIG_CONFIG_STATE_LABEL)),
        allocatable=tuple(sorted(allocatable)),
        agent=agent,
        agent_error=agent_error,
        problems=tuple(problems),
        repartition_mode=_interned(_label(labels, names.REPARTITION_MODE_LABEL)),
        carve_request=request,
        carve_status=status,
        quarantine_label=_label(labels, names.QUARANTINE_LABEL),
        quarantine_note=_label(annotations, names.QUARANTINE_ANNOTATION),
        steer_off=(_label(labels, names.DRA_STEER_LABEL) or "").lower() == "off",
        labelled_mig=labelled_mig,
        shared_mig=_shared_mig(labels, problems),
        unschedulable=spec.get("unschedulable") is True,
        taints=_taints(spec),
        labels=tuple(
            sorted(
                _label_pair(key, value)
                for key, value in labels.items()
                if isinstance(key, str) and isinstance(value, str)
            )
        ),
    )


def _taints(spec: JsonObject) -> tuple[NodeTaint, ...]:
    """The node's ``NoSchedule`` and ``NoExecute`` taints, in the order listed."""
    found: list[NodeTaint] = []
    for raw in items(spec.get("taints")):
        taint = _mapping(raw)
        effect, key, value = taint.get("effect"), taint.get("key"), taint.get("value")
        if effect in SCHEDULING_EFFECTS and isinstance(key, str):
            value = value if isinstance(value, str) else ""
            found.append(NodeTaint(sys.intern(key), sys.intern(value), sys.intern(str(effect))))
    return tuple(found)


@functools.lru_cache(maxsize=8192)
def _label_pair(key: str, value: str) -> tuple[str, str]:
    """One (key, value) pair, shared by every node that has it (a bounded memo of a pure
    function, as :func:`sys.intern` is): nodes of one pool differ in a few labels of their
    dozens, so a cache of thousands of Nodes keeps each pair once."""
    return sys.intern(key), sys.intern(value)


def _label_key(pair: tuple[str, str]) -> str:
    return pair[0]


def _shared_mig(labels: JsonObject, problems: list[str]) -> tuple[str, ...]:
    """The MIG resources whose GFD labels say they are shared (a strategy other than none, or
    more than one replica), sorted."""
    found: set[str] = set()
    for key, value in labels.items():
        if not (
            isinstance(key, str) and key.startswith(names.MIG_RESOURCE_PREFIX)
        ) or not isinstance(value, str):
            continue
        if key.endswith(GFD_SHARING_SUFFIX):
            if value.strip().lower() not in ("", "none"):
                found.add(key.removesuffix(GFD_SHARING_SUFFIX))
        elif key.endswith(GFD_REPLICAS_SUFFIX):
            try:
                replicas = parse_count(value, f"label {key}")
            except QuantityError as error:
                problems.append(str(error))
                continue
            if replicas > 1:
                found.add(key.removesuffix(GFD_REPLICAS_SUFFIX))
    return tuple(sorted(sys.intern(r) for r in found))


def _labelled_mig(labels: JsonObject, problems: list[str]) -> tuple[tuple[str, int], ...]:
    """GFD's ``nvidia.com/mig-<profile>.count`` labels as (resource, count), sorted."""
    found: list[tuple[str, int]] = []
    for key, value in labels.items():
        if not (
            isinstance(key, str)
            and key.startswith(names.MIG_RESOURCE_PREFIX)
            and key.endswith(GFD_COUNT_SUFFIX)
            and isinstance(value, str)
        ):
            continue
        try:
            count = parse_count(value, f"label {key}")
        except QuantityError as error:
            problems.append(str(error))
            continue
        if count:
            found.append((sys.intern(key.removesuffix(GFD_COUNT_SUFFIX)), count))
    return tuple(sorted(found))


def _carve(
    annotations: JsonObject, problems: list[str]
) -> tuple[CarveRequest | None, CarveStatus | None]:
    """The carve request and the agent's carve state, when the node has them."""
    request: CarveRequest | None = None
    status: CarveStatus | None = None
    text = annotations.get(names.CARVE_ANNOTATION)
    if isinstance(text, str):
        try:
            request = parse_carve_request(text)
        except CarveAnnotationError as error:
            problems.append(str(error))
    text = annotations.get(names.CARVE_STATE_ANNOTATION)
    if isinstance(text, str):
        try:
            status = parse_carve_status(text)
        except CarveAnnotationError as error:
            problems.append(str(error))
    return request, status


def node_name_of(raw_node: RawNode) -> str | None:
    name = _mapping(raw_node.get("metadata")).get("name")
    return name if isinstance(name, str) and name else None


def node_labels_of(raw_node: RawNode) -> JsonObject:
    return _mapping(_mapping(raw_node.get("metadata")).get("labels"))


def slim_node(raw_node: RawNode) -> dict[str, object]:
    """The name and ``nvidia.com/*`` labels of a Node: what the webhook's state reads
    (:func:`node_name_of`, :func:`node_product_of` answer the same on it)."""
    metadata = _mapping(raw_node.get("metadata"))
    slim: dict[str, object] = {}
    if "name" in metadata:
        name = metadata["name"]
        slim["name"] = sys.intern(name) if isinstance(name, str) else name
    labels = metadata.get("labels")
    if isinstance(labels, Mapping):
        slim["labels"] = {
            k: v for k, v in labels.items() if isinstance(k, str) and k.startswith("nvidia.com/")
        }
    return {"metadata": slim}


def node_product_of(raw_node: RawNode) -> str | None:
    """The GPU Feature Discovery product label (``nvidia.com/gpu.product``), if any."""
    return _label(node_labels_of(raw_node), names.PRODUCT_LABEL)


def _mapping(value: object) -> JsonObject:
    return value if isinstance(value, Mapping) else {}


def _label(labels: object, key: str) -> str | None:
    if not isinstance(labels, Mapping):
        return None
    value = labels.get(key)
    return value if isinstance(value, str) else None


def _interned(value: str | None) -> str | None:
    return None if value is None else sys.intern(value)
