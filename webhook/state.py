"""The webhook's compact cluster state: it implements the core's ``ClusterView`` port.

Only what decisions need is kept, never whole API objects, in three rooms:

* :class:`~migslice.policy.tenancy.Tenancy`: the valid TenantPolicies and which namespaces
  each selects (an index; namespace labels for ``spec.namespaceSelector``);
* :class:`~webhook.usage.UsageBook`: per GPU pod its slice usage, per namespace the sum, the
  admissions the pod cache has seen, and the tenants' quota ledgers (the charges of pods
  admitted, by any replica, but not yet seen) as last read or written;
* :class:`~webhook.products.NodeProducts`: the GPU products of the nodes (the offers),
  from their GFD labels or, on DRA nodes, their ResourceSlices;
* :class:`~webhook.claims.ClaimBook`: DeviceClasses, ResourceClaims (each priced in the
  usage book as the extended resources its asks amount to, but the claim kube-scheduler made
  for a pod's extended resources, which that pod pays for), which pods name which claims,
  and ResourceClaimTemplates.

Besides them: invalid policies (kept out of decisions and reported), every policy's
``.status`` as last seen, and the desired statuses, recomputed only for the policies an event
touched (``policy_statuses``).

Both sources feed it through the same methods: the cluster file once at start-up
(:meth:`ClusterState.load`), the watch caches on every event (``migslice.kube.policies``).
Decisions read it under :attr:`ClusterState.admission_lock`; the ledger write that makes an
admission count everywhere is ``webhook.quota``'s. Status computations hold the lock only to
copy their inputs. :meth:`ClusterState.blindness` says whether the watch caches may be
decided on (synced, and following the API server).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from migslice import names
from migslice.admission import SliceUsage, usage_of
from migslice.admission.ledger import Charge, Ledger
from migslice.admission.paid_claims import is_paid_by_owner, paid_claim
from migslice.admission.status import (
    StatusUpdate,
    invalid_policy_status,
    owned_status,
    policy_status,
)
from migslice.admission.usage import ZERO, claim_usage, pricing_models
from migslice.admission.view import TemplateFacts
from migslice.kube.health import CacheHealth, blindness
from migslice.mig import CATALOG
from migslice.objects import ClusterObjects
from migslice.objects.claim_templates import slim_template
from migslice.objects.device_classes import DeviceClassFacts, device_class_facts_from_raw
from migslice.objects.dra_products import slim_slice
from migslice.objects.json import items, mapping, text
from migslice.objects.nodes import node_name_of, node_product_of
from migslice.objects.pod_gpus import gpu_requests
from migslice.objects.pods import (
    annotations_of,
    bound_node_of,
    is_admission_gated,
    is_terminal,
    metadata_of,
    named_claims,
)
from migslice.policy import (
    FieldError,
    Offer,
    PolicyError,
    TenantPolicy,
    check_against_catalog,
    read_tenant_policy,
)
from migslice.policy.tenancy import Tenancy
from migslice.policy.wire import TenantPolicyStatusWire
from webhook.claims import ClaimBook, claim_record
from webhook.products import NodeProducts
from webhook.usage import SEEN_KEEP_S, PodCharge, UsageBook

log = logging.getLogger(__name__)

MAX_CHECKED_POLICIES = 4096
"""Distinct policy contents whose catalog check is kept (the cache starts over beyond)."""


class Clock(Protocol):
    """Monotonic seconds; how long a deleted pod's admission stays seen is measured on it."""

    def monotonic_s(self) -> float: ...


class SystemClock:
    def monotonic_s(self) -> float:
        return time.monotonic()


@dataclass(frozen=True, slots=True)
class InvalidPolicy:
    """A TenantPolicy that does not parse: its generation, every error with field paths, and
    the policy as far as it reads (whose namespaces it selects)."""

    generation: int
    errors: tuple[FieldError, ...]
    partial: TenantPolicy | None = None

    @property
    def message(self) -> str:
        return "; ".join(str(e) for e in self.errors)


@dataclass(frozen=True, slots=True)
class _GpuPod:
    """What a live GPU pod's charge is computed from, kept to price it again when the model
    it is priced on changes: its node's (a Node seen after the pod, or relabelled), or the
    cluster's (a model coming or going) while it is not bound to a known node."""

    namespace: str
    requests: tuple[tuple[str, int], ...]
    reservation: str | None
    node: str | None
    uid: str | None = None


