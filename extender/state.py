"""The extender's cluster view: an inventory index plus the caches that feed it.

Ports: :class:`CacheStatus` is whatever keeps the index current (a ``migslice.kube``
Informer in a cluster; :class:`StaticCache` for a cluster file).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from extender.settings import ExtenderSettings
from migslice.inventory import ClusterIndex, MigConfigs
from migslice.kube.health import CacheHealth, blindness
from migslice.mig.migparted import MigPartedError, parse_mig_parted
from migslice.objects import NodeFacts, PodFacts, node_facts_from_raw, pod_facts_from_raw
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import PreparedNode, prepare_node

log = logging.getLogger(__name__)


class CacheStatus(CacheHealth, Protocol):
    """A cache feeding the index: its name, whether it has listed once, how long it has not
    followed the API server (``blind_s``), and how long since it last heard from it."""

    def staleness_s(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class StaticCache:
    """A cache that never changes (a cluster file): always synced, never blind or stale."""

    name: str

    @property
    def synced(self) -> bool:
        return True

    def blind_s(self) -> float | None:
        return 0.0

    def staleness_s(self) -> float | None:
        return 0.0


@dataclass(slots=True)
class RepartitionStats:
    """Counters of the repartition controller, for /metrics (written by its thread only)."""

    dry_run: bool = False
    is_leader: bool = False
    plans_started: int = 0
    plans_finished: dict[str, int] = field(default_factory=dict)
    plans_dry_run: int = 0
    node_outcomes: dict[str, int] = field(default_factory=dict)
    carve_outcomes: dict[str, int] = field(default_factory=dict)
    nodes_in_flight: int = 0
    nodes_quarantined: int = 0
    errors: int = 0
    last_round: str = ""
    mig_manager_config_mismatch: bool = False
    """MIG Manager reads another ConfigMap than the controller's: no planning (the guard)."""


@dataclass
class ExtenderState:
    """What the routes read: the index, the caches whose health readiness reports, and the
    repartition controller's counters when it runs."""

    index: ClusterIndex[PreparedNode]
    caches: Sequence[CacheStatus] = ()
    stop: Callable[[], None] = field(default=lambda: None)
    repartition: RepartitionStats | None = None

    def readiness(self, max_blind_s: float) -> tuple[bool, list[str]]:
        """(ready, problems): every cache synced and none blind for longer than
        ``max_blind_s`` (``migslice.kube.health``). A quiet, healthy cluster is ready."""
        problems = blindness(self.caches, max_blind_s=max_blind_s)
        return (not problems, problems)


def new_index() -> ClusterIndex[PreparedNode]:
    return ClusterIndex(prepare_node)


def mig_configs_from(config_map: Mapping[str, Any] | None, key: str) -> MigConfigs:
    """The mig-parted configs in a ConfigMap's ``data[key]``; empty (and logged) if unreadable."""
    if not config_map:
        return {}
    data = config_map.get("data") or {}
    text = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(text, str):
        log.warning("ConfigMap has no data key=%s; inferring layouts from built-in names only", key)
        return {}
    try:
        return parse_mig_parted(text)
    except MigPartedError as error:
        log.warning("mig-parted config unreadable (%s); using built-in names only", error)
        return {}


def state_from_objects(objects: ClusterObjects, settings: ExtenderSettings) -> ExtenderState:
    """A fixed cluster view from a cluster file's objects (a Pod with spec.nodeName is bound)."""
    index = new_index()
    config_map = objects.config_map(settings.mig_config_namespace, settings.mig_config_name)
    if config_map is not None:
        index.set_mig_configs(mig_configs_from(config_map, settings.mig_config_key))
    index.replace_nodes(node_facts_from_raw(raw) for raw in objects.nodes)
    index.replace_pods(_projected_pods(objects.pods))
    return ExtenderState(index, (StaticCache("cluster-file"),))


def _projected_pods(raw_pods: Iterable[Mapping[str, Any]]) -> Iterable[PodFacts]:
    for raw in raw_pods:
        pod = pod_facts_from_raw(raw)
        if pod is not None:
            yield pod


class NodeSink:
    """Informer sink that keeps the index's nodes."""

    def __init__(self, index: ClusterIndex[PreparedNode]) -> None:
        self._index = index

    def replace(self, items: Mapping[str, NodeFacts]) -> None:
        self._index.replace_nodes(items.values())

    def upsert(self, key: str, item: NodeFacts) -> None:
        self._index.upsert_node(item)

    def delete(self, key: str) -> None:
        self._index.delete_node(key)


class PodSink:
    """Informer sink that keeps the index's GPU pods."""

    def __init__(self, index: ClusterIndex[PreparedNode]) -> None:
        self._index = index

    def replace(self, items: Mapping[str, PodFacts]) -> None:
        self._index.replace_pods(items.values())

    def upsert(self, key: str, item: PodFacts) -> None:
        self._index.upsert_pod(item)

    def delete(self, key: str) -> None:
        self._index.delete_pod(key)


class MigConfigSink:
    """Informer sink for the one ConfigMap that holds the mig-parted config."""

    def __init__(self, index: ClusterIndex[PreparedNode]) -> None:
        self._index = index

    def replace(self, items: Mapping[str, MigConfigs]) -> None:
        merged: dict[str, Any] = {}
        for configs in items.values():
            merged.update(configs)
        self._index.set_mig_configs(merged)

    def upsert(self, key: str, item: MigConfigs) -> None:
        self._index.set_mig_configs(item)

    def delete(self, key: str) -> None:
        self._index.set_mig_configs({})
