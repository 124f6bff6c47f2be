"""The webhook's compact cluster state: it implements the core's ``ClusterView`` port.

Only what decisions need is kept, never whole API objects:

* parsed TenantPolicies (invalid ones are kept out and reported);
* namespace labels (for ``spec.namespaceSelector``);
* per node, its GPU product label; per product, how many nodes have it;
* per GPU pod, its namespace and slice usage; per namespace, the sum;
* quota reservations of admitted pods not yet seen in the pod cache, each with an expiry;
* per policy, its ``.status`` as last seen (for the status writer, ``migslice.kube.status``).

Both sources feed it through the same methods: the cluster file once at start-up
(:meth:`ClusterState.load`), the watch caches on every event (``migslice.kube.policies``).
Decisions and reservations run under :attr:`ClusterState.admission_lock`, so concurrent
requests to one replica cannot over-admit a quota.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from migslice import names
from migslice.admission import SliceUsage, usage_of
from migslice.admission.status import StatusUpdate, invalid_policy_status, policy_status
from migslice.admission.usage import ZERO
from migslice.mig import CATALOG
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.nodes import node_name_of, node_product_of
from migslice.objects.pods import (
    annotations_of,
    bound_node_of,
    gpu_requests,
    is_terminal,
    metadata_of,
)
from migslice.policy import (
    FieldError,
    Offer,
    PolicyError,
    TenantPolicy,
    check_against_catalog,
    namespace_conflicts,
    parse_tenant_policy,
)

log = logging.getLogger(__name__)


class Clock(Protocol):
    """Monotonic seconds; the reservation expiry is measured on it."""

    def monotonic_s(self) -> float: ...


class SystemClock:
    def monotonic_s(self) -> float:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class Reservation:
    tenant: str
    namespace: str
    usage: SliceUsage
    expires_s: float


@dataclass(frozen=True, slots=True)
class PodCharge:
    namespace: str
    usage: SliceUsage


@dataclass(frozen=True, slots=True)
class InvalidPolicy:
    generation: int
    errors: tuple[FieldError, ...]


class ClusterState:
    """Thread-safe, event-fed view of the cluster for admission decisions."""

    def __init__(self, clock: Clock | None = None, reservation_ttl_s: float = 30.0) -> None:
        self.clock: Clock = clock or SystemClock()
        self.reservation_ttl_s = reservation_ttl_s
        self.admission_lock = threading.RLock()
        self._policies: dict[str, TenantPolicy] = {}
        self._policy_list: tuple[TenantPolicy, ...] = ()
        self.invalid_policies: dict[str, str] = {}
        self._invalid: dict[str, InvalidPolicy] = {}
        self._observed_status: dict[str, Mapping[str, object]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._node_products: dict[str, str] = {}
        self._product_nodes: Counter[str] = Counter()
        self._offers: tuple[Offer, ...] = ()
        self._model_keys: tuple[str, ...] = ()
        self._pods: dict[str, PodCharge] = {}
        self._namespace_usage: dict[str, SliceUsage] = {}
        self._reservations: dict[str, Reservation] = {}
        self._tenant_reservations: dict[str, set[str]] = {}
        self._synced: dict[str, bool] = {}

    # -- readiness -------------------------------------------------------------------------

    def expect(self, *sources: str) -> None:
        for source in sources:
            self._synced.setdefault(source, False)

    def mark_synced(self, source: str) -> None:
        self._synced[source] = True

    def is_ready(self) -> bool:
        return all(self._synced.values())

    def unsynced(self) -> tuple[str, ...]:
        return tuple(sorted(s for s, done in self._synced.items() if not done))

    # -- ClusterView -----------------------------------------------------------------------

    def policies(self) -> Sequence[TenantPolicy]:
        return self._policy_list

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._namespaces.get(namespace) or {"kubernetes.io/metadata.name": namespace}

    def known_namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return dict(self._namespaces)

    def offers(self) -> Sequence[Offer]:
        return self._offers

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        with self.admission_lock:
            policy = self._policies.get(tenant)
            total = ZERO
            if policy is not None:
                for namespace, usage in self._namespace_usage.items():
                    if policy.selects(namespace, self.namespace_labels(namespace)):
                        total = total + usage
            now = self.clock.monotonic_s()
            for uid in list(self._tenant_reservations.get(tenant, ())):
                reservation = self._reservations[uid]
                if reservation.expires_s <= now:
                    self._drop_reservation(uid)
                elif uid != exclude_reservation:
                    total = total + reservation.usage
            return total

    # -- status ------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quickly, under the lock) whenever usage or a policy changes."""
        self._listeners.append(listener)

    def policy_statuses(self, now: datetime) -> tuple[StatusUpdate, ...]:
        """Every policy's status as last seen and as it should be now (``migslice.kube``).

        Only the snapshot is taken under the admission lock; the checks (namespace conflicts
        grow with policies x namespaces) run outside it, so admissions never wait on them.
        """
        with self.admission_lock:
            policies = self._policy_list
            usage = {policy.name: self.tenant_usage(policy.name) for policy in policies}
            invalid = sorted(self._invalid.items())
            observed = dict(self._observed_status)
            known = self.known_namespaces()
        updates = []
        for policy in policies:
            previous = observed.get(policy.name)
            desired = policy_status(
                policy,
                usage[policy.name],
                now=now,
                problems=check_against_catalog(policy, CATALOG),
                conflicts=namespace_conflicts(policy, policies, known),
                previous=previous,
            )
            updates.append(StatusUpdate(policy.name, previous, desired))
        for name, problem in invalid:
            previous = observed.get(name)
            desired = invalid_policy_status(
                name, problem.generation, problem.errors, now=now, previous=previous
            )
            updates.append(StatusUpdate(name, previous, desired))
        return tuple(updates)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # -- reservations ----------------------------------------------------------------------

    def reserve(
        self, uid: str, tenant: str, namespace: str, usage: SliceUsage, replaces: str | None = None
    ) -> None:
        """Hold ``usage`` for a pod admitted but not yet seen, until it shows up or expires."""
        with self.admission_lock:
            if replaces is not None:
                old = self._reservations.get(replaces)
                if old is not None and old.namespace == namespace:
                    self._drop_reservation(replaces)
            self._drop_reservation(uid)
            expires = self.clock.monotonic_s() + self.reservation_ttl_s
            self._reservations[uid] = Reservation(tenant, namespace, usage, expires)
            self._tenant_reservations.setdefault(tenant, set()).add(uid)
            self._changed()

    def reservation_count(self) -> int:
        return len(self._reservations)

    # -- events ----------------------------------------------------------------------------

    def upsert_policy(self, raw_policy: Mapping[str, object]) -> None:
        status = raw_policy.get("status")
        observed = status if isinstance(status, Mapping) else {}
        try:
            policy = parse_tenant_policy(raw_policy)
        except PolicyError as error:
            with self.admission_lock:
                self._policies.pop(error.name, None)
                self.invalid_policies[error.name] = str(error)
                self._policy_list = tuple(sorted(self._policies.values(), key=lambda p: p.name))
                if error.name:
                    self._invalid[error.name] = InvalidPolicy(_generation(raw_policy), error.errors)
                    self._observed_status[error.name] = observed
                self._changed()
            log.warning("Ignoring invalid TenantPolicy name=%s: %s", error.name, error)
            return
        with self.admission_lock:
            self.invalid_policies.pop(policy.name, None)
            self._invalid.pop(policy.name, None)
            self._observed_status[policy.name] = observed
            self._policies[policy.name] = policy
            self._policy_list = tuple(sorted(self._policies.values(), key=lambda p: p.name))
            self._changed()

    def delete_policy(self, name: str) -> None:
        with self.admission_lock:
            self._policies.pop(name, None)
            self.invalid_policies.pop(name, None)
            self._invalid.pop(name, None)
            self._observed_status.pop(name, None)
            self._policy_list = tuple(sorted(self._policies.values(), key=lambda p: p.name))
            self._changed()

    def upsert_namespace(self, raw_namespace: Mapping[str, object]) -> None:
        metadata = raw_namespace.get("metadata")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            return
        name = str(metadata["name"])
        labels = metadata.get("labels")
        clean = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        clean.setdefault("kubernetes.io/metadata.name", name)
        with self.admission_lock:
            if self._namespaces.get(name) != clean:
                self._namespaces[name] = clean
                self._changed()

    def delete_namespace(self, name: str) -> None:
        with self.admission_lock:
            if self._namespaces.pop(name, None) is not None:
                self._changed()

    def upsert_node(self, raw_node: Mapping[str, object]) -> None:
        name = node_name_of(raw_node)
        if name is None:
            return
        product = node_product_of(raw_node)
        with self.admission_lock:
            self._forget_node(name)
            if product is not None and CATALOG.by_product(product) is not None:
                self._node_products[name] = product
                self._product_nodes[product] += 1
                if self._product_nodes[product] == 1:
                    self._rebuild_offers()

    def delete_node(self, name: str) -> None:
        with self.admission_lock:
            self._forget_node(name)

    def upsert_pod(self, raw_pod: Mapping[str, object]) -> None:
        metadata = metadata_of(raw_pod)
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            return
        key = f"{namespace}/{name}"
        reservation = annotations_of(raw_pod).get(names.RESERVATION)
        with self.admission_lock:
            usage = (
                ZERO
                if is_terminal(raw_pod)
                else usage_of(dict(gpu_requests(raw_pod)), self._models_for(raw_pod))
            )
            before = self._pods.get(key)
            if isinstance(reservation, str):
                self._drop_reservation(reservation)
            self._forget_pod(key)
            if not usage.is_zero:
                self._pods[key] = PodCharge(namespace, usage)
                self._namespace_usage[namespace] = (
                    self._namespace_usage.get(namespace, ZERO) + usage
                )
            if self._pods.get(key) != before:
                self._changed()

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.admission_lock:
            if self._forget_pod(f"{namespace}/{name}"):
                self._changed()

    def load(self, objects: ClusterObjects) -> None:
        """Fill the state from a cluster file's objects (standalone mode)."""
        for raw in objects.others:
            if raw.get("kind") == "Namespace":
                self.upsert_namespace(raw)
        for raw in objects.tenant_policies:
            self.upsert_policy(raw)
        for raw in objects.nodes:
            self.upsert_node(raw)
        for raw in objects.pods:
            self.upsert_pod(raw)

    # -- internals -------------------------------------------------------------------------

    def _models_for(self, raw_pod: Mapping[str, object]) -> tuple[str, ...]:
        """The GPU model keys a pod's slices are priced on: its node's, else the cluster's."""
        node = bound_node_of(raw_pod)
        product = self._node_products.get(node) if node is not None else None
        if product is not None:
            model = CATALOG.by_product(product)
            if model is not None:
                return (model.key,)
        return self._model_keys

    def _drop_reservation(self, uid: str) -> None:
        reservation = self._reservations.pop(uid, None)
        if reservation is not None:
            uids = self._tenant_reservations.get(reservation.tenant)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._tenant_reservations[reservation.tenant]

    def _forget_node(self, name: str) -> None:
        product = self._node_products.pop(name, None)
        if product is not None:
            self._product_nodes[product] -= 1
            if self._product_nodes[product] <= 0:
                del self._product_nodes[product]
                self._rebuild_offers()

    def _rebuild_offers(self) -> None:
        offers = []
        for product in sorted(self._product_nodes):
            model = CATALOG.by_product(product)
            if model is not None:
                offers.append(Offer(product, model))
        self._offers = tuple(offers)
        self._model_keys = tuple(sorted({o.model.key for o in offers}))

    def _forget_pod(self, key: str) -> bool:
        old = self._pods.pop(key, None)
        if old is None:
            return False
        remaining = self._namespace_usage.get(old.namespace, ZERO) - old.usage
        if remaining.is_zero and not remaining.profiles:
            self._namespace_usage.pop(old.namespace, None)
        else:
            self._namespace_usage[old.namespace] = remaining
        return True


def _generation(raw_policy: Mapping[str, object]) -> int:
    metadata = raw_policy.get("metadata")
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
