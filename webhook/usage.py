"""What each namespace's GPU pods hold, and the charges of pods admitted but not yet seen.

Pods are charged in slice units (``migslice.admission.usage``) as the webhook's pod cache
sees them; a namespace's usage is the sum of its pods'. An admitted pod is charged right away
by a reservation (keyed by its admission request uid) until the pod itself shows up in the
cache (then its own charge replaces the reservation) or the reservation expires.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice.admission import SliceUsage
from migslice.admission.usage import ZERO


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


class UsageBook:
    """Pods' charges per namespace and the reservations per tenant. Not thread-safe: the
    webhook's state holds its lock around every call."""

    def __init__(self) -> None:
        self._pods: dict[str, PodCharge] = {}
        self._namespaces: dict[str, SliceUsage] = {}
        self._reservations: dict[str, Reservation] = {}
        self._by_tenant: dict[str, set[str]] = {}

    # -- pods ---------------------------------------------------------------------------------

    def namespace_usage(self, namespace: str) -> SliceUsage:
        return self._namespaces.get(namespace, ZERO)

    def namespaces(self) -> Iterable[str]:
        return self._namespaces.keys()

    def set_pod(self, key: str, namespace: str, usage: SliceUsage) -> bool:
        """Charge ``usage`` for pod ``key`` (zero: forget it); whether anything changed."""
        before = self._pods.get(key)
        self.forget_pod(key)
        if not usage.is_zero:
            self._pods[key] = PodCharge(namespace, usage)
            self._namespaces[namespace] = self._namespaces.get(namespace, ZERO) + usage
        return self._pods.get(key) != before

    def forget_pod(self, key: str) -> str | None:
        """Drop pod ``key``'s charge; its namespace, or None if it held nothing."""
        old = self._pods.pop(key, None)
        if old is None:
            return None
        remaining = self._namespaces.get(old.namespace, ZERO) - old.usage
        if remaining.is_zero and not remaining.profiles:
            self._namespaces.pop(old.namespace, None)
        else:
            self._namespaces[old.namespace] = remaining
        return old.namespace

    # -- reservations -------------------------------------------------------------------------

    def reserve(self, uid: str, reservation: Reservation) -> None:
        self.release(uid)
        self._reservations[uid] = reservation
        self._by_tenant.setdefault(reservation.tenant, set()).add(uid)

    def reservation(self, uid: str) -> Reservation | None:
        return self._reservations.get(uid)

    def release(self, uid: str) -> Reservation | None:
        reservation = self._reservations.pop(uid, None)
        if reservation is not None:
            uids = self._by_tenant.get(reservation.tenant)
            if uids is not None:
                uids.discard(uid)
                if not uids:
                    del self._by_tenant[reservation.tenant]
        return reservation

    def reserved(self, tenant: str, now_s: float, exclude: str | None = None) -> SliceUsage:
        """The tenant's unexpired reservations (expired ones are dropped now)."""
        total = ZERO
        for uid in list(self._by_tenant.get(tenant, ())):
            reservation = self._reservations[uid]
            if reservation.expires_s <= now_s:
                self.release(uid)
            elif uid != exclude:
                total = total + reservation.usage
        return total

    def tenants_with_reservations(self) -> frozenset[str]:
        return frozenset(self._by_tenant)

    def reservation_count(self) -> int:
        return len(self._reservations)

    def reservations(self) -> Mapping[str, Reservation]:
        return dict(self._reservations)
