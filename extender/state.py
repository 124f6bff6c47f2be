"""The extender's cluster view: an inventory index plus the caches that feed it.

Ports: :class:`CacheStatus` is whatever keeps the index current (a ``migslice.kube``
Informer in a cluster; :class:`StaticCache` for a cluster file).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from extender.catch_up import NodeChanges
from extender.retries import Retries
from extender.settings import ExtenderSettings
from extender.wire import HostPriority, host_priority
from migslice.inventory import ClusterIndex, MigConfigs
from migslice.kube.health import CacheHealth, blindness
from migslice.mig.migparted import MigPartedError, parse_mig_parted
from migslice.mig.stranding import NO_MIX, FillerMix
from migslice.objects import NodeFacts, PodFacts
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.device_taint_rules import TaintRuleFacts
from migslice.objects.dra_pool import PoolState
from migslice.objects.resource_claims import ClaimFacts
from migslice.objects.resource_slices import SliceFacts
from migslice.scheduling import DecisionCache, PreparedNode, prepare_node
from migslice.scheduling.reserve import DEFAULT_MAX_HOLD_S

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
class StrandGuard:
    """The cluster's stranding rule (:func:`migslice.mig.stranding.strand_guard`), as the
    steer loop last read it from the held mix: the index derives DynamicMIG nodes' scores with
    it, the steer ranks with it. Written by the steer loop's thread only."""

    on: bool = False
    fill: int = 0
    need: int = 0
    flips: int = 0
    complete: bool = False
    """The steer's full-compute rule (:func:`migslice.mig.stranding.complete_rule`)."""
    wide: int = 0
    """Memory slices the held 4g instances take (the rule weighs them against ``need``)."""
    complete_flips: int = 0


@dataclass(slots=True)
class ReserveStats:
    """The large-job reserve (:mod:`migslice.scheduling.reserve`) as the steer loop last
    added it up: idle DynamicMIG GPUs and their free capacity in whole GPUs; ``held_back``:
    filter calls it left without a node; ``released``: filter calls it let past after the pod
    had waited ``max_hold_s``. ``enabled``: ``--dra-large-reserve``."""

    enabled: bool = False
    idle: int = 0
    free: float = 0.0
    share: float = 0.0
    """The arrivals' large share as this replica's filter last read it."""
    held_back: int = 0
    released: int = 0
    max_hold_s: float = DEFAULT_MAX_HOLD_S
    """``--dra-large-reserve-max-hold``."""


@dataclass(slots=True)
class SteerStats:
    """Counters of the DRA steer (``extender.steer``), for /metrics (written by its thread
    only)."""

    rules: int = 0
    created: int = 0
    deleted: int = 0
    lifted: int = 0
    failures: int = 0
    capped_nodes: int = 0
    guard: StrandGuard = field(default_factory=StrandGuard)
    reserve: ReserveStats = field(default_factory=ReserveStats)


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
    pending: dict[str, tuple[int, float]] = field(default_factory=dict)
    """The leader's last round: per MIG profile, pods waiting for it and the longest wait."""
    open_ages: dict[str, float] = field(default_factory=dict)
    """Per mode, how long the oldest applied, unanswered node of the record has waited, by
    its writer's stamp (a restart or a change of leader does not reset it)."""
    open_leader_ages: dict[str, float] = field(default_factory=dict)
    """The same waits as this leader times them, from when it first saw each stamp: what its
    deadline counts (:mod:`migslice.repartition.record.local_time`)."""
    pending_as_of: float | None = None
    """The controller's clock when ``pending`` was taken, and ``open_ages``'s: a scrape adds
    what has passed since (:meth:`aged`), so rounds that fail leave the waits growing, not
    frozen where the alerts on them never fire."""
    open_as_of: float | None = None
    clock: Callable[[], float] = time.time
    deadline_s: float = 0.0
    stranding: FillerMix = NO_MIX
    """The leader's last round: what the pods on device-plugin nodes hold towards the
    planners' stranding rule (:func:`migslice.repartition.held_mix`)."""

    def aged(self, seconds: float, as_of: float | None) -> float:
        """A wait taken at ``as_of`` as it stands now (0 stays 0: nothing waits)."""
        if seconds <= 0 or as_of is None:
            return seconds
        return seconds + max(0.0, self.clock() - as_of)

    def follower(self) -> None:
        """This replica does not lead: what only the leader exports goes, and what it exported
        while it led is not left behind for ``max()`` in the alerts to read for ever."""
        self.pending, self.open_ages, self.open_leader_ages = {}, {}, {}
        self.pending_as_of = self.open_as_of = None
        self.stranding = NO_MIX
        self.nodes_in_flight = self.nodes_quarantined = 0
        self.mig_manager_config_mismatch = False


