"""The repartition controller's guard: plan only while MIG Manager applies the mig-parted
ConfigMap the controller writes.

A config written into a ConfigMap that MIG Manager does not read is never applied: every
labelled node would sit at ``pending`` until the deadline, be rolled back and backed off. So
each round, before planning, the leader reads the GPU Operator's ClusterPolicy; when its
``spec.migManager.config.name`` is not the controller's ConfigMap, or its
``spec.migManager.enabled`` is false (no MIG Manager runs at all), the round stops there,
the metric ``migslice_repartition_mig_manager_config_mismatch`` is 1, the reason is logged
once and a Warning Event (``MigManagerConfigMismatch``) is recorded on the ClusterPolicy once
(not in dry-run mode, which writes nothing). Without the GPU Operator (no ClusterPolicy CRD,
or no ClusterPolicy: MIG Manager installed on its own) nothing can be checked: the controller
goes on, and says so once. A read that says neither (a 5xx, a 429, no connection, or a 404
while the API server's discovery still lists ClusterPolicies, as one restarting answers) is
no answer: the round keeps the last one (plans or stops as the last read said), or, before
any, does not plan; it is logged, and no Event is recorded.

Port: :class:`ClusterPolicyApi` (``migslice.kube.gpu_operator.KubeClusterPolicyApi``).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from extender.state import RepartitionStats
from migslice.kube.gpu_operator import GpuOperatorUnknownError, GpuOperatorUnreadableError
from migslice.objects.cluster_policy import (
    active_cluster_policy,
    disabled_mig_manager,
    foreign_mig_config,
    foreign_mig_config_fix,
    mig_manager_enable_fix,
)

log = logging.getLogger(__name__)

EVENT_REASON = "MigManagerConfigMismatch"


class ClusterPolicyApi(Protocol):
    def list_cluster_policies(self) -> list[dict[str, Any]] | None: ...

    def record_warning(
        self, policy_name: str, policy_uid: str, reason: str, message: str
    ) -> None: ...


class MigManagerGuard:
    """:meth:`allows_planning` is asked once per leader round."""

    def __init__(
        self,
        api: ClusterPolicyApi,
        config_map: str,
        *,
        stats: RepartitionStats,
        dry_run: bool = False,
    ) -> None:
        self._api = api
        self._namespace, _, self._name = config_map.rpartition("/")
        self._stats = stats
        self._dry_run = dry_run
        self._said = ""
        self._warned: set[tuple[str, str]] = set()  # (ClusterPolicy uid, message)
        self._last: bool | None = None  # the last answer a read gave; None before any

    def allows_planning(self) -> bool:
        try:
            allowed = self._judge()
        except GpuOperatorUnknownError as error:
            if self._last is None:
                then = "not re-partitioning until they are read"
            elif self._last:
                then = "re-partitioning, as the last read said"
            else:
                then = "not re-partitioning, as the last read said"
            self._say(f"ClusterPolicies not read this round ({error}); {then}", logging.WARNING)
            return bool(self._last)
        self._last = allowed
        return allowed

    def _judge(self) -> bool:
        where = f"{self._namespace}/{self._name}" if self._namespace else self._name
        try:
            raw_policies = self._api.list_cluster_policies()
        except GpuOperatorUnreadableError as error:
            self._allow(
                f"ClusterPolicies unreadable ({error}): MIG Manager's ConfigMap is not checked; "
                "grant get, list on clusterpolicies.nvidia.com (the chart does)",
                logging.WARNING,
            )
            return True
        policy = active_cluster_policy(raw_policies or ())
        if policy is None:
            missing = "CRD" if raw_policies is None else "object"
            self._allow(
                f"no ClusterPolicy {missing} (MIG Manager installed without the GPU Operator): "
                f"not checked that MIG Manager reads {where}; make sure it does",
                logging.INFO,
            )
            return True
        disabled = disabled_mig_manager(policy)
        why = foreign_mig_config(policy, self._name, self._namespace)
        if disabled is not None:
            # no MIG Manager pod runs: a labelled node would sit at our state=pending
            fix = mig_manager_enable_fix(policy.name)
            message = f"{disabled}; not re-partitioning until it is: {fix}"
        elif why is not None:
            fix = foreign_mig_config_fix(why, policy, self._name)
            message = f"{why}; not re-partitioning until it does: {fix}"
        else:
            self._allow(f"MIG Manager reads {where} (ClusterPolicy {policy.name})", logging.INFO)
            return True
        self._stats.mig_manager_config_mismatch = True
        self._say(message, logging.WARNING)
        if not self._dry_run and (policy.uid, message) not in self._warned:
            self._api.record_warning(policy.name, policy.uid, EVENT_REASON, message)
            self._warned.add((policy.uid, message))
        return False

    def _allow(self, message: str, level: int) -> None:
        self._stats.mig_manager_config_mismatch = False
        self._warned.clear()  # a mismatch that comes back is reported again
        self._say(message, level)

    def _say(self, message: str, level: int) -> None:
        if message != self._said:
            log.log(level, "%s", message)
            self._said = message
