"""A cluster inventory that is kept up to date one event at a time.

:class:`ClusterIndex` holds the projected Nodes and Pods of a cluster (and, for DRA nodes, the
``gpu.nvidia.com`` ResourceSlices, the ResourceClaims and the DeviceClasses) and, per node, a value
derived from its :class:`NodeState` by a caller-given function (the extender derives the
per-profile free counts and scores it answers from; the webhook can keep the state itself).
A node's value is derived once per change: a change drops the values of the nodes it touches
(a whole list drops them all) and names the nodes to derive again; :meth:`derive` derives
those (the extender's watches call it as each event arrives, so a request reads a derived
value), :meth:`derive_pending` every missing one at once (the extender calls it when its
lists are all in, so start-up derives each node once, not once per list), and :meth:`get`
derives a missing one on first use. A node's layout (:func:`node_layout`, from its facts and
the mig-parted configs) is kept while only its pods change, and derived once for all nodes
of one shape (:func:`~migslice.inventory.layouts.layout_key`); a DRA node's pool
(:func:`migslice.objects.dra_pool.read_pool`) while only its claims and pods do. A watch event
thus costs one node's work: a slice touches its node, a claim the nodes its allocation names
and those of the pods that use it; a DeviceClass touches every DRA node.
Listeners (:meth:`subscribe`) hear the name of every node whose value was dropped (None: all
of them), after the drop, so caches built on derived values stay exact.

No I/O and no clock: the shells (``migslice.kube`` informers, cluster files) feed it.
Writers are serialised by a lock; readers of a derived value take no lock and see, per node,
either the old or the new value (dict reads and writes are atomic in CPython); a reader that
finds none derives it under the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, TypeVar

from migslice.inventory.dra import DraInputs
from migslice.inventory.layouts import (
    NodeLayout,
    NodeState,
    layout_key,
    node_layout,
    resolve_node,
)
from migslice.mig import CATALOG, Catalog
from migslice.mig.migparted import MigPartedEntry
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.device_classes import (
    DeviceClassFacts,
    device_class_facts_from_raw,
    extended_resources,
)
from migslice.objects.device_taint_rules import (
    TaintRuleFacts,
    taint_rule_facts_from_raw,
    with_rules,
)
from migslice.objects.dra_pool import DraPool, read_pool
from migslice.objects.nodes import NodeFacts, node_facts_from_raw
from migslice.objects.pods import PodFacts, pod_facts_from_raw
from migslice.objects.resource_claims import ClaimFacts, claim_facts_from_raw
from migslice.objects.resource_slices import SliceFacts, slice_facts_from_raw

V = TypeVar("V")
#: Nodes whose inputs :meth:`ClusterIndex.derive_pending` copies per hold of the lock.
DERIVE_BATCH = 64
MigConfigs = Mapping[str, tuple[MigPartedEntry, ...]]
#: Distinct node shapes whose layouts are kept (more are derived again: a bound, not a need).
MAX_SHARED_LAYOUTS = 4096


class ClusterIndex(Generic[V]):
    """Nodes, the GPU pods on them, and a derived value per node."""

    def __init__(self, derive: Callable[[NodeState], V], catalog: Catalog = CATALOG) -> None:
        self._derive = derive
        self._catalog = catalog
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeFacts] = {}
        self._pods: dict[str, PodFacts] = {}
        self._pods_by_node: dict[str, dict[str, PodFacts]] = {}
        self._nominated: dict[str, set[str]] = {}
        """Per node, the pods only nominated there (a preemptor's victims leaving): few."""
        self._derived: dict[str, V] = {}
        # Per node, the layout its facts and the configs give, kept while only its pods change
        # (a bind re-derives the node without reading its agent report or config again).
        self._layouts: dict[str, tuple[NodeFacts, MigConfigs, NodeLayout]] = {}
        self._mig_configs: MigConfigs = {}
        # Layouts by :func:`layout_key`, for the configs they were derived with: nodes of one
        # shape share one derivation (replaced whole when the configs change).
        self._shared: tuple[MigConfigs, dict[tuple[object, ...], NodeLayout]] = ({}, {})
        self._listeners: list[Callable[[str | None], None]] = []
        # DRA: slices by node, the pool read from them (kept until they change), claims by key
        # and by the pools their allocations name, the pods that use each claim, the classes.
        self._slices: dict[str, dict[str, SliceFacts]] = {}
        self._slice_nodes: dict[str, str] = {}
        self._pools: dict[str, DraPool] = {}
        self._claims: dict[str, ClaimFacts] = {}
        self._claims_by_pool: dict[str, dict[str, ClaimFacts]] = {}
        self._pods_by_claim: dict[str, set[str]] = {}
        self._classes: dict[str, DeviceClassFacts] = {}
        self._extended: tuple[Mapping[str, DeviceClassFacts], frozenset[str]] = (
            self._classes,
            frozenset(),
        )
        # DeviceTaintRules by the pool they select (None: any pool), by name.
        self._rules: dict[str | None, dict[str, TaintRuleFacts]] = {}
        self._rule_pools: dict[str, str | None] = {}
        self._inexact: set[str] = set()  # steer-named rules not as the steer writes them

    def subscribe(self, listener: Callable[[str | None], None]) -> None:
        """Call ``listener(name)`` after a node's derived value is dropped, ``None`` for all."""
        with self._lock:
            self._listeners.append(listener)

    # -- reads (lock-free) -------------------------------------------------------------------

    def get(self, name: str) -> V | None:
        derived = self._derived.get(name)
        if derived is not None or name not in self._nodes:
            return derived
        with self._lock:
            return self._derive_missing(name)

    def node_facts(self, name: str) -> NodeFacts | None:
        return self._nodes.get(name)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        return len(self._pods)

    def state_of(self, name: str) -> NodeState | None:
        """The full NodeState of a cached node (computed now; not on the hot path)."""
        facts = self._nodes.get(name)
        return None if facts is None else self._resolve(facts)

    def dra_inputs(self, name: str, pods: Iterable[PodFacts]) -> DraInputs | None:
        """The cached DRA inputs of node ``name`` (its ``gpu.nvidia.com`` pool, the claims
        allocated in it and those ``pods`` name), for a caller that read the node and its pods
        fresh; None when no slice names it."""
        with self._lock:
            return self._dra_inputs(name, tuple(pods))

    def uncounted_nominations(self, key: str, priority: int) -> frozenset[str]:
        """The nodes holding a pod only nominated there that kube-scheduler does not count for
        pod ``key`` of ``priority`` (the pod itself, or one of lower priority)."""
        with self._lock:
            if not self._nominated:
                return frozenset()
            return frozenset(
                node
                for node, keys in self._nominated.items()
                if any(not self._pods[k].counts_for(key, priority) for k in keys)
            )

    def holds_lower(self, name: str, priority: int) -> bool:
        """Whether a pod bound to node ``name`` has a priority below ``priority`` (one that
        kube-scheduler may have evicted for a pod of ``priority``)."""
        with self._lock:
            return any(
                not p.is_assumed and p.priority < priority
                for p in self._pods_by_node.get(name, {}).values()
            )

    def derive_for_pod(
        self, name: str, key: str, priority: int, facts: NodeFacts | None = None
    ) -> V | None:
        """The value of node ``name`` as kube-scheduler sees it for that pod: without the
        nominated pods it does not count for it (:meth:`PodFacts.counts_for`). ``facts``: the
        node as given from outside (an ExtenderArgs ``Nodes``), else the cached node's."""
        if facts is None:
            facts = self._nodes.get(name)
        if facts is None:
            return None
        with self._lock:
            pods = tuple(
                p for p in self._pods_by_node.get(name, {}).values() if p.counts_for(key, priority)
            )
            dra = self._dra_inputs(name, pods)
        return self._derive(self._resolve_with(facts, pods, self._mig_configs, dra))

    def derive_for(self, facts: NodeFacts) -> V:
        """The derived value for a node given from outside (e.g. in an ExtenderArgs ``Nodes``),
        with the cached pods that hold resources on a node of that name."""
        return self._derive(self._resolve(facts))

    # -- writes -----------------------------------------------------------------------------

    def derive_pending(self) -> int:
        """Derive every node whose value is missing; returns how many were derived.

        The work runs outside the lock, :data:`DERIVE_BATCH` nodes at a time (5,000 nodes take
        seconds): the lock is held only to copy a batch's inputs and to store its values, so the
        watches' writers and a request that needs a node derived never wait for the whole of
        it. A value whose node changed meanwhile is not stored (it is derived on first use)."""
        with self._lock:
            missing = [name for name in self._nodes if name not in self._derived]
        return self.derive(missing)

    def derive(self, names: Iterable[str]) -> int:
        """Derive those of ``names`` whose value is missing, as :meth:`derive_pending` does;
        returns how many were derived. A watch's writer calls it with the names a change
        touched (what :meth:`upsert_pod` and the other writes return), so the work is done
        on its thread when the event arrives, not by the next request that reads the node."""
        missing = [name for name in names if name not in self._derived]
        derived = 0
        for start in range(0, len(missing), DERIVE_BATCH):
            with self._lock:
                configs = self._mig_configs
                inputs = [
                    (name, facts, self._pods_on(name), self._dra_inputs(name))
                    for name in missing[start : start + DERIVE_BATCH]
                    if name not in self._derived and (facts := self._nodes.get(name)) is not None
                ]
            values = [
                (
                    name,
                    facts,
                    pods,
                    dra,
                    self._derive(self._resolve_with(facts, pods, configs, dra)),
                )
                for name, facts, pods, dra in inputs
            ]
            with self._lock:
                for name, facts, pods, dra, value in values:
                    unchanged = (
                        self._nodes.get(name) is facts
                        and self._mig_configs is configs
                        and self._pods_on(name) == pods
                        and self._dra_inputs(name) == dra
                    )
                    if unchanged and name not in self._derived:
                        self._derived[name] = value
                        derived += 1
        return derived

    def refresh(self, names: Iterable[str]) -> tuple[str, ...]:
        """Drop the values of ``names`` (their inputs unchanged, the derive function's own
        inputs not: the extender's stranding rule); the names to derive again."""
        with self._lock:
            return self._drop_nodes({name for name in names if name in self._nodes})

    def replace_nodes(self, nodes: Iterable[NodeFacts]) -> None:
        with self._lock:
            self._nodes = {facts.name: facts for facts in nodes}
            self._layouts = {}
            self._drop_all()

    def upsert_node(self, facts: NodeFacts) -> tuple[str, ...]:
        """Keep ``facts``; the names of the nodes to derive again (its own)."""
        with self._lock:
            self._nodes[facts.name] = facts
            self._drop(facts.name)
            return (facts.name,)

    def delete_node(self, name: str) -> tuple[str, ...]:
        """Forget the node; nothing is left to derive again."""
        with self._lock:
            self._nodes.pop(name, None)
            self._layouts.pop(name, None)
            self._drop(name)
            return ()

    def replace_pods(self, pods: Iterable[PodFacts]) -> None:
        with self._lock:
            self._pods = {pod.key: pod for pod in pods}
            self._pods_by_node = {}
            self._pods_by_claim = {}
            self._nominated = {}
            for pod in self._pods.values():
                self._link(pod)
            self._drop_all()

    def upsert_pod(self, pod: PodFacts) -> tuple[str, ...]:
        """Keep ``pod``; the names of the nodes to derive again (none when the pod is
        unchanged; else the node it left and the one it holds resources on)."""
        with self._lock:
            old = self._pods.get(pod.key)
            if old == pod:
                return ()
            left = self._unlink(old)
            self._pods[pod.key] = pod
            self._link(pod)
            touched = tuple(name for name in {left, pod.holding_node} if name is not None)
            for name in touched:
                self._drop(name)
            return touched

    def delete_pod(self, key: str) -> tuple[str, ...]:
        """Forget the pod; the name of the node to derive again, if it held resources."""
        with self._lock:
            old = self._pods.pop(key, None)
            touched = self._unlink(old)
            if touched is None:
                return ()
            self._drop(touched)
            return (touched,)

    def set_mig_configs(self, configs: MigConfigs) -> None:
        with self._lock:
            self._mig_configs = dict(configs)
            self._layouts = {}
            self._drop_all()

    def load_objects(self, objects: ClusterObjects) -> None:
        """Fill the index from a cluster file's objects: Nodes, Pods (one with
        ``spec.nodeName`` is bound) and the DRA objects."""
        self.replace_nodes(node_facts_from_raw(raw) for raw in objects.nodes)
        self.replace_pods(p for p in map(pod_facts_from_raw, objects.pods) if p is not None)
        self.load_dra(objects)

    def load_dra(self, objects: ClusterObjects) -> None:
        """Take a cluster file's ResourceSlices, ResourceClaims, DeviceClasses and
        DeviceTaintRules."""
        self.replace_slices(s for s in map(slice_facts_from_raw, objects.resource_slices) if s)
        self.replace_claims(c for c in map(claim_facts_from_raw, objects.resource_claims) if c)
        found = map(device_class_facts_from_raw, objects.device_classes)
        self.replace_classes(c for c in found if c is not None)
        rules = map(taint_rule_facts_from_raw, objects.device_taint_rules)
        self.replace_rules(r for r in rules if r is not None)

    def replace_slices(self, slices: Iterable[SliceFacts]) -> None:
        with self._lock:
            self._slices, self._slice_nodes, self._pools = {}, {}, {}
            for facts in slices:
                self._slices.setdefault(facts.node_name, {})[facts.name] = facts
                self._slice_nodes[facts.name] = facts.node_name
            self._drop_all()

    def upsert_slice(self, facts: SliceFacts) -> tuple[str, ...]:
        """Keep ``facts``; the names of the nodes to derive again (the slice's)."""
        with self._lock:
            touched = {facts.node_name, *self._forget_slice(facts.name)}
            self._slices.setdefault(facts.node_name, {})[facts.name] = facts
            self._slice_nodes[facts.name] = facts.node_name
            for name in touched:
                self._pools.pop(name, None)
                self._drop(name)
            return tuple(sorted(touched))

    def delete_slice(self, name: str) -> tuple[str, ...]:
        with self._lock:
            touched = self._forget_slice(name)
            for node in touched:
                self._pools.pop(node, None)
                self._drop(node)
            return touched

    def replace_claims(self, claims: Iterable[ClaimFacts]) -> None:
        with self._lock:
            self._claims = {claim.key: claim for claim in claims}
            self._claims_by_pool = {}
            for claim in self._claims.values():
                for pool, _ in claim.devices:
                    self._claims_by_pool.setdefault(pool, {})[claim.key] = claim
            self._drop_all()

    def upsert_claim(self, claim: ClaimFacts) -> tuple[str, ...]:
        """Keep ``claim``; the nodes to derive again: those its old and new allocations name
        and those of the pods that use it."""
        with self._lock:
            old = self._claims.get(claim.key)
            if old == claim:
                return ()
            touched = self._unlink_claim(old)
            self._claims[claim.key] = claim
            for pool, _ in claim.devices:
                self._claims_by_pool.setdefault(pool, {})[claim.key] = claim
                touched.add(pool)
            touched |= self._claim_users(claim.key)
            return self._drop_nodes(touched)

    def delete_claim(self, key: str) -> tuple[str, ...]:
        with self._lock:
            touched = self._unlink_claim(self._claims.pop(key, None))
            touched |= self._claim_users(key)
            return self._drop_nodes(touched)

    def replace_classes(self, classes: Iterable[DeviceClassFacts]) -> None:
        with self._lock:
            self._classes = {found.name: found for found in classes}
            self._drop_all()

    def upsert_class(self, found: DeviceClassFacts) -> tuple[str, ...]:
        """Keep the class; every DRA node is derived again (what claims ask may change)."""
        with self._lock:
            if self._classes.get(found.name) == found:
                return ()
            self._classes = {**self._classes, found.name: found}
            return self._drop_nodes(set(self._slices))

    def delete_class(self, name: str) -> tuple[str, ...]:
        with self._lock:
            if name not in self._classes:
                return ()
            self._classes = {k: v for k, v in self._classes.items() if k != name}
            return self._drop_nodes(set(self._slices))

    def replace_rules(self, rules: Iterable[TaintRuleFacts]) -> None:
        with self._lock:
            self._rules, self._rule_pools, self._inexact = {}, {}, set()
            for rule in rules:
                self._rules.setdefault(rule.pool, {})[rule.name] = rule
                self._rule_pools[rule.name] = rule.pool
                if rule.steer and not rule.exact:
                    self._inexact.add(rule.name)
            self._pools = {}
            self._drop_all()

    def upsert_rule(self, rule: TaintRuleFacts) -> tuple[str, ...]:
        """Keep the DeviceTaintRule; the nodes to derive again: those of the pools its old
        and new selectors name (every DRA node for a rule of any pool)."""
        with self._lock:
            old = self._forget_rule(rule.name)
            self._rules.setdefault(rule.pool, {})[rule.name] = rule
            self._rule_pools[rule.name] = rule.pool
            if rule.steer and not rule.exact:
                self._inexact.add(rule.name)
            return self._drop_pools(*old, rule.pool)

    def delete_rule(self, name: str) -> tuple[str, ...]:
        with self._lock:
            return self._drop_pools(*self._forget_rule(name))

    def edited_steer_rules(self) -> frozenset[str]:
        """The names of steer rules not as the steer writes them (changed by hand: their
        effect, key or device), kept as rules arrive rather than looked for each round."""
        with self._lock:
            return frozenset(self._inexact)

    def steer_rules(self) -> dict[str, TaintRuleFacts]:
        """migslice's own steer rules, by name."""
        with self._lock:
            return {
                name: rule
                for rules in self._rules.values()
                for name, rule in rules.items()
                if rule.steer
            }

    @property
    def classes(self) -> Mapping[str, DeviceClassFacts]:
        """The DeviceClasses by name (a value replaced, never changed, on each change)."""
        return self._classes

    def claim(self, key: str) -> ClaimFacts | None:
        return self._claims.get(key)

    # -- internals ----------------------------------------------------------------------------

    def _link(self, pod: PodFacts) -> None:
        node = pod.holding_node
        if node is not None:
            self._pods_by_node.setdefault(node, {})[pod.key] = pod
            if pod.is_assumed:
                self._nominated.setdefault(node, set()).add(pod.key)
            for claim in pod.claims:
                self._pods_by_claim.setdefault(claim, set()).add(pod.key)

    def _unlink(self, pod: PodFacts | None) -> str | None:
        if pod is None or pod.holding_node is None:
            return None
        on_node = self._pods_by_node.get(pod.holding_node)
        if on_node is not None:
            on_node.pop(pod.key, None)
            if not on_node:
                del self._pods_by_node[pod.holding_node]
        nominated = self._nominated.get(pod.holding_node)
        if nominated is not None:
            nominated.discard(pod.key)
            if not nominated:
                del self._nominated[pod.holding_node]
        for claim in pod.claims:
            users = self._pods_by_claim.get(claim)
            if users is not None:
                users.discard(pod.key)
                if not users:
                    del self._pods_by_claim[claim]
        return pod.holding_node

    def _forget_rule(self, name: str) -> tuple[str | None, ...]:
        """Forget a rule; the pool it selected, as a 1-tuple (empty: it was not kept)."""
        if name not in self._rule_pools:
            return ()
        self._inexact.discard(name)
        pool = self._rule_pools.pop(name)
        found = self._rules.get(pool)
        if found is not None:
            found.pop(name, None)
            if not found:
                del self._rules[pool]
        return (pool,)

    def _drop_pools(self, *pools: str | None) -> tuple[str, ...]:
        if not pools:
            return ()
        touched = set(self._slices) if None in pools else {p for p in pools if p is not None}
        for node in touched:
            self._pools.pop(node, None)
        return self._drop_nodes(touched)

    def _forget_slice(self, name: str) -> tuple[str, ...]:
        node = self._slice_nodes.pop(name, None)
        if node is None:
            return ()
        on_node = self._slices.get(node)
        if on_node is not None:
            on_node.pop(name, None)
            if not on_node:
                del self._slices[node]
        return (node,)

    def _unlink_claim(self, claim: ClaimFacts | None) -> set[str]:
        touched: set[str] = set()
        if claim is None:
            return touched
        for pool, _ in claim.devices:
            in_pool = self._claims_by_pool.get(pool)
            if in_pool is not None:
                in_pool.pop(claim.key, None)
                if not in_pool:
                    del self._claims_by_pool[pool]
            touched.add(pool)
        return touched

    def _claim_users(self, key: str) -> set[str]:
        """The nodes of the pods that use claim ``key``."""
        nodes: set[str] = set()
        for pod_key in self._pods_by_claim.get(key, ()):
            pod = self._pods.get(pod_key)
            if pod is not None and pod.holding_node is not None:
                nodes.add(pod.holding_node)
        return nodes

    def _drop_nodes(self, names: set[str]) -> tuple[str, ...]:
        touched = tuple(sorted(name for name in names if name))
        for name in touched:
            self._drop(name)
        return touched

    def _dra_inputs(self, name: str, pods: Iterable[PodFacts] | None = None) -> DraInputs | None:
        """The DRA inputs of node ``name`` (the caller holds the lock), None when no
        ``gpu.nvidia.com`` slice names it and no claim is allocated in its pool; ``pods``:
        those whose claims count (default every pod held there). A node whose slices are gone
        (its kubelet plugin restarting) while claims still hold its devices is a DRA node all
        the same, its pool incomplete: never read as a device-plugin node with nothing held."""
        slices = self._slices.get(name)
        if not slices and not self._claims_by_pool.get(name):
            return None
        if not slices:
            pool = read_pool(name, (), self._catalog)  # incomplete: nothing published
        elif (kept := self._pools.get(name)) is not None:
            pool = kept
        else:
            read = read_pool(name, slices.values(), self._catalog)
            pool = self._pools[name] = with_rules(
                read, self._rules.get(name), self._rules.get(None)
            )
        allocated = tuple(self._claims_by_pool.get(name, {}).values())
        counted = self._pods_by_node.get(name, {}).values() if pods is None else pods
        used = {
            key: claim
            for pod in counted
            for key in pod.claims
            if (claim := self._claims.get(key)) is not None
        }
        classes = self._classes
        if self._extended[0] is not classes:  # the classes changed (a new value each time)
            self._extended = (classes, extended_resources(classes.values()))
        return DraInputs(pool, allocated, used, classes, self._extended[1])

    def _pods_on(self, name: str) -> tuple[PodFacts, ...]:
        return tuple(self._pods_by_node.get(name, {}).values())

    def _resolve(self, facts: NodeFacts) -> NodeState:
        with self._lock:
            pods = tuple(self._pods_by_node.get(facts.name, {}).values())
            dra = self._dra_inputs(facts.name)
        return self._resolve_with(facts, pods, self._mig_configs, dra)

    def _resolve_with(
        self,
        facts: NodeFacts,
        pods: Iterable[PodFacts],
        configs: MigConfigs,
        dra: DraInputs | None = None,
    ) -> NodeState:
        kept = self._layouts.get(facts.name)  # checked by identity: no lock needed
        if kept is not None and kept[0] is facts and kept[1] is configs:
            layout = kept[2]
        else:
            layout = self._shared_layout(facts, configs)
            if self._nodes.get(facts.name) is facts:  # not a node given from outside
                self._layouts[facts.name] = (facts, configs, layout)
        return resolve_node(facts, pods, configs, catalog=self._catalog, layout=layout, dra=dra)

    def _shared_layout(self, facts: NodeFacts, configs: MigConfigs) -> NodeLayout:
        """The node's layout, derived once per shape (:func:`layout_key`) and configs."""
        key = layout_key(facts)
        if key is None:
            return node_layout(facts, configs, catalog=self._catalog)
        shared = self._shared  # one read: a whole replacement is seen whole
        if shared[0] is not configs:
            shared = self._shared = (configs, {})
        layout = shared[1].get(key)
        if layout is None:
            if len(shared[1]) >= MAX_SHARED_LAYOUTS:
                shared[1].clear()
            layout = shared[1][key] = node_layout(facts, configs, catalog=self._catalog)
        return layout

    def _derive_missing(self, name: str) -> V | None:
        """The node's derived value, derived now if missing (the caller holds the lock)."""
        derived = self._derived.get(name)
        facts = self._nodes.get(name)
        if derived is None and facts is not None:
            derived = self._derived[name] = self._derive(self._resolve(facts))
        return derived

    def _drop(self, name: str) -> None:
        self._derived.pop(name, None)
        for listener in self._listeners:
            listener(name)

    def _drop_all(self) -> None:
        self._derived = {}
        for listener in self._listeners:
            listener(None)
