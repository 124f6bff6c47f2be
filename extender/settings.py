"""Settings of the extender service: one typed value, validated here, built by ``command``
(no environment reads here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from migslice import names
from migslice.console import CommandError
from migslice.kube.lease import default_renew_deadline_s
from migslice.repartition import (
    CARVE_MIN_PENDING_S,
    CarveSettings,
    ControllerSettings,
    PlanSettings,
)
from migslice.scheduling.reserve import DEFAULT_MAX_HOLD_S
from migslice.serving import ServerOptions

DEFAULT_PORT = 8443
DEFAULT_MIG_CONFIG_MAP = f"{names.GPU_OPERATOR_NAMESPACE}/{names.MIG_CONFIG_MAP}"
DEFAULT_LEASE = f"{names.SYSTEM_NAMESPACE}/{names.LEASE_NAME}"
BUDGET_SCOPES = ("pool", "cluster")


@dataclass(frozen=True, slots=True)
class RepartitionSettings:
    """The repartition controller (off unless ``enabled``; ``dry_run`` decides and logs only).

    ``interval_s``: time between rounds. ``min_pending_s``, ``cooldown_s`` and
    ``max_nodes_in_flight`` are the planner's rate limits (``carve_*``: carve mode's own), the
    last per GPU product pool or for the whole cluster (``budget_scope``); ``mode_default``: how
    nodes without ``migslice.io/repartition-mode`` are re-shaped; ``deadline_s``: how long a
    node may stay short of ``success`` before it is quarantined; ``backoff_s``: how long a failed
    node is left alone; ``config_propagation_s``: how long a written config waits before its
    node is labelled (MIG Manager's copy of the ConfigMap lags).
    ``scheduler_name``: only pods of this scheduler count as pending. ``lease``:
    ``namespace/name`` of the leader-election Lease, held for ``lease_duration_s``; a leader
    not renewed within ``renew_deadline_s`` (None: two thirds of the lease) stops leading.
    """

    enabled: bool = False
    dry_run: bool = False
    interval_s: float = 15.0
    min_pending_s: float = 30.0
    cooldown_s: float = 600.0
    max_nodes_in_flight: int = 1
    budget_scope: str = "pool"
    deadline_s: float = 600.0
    backoff_s: float = 1800.0
    config_propagation_s: float = 90.0
    scheduler_name: str = names.SCHEDULER_NAME
    lease: str = DEFAULT_LEASE
    lease_duration_s: float = 60.0
    renew_deadline_s: float | None = None
    mode_default: str = names.MODE_MIG_MANAGER
    carve_min_pending_s: float = CARVE_MIN_PENDING_S
    carve_cooldown_s: float = 60.0
    carve_max_nodes_in_flight: int = 4

    def __post_init__(self) -> None:
        for flag, value in (
            ("--repartition-interval-s", self.interval_s),
            ("--repartition-lease-s", self.lease_duration_s),
            ("--repartition-deadline-s", self.deadline_s),
        ):
            if not math.isfinite(value) or value <= 0:
                raise CommandError(f"{flag} {value}: must be a finite number > 0")
        for flag, value in (
            ("--repartition-min-pending-s", self.min_pending_s),
            ("--repartition-cooldown-s", self.cooldown_s),
            ("--repartition-backoff-s", self.backoff_s),
            ("--repartition-config-propagation-s", self.config_propagation_s),
            ("--repartition-carve-min-pending-s", self.carve_min_pending_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise CommandError(f"{flag} {value}: must be a finite number >= 0")
        if self.carve_cooldown_s < 0 or not math.isfinite(self.carve_cooldown_s):
            raise CommandError(
                f"--repartition-carve-cooldown-s {self.carve_cooldown_s}: must be a finite "
                "number >= 0"
            )
        if self.carve_max_nodes_in_flight < 1:
            raise CommandError(
                f"--repartition-carve-max-nodes-in-flight {self.carve_max_nodes_in_flight}: "
                "must be >= 1"
            )
        if self.mode_default not in names.REPARTITION_MODES:
            raise CommandError(
                f"--repartition-mode-default {self.mode_default}: must be one of "
                f"{', '.join(names.REPARTITION_MODES)}"
            )
        if self.max_nodes_in_flight < 1:
            raise CommandError(
                f"--repartition-max-nodes-in-flight {self.max_nodes_in_flight}: must be >= 1"
            )
        if self.budget_scope not in BUDGET_SCOPES:
            raise CommandError(
                f"--repartition-budget-scope {self.budget_scope}: one of {', '.join(BUDGET_SCOPES)}"
            )
        if self.dry_run and not self.enabled:
            raise CommandError("--repartition-dry-run needs --repartition")
        if self.lease_duration_s < 2 * self.interval_s:
            raise CommandError(
                f"--repartition-lease-s {self.lease_duration_s:g} must be at least twice "
                f"--repartition-interval-s {self.interval_s:g} (the Lease is renewed once a "
                "round)"
            )
        renew = self.renew_deadline_s
        if renew is not None and (not math.isfinite(renew) or renew <= 0):
            raise CommandError(
                f"--repartition-renew-deadline-s {renew}: must be a finite number > 0"
            )
        if renew is not None and renew >= self.lease_duration_s:
            raise CommandError(
                f"--repartition-renew-deadline-s {renew:g} must be shorter than "
                f"--repartition-lease-s {self.lease_duration_s:g} (a leader stops leading once "
                "it has not renewed for this long, before another replica may take the Lease); "
                "lower it or raise the lease"
            )
        if renew is not None and self.interval_s >= renew:
            raise CommandError(
                f"--repartition-interval-s {self.interval_s:g} must be shorter than "
                f"--repartition-renew-deadline-s {renew:g} (the Lease is renewed once a round: "
                "a leader that waits longer stops leading between rounds); raise the deadline "
                "or lower the interval"
            )

    @property
    def lease_renew_deadline_s(self) -> float:
        """``renew_deadline_s``, or two thirds of the lease when it is not given."""
        if self.renew_deadline_s is None:
            return default_renew_deadline_s(self.lease_duration_s)
        return self.renew_deadline_s

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
    5,000-node cluster (``bench/serving/request_sizes.py``). ``max_blind_s``: a cache that has not
    followed the API server for longer (``migslice.kube.health``) makes filter answer an
    ``Error`` and fails readiness. ``mig_config_map``: ``namespace/name`` of the ConfigMap
    holding the mig-parted config under ``mig_config_key``.
    """

    max_body_bytes: int = 16 << 20
    max_blind_s: float = 5.0
    mig_config_map: str = DEFAULT_MIG_CONFIG_MAP
    mig_config_key: str = names.MIG_CONFIG_KEY
    repartition: RepartitionSettings = field(default_factory=RepartitionSettings)
    cluster_file: Path | None = None
    kubeconfig: str | None = None
    server: ServerOptions = field(default_factory=lambda: ServerOptions(port=DEFAULT_PORT))
    log_level: str = "info"
    log_format: str = "text"
    dra_steer: bool = True
    """Keep DeviceTaintRules that steer kube-scheduler's first fit on DynamicMIG nodes
    (``extender.steer``; in a cluster serving them only)."""
    dra_steer_max_rules: int = 4096
    dra_steer_lease: str = ""
    """``namespace/name`` of a Lease that elects the one replica that writes the steer's rules
    when no repartition controller runs (whose Lease elects it otherwise); "" : every replica
    writes (one replica). Replicas that each write keep their stranding rule from what each
    has seen, so two of them can want different rules and undo each other's."""
    dra_large_reserve: bool = False
    """Keep idle DynamicMIG GPUs whole for 7g and multi-GPU pods, as many as their share of
    the arrivals asks for (``extender.reserve``; needs the steer)."""
    dra_large_reserve_max_hold_s: float = DEFAULT_MAX_HOLD_S
    """How long the reserve holds a smaller pod back at most (unschedulable that long, it
    may take an idle GPU)."""

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise CommandError(f"max body {self.max_body_bytes} bytes: must be at least 1")
        hold = self.dra_large_reserve_max_hold_s
        if not math.isfinite(hold) or hold <= 0:
            raise CommandError(f"--dra-large-reserve-max-hold {hold}: must be > 0 seconds")
        if self.dra_steer_lease and self.dra_steer_lease.count("/") != 1:
            raise CommandError(
                f"--dra-steer-lease {self.dra_steer_lease!r}: must be NAMESPACE/NAME"
            )
        if not math.isfinite(self.max_blind_s) or self.max_blind_s < 0:
            raise CommandError(f"--max-blind-s {self.max_blind_s}: must be >= 0")
        if self.cluster_file is not None and self.kubeconfig is not None:
            raise CommandError("--cluster-file and --kubeconfig exclude each other")
        if self.repartition.enabled and self.cluster_file is not None:
            raise CommandError(
                "--repartition needs a live cluster; a --cluster-file cannot be re-partitioned "
                "(use migslice plan --cluster-file to see what would happen)"
            )

    @property
    def mig_config_namespace(self) -> str:
        return self.mig_config_map.partition("/")[0] if "/" in self.mig_config_map else ""

    @property
    def mig_config_name(self) -> str:
        return self.mig_config_map.rpartition("/")[2]


def controller_settings(settings: RepartitionSettings) -> ControllerSettings:
    """The decision's settings from the command line's."""
    return ControllerSettings(
        plan=PlanSettings(
            min_pending_s=settings.min_pending_s,
            cooldown_s=settings.cooldown_s,
            max_nodes_in_flight=settings.max_nodes_in_flight,
            budget_per_pool=settings.budget_scope == "pool",
        ),
        deadline_s=settings.deadline_s,
        backoff_s=settings.backoff_s,
        config_propagation_s=settings.config_propagation_s,
        carve=CarveSettings(
            min_pending_s=settings.carve_min_pending_s,
            cooldown_s=settings.carve_cooldown_s,
            max_nodes_in_flight=settings.carve_max_nodes_in_flight,
            default_mode=settings.mode_default,
        ),
    )
