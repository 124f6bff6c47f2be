"""The cluster as the admission decision sees it: a port, so that the in-cluster watch caches
and the standalone ``--cluster-file`` state share one decide path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from migslice.admission.usage import ZERO, SliceUsage
from migslice.objects.device_classes import DeviceClassFacts
from migslice.policy import Offer, TenantPolicy


@dataclass(frozen=True, slots=True)
class TemplateFacts:
    """A ResourceClaimTemplate as admission needs it: whether its claims ask for NVIDIA GPUs,
    and the profile when it is exactly migslice's template of its name (else None)."""

    asks_gpu: bool
    migslice_profile: str | None = None
    instances: int = 0
    """The NVIDIA GPU devices (MIG instances or whole GPUs) each of its claims asks for."""


class ClusterView(Protocol):
    """What :func:`migslice.admission.decide` needs to know about the cluster."""

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        """The valid TenantPolicies that select ``namespace`` (more than one is a conflict)."""
        ...

    def invalid_selecting(self, namespace: str) -> Sequence[tuple[str, str]]:
        """TenantPolicies stored but unreadable whose namespaces, as far as they read, take in
        ``namespace``: each one's name and problems, in one line."""
        ...

    def offers(self) -> Sequence[Offer]:
        """The GPU products present on the cluster's nodes."""
        ...

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        """Slices the tenant's live pods and claims hold plus its unexpired reservations."""
        ...

    def device_classes(self) -> Mapping[str, DeviceClassFacts]:
        """The DeviceClasses by name (empty where the cluster serves no DRA)."""
        ...

    def dra_product_names(self) -> frozenset[str]:
        """The ``productName`` values NVIDIA's DRA driver publishes in the cluster's
        ResourceSlices, as written there (NVML's names)."""
        ...

    def covering_pod(
        self, namespace: str, pod: str, pod_uid: str, claim: str
    ) -> Mapping[str, int] | None:
        """The GPU requests of the live pod ``pod`` (uid ``pod_uid``) of ``namespace``, when it
        may pay for the extended-resource claim ``claim`` (it pays for no other); else None."""
        ...

    def claim_users(self, namespace: str, claim: str) -> tuple[str, ...]:
        """The live pods of ``namespace`` that use ResourceClaim ``claim`` by name or that it
        is reserved for."""
        ...

    def claim_asks_gpu(self, namespace: str, claim: str) -> bool | None:
        """Whether ResourceClaim ``claim`` asks for NVIDIA GPUs (None: not seen)."""
        ...

    def claim_instances(self, namespace: str, claim: str) -> int:
        """The NVIDIA GPU devices (MIG instances or whole GPUs) ResourceClaim ``claim`` asks
        for, as read (0: none, or not seen)."""
        ...

    def extended_claim(self, namespace: str, claim: str) -> bool:
        """Whether ResourceClaim ``claim`` is marked as kube-scheduler's claim for a pod's
        extended resources (annotation ``resource.kubernetes.io/extended-resource-claim``)."""
        ...

    def template(self, namespace: str, name: str) -> TemplateFacts | None:
        """The ResourceClaimTemplate ``name`` of ``namespace`` (None: not seen)."""
        ...


@dataclass(frozen=True, slots=True)
class StaticView:
    """A fixed view: for tests, the CLI and anything that decides on a snapshot."""

    policy_list: tuple[TenantPolicy, ...] = ()
    offer_list: tuple[Offer, ...] = ()
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    usage: Mapping[str, SliceUsage] = field(default_factory=dict)
    classes: Mapping[str, DeviceClassFacts] = field(default_factory=dict)
    pods: Mapping[str, tuple[str, Mapping[str, int]]] = field(default_factory=dict)
    """``namespace/name`` -> (uid, GPU requests) of live pods (extended-resource claims)."""
    users: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """``namespace/claim`` -> the live pods that use it."""
    gpu_claims: Mapping[str, bool] = field(default_factory=dict)
    instances: Mapping[str, int] = field(default_factory=dict)
    """``namespace/claim`` -> the GPU devices it asks for."""
    templates: Mapping[str, TemplateFacts] = field(default_factory=dict)
    extended_claims: frozenset[str] = frozenset()
    """``namespace/claim`` of the claims marked as made for a pod's extended resources."""
    invalid_list: tuple[tuple[TenantPolicy, str], ...] = ()
    """Unreadable policies as far as they read (:func:`migslice.policy.read_tenant_policy`),
    with their problems."""
    product_names: frozenset[str] = frozenset()
    """The ``productName`` values the cluster's ResourceSlices publish."""

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        labels = self.labels.get(namespace, {"kubernetes.io/metadata.name": namespace})
        return tuple(p for p in self.policy_list if p.selects(namespace, labels))

    def invalid_selecting(self, namespace: str) -> Sequence[tuple[str, str]]:
        labels = self.labels.get(namespace, {"kubernetes.io/metadata.name": namespace})
        return tuple(
            (p.name, problems) for p, problems in self.invalid_list if p.selects(namespace, labels)
        )

    def offers(self) -> Sequence[Offer]:
        return self.offer_list

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        return self.usage.get(tenant, ZERO)

    def device_classes(self) -> Mapping[str, DeviceClassFacts]:
        return self.classes

    def dra_product_names(self) -> frozenset[str]:
        return self.product_names

    def covering_pod(
        self, namespace: str, pod: str, pod_uid: str, claim: str
    ) -> Mapping[str, int] | None:
        found = self.pods.get(f"{namespace}/{pod}")
        return found[1] if found is not None and found[0] == pod_uid else None

    def claim_users(self, namespace: str, claim: str) -> tuple[str, ...]:
        return self.users.get(f"{namespace}/{claim}", ())

    def claim_asks_gpu(self, namespace: str, claim: str) -> bool | None:
        return self.gpu_claims.get(f"{namespace}/{claim}")

    def claim_instances(self, namespace: str, claim: str) -> int:
        return self.instances.get(f"{namespace}/{claim}", 0)

    def extended_claim(self, namespace: str, claim: str) -> bool:
        return f"{namespace}/{claim}" in self.extended_claims

    def template(self, namespace: str, name: str) -> TemplateFacts | None:
        return self.templates.get(f"{namespace}/{name}")
