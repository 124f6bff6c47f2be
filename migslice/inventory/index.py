"""A cluster inventory that is kept up to date one event at a time.

:class:`ClusterIndex` holds the projected Nodes and Pods of a cluster and, per node, a value
derived from its :class:`NodeState` by a caller-given function (the extender derives the
per-profile free counts and scores it answers from; the webhook can keep the state itself).
A node's value is derived once per change: a change drops the values of the nodes it touches
(a whole list drops them all) and names the nodes to derive again; :meth:`derive` derives
those (the extender's watches call it as each event arrives, so a request reads a derived
value), :meth:`derive_pending` every missing one at once (the extender calls it when its
lists are all in, so start-up derives each node once, not once per list), and :meth:`get`
derives a missing one on first use. A node's layout (:func:`node_layout`, from its facts and
the mig-parted configs) is kept while only its pods change. A watch event thus costs one
node's work.
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

from migslice.inventory.layouts import NodeLayout, NodeState, node_layout, resolve_node
from migslice.mig import CATALOG, Catalog
from migslice.mig.migparted import MigPartedEntry
from migslice.objects.nodes import NodeFacts
from migslice.objects.pods import PodFacts

V = TypeVar("V")
#: Nodes whose inputs :meth:`ClusterIndex.derive_pending` copies per hold of the lock.
DERIVE_BATCH = 64
MigConfigs = Mapping[str, tuple[MigPartedEntry, ...]]


class ClusterIndex(Generic[V]):
    """Nodes, the GPU pods on them, and a derived value per node."""

    def __init__(self, derive: Callable[[NodeState], V], catalog: Catalog = CATALOG) -> None:
        self._derive = derive
        self._catalog = catalog
        self._lock = threading.RLock()
        self._nodes: dict[str, NodeFacts] = {}
        self._pods: dict[str, PodFacts] = {}
        self._pods_by_node: dict[str, dict[str, PodFacts]] = {}
        self._derived: dict[str, V] = {}
        # Per node, the layout its facts and the configs give, kept while only its pods change
        # (a bind re-derives the node without reading its agent report or config again).
        self._layouts: dict[str, tuple[NodeFacts, MigConfigs, NodeLayout]] = {}
        self._mig_configs: MigConfigs = {}
        self._listeners: list[Callable[[str | None], None]] = []

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
                    (name, facts, self._pods_on(name))
                    for name in missing[start : start + DERIVE_BATCH]
                    if name not in self._derived and (facts := self._nodes.get(name)) is not None
                ]
            values = [
                (name, facts, pods, self._derive(self._resolve_with(facts, pods, configs)))
                for name, facts, pods in inputs
            ]
            with self._lock:
                for name, facts, pods, value in values:
                    unchanged = (
                        self._nodes.get(name) is facts
                        and self._mig_configs is configs
                        and self._pods_on(name) == pods
                    )
                    if unchanged and name not in self._derived:
                        self._derived[name] = value
                        derived += 1
        return derived

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

    # -- internals ----------------------------------------------------------------------------

    def _link(self, pod: PodFacts) -> None:
        node = pod.holding_node
        if node is not None:
            self._pods_by_node.setdefault(node, {})[pod.key] = pod

    def _unlink(self, pod: PodFacts | None) -> str | None:
        if pod is None or pod.holding_node is None:
            return None
        on_node = self._pods_by_node.get(pod.holding_node)
        if on_node is not None:
            on_node.pop(pod.key, None)
            if not on_node:
                del self._pods_by_node[pod.holding_node]
        return pod.holding_node

    def _pods_on(self, name: str) -> tuple[PodFacts, ...]:
        return tuple(self._pods_by_node.get(name, {}).values())

    def _resolve(self, facts: NodeFacts) -> NodeState:
        pods = self._pods_by_node.get(facts.name, {}).values()
        return self._resolve_with(facts, pods, self._mig_configs)

    def _resolve_with(
        self, facts: NodeFacts, pods: Iterable[PodFacts], configs: MigConfigs
    ) -> NodeState:
        kept = self._layouts.get(facts.name)  # checked by identity: no lock needed
        if kept is not None and kept[0] is facts and kept[1] is configs:
            layout = kept[2]
        else:
            layout = node_layout(facts, configs, catalog=self._catalog)
            if self._nodes.get(facts.name) is facts:  # not a node given from outside
                self._layouts[facts.name] = (facts, configs, layout)
        return resolve_node(facts, pods, configs, catalog=self._catalog, layout=layout)

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
