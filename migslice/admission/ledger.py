"""A tenant's quota ledger: the charges of pods admitted but not yet counted from a pod cache.

Every webhook replica charges an allowed admission by writing its :class:`Charge` into the
tenant's ledger with a compare-and-swap on the stored object's resourceVersion (the API
server is the one place all replicas agree on; see docs/policy.md, "Quota across replicas").
A tenant's usage is then, on any replica:

    the GPU pods its pod cache holds + the ledger's charges whose pod that cache has not seen

A charge is matched to its pod by the pod's ``migslice.io/reservation`` annotation (the
admission request uid) in the charge's namespace. Charges leave the ledger in two ways, both
decided here and written by the next compare-and-swap:

* **settled**: the writer's pod cache has held the pod for ``settle_after_s``. A replica may
  decide only while its cache follows the API server (it lags by seconds at most), so by then
  every replica that may decide counts the pod itself.
* **never created**: known to this replica for ``hold_s`` (on its own monotonic clock; ``at``
  is the writer's wall clock, which may be ahead or behind), not seen, and absent from an
  authoritative list of its namespace's pods taken after ``hold_s`` had passed
  (:func:`failed_charges`). ``hold_s`` is longer than kube-apiserver takes to answer a create
  (34 s when etcd does not answer), so such a pod cannot be stored any more. A timer alone
  never releases a charge.

A ledger can be lost or changed behind the webhook's back (deleted, edited, replaced by an old
copy). Charges lost that way are admissions whose pods may still be stored, so a replica that
finds its ledger gone, unreadable, written by someone else or older than one it has seen
**fences** the tenant (:meth:`Ledger.fenced`): a new ledger (a new ``epoch``, no charges) that
refuses the tenant's GPU pods for ``hold_s``, after which every pod those charges admitted is
stored or never will be, and counted from the pod caches like any other (docs/policy.md, "When
the ledger is lost or changed"). ``seq`` counts the writes of one epoch, so a copy older than one
already seen is told apart.

Pure: time, the pod cache's view (``seen_for``), epochs and the list's answer are inputs. The
text is JSON in a ConfigMap's data (``migslice.kube.ledger``)::

    {"version": "v2", "tenant": "team-a", "epoch": "4c0d…", "seq": 12,
     "charges": [{"uid": "7f1c…", "namespace": "team-a", "at": "2025-05-01T12:00:00.250000Z",
                  "instances": 1, "computeSlices": 2, "memorySlices": 2,
                  "profiles": {"2g.20gb": 1}}]}

with ``"fencedUntil"`` and ``"fenceReason"`` in a fencing ledger. Version ``v1`` (no epoch, no
sequence) is still read; the next write stores ``v2``.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace

from migslice.admission.usage import SliceUsage
from migslice.errors import InvalidInputError, MigsliceError
from migslice.objects.json import decode, version_not_read
from migslice.objects.times import format_micro_time, parse_micro_epoch_s

LEDGER_VERSION = "v2"
LEGACY_VERSIONS = frozenset({"v1"})

SeenFor = Callable[[str, str], float | None]
"""``seen_for(uid, namespace)``: how long the pod cache has held (or, once it is gone, held) the
pod that admission ``uid`` let into ``namespace``, in seconds; None when it never has."""


class LedgerError(InvalidInputError):
    """A ledger text that cannot be read; the message says where. ``version``: the stored
    object's resourceVersion, where one was read (a fence replaces it at that version)."""

    def __init__(self, message: str, version: str = "") -> None:
        super().__init__(message)
        self.version = version


class LedgerConflictError(MigsliceError):
    """The stored ledger is not the version a write expected: someone wrote first."""


class Damage(enum.Enum):
    """How a ledger was found lost or changed behind the webhook's back."""

    LOST = "deleted"
    CORRUPT = "unreadable"
    FOREIGN = "written by another client"
    STALE = "older than a copy already seen"
    REPLACED = "replaced by a ledger of another epoch"


@dataclass(frozen=True, slots=True)
class Charge:
    """One admission's charge: its request uid, the pod's namespace, what it costs, and when
    it was admitted (the writer's wall-clock epoch seconds: for people; replicas judge a
    charge's age by when they first read it, :meth:`Ledger.overdue`)."""

    uid: str
    namespace: str
    usage: SliceUsage
    at_s: float


