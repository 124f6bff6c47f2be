"""The cluster as the admission decision sees it: a port, so that the in-cluster watch caches
and the standalone ``--cluster-file`` state share one decide path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from migslice.admission.usage import ZERO, SliceUsage
from migslice.policy import Offer, TenantPolicy


class ClusterView(Protocol):
    """What :func:`migslice.admission.decide` needs to know about the cluster."""

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        """The valid TenantPolicies that select ``namespace`` (more than one is a conflict)."""
        ...

    def offers(self) -> Sequence[Offer]:
        """The GPU products present on the cluster's nodes."""
        ...

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        """Slices the tenant's live pods hold plus its unexpired reservations."""
        ...


@dataclass(frozen=True, slots=True)
class StaticView:
    """A fixed view: for tests, the CLI and anything that decides on a snapshot."""

    policy_list: tuple[TenantPolicy, ...] = ()
    offer_list: tuple[Offer, ...] = ()
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    usage: Mapping[str, SliceUsage] = field(default_factory=dict)

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        labels = self.labels.get(namespace, {"kubernetes.io/metadata.name": namespace})
        return tuple(p for p in self.policy_list if p.selects(namespace, labels))

    def offers(self) -> Sequence[Offer]:
        return self.offer_list

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        return self.usage.get(tenant, ZERO)
