"""One snapshot of what the repartition decision reads: node states, pending pods and the
mig-parted ConfigMap (configs and plan record).

The controller builds it from its watch caches and fresh reads; ``migslice plan`` and the demo
build it from a cluster file's objects with :func:`snapshot_from_objects`; the simulator from
its own state. All of them then call the same :func:`migslice.repartition.decide`.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from migslice.inventory import ClusterIndex, NodeState
from migslice.mig import CATALOG
from migslice.objects import ClusterObjects, node_facts_from_raw, pod_facts_from_raw
from migslice.objects.json import JsonObject
from migslice.repartition.configmap import MigConfigFile, MigConfigs, read_config_map
from migslice.repartition.pending import PendingPod, pending_pods


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    pending: tuple[PendingPod, ...]
    file: MigConfigFile


def node_states(
    raw_nodes: Iterable[JsonObject],
    raw_pods: Iterable[JsonObject],
    configs: MigConfigs,
    *,
    dra: ClusterObjects | None = None,
) -> tuple[NodeState, ...]:
    """Every node's state, as the extender's index resolves it, sorted by name (``dra``: a
    cluster file's ResourceSlices, ResourceClaims and DeviceClasses)."""
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state, CATALOG)
    index.set_mig_configs(configs)
    index.replace_nodes(node_facts_from_raw(raw) for raw in raw_nodes)
    index.replace_pods(p for p in (pod_facts_from_raw(raw) for raw in raw_pods) if p)
    if dra is not None:
        index.load_dra(dra)
    states = (index.get(name) for name in sorted(index.node_names()))
    return tuple(state for state in states if state is not None)


def snapshot_from_objects(
    objects: ClusterObjects,
    *,
    config_map: tuple[str, str],
    key: str,
    now_s: float,
    scheduler_name: str,
) -> Snapshot:
    """The snapshot of a cluster file: ``config_map`` is (namespace, name)."""
    file = read_config_map(objects.config_map(*config_map), key)
    now = datetime.datetime.fromtimestamp(now_s, datetime.UTC)
    return Snapshot(
        nodes=node_states(objects.nodes, objects.pods, file.configs, dra=objects),
        pending=tuple(pending_pods(objects.pods, now, scheduler_name)),
        file=file,
    )