@dataclass
class ExtenderState:
    """What the routes read: the index, the verdicts and scores kept per pod demand until an
    event touches their node, the caches whose health readiness reports, and the repartition
    controller's counters when it runs, and in a cluster the pods to touch once the reason
    the filter turned them away ends (:mod:`extender.retries`)."""

    index: ClusterIndex[PreparedNode]
    caches: Sequence[CacheStatus] = ()
    stop: Callable[[], None] = field(default=lambda: None)
    repartition: RepartitionStats | None = None
    steer: SteerStats | None = None
    retries: Retries | None = None
    decisions: DecisionCache[HostPriority] = field(init=False)
    changes: NodeChanges = field(init=False)

    def __post_init__(self) -> None:
        self.decisions = DecisionCache(self.index.get, host_priority)
        self.index.subscribe(self.decisions.forget)
        self.changes = NodeChanges()
        self.index.subscribe(self.changes)

    def dra_nodes(self) -> dict[str, int]:
        """How many DRA nodes are in each pool state (ready, incomplete, unknown)."""
        counts = {str(state): 0 for state in PoolState}
        for name in self.index.node_names():
            node = self.index.get(name)
            dra = None if node is None else node.state.dra
            if dra is not None:
                counts[str(dra.pool.state)] += 1
        return counts

    def dra_problems(self) -> dict[str, tuple[str, str]]:
        """Node -> (pool state, reason) of each DRA node whose pool is not ready."""
        found: dict[str, tuple[str, str]] = {}
        for name in self.index.node_names():
            node = self.index.get(name)
            dra = None if node is None else node.state.dra
            if dra is not None and not dra.is_ready:
                found[name] = (str(dra.pool.state), dra.pool.reason)
        return found

    def readiness(self, max_blind_s: float) -> tuple[bool, list[str]]:
        """(ready, problems): every cache synced and none blind for longer than
        ``max_blind_s`` (``migslice.kube.health``). A quiet, healthy cluster is ready."""
        problems = blindness(self.caches, max_blind_s=max_blind_s)
        return (not problems, problems)


def new_index(guard: StrandGuard | None = None) -> ClusterIndex[PreparedNode]:
    """The extender's index; with ``guard``, nodes are derived under its current value."""
    if guard is None:
        return ClusterIndex(prepare_node)
    return ClusterIndex(lambda state: prepare_node(state, strand_guard=guard.on))


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
    """A fixed cluster view from a cluster file's objects (a Pod with spec.nodeName is bound;
    ResourceSlices, ResourceClaims and DeviceClasses are read as the watches read them)."""
    index = new_index()
    config_map = objects.config_map(settings.mig_config_namespace, settings.mig_config_name)
    if config_map is not None:
        index.set_mig_configs(mig_configs_from(config_map, settings.mig_config_key))
    index.load_objects(objects)
    index.derive_pending()
    return ExtenderState(index, (StaticCache("cluster-file"),))


class Warmup:
    """Derives every node's value once all of ``lists`` have arrived, and again after any
    later list: start-up derives each node once, not once per list (the index drops every
    value when a list arrives and would otherwise derive each on its first request)."""

    def __init__(self, index: ClusterIndex[PreparedNode], lists: Iterable[str]) -> None:
        self._index = index
        self._waiting = set(lists)

    @property
    def done(self) -> bool:
        """Every list has arrived once (a watch event's node can be derived for good)."""
        return not self._waiting

    def arrived(self, name: str) -> None:
        self._waiting.discard(name)
        if not self._waiting:
            derived = self._index.derive_pending()
            log.info("list=%s arrived; derived nodes=%d", name, derived)