@dataclass(frozen=True, slots=True)
class Ledger:
    """The charges of one tenant; ``version`` is the stored object's resourceVersion ("" when
    none is stored yet), the compare-and-swap's expectation."""

    tenant: str
    charges: tuple[Charge, ...] = ()
    version: str = ""
    epoch: str = ""
    """Which incarnation of the ledger this is ("" for a v1 ledger or none stored yet)."""
    seq: int = 0
    """Writes of this epoch so far: a copy with a lower one is older than one already seen."""
    fenced_until_s: float | None = None
    fence_reason: str = ""

    @property
    def stored(self) -> bool:
        return bool(self.version)

    def is_fenced(self, now_s: float, *, known_for_s: float | None, hold_s: float) -> bool:
        """True while the ledger refuses the tenant's GPU pods (see :meth:`fenced`): until
        ``fencedUntil`` by this replica's wall clock, and, while nothing has been charged since
        the fence (``seq`` 0), until this replica has known the fence for ``hold_s`` on its own
        monotonic clock (``known_for_s``; None: not yet). ``fencedUntil`` is the writer's wall
        clock: a replica whose clock runs ahead of it by the hold would otherwise never be
        fenced. A first charge is written only by a replica that waited the hold itself, so a
        fence with charges (``seq`` above 0) is over on every replica, whatever its wall clock
        (one behind the writer's would otherwise refuse for as long as it is behind)."""
        if self.fenced_until_s is None or self.seq > 0:
            return False
        return now_s < self.fenced_until_s or known_for_s is None or known_for_s < hold_s

    def fenced(self, *, epoch: str, now_s: float, hold_s: float, reason: str) -> Ledger:
        """The ledger that replaces this one after it was lost or changed: no charges, a new
        ``epoch``, refusing the tenant's GPU pods until ``hold_s`` from now. Every admission
        whose charge was lost was answered before now; by then its pod is stored (and in the
        pod caches) or never will be. ``version`` stays: the write replaces what is stored."""
        return Ledger(
            self.tenant,
            (),
            self.version,
            epoch=epoch,
            seq=0,
            fenced_until_s=now_s + hold_s,
            fence_reason=reason,
        )

    def damage_against(self, known: Ledger | None) -> Damage | None:
        """What this stored ledger says happened, against ``known``: the same tenant's ledger
        this replica last read or wrote (None: it knows of none). A ledger of the epoch known
        with fewer writes is a stale copy; one of another epoch that is not a fence is a
        replacement (a fence is how replicas start a new epoch)."""
        if known is None or not known.stored or not known.epoch or not self.stored:
            return None
        if self.epoch == known.epoch:
            return Damage.STALE if self.seq < known.seq else None
        return None if self.fenced_until_s is not None else Damage.REPLACED

    def pending(self, seen_for: SeenFor, exclude: str | None = None) -> SliceUsage:
        """What the charges whose pods the cache has not seen add to the tenant's usage
        (``exclude``: the uid of the admission being decided, which never counts itself)."""
        instances = compute = memory = 0
        profiles: dict[str, int] = {}
        for charge in self.charges:
            if charge.uid == exclude or seen_for(charge.uid, charge.namespace) is not None:
                continue
            usage = charge.usage
            instances += usage.instances
            compute += usage.compute_slices
            memory += usage.memory_slices
            for name, count in usage.profiles:
                profiles[name] = profiles.get(name, 0) + count
        counts = tuple(sorted((n, c) for n, c in profiles.items() if c))
        return SliceUsage(instances, compute, memory, counts)

    def with_charge(self, charge: Charge, *, seen_for: SeenFor, settle_after_s: float) -> Ledger:
        """The ledger with ``charge`` (replacing an earlier one of the same uid: a retried or
        reinvoked admission) and without the charges whose pods the cache has held for
        ``settle_after_s``."""
        kept = tuple(
            c
            for c in self.charges
            if c.uid != charge.uid and (seen_for(c.uid, c.namespace) or 0.0) < settle_after_s
        )
        return replace(self, charges=(*kept, charge), seq=self.seq + 1)

    def without(self, uids: Collection[str]) -> Ledger:
        kept = tuple(c for c in self.charges if c.uid not in uids)
        return replace(self, charges=kept, seq=self.seq + 1)

    def with_epoch(self, epoch: str) -> Ledger:
        """A ledger read without an epoch (v1, or none stored) given one for its next write."""
        return self if self.epoch else replace(self, epoch=epoch)

    def overdue(
        self, seen_for: SeenFor, *, known_for: Callable[[Charge], float], hold_s: float
    ) -> tuple[Charge, ...]:
        """Charges this replica has known for longer than ``hold_s`` whose pod the cache has
        not seen: created late, or never; an authoritative list of their namespaces tells
        (:func:`failed_charges`). ``known_for(charge)``: seconds since this replica first read
        or wrote the charge, on its own monotonic clock. Never ``at`` against this replica's
        wall clock: ``at`` is the writer's, and a reader a minute ahead of it released a charge
        whose create was still on its way to etcd (two pods on a quota of one). Known for the
        hold, the charge is older than that, whatever the clocks say."""
        return tuple(
            c
            for c in self.charges
            if known_for(c) > hold_s and seen_for(c.uid, c.namespace) is None
        )


def failed_charges(
    overdue: Collection[Charge], listed: Mapping[str, Collection[str]]
) -> frozenset[str]:
    """The uids of ``overdue`` charges whose pod does not exist: ``listed`` maps each of their
    namespaces to the reservation uids of the GPU pods a fresh list found there."""
    return frozenset(
        c.uid for c in overdue if c.namespace in listed and c.uid not in listed[c.namespace]
    )


