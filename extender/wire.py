"""kube-scheduler extender wire types (``k8s.io/kube-scheduler/extender/v1``).

Keys are the Go field names exactly (the Go structs have no json tags); nothing is
``omitempty``, so an unset pointer or map travels as ``null``. Embedded Pods and Nodes are plain
API JSON without ``apiVersion``/``kind``.
"""

from __future__ import annotations

from typing import Any, TypedDict

RawPod = dict[str, Any]
RawNode = dict[str, Any]


class NodeList(TypedDict):
    metadata: dict[str, Any]
    items: list[RawNode]


class ExtenderArgs(TypedDict):
    """The body of a filter or prioritize call: exactly one of Nodes/NodeNames is non-null."""

    Pod: RawPod
    Nodes: NodeList | None
    NodeNames: list[str] | None


class ExtenderFilterResult(TypedDict):
    """The filter answer; ``Error`` non-empty makes kube-scheduler treat the call as failed."""

    Nodes: NodeList | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of the prioritize answer (a bare JSON array of these); Score is an integer."""

    Host: str
    Score: int


HostPriorityList = list[HostPriority]


def host_priority(name: str, score: int) -> HostPriority:
    return {"Host": name, "Score": score}


class PrioritizeError(TypedDict):
    """What prioritize answers on our own failure: kube-scheduler cannot decode it into a
    HostPriorityList, logs the failure and ignores this extender's scores for the pod."""

    Error: str


def filter_error(message: str) -> ExtenderFilterResult:
    return {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": message,
    }
