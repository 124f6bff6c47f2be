"""Tenants in the simulator: the trace's groups, each with a TenantPolicy whose quota the
webhook's own core charges and checks.

The v2023 trace names no user; its only grouping column is ``qos`` (``LS`` latency-sensitive
services, ``BE`` best-effort batch, a few ``Burstable`` and ``Guaranteed``), so a tenant is a
QoS group (:attr:`migslice.sim.trace.SimPod.tenant`; ``default`` where the column is empty,
as in the multigpu lists). Each tenant's quota is its share of the arrivals' compute slices
times the cluster's (``TenantPolicy.quota.computeSlices``, what an admin dividing a cluster by
demand would write): at 130 % arrived no tenant may hold more than its share, and every pod is
charged and checked as the webhook charges and checks it
(:func:`migslice.admission.usage.charge`, :func:`migslice.admission.decide.quota_denial`).
Fairness is Jain's index of the tenants' acceptance: 1 when every tenant gets the same share
of its pods placed, ``1/n`` when one tenant gets all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from migslice.admission.decide import quota_denial
from migslice.admission.usage import ZERO, SliceUsage, charge
from migslice.mig import GpuModel
from migslice.names import mig_resource_name
from migslice.policy.types import Quota, TenantPolicy
from migslice.sim.trace import SimPod

DEFAULT_TENANT = "default"


def tenant_of(pod: SimPod) -> str:
    return pod.tenant or DEFAULT_TENANT


def quota_policies(pods: Iterable[SimPod], capacity_compute_slices: int) -> dict[str, TenantPolicy]:
    """Per tenant of ``pods``, a policy whose compute-slice quota is its share of their
    demand times ``capacity_compute_slices`` (rounded down, at least one GPU's 7)."""
    demand: Counter[str] = Counter()
    for pod in pods:
        demand[tenant_of(pod)] += pod.compute_slices
    total = sum(demand.values())
    return {
        tenant: TenantPolicy(
            tenant, quota=Quota(compute_slices=max(7, capacity_compute_slices * asked // total))
        )
        for tenant, asked in sorted(demand.items())
    }


class QuotaLedger:
    """What each tenant holds, charged and checked by the webhook's core."""

    def __init__(self, policies: Mapping[str, TenantPolicy], model: GpuModel) -> None:
        self.policies = policies
        self.model_keys = (model.key,)
        self.used: dict[str, SliceUsage] = {tenant: ZERO for tenant in policies}
        self._charged: dict[str, tuple[str, SliceUsage]] = {}

    def charge_of(self, pod: SimPod) -> SliceUsage:
        return charge(mig_resource_name(pod.profile), pod.count, self.model_keys)

    def admit(self, pod: SimPod) -> bool:
        """Charge the pod to its tenant; False (nothing charged) when that would exceed the
        tenant's quota. A tenant without a policy is not limited."""
        tenant = tenant_of(pod)
        policy = self.policies.get(tenant)
        wanted = self.charge_of(pod)
        used = self.used.get(tenant, ZERO)
        if policy is not None and quota_denial(policy, used, wanted) is not None:
            return False
        self.used[tenant] = used + wanted
        self._charged[pod.name] = (tenant, wanted)
        return True

    def release(self, pod_name: str) -> None:
        """The pod ended (or was never placed): its charge is returned."""
        found = self._charged.pop(pod_name, None)
        if found is not None:
            tenant, wanted = found
            self.used[tenant] = self.used[tenant] - wanted


def jain_index(shares: Sequence[float]) -> float | None:
    """Jain's fairness index of ``shares`` (None for none)."""
    if not shares:
        return None
    squares = sum(x * x for x in shares)
    if squares == 0:
        return 1.0
    return sum(shares) ** 2 / (len(shares) * squares)
