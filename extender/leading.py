"""The repartition controller's writes, made only while its replica leads.

A leader that has not renewed its Lease within the renew deadline stops leading at once
(:attr:`migslice.kube.LeaderElector.is_leader`), also in the middle of a round: a round can
outlast the deadline when the API server is slow (each call may take its full timeout), and
another replica may take the Lease once it expires. :class:`LeaderWrites` asks the elector
before each write and refuses it with :class:`NotLeadingError` from then on; the round ends
there, as it would at a restart, and the record keeps its step for whichever replica leads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from extender.controller import RepartitionApi

RawObject = dict[str, Any]


class NotLeadingError(Exception):
    """A write refused: this replica does not lead (any more)."""


class LeaderWrites:
    """``api`` whose writes go through only while ``is_leader()``; reads always do."""

    def __init__(self, api: RepartitionApi, is_leader: Callable[[], bool]) -> None:
        self._api = api
        self._is_leader = is_leader

    def _leading(self, what: str) -> None:
        if not self._is_leader():
            raise NotLeadingError(
                f"not leading any more (the Lease was not renewed within its renew deadline): "
                f"{what} not written"
            )

    def read_config_map(self) -> RawObject | None:
        return self._api.read_config_map()

    def update_config_map(
        self, mutate: Callable[[RawObject], RawObject | None]
    ) -> RawObject | None:
        self._leading("the mig-parted ConfigMap")
        return self._api.update_config_map(mutate)

    def list_pending_pods(self, scheduler_name: str) -> list[RawObject]:
        return self._api.list_pending_pods(scheduler_name)

    def read_node(self, name: str) -> RawObject | None:
        return self._api.read_node(name)

    def list_pods_on_node(self, name: str) -> list[RawObject]:
        return self._api.list_pods_on_node(name)

    def set_node_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        self._leading(f"node={name} labels")
        self._api.set_node_labels(name, labels)

    def set_node_annotations(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self._leading(f"node={name} annotations")
        self._api.set_node_annotations(name, annotations)

    def record_event(self, node: str, reason: str, message: str, *, warning: bool = False) -> None:
        self._leading(f"node={node} Event {reason}")
        self._api.record_event(node, reason, message, warning=warning)

    def touch_pod(self, pod_key: str, annotations: Mapping[str, str], uid: str = "") -> bool:
        self._leading(f"pod={pod_key} touch")
        return self._api.touch_pod(pod_key, annotations, uid=uid)

    def mark_quarantine(self, node: str, note: str | None) -> None:
        self._leading(f"node={node} quarantine mark")
        self._api.mark_quarantine(node, note)