@dataclass(frozen=True, slots=True)
class _StatusInputs:
    policy: TenantPolicy | None
    invalid: InvalidPolicy | None
    usage: SliceUsage
    conflicts: tuple[FieldError, ...]
    observed: Mapping[str, object]


class ClusterState:
    """Thread-safe, event-fed view of the cluster for admission decisions."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.admission_lock = threading.RLock()
        self._tenancy = Tenancy()
        self._usage = UsageBook()
        self._products = NodeProducts()
        self._gpu_pods: dict[str, _GpuPod] = {}
        self._gated: dict[str, Mapping[str, object]] = {}  # key -> the whole gated pod
        self._pods_on: dict[str, set[str]] = {}  # node -> keys of the GPU pods bound to it
        self._dra = ClaimBook()
        self._claims_on: dict[str, set[str]] = {}  # node -> keys of the claims allocated there
        self._slice_nodes: dict[str, str] = {}  # ResourceSlice -> its node
        self._slice_names: dict[str, frozenset[str]] = {}  # ResourceSlice -> productNames
        self._product_names: Counter[str] = Counter()  # productName -> slices publishing it
        self._invalid: dict[str, InvalidPolicy] = {}
        self._observed: dict[str, Mapping[str, object]] = {}
        self._uids: dict[str, str] = {}  # policy -> metadata.uid (its Events name it)
        # Policies whose object as last watched records no ledger (no status.quotaLedger):
        # deleted, or created again (new uid) with an empty status, however this replica
        # learnt of it (a DELETE event, a relist after a watch gap, a start).
        self._unmarked: set[str] = set()
        self._desired: dict[str, TenantPolicyStatusWire] = {}
        # Keyed by what the check reads (not by name and generation): tenants' policies often
        # share their sizes and profiles, and a whole round after a restart checks each once.
        self._catalog_problems: dict[TenantPolicy, tuple[FieldError, ...]] = {}
        self._dirty: set[str] = set()
        self._listeners: list[Callable[[], None]] = []
        self._synced: dict[str, bool] = {}
        self._caches: tuple[CacheHealth, ...] = ()

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

    def follow(self, caches: Sequence[CacheHealth]) -> None:
        """The watch caches that feed this state, for :meth:`blindness`."""
        self._caches = tuple(caches)

    @property
    def caches(self) -> tuple[CacheHealth, ...]:
        return self._caches

    def blindness(self, max_blind_s: float) -> list[str]:
        """Why decisions on this state would be blind (empty: they would not): a source that
        has not listed once, or a cache that has not followed the API server for longer than
        ``max_blind_s``."""
        problems = [f"cache {source} has not listed once yet" for source in self.unsynced()]
        return problems + blindness(self._caches, max_blind_s=max_blind_s)

    # -- ClusterView -----------------------------------------------------------------------

    def tenant_policies(self, namespace: str) -> Sequence[TenantPolicy]:
        return self._tenancy.selecting(namespace)

    def invalid_selecting(self, namespace: str) -> Sequence[tuple[str, str]]:
        labels = self._tenancy.labels_of(namespace)
        with self.admission_lock:
            return tuple(
                (name, problem.message)
                for name, problem in self._invalid.items()
                if problem.partial is not None and problem.partial.selects(namespace, labels)
            )

    def policies(self) -> Sequence[TenantPolicy]:
        return self._tenancy.policies()

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._tenancy.labels_of(namespace)

    def known_namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return self._tenancy.known_namespaces()

    def tenant_namespaces(self, tenant: str) -> frozenset[str]:
        """The namespaces the tenant's policy selects, of those the cache knows."""
        with self.admission_lock:
            return self._tenancy.namespaces_of(tenant)

    def offers(self) -> Sequence[Offer]:
        return self._products.offers

    def dra_product_names(self) -> frozenset[str]:
        with self.admission_lock:
            return frozenset(self._product_names)

    def tenant_usage(self, tenant: str, exclude_reservation: str | None = None) -> SliceUsage:
        """The tenant's cached GPU pods plus its ledger's charges for pods not seen yet
        (``exclude_reservation``: the admission being decided)."""
        with self.admission_lock:
            total = ZERO
            for namespace in self._tenancy.namespaces_of(tenant):
                total = total + self._usage.namespace_usage(namespace)
            return total + self._usage.pending(tenant, exclude_reservation)

    def device_classes(self) -> Mapping[str, DeviceClassFacts]:
        return self._dra.classes

    def covering_pod(
        self, namespace: str, pod: str, pod_uid: str, claim: str
    ) -> Mapping[str, int] | None:
        key = f"{namespace}/{pod}"
        found = self._gpu_pods.get(key)
        # kube-scheduler creates a pod's extended-resource claim in PreBind, before it binds
        # the pod: one created for a pod already bound is not its, whatever it says
        if found is None or found.uid != pod_uid or found.node is not None:
            return None
        if f"{namespace}/{claim}" in self._dra.named_by(key):
            return None  # kube-scheduler's claim is never in its pod's spec.resourceClaims
        paid = self._paid_claim(key)
        if paid is not None and paid != f"{namespace}/{claim}":
            return None
        return dict(found.requests)

    def claim_users(self, namespace: str, claim: str) -> tuple[str, ...]:
        return self._dra.users(f"{namespace}/{claim}")

    def claim_asks_gpu(self, namespace: str, claim: str) -> bool | None:
        return self._dra.asks_gpu(f"{namespace}/{claim}")

    def claim_instances(self, namespace: str, claim: str) -> int:
        return self._dra.instances(f"{namespace}/{claim}")

    def extended_claim(self, namespace: str, claim: str) -> bool:
        record = self._dra.claims.get(f"{namespace}/{claim}")
        return record is not None and record.facts.extended_resource

    def template(self, namespace: str, name: str) -> TemplateFacts | None:
        return self._dra.template(f"{namespace}/{name}")

    def policy_uid(self, name: str) -> str | None:
        """``metadata.uid`` of the TenantPolicy ``name`` as the cache last saw it (an Event
        about it names it: ``kubectl describe tp`` selects Events by uid)."""
        return self._uids.get(name)

    @property
    def invalid_policies(self) -> Mapping[str, str]:
        """Invalid policies by name, with their errors in one line."""
        return {name: problem.message for name, problem in self._invalid.items()}

    def conflicts(self, policy: TenantPolicy) -> tuple[FieldError, ...]:
        """Namespaces ``policy`` shares with another valid policy (for /validate)."""
        with self.admission_lock:
            return self._tenancy.conflicts(policy)

    # -- status ------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (quickly, under the lock) whenever usage or a policy changes."""
        self._listeners.append(listener)

    def policy_statuses(self, now: datetime) -> tuple[StatusUpdate, ...]:
        """Every policy's status as last seen and as it should be now (``migslice.kube``).

        Only the policies an event or a ledger touched since the last call are computed
        again, outside the admission lock; the lock is held only to copy their inputs, so
        admissions never wait on a status computation."""
        with self.admission_lock:
            dirty = self._dirty
            self._dirty = set()
            inputs = {name: self._status_inputs(name) for name in dirty}
            names_now = sorted({p.name for p in self._tenancy.policies()} | set(self._invalid))
            observed = {name: self._observed.get(name, {}) for name in names_now}
        computed: dict[str, TenantPolicyStatusWire] = {}
        for name, given in inputs.items():
            desired = self._desired_status(name, given, now)
            if desired is not None:
                computed[name] = desired
        with self.admission_lock:
            for name in dirty:
                if name in computed:
                    self._desired[name] = computed[name]
                else:
                    self._desired.pop(name, None)
            desired_now = {n: self._desired[n] for n in names_now if n in self._desired}
        return tuple(
            StatusUpdate(name, observed[name], desired_now[name])
            for name in names_now
            if name in desired_now
        )

    def _status_inputs(self, name: str) -> _StatusInputs:
        policy = self._tenancy.policy(name)
        return _StatusInputs(
            policy=policy,
            invalid=self._invalid.get(name),
            usage=self.tenant_usage(name) if policy is not None else ZERO,
            conflicts=self._tenancy.conflicts(policy) if policy is not None else (),
            observed=self._observed.get(name, {}),
        )

    def _desired_status(
        self, name: str, given: _StatusInputs, now: datetime
    ) -> TenantPolicyStatusWire | None:
        previous = given.observed
        if given.policy is not None:
            policy = given.policy
            key = replace(policy, name="", generation=0, namespaces=(), namespace_selector=None)
            problems = self._catalog_problems.get(key)
            if problems is None:
                problems = check_against_catalog(policy, CATALOG)
                if len(self._catalog_problems) >= MAX_CHECKED_POLICIES:
                    self._catalog_problems.clear()
                self._catalog_problems[key] = problems
            return policy_status(
                policy,
                given.usage,
                now=now,
                problems=problems,
                conflicts=given.conflicts,
                previous=previous,
            )
        if given.invalid is not None:
            return invalid_policy_status(
                name, given.invalid.generation, given.invalid.errors, now=now, previous=previous
            )
        return None

    def _changed(self, *policies: str) -> None:
        self._dirty.update(policies)
        for listener in self._listeners:
            listener()

    # -- ledgers -----------------------------------------------------------------------------

    def set_ledger(self, ledger: Ledger) -> None:
        """The tenant's ledger as just read or written (``webhook.quota``)."""
        with self.admission_lock:
            before = self._usage.ledger(ledger.tenant)
            self._usage.set_ledger(ledger, now_s=self.clock.monotonic_s())
            if before is None or before.charges != ledger.charges:
                self._changed(ledger.tenant)

    def ledger(self, tenant: str) -> Ledger | None:
        with self.admission_lock:
            return self._usage.ledger(tenant)

    def needs_mark(self, tenant: str) -> bool:
        """Whether the tenant's policy, as last watched, records no ledger (its
        ``status.quotaLedger`` absent: deleted, or deleted and created again, its status
        gone) and has not been marked since: a ledger it has is to be marked again. Read from
        the policy object itself, not from having seen it deleted: a replica started after the
        deletion, or one whose relist after a watch gap finds the new object under the old
        name (an upsert, no delete), marks it too. Read from the watch, so an admission pays
        no extra write otherwise."""
        with self.admission_lock:
            return tenant in self._unmarked

    def marked(self, tenant: str) -> None:
        """The ledger was marked again (the watch will show it)."""
        with self.admission_lock:
            self._unmarked.discard(tenant)

    def ledgers(self) -> Mapping[str, Ledger]:
        with self.admission_lock:
            return self._usage.ledgers()

    def known_for(self, tenant: str, charge: Charge) -> float:
        """Seconds, on this process's monotonic clock, since it first read or wrote the
        tenant's ``charge`` (0.0 when the ledger it holds has no such charge)."""
        with self.admission_lock:
            return self._usage.known_for(tenant, charge, self.clock.monotonic_s())

    def fence_known_for(self, ledger: Ledger) -> float | None:
        """Seconds, on this process's monotonic clock, since it first read or wrote the fence
        ``ledger`` carries; None when it has not (a dry run's fence, never written)."""
        with self.admission_lock:
            return self._usage.fence_known_for(
                ledger.tenant, ledger.epoch, self.clock.monotonic_s()
            )

    def seen_for(self, uid: str, namespace: str) -> float | None:
        """Seconds since the pod cache first held the pod admission ``uid`` let into
        ``namespace`` (it may be gone since); None when it never did."""
        with self.admission_lock:
            return self._usage.seen_for(uid, namespace, self.clock.monotonic_s())

    def reservations_in(self, namespace: str) -> frozenset[str]:
        """The admission uids of the cached live GPU pods of ``namespace`` (with a cluster
        file, the whole truth)."""
        with self.admission_lock:
            return self._usage.reservations_in(namespace)

    def gated_pods(self) -> tuple[Mapping[str, object], ...]:
        """The cached pods behind the admission gate (whole, as last seen), for the gate
        reconciler; in no particular order."""
        with self.admission_lock:
            return tuple(self._gated.values())

    def pending_charges(self) -> int:
        """Ledger charges whose pods the cache has not seen (for tests and metrics)."""
        with self.admission_lock:
            return self._usage.pending_count()

    # -- events ----------------------------------------------------------------------------

    def upsert_policy(self, raw_policy: Mapping[str, object]) -> None:
        status = raw_policy.get("status")
        observed = owned_status(status) if isinstance(status, Mapping) else {}
        mark = status.get(names.LEDGER_STATUS_KEY) if isinstance(status, Mapping) else None
        metadata = raw_policy.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
        if isinstance(name, str) and isinstance(uid, str) and uid:
            self._uids[name] = uid
        if isinstance(name, str):
            with self.admission_lock:
                if isinstance(mark, Mapping) and mark.get("epoch"):
                    self._unmarked.discard(name)
                else:
                    self._unmarked.add(name)
        name_read, partial, errors = read_tenant_policy(raw_policy)
        if partial is None or errors:
            error = PolicyError(name_read or "?", errors)
            with self.admission_lock:
                touched = self._tenancy.remove_policy(error.name)
                if error.name:
                    invalid = InvalidPolicy(_generation(raw_policy), error.errors, partial)
                    self._invalid[error.name] = invalid
                    self._observed[error.name] = observed
                self._changed(error.name, *touched)
            log.warning("Ignoring invalid TenantPolicy tenant=%s: %s", error.name, error)
            return
        policy = partial
        with self.admission_lock:
            self._invalid.pop(policy.name, None)
            self._observed[policy.name] = observed
            if self._tenancy.policy(policy.name) == policy:
                self._changed(policy.name)
                return
            touched = self._tenancy.put_policy(policy)
            self._changed(policy.name, *touched)

    def delete_policy(self, name: str) -> None:
        with self.admission_lock:
            touched = self._tenancy.remove_policy(name)
            self._invalid.pop(name, None)
            self._observed.pop(name, None)
            self._uids.pop(name, None)
            self._unmarked.add(name)
            self._changed(name, *touched)

    def upsert_namespace(self, raw_namespace: Mapping[str, object]) -> None:
        metadata = raw_namespace.get("metadata")
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            return
        name = str(metadata["name"])
        labels = metadata.get("labels")
        clean = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
        with self.admission_lock:
            touched = self._tenancy.put_namespace(name, clean)
            if touched:
                self._changed(*touched)

    def delete_namespace(self, name: str) -> None:
        with self.admission_lock:
            touched = self._tenancy.remove_namespace(name)
            if touched:
                self._changed(*touched)

    def upsert_node(self, raw_node: Mapping[str, object]) -> None:
        name = node_name_of(raw_node)
        if name is None:
            return
        with self.admission_lock:
            before = (self._products.product_of(name), self._products.model_keys)
            self._products.set_node(name, node_product_of(raw_node))
            self._price_again(name, before)

    def delete_node(self, name: str) -> None:
        with self.admission_lock:
            before = (self._products.product_of(name), self._products.model_keys)
            self._products.forget_node(name)
            self._price_again(name, before)

    def upsert_pod(self, raw_pod: Mapping[str, object]) -> None:
        metadata = metadata_of(raw_pod)
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not isinstance(namespace, str) or not isinstance(name, str):
            return
        uid = annotations_of(raw_pod).get(names.RESERVATION)
        terminal = is_terminal(raw_pod)
        # A pod behind the admission gate holds nothing (it cannot be scheduled) and its
        # annotations are not the webhook's: it counts once the webhook admits it.
        gated = not terminal and is_admission_gated(raw_pod)
        requests = () if gated or terminal else gpu_requests(raw_pod)
        pod = _GpuPod(
            namespace,
            requests,
            uid if isinstance(uid, str) and uid else None,
            bound_node_of(raw_pod),
            text(metadata.get("uid")),
        )
        key = f"{namespace}/{name}"
        named = () if terminal else named_claims(raw_pod, namespace)
        with self.admission_lock:
            if gated:
                self._gated[key] = raw_pod
            else:
                self._gated.pop(key, None)
            self._dra.set_pod_claims(key, named, live=not terminal)
            self._keep_gpu_pod(key, pod)
            changed = self._charge(key, pod)
            touched = self._price_claims(self._dra.owned_by(key) + named)
            if changed or touched:
                self._changed(*(p.name for p in self._tenancy.selecting(namespace)))

    def _charge(self, key: str, pod: _GpuPod) -> bool:
        """Charge ``pod`` as priced now; whether its charge changed."""
        usage = usage_of(dict(pod.requests), self._models_for(pod.node)) if pod.requests else ZERO
        # The annotation is trusted only on a pod that asks for a GPU: every such pod went
        # through this webhook, which wrote the annotation itself (a tenant's own value is
        # overwritten); a pod without a GPU never reaches the webhook, so its annotation
        # may be forged and settles nothing. A charge also needs its own namespace.
        reservation = pod.reservation if not usage.is_zero else None
        now = self.clock.monotonic_s()
        if usage.is_zero:
            return self._usage.forget_pod(key, now_s=now) is not None
        self._tenancy.touch_namespace(pod.namespace)
        return self._usage.set_pod(key, PodCharge(pod.namespace, usage, reservation), now_s=now)

    def _keep_gpu_pod(self, key: str, pod: _GpuPod | None) -> None:
        """Remember (or, with None or no GPU request, forget) what ``key`` is priced from."""
        old = self._gpu_pods.pop(key, None)
        if old is not None and old.node is not None:
            keys = self._pods_on.get(old.node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._pods_on[old.node]
        if pod is None or not pod.requests:
            return
        self._gpu_pods[key] = pod
        if pod.node is not None:
            self._pods_on.setdefault(pod.node, set()).add(key)

    def _price_again(self, node: str, before: tuple[str | None, tuple[str, ...]]) -> None:
        """After ``node`` changed: price again the pods bound to it when its product changed,
        and every pod priced on the cluster's models when the cluster's models changed."""
        product, model_keys = before
        keys: set[str] = set()
        if self._products.product_of(node) != product:
            keys |= self._pods_on.get(node, set())
        if self._products.model_keys != model_keys:
            keys |= {
                key
                for key, pod in self._gpu_pods.items()
                if pod.node is None or self._products.product_of(pod.node) is None
            }
        touched: set[str] = set()
        for key in sorted(keys):
            pod = self._gpu_pods[key]
            if self._charge(key, pod):
                touched.update(p.name for p in self._tenancy.selecting(pod.namespace))
        claims: set[str] = set()
        if self._products.product_of(node) != product:
            claims |= self._claims_on.get(node, set())
        if self._products.model_keys != model_keys:
            claims |= {
                key
                for key, record in self._dra.claims.items()
                if record.node is None or self._products.product_of(record.node) is None
            }
        for key in sorted(claims):
            if self._price_claims((key,)):
                touched.update(
                    p.name for p in self._tenancy.selecting(self._dra.claims[key].namespace)
                )
        if touched:
            self._changed(*sorted(touched))

    def delete_pod(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        with self.admission_lock:
            now = self.clock.monotonic_s()
            self._gated.pop(key, None)
            self._dra.set_pod_claims(key, ())
            self._keep_gpu_pod(key, None)
            forgot = self._usage.forget_pod(key, now_s=now) is not None
            touched = self._price_claims(self._dra.owned_by(key))
            if forgot:
                self._usage.forget_seen_before(now - SEEN_KEEP_S)
            if forgot or touched:
                self._changed(*(p.name for p in self._tenancy.selecting(namespace)))

    # -- DRA objects ---------------------------------------------------------------------------

    def upsert_claim(self, raw_claim: Mapping[str, object]) -> None:
        record = claim_record(raw_claim)
        if record is None:
            return
        with self.admission_lock:
            old = self._dra.claims.get(record.key)
            if old is not None and old.node is not None:
                self._unindex_claim(old.key, old.node)
            touched = self._dra.put_claim(record)
            if record.node is not None:
                self._claims_on.setdefault(record.node, set()).add(record.key)
            if self._price_claims(touched):
                self._changed(*(p.name for p in self._tenancy.selecting(record.namespace)))

    def delete_claim(self, key: str) -> None:
        with self.admission_lock:
            old = self._dra.claims.get(key)
            if old is None:
                return
            if old.node is not None:
                self._unindex_claim(key, old.node)
            touched = self._dra.forget_claim(key)
            now = self.clock.monotonic_s()
            forgot = self._usage.forget_pod(_claim_key(key), now_s=now) is not None
            if self._price_claims(touched) or forgot:
                self._changed(*(p.name for p in self._tenancy.selecting(old.namespace)))

    def upsert_device_class(self, raw_class: Mapping[str, object]) -> None:
        facts = device_class_facts_from_raw(raw_class)
        if facts is None:
            return
        with self.admission_lock:
            if self._dra.put_class(facts):
                self._price_every_claim()

    def delete_device_class(self, name: str) -> None:
        with self.admission_lock:
            if self._dra.forget_class(name):
                self._price_every_claim()

    def upsert_slice(self, slim_slice: Mapping[str, object]) -> None:
        name, node = text(slim_slice.get("name")), text(slim_slice.get("node"))
        if not name or not node:
            return
        products = frozenset(str(p) for p in items(slim_slice.get("products")))
        published = frozenset(str(p) for p in items(slim_slice.get("names")))
        with self.admission_lock:
            self._forget_names(name)
            self._slice_names[name] = published
            self._product_names.update(published)
            old = self._slice_nodes.get(name)
            if old is not None and old != node:
                self._set_products(old, lambda: self._products.forget_slice(old, name))
            self._slice_nodes[name] = node
            self._set_products(node, lambda: self._products.set_slice(node, name, products))

    def delete_slice(self, name: str) -> None:
        with self.admission_lock:
            self._forget_names(name)
            node = self._slice_nodes.pop(name, None)
            if node is not None:
                self._set_products(node, lambda: self._products.forget_slice(node, name))

    def upsert_template(self, raw_template: Mapping[str, object]) -> None:
        metadata = mapping(raw_template.get("metadata"))
        namespace, name = text(metadata.get("namespace")), text(metadata.get("name"))
        if namespace and name:
            with self.admission_lock:
                self._dra.put_template(f"{namespace}/{name}", slim_template(raw_template))

    def delete_template(self, key: str) -> None:
        with self.admission_lock:
            self._dra.forget_template(key)

    def _forget_names(self, slice_name: str) -> None:
        self._product_names.subtract(self._slice_names.pop(slice_name, frozenset()))
        self._product_names = +self._product_names

    def _set_products(self, node: str, change: Callable[[], None]) -> None:
        before = (self._products.product_of(node), self._products.model_keys)
        change()
        self._price_again(node, before)

    def _unindex_claim(self, key: str, node: str) -> None:
        keys = self._claims_on.get(node)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._claims_on[node]

    def _paid_claim(self, pod_key: str) -> str | None:
        """The extended-resource claim the live GPU pod ``pod_key`` pays for, if any: of the
        claims it controls and does not name, the first by name whose asks its requests
        cover."""
        pod = self._gpu_pods.get(pod_key)
        if pod is None:
            return None
        owned = []
        named = self._dra.named_by(pod_key)
        for key in self._dra.owned_by(pod_key):
            if key in named:
                continue  # kube-scheduler's claim is never in its pod's spec.resourceClaims
            record = self._dra.claims[key]
            if record.owner is not None:
                owned.append((key, record.owner[1], self._dra.asks_of(record)))
        return paid_claim(dict(pod.requests), pod.uid, owned)

    def _price_claims(self, keys: Sequence[str]) -> bool:
        """Price the claims ``keys`` again; whether any charge changed."""
        changed = False
        for key in keys:
            record = self._dra.claims.get(key)
            if record is None:
                continue
            asks = self._dra.asks_of(record)
            paid = is_paid_by_owner(
                record.facts, record.owner, self._dra.users(key), self._paid_claim
            )
            usage = ZERO if paid else claim_usage(asks, self._models_for(record.node))
            now = self.clock.monotonic_s()
            if usage.is_zero:
                changed |= self._usage.forget_pod(_claim_key(key), now_s=now) is not None
                continue
            self._tenancy.touch_namespace(record.namespace)
            charge = PodCharge(record.namespace, usage, record.reservation)
            changed |= self._usage.set_pod(_claim_key(key), charge, now_s=now)
        return changed

    def _price_every_claim(self) -> None:
        namespaces = {r.namespace for r in self._dra.claims.values()}
        if self._price_claims(tuple(self._dra.claims)):
            touched = {p.name for ns in namespaces for p in self._tenancy.selecting(ns)}
            self._changed(*sorted(touched))

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
        for raw in objects.device_classes:
            self.upsert_device_class(raw)
        for raw in objects.resource_claims:
            self.upsert_claim(raw)
        for raw in objects.resource_slices:
            slim = slim_slice(raw)
            if slim is not None:
                self.upsert_slice(slim)
        for raw in objects.others:
            if raw.get("kind") == "ResourceClaimTemplate":
                self.upsert_template(raw)

    # -- internals -------------------------------------------------------------------------

    def _models_for(self, node: str | None) -> tuple[str, ...]:
        """The GPU model keys a pod's slices are priced on: those of its node (``node``,
        where it is bound) when the node is known, else the cluster's."""
        product = self._products.product_of(node) if node is not None else None
        return pricing_models(product, self._products.model_keys)


def _claim_key(key: str) -> str:
    """The usage book's key of claim ``namespace/name`` (pods are keyed ``namespace/name``)."""
    return f"claim:{key}"


def _generation(raw_policy: Mapping[str, object]) -> int:
    metadata = raw_policy.get("metadata")
    generation = metadata.get("generation") if isinstance(metadata, Mapping) else None
    return generation if isinstance(generation, int) and not isinstance(generation, bool) else 0
