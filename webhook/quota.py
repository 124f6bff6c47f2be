"""Admission with exact quota across replicas: decide on the caches, charge the tenant's ledger
by compare-and-swap, and release the charges of pods that were never created.

    keeper = QuotaKeeper(state, ledgers, hold_s=45.0)
    decision = keeper.admit(PodAdmission(namespace, raw_pod, request_uid), dry_run=False)

Per admission: the pure decision (``migslice.admission.decide``) on the state, which counts
the tenant's cached pods plus the ledger charges of pods not seen yet; an allowed, charged,
non-dry-run admission then writes its :class:`~migslice.admission.ledger.Charge` into the
ledger with the version it decided on. A conflict (another replica or worker wrote first)
reads the ledger again and decides again, so two admissions never both take the last free
slice. Threads of one process take a per-tenant lock first, so they do not conflict with each
other. A quota denial decided on a ledger not read in this attempt is decided once more on a
fresh read (a charge another replica released does not deny a pod), and once more after
settling charges of pods never created (:meth:`QuotaKeeper.settle`, which a thread also runs
every few seconds).

:class:`UnavailableError` means "cannot decide now" (caches blind, the ledger unreachable or
unreadable, too many conflicts): the webhook answers 503 with ``Retry-After``, which
kube-apiserver retries within the webhook's timeout and otherwise reports (failurePolicy).

A ledger found deleted, unreadable, written by another client or older than one this replica
has seen is **fenced** (:meth:`migslice.admission.ledger.Ledger.fenced`): the keeper writes a new
ledger that refuses the tenant's GPU pods for the hold, with a denial that says why and until
when (not a 503: the user sees it at once), tells its listeners (a Warning Event on the
TenantPolicy, a metric), and admits again once every pod the lost charges admitted is stored,
counted from the pod caches, or never will be. Nothing is to be repaired by hand.

Ports: :class:`LedgerStore` (``migslice.kube.ledger.ConfigMapLedgers`` in a cluster,
:class:`MemoryLedgers` for a cluster file and tests).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from migslice import names
from migslice.admission import AdmissionDecision, AdmissionSettings, PodAdmission, decide
from migslice.admission.claims import ClaimAdmission, decide_claim
from migslice.admission.ledger import (
    Charge,
    Damage,
    Ledger,
    LedgerConflictError,
    LedgerError,
    failed_charges,
)
from migslice.errors import MigsliceError
from migslice.kube.informer import WATCH_GRACE_S
from migslice.kube.ledger import LIST_TIMEOUT_S, ForeignWriteError, LedgerStore, PolicyGoneError
from migslice.kube.policies import ADMISSION_WATCH_TIMEOUT_S
from migslice.objects.pods import annotations_of
from migslice.objects.times import format_micro_time
from webhook.state import ClusterState

log = logging.getLogger(__name__)

DEFAULT_HOLD_S = 45.0
UNNOTICED_STALL_S = ADMISSION_WATCH_TIMEOUT_S + WATCH_GRACE_S
MAX_CHARGES = 4000
"""Charges one ledger may hold (about 150 bytes each, so well under a ConfigMap's 1 MiB): a
charge stays until its pod is seen for the settle time (50 s) or its hold passes unseen, so a
tenant admitting faster than about 80 pods a second waits (503, retried)."""
INLINE_LIST_S = 1.5
"""The namespace list a quota denial makes to settle charges of pods never created, at most
(the settle thread's own takes ``LIST_TIMEOUT_S``): kube-apiserver gives up on the webhook
after its timeoutSeconds (5 s by default), failing the create instead of reading the answer,
while the admission went on and might charge for it. Not listed in time, the charges count
and the settle thread releases them later."""
CLUSTER_FREE = frozenset({"no-gpu", "bad-resource"})
Admission = PodAdmission | ClaimAdmission
"""Decisions that read nothing of the cluster: made even while the caches are blind."""


FENCED = "ledger-fenced"
"""The reason of a denial while the tenant's ledger is fenced."""


class UnavailableError(MigsliceError):
    """The webhook cannot decide now; the message says why (answered 503, retried)."""


@dataclass(frozen=True, slots=True)
class Fence:
    """A fence this replica wrote: which tenant, what happened to its ledger, the message."""

    tenant: str
    damage: Damage
    message: str


def _holds(ledger: Ledger, uid: str, namespace: str) -> bool:
    return any(c.uid == uid and c.namespace == namespace for c in ledger.charges)


def _new_epoch() -> str:
    return uuid.uuid4().hex


class MemoryLedgers:
    """A :class:`LedgerStore` in this process: the ledgers of a cluster file (and of tests),
    where the state's own pod cache is the whole truth about which pods exist."""

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self._lock = threading.Lock()
        self._ledgers: dict[str, Ledger] = {}
        self._marks: dict[str, str] = {}
        self.writes = 0

    def read(self, tenant: str) -> Ledger:
        with self._lock:
            return self._ledgers.get(tenant) or Ledger(tenant)

    def write(self, ledger: Ledger) -> Ledger:
        with self._lock:
            current = self._ledgers.get(ledger.tenant) or Ledger(ledger.tenant)
            if current.version != ledger.version:
                raise LedgerConflictError(f"ledger of tenant {ledger.tenant!r} changed")
            stored = replace(ledger, version=str(int(current.version or "0") + 1))
            self._ledgers[ledger.tenant] = stored
            self.writes += 1
            return stored

    def reservations_in(
        self, namespace: str, *, timeout_s: float = LIST_TIMEOUT_S
    ) -> frozenset[str]:
        return self._state.reservations_in(namespace)

    def marked(self, tenant: str) -> str:
        with self._lock:
            return self._marks.get(tenant, "")

    def mark(self, tenant: str, epoch: str) -> None:
        with self._lock:
            self._marks[tenant] = epoch

    def where(self, tenant: str) -> str:
        return "in the webhook's memory"


class _TenantLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(tenant, threading.Lock())
        with lock:
            yield


class QuotaKeeper:
    """Decides admissions and charges them exactly (see the module docstring)."""

    def __init__(
        self,
        state: ClusterState,
        store: LedgerStore,
        *,
        settings: AdmissionSettings | None = None,
        hold_s: float = DEFAULT_HOLD_S,
        max_blind_s: float = 5.0,
        attempts: int = 20,
        wall_clock: Callable[[], float] = time.time,
        new_epoch: Callable[[], str] = _new_epoch,
        mark_wait_s: float = 1.0,
    ) -> None:
        self.state = state
        self.store = store
        self.settings = settings or AdmissionSettings()
        self.hold_s = hold_s
        self.max_blind_s = max_blind_s
        self.attempts = attempts
        self.wall_clock = wall_clock
        # A replica decides while its caches lag by at most max_blind_s past the longest a
        # stalled watch goes unnoticed (Informer.blind_s: its timeout plus WATCH_GRACE_S; an
        # open connection that carries no bytes, as to a dead API server, looks like a quiet
        # cluster until then): a charge whose pod this cache has held longer than that (twice
        # max_blind_s, and 5 s more) is counted everywhere.
        self.settle_s = UNNOTICED_STALL_S + 2 * max_blind_s + 5.0
        self.new_epoch = new_epoch
        self.mark_wait_s = mark_wait_s
        self.fence_listeners: list[Callable[[Fence], None]] = []
        """Called (outside any lock that admissions wait on) for every fence this replica
        writes: the service records an Event, the app counts it."""
        self._locks = _TenantLocks()

    def require_sight(self) -> None:
        """Raise :class:`UnavailableError` while the caches cannot be decided on."""
        problems = self.state.blindness(self.max_blind_s)
        if problems:
            raise UnavailableError("migslice webhook cannot decide yet: " + "; ".join(problems))

    def admit(self, admission: Admission, *, dry_run: bool) -> AdmissionDecision:
        """The decision for one pod or claim CREATE, charged in its tenant's ledger when
        allowed (a claim template is checked, never charged)."""
        first, seen = self._decide(admission)
        if first.reason in CLUSTER_FREE:
            return first
        self.require_sight()
        tenant = first.tenant
        charged = first.allowed and first.charge is not None
        if tenant is None or not (charged or first.reason == "quota"):
            return first  # the ledger cannot change this answer
        with self._locks.held(tenant):
            if not dry_run:
                self._release_earlier_round(admission, tenant)
            # Another thread's write since the first decision means deciding again.
            reuse = first if seen is not None and self.state.ledger(tenant) is seen else None
            return self._charged(admission, tenant, dry_run=dry_run, decided=reuse)

    def _charged(
        self,
        admission: Admission,
        tenant: str,
        *,
        dry_run: bool,
        decided: AdmissionDecision | None,
    ) -> AdmissionDecision:
        """Decide on the ledger and charge it; a quota denial is decided again on a fresh read,
        then once more after settling charges of pods never created. ``decided``: a decision
        already made on the ledger the state holds now."""
        ledger, fresh, settled = self.state.ledger(tenant), False, False
        if dry_run:  # decided as a create would be now: on the stored ledger, fenced or not
            ledger, fresh = self._read(tenant, write_fence=False), True
        for _ in range(self.attempts):
            if ledger is None:
                ledger, fresh = self._read(tenant), True
            if self._is_fenced(ledger):
                return self._fenced_denial(ledger)
            decision = decided or self._decide(admission)[0]
            decided = None
            if not decision.allowed and decision.reason == "quota":
                if not fresh:
                    ledger, fresh = self._read(tenant), True
                    continue
                if not settled:
                    ledger, settled = self._settle(ledger, list_timeout_s=INLINE_LIST_S), True
                    continue
            if not decision.allowed or decision.charge is None or dry_run:
                return decision
            charge = Charge(admission.request_uid, admission.namespace, decision.charge, 0.0)
            if self._write_charge(ledger, charge):
                return decision
            ledger, fresh = self._read(tenant), True
        raise UnavailableError(
            f"quota ledger of tenant {tenant!r} changed under {self.attempts} attempts in a row "
            "(many concurrent admissions); retry"
        )

    def _release_earlier_round(self, admission: Admission, tenant: str) -> None:
        """Release the charge of this request's first round. kube-apiserver reinvokes the
        webhook (reinvocationPolicy IfNeeded) when a later webhook changed the object, with a
        new request uid; the object carries the reservation the first round wrote and charged,
        and the patch now writes the new uid, charged in its place. Released only when a
        pod or claim that exists does not carry it (an authoritative list of the namespace):
        a tenant can copy the reservation of a stored object only, whose charge counts until
        the caches see that object."""
        raw = admission.raw_pod if isinstance(admission, PodAdmission) else admission.raw_object
        earlier, namespace = annotations_of(raw).get(names.RESERVATION), admission.namespace
        if not isinstance(earlier, str) or earlier == admission.request_uid:
            return
        if self.state.seen_for(earlier, namespace) is not None:
            return
        ledger = self.state.ledger(tenant)
        for _ in range(self.attempts):
            if ledger is None or not _holds(ledger, earlier, namespace):
                ledger = self._read(tenant)
            if self._is_fenced(ledger) or not _holds(ledger, earlier, namespace):
                return
            try:
                listed = self.store.reservations_in(namespace, timeout_s=INLINE_LIST_S)
            except MigsliceError as error:
                log.warning(
                    "Cannot list namespace=%s to release the first round's charge uid=%s of "
                    "request uid=%s (%s); it still counts",
                    namespace,
                    earlier,
                    admission.request_uid,
                    error,
                )
                return
            if earlier in listed:
                return
            try:
                stored = self.store.write(self._marked(ledger.without({earlier}), releasing=True))
            except LedgerConflictError:
                ledger = None
                continue
            except MigsliceError as error:
                raise UnavailableError(f"quota ledger of tenant {tenant!r}: {error}") from None
            self.state.set_ledger(stored)
            return

    def settle(self, tenant: str) -> None:
        """Release the tenant's charges whose pods were never created (a reconciler's round).
        A ledger that holds charges is read again first, so that one deleted or changed
        behind the webhook's back is fenced before the next admission, not at it."""
        with self._locks.held(tenant):
            ledger = self.state.ledger(tenant)
            if ledger is not None and ledger.charges:
                ledger = self._read(tenant)
            if ledger is not None:
                self._settle(ledger)

    def settle_every(self, interval_s: float, stop: threading.Event) -> None:
        """Settle every ledger this replica knows, every ``interval_s``, until ``stop``."""
        while not stop.wait(interval_s):
            if self.state.blindness(self.max_blind_s):
                continue  # a blind cache cannot tell seen from unseen
            for tenant in self.state.ledgers():
                try:
                    self.settle(tenant)
                except UnavailableError as error:
                    log.warning("Settling tenant=%s later: %s", tenant, error)
                except Exception:  # the loop must outlive any one failure
                    log.exception("Settling the quota ledger of tenant=%s failed", tenant)

    def _decide(self, admission: Admission) -> tuple[AdmissionDecision, Ledger | None]:
        """The decision, and the tenant's ledger it was made on (read under the same lock)."""
        with self.state.admission_lock:
            decision = (
                decide_claim(admission, self.state, self.settings)
                if isinstance(admission, ClaimAdmission)
                else decide(admission, self.state, self.settings)
            )
            tenant = decision.tenant
            return decision, None if tenant is None else self.state.ledger(tenant)

    def _write_charge(self, ledger: Ledger, charge: Charge) -> bool:
        now = self.wall_clock()
        wanted = ledger.with_charge(
            replace(charge, at_s=now), seen_for=self.state.seen_for, settle_after_s=self.settle_s
        )
        if len(wanted.charges) > MAX_CHARGES:
            raise UnavailableError(
                f"quota ledger of tenant {ledger.tenant!r} holds {len(wanted.charges) - 1} "
                f"recent admissions (limit {MAX_CHARGES}; each stays until its pod has been "
                f"seen {self.settle_s:.0f}s); retry"
            )
        try:
            stored = self.store.write(self._marked(wanted))
        except LedgerConflictError:
            return False
        except MigsliceError as error:
            raise UnavailableError(f"quota ledger of tenant {ledger.tenant!r}: {error}") from None
        self.state.set_ledger(stored)
        return True

    def _marked(self, ledger: Ledger, *, releasing: bool = False) -> Ledger:
        """``ledger`` ready to be written, its epoch recorded in the tenant's policy first
        where that is needed; a ledger without one (the tenant's first, or a v1 one an earlier
        release wrote) gets a new epoch. ``releasing``: the write only takes charges away, so
        a tenant whose TenantPolicy is gone is written unmarked (no policy, no quota to keep;
        it is marked at its next charge once a policy of that name exists again)."""
        if not ledger.epoch:
            ledger = ledger.with_epoch(self.new_epoch())
        elif not self.state.needs_mark(ledger.tenant):
            return ledger
        # No epoch yet, or the policy records no ledger (deleted and created again, its status
        # gone, whether this replica saw the deletion or not): record the ledger, so that a
        # replica started after a loss still finds it existed.
        try:
            self.store.mark(ledger.tenant, ledger.epoch)
        except PolicyGoneError:
            if not releasing:
                raise
            return ledger
        self.state.marked(ledger.tenant)
        return ledger

    def _read(self, tenant: str, *, write_fence: bool = True) -> Ledger:
        """The stored ledger, or the fence that replaces it when it was lost or changed
        (``write_fence`` False, a dry run's: the fence a create would write, not written).

        A ledger missing while the policy's mark says it exists, read by a replica that has
        never seen it, may be one that another replica is creating right now (it marks the
        epoch first, then creates): it is read again a few times, for ``mark_wait_s`` in all,
        before it counts as lost (three replicas' first admissions at once fenced a new
        tenant this way)."""
        waits = [self.mark_wait_s * (i + 1) / 10 for i in range(4)]
        for _ in range(3 + len(waits)):
            known = self.state.ledger(tenant)
            try:
                ledger = self.store.read(tenant)
            except LedgerError as error:
                damage = Damage.FOREIGN if isinstance(error, ForeignWriteError) else Damage.CORRUPT
                fence = self._fence(tenant, damage, str(error), error.version, write_fence)
            except MigsliceError as error:
                raise UnavailableError(f"quota ledger of tenant {tenant!r}: {error}") from None
            else:
                damage_found = self._damage(ledger, known)
                if damage_found is None:
                    self.state.set_ledger(ledger)
                    return ledger
                unseen = not ledger.stored and (known is None or not known.stored)
                if damage_found is Damage.LOST and unseen and waits:
                    time.sleep(waits.pop(0))  # perhaps being created now: look again
                    continue
                detail = (
                    f"quota ledger of tenant {tenant!r} ({self.store.where(tenant)}) was "
                    + damage_found.value
                )
                fence = self._fence(tenant, damage_found, detail, ledger.version, write_fence)
            if fence is not None:
                return fence
        raise UnavailableError(
            f"quota ledger of tenant {tenant!r} ({self.store.where(tenant)}) keeps changing "
            "under the webhook; retry"
        )

    def _damage(self, ledger: Ledger, known: Ledger | None) -> Damage | None:
        """What a ledger read says happened, against what this replica knew."""
        if ledger.stored:
            return ledger.damage_against(known)
        if known is not None and known.stored:
            return Damage.LOST
        try:
            marked = self.store.marked(ledger.tenant)
        except MigsliceError as error:
            raise UnavailableError(
                f"quota ledger of tenant {ledger.tenant!r} is missing and its TenantPolicy "
                f"cannot be read to tell whether it ever existed: {error}"
            ) from None
        return Damage.LOST if marked else None

    def _fence(
        self, tenant: str, damage: Damage, detail: str, version: str, write: bool = True
    ) -> Ledger | None:
        """Write the fence that replaces a lost or changed ledger (None: someone else wrote
        first; read again); ``write`` False: only the fence, for a dry run's answer."""
        now = self.wall_clock()
        fence = Ledger(tenant, (), version).fenced(
            epoch=self.new_epoch(), now_s=now, hold_s=self.hold_s, reason=detail
        )
        if not write:
            return fence
        try:
            self.store.mark(tenant, fence.epoch)
            stored = self.store.write(fence)
        except LedgerConflictError:
            return None
        except MigsliceError as error:
            raise UnavailableError(f"{detail}; it cannot be rebuilt now ({error}); retry") from None
        self.state.set_ledger(stored)
        message = self._fence_message(stored)
        log.warning("Fenced tenant=%s ledger=%s: %s", tenant, damage.name.lower(), message)
        for listener in self.fence_listeners:
            try:
                listener(Fence(tenant, damage, message))
            except Exception:  # a listener must never fail an admission
                log.exception("A fence listener failed tenant=%s", tenant)
        return stored

    def _is_fenced(self, ledger: Ledger) -> bool:
        known_for = self.state.fence_known_for(ledger)
        return ledger.is_fenced(self.wall_clock(), known_for_s=known_for, hold_s=self.hold_s)

    def _fence_message(self, ledger: Ledger) -> str:
        until, now = ledger.fenced_until_s or 0.0, self.wall_clock()
        if now >= until:  # fenced on this replica's own count: its clock is ahead of the writer's
            until = now + self.hold_s - (self.state.fence_known_for(ledger) or 0.0)
        return (
            f"GPU pods of tenant {ledger.tenant!r} are refused until "
            f"{format_micro_time(until)[:19]}Z ({self.hold_s:.0f}s after it was found): "
            f"{ledger.fence_reason}, so pods it admitted may still be stored; the webhook "
            "rebuilt the ledger and counts those pods once they show up. Nothing to repair: "
            "create the pod again after that time"
        )

    def _fenced_denial(self, ledger: Ledger) -> AdmissionDecision:
        return AdmissionDecision(
            allowed=False,
            reason=FENCED,
            message=self._fence_message(ledger),
            code=403,
            tenant=ledger.tenant,
        )

    def _settle(self, ledger: Ledger, *, list_timeout_s: float = LIST_TIMEOUT_S) -> Ledger:
        """The ledger without the overdue charges a fresh list shows were never created, the
        list made within ``list_timeout_s`` (else the charges still count)."""
        tenant = ledger.tenant
        overdue = ledger.overdue(
            self.state.seen_for,
            known_for=lambda charge: self.state.known_for(tenant, charge),
            hold_s=self.hold_s,
        )
        if not overdue:
            return ledger
        try:
            deadline = time.monotonic() + list_timeout_s
            listed = {
                ns: self.store.reservations_in(ns, timeout_s=max(0.0, deadline - time.monotonic()))
                for ns in {c.namespace for c in overdue}
            }
        except MigsliceError as error:
            log.warning(
                "Cannot list pods to settle tenant=%s overdue charges=%d (%s); they still count",
                ledger.tenant,
                len(overdue),
                error,
            )
            return ledger
        failed = failed_charges(overdue, listed)
        if not failed:
            return ledger
        try:
            stored = self.store.write(self._marked(ledger.without(failed), releasing=True))
        except LedgerConflictError:
            return self._read(ledger.tenant)
        except MigsliceError as error:
            log.warning("Cannot release charges of tenant=%s (%s)", ledger.tenant, error)
            return ledger
        log.info(
            "Released tenant=%s charges=%d of pods never created (held over %.0fs, not listed)",
            ledger.tenant,
            len(failed),
            self.hold_s,
        )
        self.state.set_ledger(stored)
        return stored
