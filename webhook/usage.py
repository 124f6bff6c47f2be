"""What each namespace's GPU pods hold, which admissions the pod cache has seen (and since
when), and the tenants' quota ledgers as last read or written.

Pods are charged in slice units (``migslice.admission.usage``) as the webhook's pod cache
sees them; a namespace's usage is the sum of its pods'. An admission is charged in its
tenant's ledger (``migslice.admission.ledger``, shared by all replicas through the API server)
until the pod cache holds the pod: a GPU pod whose ``migslice.io/reservation`` annotation
names the admission, in the charge's namespace. A pod once seen stays seen after it is gone
(for ``SEEN_KEEP_S``), so a pod created and deleted quickly is never counted again by its
charge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice.admission import SliceUsage
from migslice.admission.ledger import Charge, Ledger
from migslice.admission.usage import ZERO

SEEN_KEEP_S = 600.0
"""How long a deleted pod's admission stays seen (much longer than any charge is held)."""


@dataclass(frozen=True, slots=True)
class PodCharge:
    namespace: str
    usage: SliceUsage
    reservation: str | None = None


class UsageBook:
    """Pods' charges per namespace, seen admissions and ledgers. Not thread-safe: the
    webhook's state holds its lock around every call."""

    def __init__(self) -> None:
        self._pods: dict[str, PodCharge] = {}
        self._namespaces: dict[str, SliceUsage] = {}
        self._live: dict[str, str] = {}  # reservation uid -> key of the live pod
        self._seen: dict[str, tuple[str, float]] = {}  # uid -> (namespace, first seen)
        self._ledgers: dict[str, Ledger] = {}
        # tenant -> (charge uid, at) -> when this process first read or wrote the charge
        self._known: dict[str, dict[tuple[str, float], float]] = {}
        self._fence_known: dict[str, tuple[str, float]] = {}  # tenant -> (epoch, first known)

    # -- pods ---------------------------------------------------------------------------------

    def namespace_usage(self, namespace: str) -> SliceUsage:
        return self._namespaces.get(namespace, ZERO)

    def namespaces(self) -> Iterable[str]:
        return self._namespaces.keys()

    def set_pod(self, key: str, charge: PodCharge, *, now_s: float) -> bool:
        """Charge pod ``key`` (a non-zero usage); whether its usage changed."""
        before = self._pods.get(key)
        self.forget_pod(key, now_s=now_s)
        self._pods[key] = charge
        self._namespaces[charge.namespace] = (
            self._namespaces.get(charge.namespace, ZERO) + charge.usage
        )
        if charge.reservation is not None:
            self._live[charge.reservation] = key
            self._seen.setdefault(charge.reservation, (charge.namespace, now_s))
        return before is None or (before.namespace, before.usage) != (
            charge.namespace,
            charge.usage,
        )

    def forget_pod(self, key: str, *, now_s: float) -> str | None:
        """Drop pod ``key``'s charge; its namespace, or None if it held nothing."""
        old = self._pods.pop(key, None)
        if old is None:
            return None
        remaining = self._namespaces.get(old.namespace, ZERO) - old.usage
        if remaining.is_zero and not remaining.profiles:
            self._namespaces.pop(old.namespace, None)
        else:
            self._namespaces[old.namespace] = remaining
        uid = old.reservation
        if uid is not None and self._live.get(uid) == key:
            del self._live[uid]
        return old.namespace

    def seen_for(self, uid: str, namespace: str, now_s: float) -> float | None:
        """Seconds (at ``now_s``) since the pod that admission ``uid`` let into ``namespace``
        was first cached (it may be gone since); None when it never was."""
        seen = self._seen.get(uid)
        if seen is None or seen[0] != namespace:
            return None
        return max(0.0, now_s - seen[1])

    def reservations_in(self, namespace: str) -> frozenset[str]:
        """The admission uids of the live GPU pods of ``namespace``."""
        return frozenset(
            uid for uid, key in self._live.items() if self._pods[key].namespace == namespace
        )

    def forget_seen_before(self, cutoff_s: float) -> None:
        """Forget admissions first seen before ``cutoff_s`` whose pods are gone."""
        old = [u for u, (_, at) in self._seen.items() if at < cutoff_s and u not in self._live]
        for uid in old:
            del self._seen[uid]

    # -- ledgers -------------------------------------------------------------------------------

    def set_ledger(self, ledger: Ledger, *, now_s: float) -> None:
        """The tenant's ledger as read or written at ``now_s`` (monotonic): each charge and
        fence not known before is known from then on."""
        tenant = ledger.tenant
        self._ledgers[tenant] = ledger
        before = self._known.get(tenant, {})
        self._known[tenant] = {
            key: before.get(key, now_s) for key in (_charge_key(c) for c in ledger.charges)
        }
        if ledger.fenced_until_s is None:
            self._fence_known.pop(tenant, None)
        elif self._fence_known.get(tenant, ("", 0.0))[0] != ledger.epoch:
            self._fence_known[tenant] = (ledger.epoch, now_s)

    def known_for(self, tenant: str, charge: Charge, now_s: float) -> float:
        """Seconds (at ``now_s``) since this process first read or wrote ``charge``; 0.0 when
        its tenant's ledger as set last does not hold it."""
        since = self._known.get(tenant, {}).get(_charge_key(charge))
        return 0.0 if since is None else max(0.0, now_s - since)

    def fence_known_for(self, tenant: str, epoch: str, now_s: float) -> float | None:
        """Seconds since this process first read or wrote the fence of ``epoch``; None when
        it has not."""
        known = self._fence_known.get(tenant)
        return None if known is None or known[0] != epoch else max(0.0, now_s - known[1])

    def ledger(self, tenant: str) -> Ledger | None:
        return self._ledgers.get(tenant)

    def ledgers(self) -> Mapping[str, Ledger]:
        return dict(self._ledgers)

    def pending(self, tenant: str, exclude: str | None = None) -> SliceUsage:
        """What the tenant's ledger charges for pods the cache has not seen."""
        ledger = self._ledgers.get(tenant)
        return ZERO if ledger is None else ledger.pending(self._ever_seen, exclude)

    def pending_count(self) -> int:
        """Charges, over all ledgers, whose pods the cache has not seen."""
        return sum(
            1
            for ledger in self._ledgers.values()
            for charge in ledger.charges
            if self._ever_seen(charge.uid, charge.namespace) is None
        )

    def _ever_seen(self, uid: str, namespace: str) -> float | None:
        """0.0 when the admission's pod was ever cached (for counting, not for how long)."""
        seen = self._seen.get(uid)
        return 0.0 if seen is not None and seen[0] == namespace else None


def _charge_key(charge: Charge) -> tuple[str, float]:
    """A charge's identity: a retried admission's new charge (same uid, a later ``at``) is
    another one. ``at`` to the millisecond: the text keeps microseconds of a float."""
    return charge.uid, round(charge.at_s, 3)
