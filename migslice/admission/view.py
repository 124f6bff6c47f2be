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

    def policies(self) -> Sequence[TenantPolicy]:
        """Every valid TenantPolicy."""
        ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        """The namespace's labels (at least ``kubernetes.io/metadata.name``)."""
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

    def policies(self) -> Sequence[TenantPolicy]:
        return self.policy_list

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self.labels.get(namespace, {"kubernetes.io/metadata.name": namespace})

    def offers(self) -> Sequence[Offer]:
        return self.offer_list

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        return self.usage.get(tenant, ZERO)