# -- text ----------------------------------------------------------------------------------------


def render_ledger(ledger: Ledger) -> str:
    """The ledger's text; it must have an epoch (:meth:`Ledger.with_epoch`)."""
    if not ledger.epoch:
        raise ValueError(f"quota ledger of tenant {ledger.tenant!r} has no epoch to store")
    document: dict[str, object] = {
        "version": LEDGER_VERSION,
        "tenant": ledger.tenant,
        "epoch": ledger.epoch,
        "seq": ledger.seq,
    }
    if ledger.fenced_until_s is not None:
        document["fencedUntil"] = format_micro_time(ledger.fenced_until_s)
        document["fenceReason"] = ledger.fence_reason
    document["charges"] = [_charge_json(c) for c in ledger.charges]
    return json.dumps(document, separators=(",", ":"))


def parse_ledger(tenant: str, text: str | None, version: str = "") -> Ledger:
    """The ledger in ``text`` (None or empty: no charges)."""
    if not text:
        return Ledger(tenant, (), version)
    try:
        document = decode(text)
    except ValueError as error:
        raise LedgerError(f"quota ledger of tenant {tenant!r} is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise LedgerError(
            f"quota ledger of tenant {tenant!r}: expected an object with version {LEDGER_VERSION}"
        )
    found = document.get("version")
    if found != LEDGER_VERSION and found not in LEGACY_VERSIONS:
        reads = " or ".join([LEDGER_VERSION, *sorted(LEGACY_VERSIONS)])
        raise LedgerError(f"quota ledger of tenant {tenant!r} {version_not_read(found, reads)}")
    if document.get("tenant", tenant) != tenant:
        raise LedgerError(
            f"quota ledger of tenant {tenant!r} names tenant {document.get('tenant')!r}"
        )
    raw_charges = document.get("charges")
    if not isinstance(raw_charges, list):
        raise LedgerError(f"quota ledger of tenant {tenant!r}: charges must be a list")
    charges = tuple(_charge_from(raw, f"charges[{i}]", tenant) for i, raw in enumerate(raw_charges))
    if document["version"] in LEGACY_VERSIONS:
        return Ledger(tenant, charges, version)
    return _v2_ledger(document, tenant, charges, version)


def _v2_ledger(
    document: Mapping[str, object], tenant: str, charges: tuple[Charge, ...], version: str
) -> Ledger:
    """A v2 ledger: the charges with their epoch, sequence and fence."""
    prefix = f"quota ledger of tenant {tenant!r}"
    epoch, seq = document.get("epoch"), document.get("seq")
    if not isinstance(epoch, str) or not epoch:
        raise LedgerError(f"{prefix}: epoch must be a non-empty string")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise LedgerError(f"{prefix}: seq must be a count")
    ledger = Ledger(tenant, charges, version, epoch=epoch, seq=seq)
    if "fencedUntil" not in document:
        return ledger
    until = parse_micro_epoch_s(document.get("fencedUntil"))
    reason = document.get("fenceReason", "")
    if until is None or not isinstance(reason, str):
        raise LedgerError(f"{prefix}: fencedUntil must be a time, fenceReason a string")
    return replace(ledger, fenced_until_s=until, fence_reason=reason)


def _charge_json(charge: Charge) -> dict[str, object]:
    usage = charge.usage
    return {
        "uid": charge.uid,
        "namespace": charge.namespace,
        "at": format_micro_time(charge.at_s),
        "instances": usage.instances,
        "computeSlices": usage.compute_slices,
        "memorySlices": usage.memory_slices,
        "profiles": dict(usage.profiles),
    }


def _charge_from(raw: object, where: str, tenant: str) -> Charge:
    prefix = f"quota ledger of tenant {tenant!r}, {where}"
    if not isinstance(raw, Mapping):
        raise LedgerError(f"{prefix}: expected an object")
    uid, namespace = raw.get("uid"), raw.get("namespace")
    if not isinstance(uid, str) or not uid or not isinstance(namespace, str) or not namespace:
        raise LedgerError(f"{prefix}: uid and namespace must be non-empty strings")
    at_s = parse_micro_epoch_s(raw.get("at"))
    if at_s is None:
        raise LedgerError(f"{prefix}.at: expected a time like 2025-05-01T12:00:00.250000Z")
    counts = [raw.get(k) for k in ("instances", "computeSlices", "memorySlices")]
    profiles = raw.get("profiles") or {}
    if not all(_is_count(n) for n in counts) or not isinstance(profiles, Mapping):
        raise LedgerError(f"{prefix}: instances, computeSlices, memorySlices must be counts")
    if not all(isinstance(k, str) and _is_count(v) for k, v in profiles.items()):
        raise LedgerError(f"{prefix}.profiles: expected profile names with counts")
    usage = SliceUsage(
        int(str(counts[0])),
        int(str(counts[1])),
        int(str(counts[2])),
        tuple(sorted((str(k), int(v)) for k, v in profiles.items() if v)),
    )
    return Charge(uid, namespace, usage, at_s)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
