"""Warning Events on the Nodes whose DRA devices migslice cannot read.

A node whose ``gpu.nvidia.com`` ResourceSlices are of a shape migslice does not know (another
driver version, a device type, a profile or placement the catalog lacks for the model; see
:mod:`migslice.objects.dra_pool`) is unresolvable for every GPU pod, and
``migslice_extender_dra_nodes{state="unknown"}`` counts it. So that an admin learns which node
and why, :class:`DraWarnings` records a Warning Event (reason ``MigsliceDraDevicesUnknown``)
on the Node once per change of its reason: not again while the reason stays, again when it
changes or comes back after the node was read. A pool still being published (incomplete) is
passing and records nothing.

With the repartition controller on, only the replica holding its Lease records (one Event per
change in the cluster); without it, every replica does.

Port: :class:`WarningRecorder` (``migslice.kube.nodes.KubeNodeStore`` in a cluster).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from migslice.objects.dra_pool import PoolState

log = logging.getLogger(__name__)

EVENT_REASON = "MigsliceDraDevicesUnknown"
INTERVAL_S = 10.0


class WarningRecorder(Protocol):
    def record_warning(self, node: str, reason: str, message: str) -> None: ...


class DraWarnings:
    """:meth:`review` is given every DRA node's problem and records what changed."""

    def __init__(
        self, recorder: WarningRecorder, *, may_record: Callable[[], bool] = lambda: True
    ) -> None:
        self._recorder = recorder
        self._may_record = may_record
        self._said: dict[str, str] = {}

    def review(self, problems: Mapping[str, tuple[str, str]]) -> list[str]:
        """Record a Warning Event for each node newly unknown or unknown for another reason;
        the nodes recorded. ``problems``: node -> (pool state, reason)."""
        unknown = {
            node: reason for node, (state, reason) in problems.items() if state == PoolState.UNKNOWN
        }
        for node in [n for n in self._said if n not in unknown]:
            del self._said[node]  # read again (or gone): a recurrence is reported anew
        if not self._may_record():
            return []
        recorded: list[str] = []
        for node, reason in sorted(unknown.items()):
            if self._said.get(node) == reason:
                continue
            message = (
                f"migslice cannot read this node's DRA devices (gpu.nvidia.com), so it places "
                f"no GPU pod here: {reason}"
            )
            self._recorder.record_warning(node, EVENT_REASON, message)
            log.warning("node=%s DRA devices unknown: %s", node, reason)
            self._said[node] = reason
            recorded.append(node)
        return recorded
