"""Settings of the extender service (from the command line; no environment reads here)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_PORT = 8443
DEFAULT_MIG_CONFIG_MAP = "gpu-operator/migslice-mig-config"
DEFAULT_LEASE = "migslice-system/migslice-repartition"


@dataclass(frozen=True, slots=True)
class RepartitionSettings:
    """The repartition controller (off unless ``enabled``; ``dry_run`` decides and logs only).

    ``interval_s``: time between rounds. ``min_pending_s``, ``cooldown_s`` and
    ``max_nodes_in_flight`` are the planner's rate limits; ``deadline_s``: how long a node may
    stay short of ``success``; ``backoff_s``: how long a failed node is left alone.
    ``scheduler_name``: only pods of this scheduler count as pending. ``lease``:
    ``namespace/name`` of the leader-election Lease, held for ``lease_duration_s``.
    """

    enabled: bool = False
    dry_run: bool = False
    interval_s: float = 15.0
    min_pending_s: float = 30.0
    cooldown_s: float = 600.0
    max_nodes_in_flight: int = 1
    deadline_s: float = 600.0
    backoff_s: float = 1800.0
    scheduler_name: str = "migslice-scheduler"
    lease: str = DEFAULT_LEASE
    lease_duration_s: float = 60.0

    @property
    def lease_namespace(self) -> str:
        return self.lease.partition("/")[0] if "/" in self.lease else "migslice-system"

    @property
    def lease_name(self) -> str:
        return self.lease.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """``max_body_bytes``: larger requests get an ``Error``. NodeNames for 5,000 nodes with a pod
    at etcd's 1.5 MiB limit are 1.7 MiB; full Nodes (``nodeCacheCapable: false``) are about
    22 KB each when real-shaped, 10.7 MiB for the 500 candidates kube-scheduler sends from a
    5,000-node cluster (``bench/request_sizes.py``). ``max_staleness_s``:
    readiness fails when a cache has not heard from the API server for longer. ``mig_config_map``:
    ``namespace/name`` of the ConfigMap holding the mig-parted config under ``mig_config_key``.
    """

    max_body_bytes: int = 16 << 20
    max_staleness_s: float = 180.0
    mig_config_map: str = DEFAULT_MIG_CONFIG_MAP
    mig_config_key: str = "config.yaml"
    repartition: RepartitionSettings = field(default_factory=RepartitionSettings)

    @property
    def mig_config_namespace(self) -> str:
        return self.mig_config_map.partition("/")[0] if "/" in self.mig_config_map else ""

    @property
    def mig_config_name(self) -> str:
        return self.mig_config_map.rpartition("/")[2]