class _EagerSink:
    """A watch event's node is derived on the watch's thread as the event arrives, not by the
    next call that names it: kube-scheduler's binds touch the node the next pod is most likely
    to be offered (best fit packs the fullest), and a derive inside a call is time in
    kube-scheduler's serial scheduling cycle. Before every list is in, nothing is derived
    (the warm-up derives each node once)."""

    def __init__(self, index: ClusterIndex[PreparedNode], warmup: Warmup | None = None) -> None:
        self._index = index
        self._warmup = warmup

    def _derive(self, touched: tuple[str, ...]) -> None:
        if touched and self._warm:
            self._index.derive(touched)

    def _derive_all(self) -> None:
        if self._warm:
            self._index.derive_pending()

    @property
    def _warm(self) -> bool:
        return self._warmup is None or self._warmup.done


class NodeSink(_EagerSink):
    """Informer sink that keeps the index's nodes."""

    def replace(self, items: Mapping[str, NodeFacts]) -> None:
        self._index.replace_nodes(items.values())
        if self._warmup is not None:
            self._warmup.arrived("nodes")

    def upsert(self, key: str, item: NodeFacts) -> None:
        self._derive(self._index.upsert_node(item))

    def delete(self, key: str) -> None:
        self._index.delete_node(key)


class PodSink(_EagerSink):
    """Informer sink that keeps the index's GPU pods."""

    def replace(self, items: Mapping[str, PodFacts]) -> None:
        self._index.replace_pods(items.values())
        if self._warmup is not None:
            self._warmup.arrived("pods")

    def upsert(self, key: str, item: PodFacts) -> None:
        self._derive(self._index.upsert_pod(item))

    def delete(self, key: str) -> None:
        self._derive(self._index.delete_pod(key))


class SliceSink(_EagerSink):
    """Informer sink that keeps the index's ``gpu.nvidia.com`` ResourceSlices."""

    def replace(self, items: Mapping[str, SliceFacts]) -> None:
        self._index.replace_slices(items.values())
        if self._warmup is not None:
            self._warmup.arrived("resourceslices")

    def upsert(self, key: str, item: SliceFacts) -> None:
        self._derive(self._index.upsert_slice(item))

    def delete(self, key: str) -> None:
        self._derive(self._index.delete_slice(key))


class ClaimSink(_EagerSink):
    """Informer sink that keeps the index's ResourceClaims."""

    def replace(self, items: Mapping[str, ClaimFacts]) -> None:
        self._index.replace_claims(items.values())
        if self._warmup is not None:
            self._warmup.arrived("resourceclaims")

    def upsert(self, key: str, item: ClaimFacts) -> None:
        self._derive(self._index.upsert_claim(item))

    def delete(self, key: str) -> None:
        self._derive(self._index.delete_claim(key))


class DeviceClassSink(_EagerSink):
    """Informer sink that keeps the index's DeviceClasses."""

    def replace(self, items: Mapping[str, DeviceClassFacts]) -> None:
        self._index.replace_classes(items.values())
        if self._warmup is not None:
            self._warmup.arrived("deviceclasses")

    def upsert(self, key: str, item: DeviceClassFacts) -> None:
        self._derive(self._index.upsert_class(item))

    def delete(self, key: str) -> None:
        self._derive(self._index.delete_class(key))


class TaintRuleSink(_EagerSink):
    """Informer sink that keeps the index's DeviceTaintRules (those that keep the allocator
    off ``gpu.nvidia.com`` devices, migslice's steer among them)."""

    def replace(self, items: Mapping[str, TaintRuleFacts]) -> None:
        self._index.replace_rules(items.values())
        if self._warmup is not None:
            self._warmup.arrived("devicetaintrules")

    def upsert(self, key: str, item: TaintRuleFacts) -> None:
        self._derive(self._index.upsert_rule(item))

    def delete(self, key: str) -> None:
        self._derive(self._index.delete_rule(key))


class MigConfigSink(_EagerSink):
    """Informer sink for the one ConfigMap that holds the mig-parted config. A change re-reads
    every node's layout: after the warm-up, the watch's thread derives them all at once, so
    calls do not each derive the names they send."""

    def replace(self, items: Mapping[str, MigConfigs]) -> None:
        merged: dict[str, Any] = {}
        for configs in items.values():
            merged.update(configs)
        self._index.set_mig_configs(merged)
        if self._warmup is not None:
            self._warmup.arrived("mig-config")

    def upsert(self, key: str, item: MigConfigs) -> None:
        self._index.set_mig_configs(item)
        self._derive_all()

    def delete(self, key: str) -> None:
        self._index.set_mig_configs({})
        self._derive_all()
