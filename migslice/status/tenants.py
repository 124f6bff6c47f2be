"""Per tenant: its usage against its quota, in slice units and instances per profile.

Usage is counted from the pods and ResourceClaims, as the webhook counts it
(:meth:`Cluster.usage_of`: each live GPU pod of the tenant's namespaces priced by
:func:`migslice.admission.usage.usage_of` on its node's model, and each of their claims as
the webhook charges it): the TenantPolicy's ``status.used`` may lag behind (the webhook writes
it every few seconds, and counts the quota ledger's charges of pods and claims not yet
created); it is shown only where it differs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from migslice.admission.status import QuotaDimension, quota_dimensions, usage_wire
from migslice.admission.usage import SliceUsage
from migslice.mig import CATALOG
from migslice.policy import check_against_catalog
from migslice.status.cluster import Cluster


@dataclass(frozen=True, slots=True)
class TenantView:
    """One tenant: its namespaces, its GPU pods (bound, waiting), usage per quota dimension;
    ``status_used``: the policy's ``status.used`` where it differs from the pods' count;
    ``problem``: why admission ignores or refuses the policy, if it does."""

    name: str
    namespaces: tuple[str, ...]
    bound_pods: int
    waiting_pods: int
    usage: SliceUsage
    dimensions: tuple[QuotaDimension, ...]
    status_used: Mapping[str, object] | None = None
    problem: str = ""

    def dimension(self, name: str) -> QuotaDimension | None:
        for found in self.dimensions:
            if found.dimension == name:
                return found
        return None

    @property
    def at_limit(self) -> tuple[QuotaDimension, ...]:
        return tuple(d for d in self.dimensions if d.is_reached)


def tenant_views(cluster: Cluster) -> list[TenantView]:
    """Every TenantPolicy's tenant, by name (invalid policies too, with their problem)."""
    by_namespace: dict[str, list[str]] = {}
    for pod in cluster.gpu_pods.values():
        by_namespace.setdefault(pod.namespace, []).append(pod.key)
    views: list[TenantView] = []
    for name, policy in sorted(cluster.policies.items()):
        namespaces = tuple(sorted(cluster.tenancy.namespaces_of(name)))
        pods = [cluster.gpu_pods[k] for ns in namespaces for k in by_namespace.get(ns, ())]
        usage = cluster.usage_of(name)
        problems = [str(c) for c in cluster.tenancy.conflicts(policy)]
        if unservable := check_against_catalog(policy, CATALOG):
            # The webhook's status writer marks such a policy Ready=False (InvalidSpec) and
            # doctor's tenant-policies fails it: pods that hit these fields are refused.
            problems.append(
                "asks what the catalog cannot serve: " + "; ".join(str(e) for e in unservable)
            )
        observed = _status_used(cluster.policy_status.get(name))
        views.append(
            TenantView(
                name=name,
                namespaces=namespaces,
                bound_pods=sum(1 for p in pods if not p.is_waiting),
                waiting_pods=sum(1 for p in pods if p.is_waiting),
                usage=usage,
                dimensions=quota_dimensions(policy, usage),
                status_used=observed if observed not in (None, dict(usage_wire(usage))) else None,
                problem="; ".join(problems),
            )
        )
    for name, invalid in sorted(cluster.invalid_policies.items()):
        views.append(
            TenantView(name, (), 0, 0, SliceUsage(), (), problem=f"invalid: {invalid.message}")
        )
    return sorted(views, key=lambda v: v.name)


def _status_used(status: Mapping[str, object] | None) -> dict[str, object] | None:
    used = status.get("used") if status is not None else None
    if not isinstance(used, Mapping):
        return None
    found = dict(used)
    profiles = found.get("profiles")
    found["profiles"] = dict(profiles) if isinstance(profiles, Mapping) else {}
    return found
