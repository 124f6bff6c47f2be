"""The gate reconciler: a thread in every webhook process, active only as the leader of a
Lease, that admits the GPU pods fail-open namespaces created behind the admission gate while
the webhook could not be called (``migslice.admission.gate``, docs/outages.md).

Each round (every ``interval_s``): renew the Lease (followers stop here; a leader asks again
before each pod, and ends its round once past its renew deadline); while the caches are
blind, do nothing; then, oldest first, decide each gated pod with the same ``decide()`` and
charge it through the same :class:`~webhook.quota.QuotaKeeper` as an admission (the ledger's
compare-and-swap keeps it exact beside every replica's admissions, and beside a second leader
for the moment two may overlap: a pod's charge has one uid, so deciding it twice replaces
it), then remove the gate with the webhook's patch, guarded by the resourceVersion decided on.
A pod the policy refuses stays gated: a Warning Event and the pod condition
``migslice.io/Admitted=False`` say why, with the numbers: the condition once per change of
the message, the Event once per change of reason and at most every ``EVENT_REPEAT_S`` for a
message alone (the tenant's usage moves every waiting pod's), and it is decided again every
round. A gated pod of a namespace migslice no longer admits
(added to ``--exclude-namespaces``, or labelled ``migslice.io/admission=disabled``, after it was
gated) is let go as it is: the gate removed and nothing else, nothing charged, as the webhook
would let it be created now, with an Event and the condition saying so; a label is read again
from kube-apiserver first, so a cache that lags an admin who took it off lets nothing run
past quota. At most ``batch`` pods are admitted or let go per round.

Ports: :class:`GateApi` (``migslice.kube.pod_gate.KubeGateApi`` in a cluster) and
:class:`Elector` (``migslice.kube.LeaderElector``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from migslice import names
from migslice.admission import AdmissionDecision, MalformedPodError, decide
from migslice.admission.gate import (
    SKIPPED_REASON,
    GatedPod,
    GateNote,
    admitted_condition,
    in_place_refusal,
    note_of,
    opt_out,
    queue,
    release_patch,
    skipped_note,
    ungate_patch,
)
from migslice.admission.patch import JsonValue
from migslice.kube.transport import ApiError
from migslice.objects.times import format_time
from webhook.quota import QuotaKeeper, UnavailableError
from webhook.settings import GateSettings

log = logging.getLogger(__name__)

EVENT_REPEAT_S = 300.0
"""Least time between two Events of one waiting pod with the same reason (client-go's event
spam filter lets one through per 5 minutes per object once its burst is spent)."""


class GateApi(Protocol):
    def patch_pod(
        self, namespace: str, name: str, patch: Sequence[Mapping[str, JsonValue]]
    ) -> bool:
        """Apply a JSON Patch to the pod; False when it changed or is gone (422, 409, 404)."""
        ...

    def set_condition(self, namespace: str, name: str, condition: Mapping[str, str]) -> None:
        """Merge ``condition`` into the pod's ``status.conditions`` (failures are logged)."""
        ...

    def record_event(self, pod: GatedPod, note: GateNote) -> None:
        """An Event about the pod (failures are logged)."""
        ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels as kube-apiserver holds them now; None when it is gone."""
        ...


class Elector(Protocol):
    def try_acquire_or_renew(self) -> bool: ...

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now (false from its renew deadline on)."""
        ...

    def release(self) -> None: ...


@dataclass
class GateStats:
    is_leader: bool = False
    admitted: int = 0
    released: int = 0
    """Gated pods let go unadmitted: their namespace was taken out of migslice."""
    errors: int = 0
    waiting: dict[str, str] = field(default_factory=dict)
    """Gated pods by key, with why they wait, as of the leader's last round."""


class GateReconciler:
    """Rounds of the gate; :meth:`run_once` is one round (tests call it directly)."""

    def __init__(
        self,
        quota: QuotaKeeper,
        api: GateApi,
        elector: Elector,
        settings: GateSettings | None = None,
        *,
        exclude_namespaces: frozenset[str] = frozenset(),
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._quota = quota
        self._state = quota.state
        self._api = api
        self._elector = elector
        self.settings = settings or GateSettings()
        self._exclude = exclude_namespaces
        self._clock = clock  # wall: the stamps of conditions
        self._monotonic = monotonic  # waits: a step of the wall clock must not stretch them
        self.stats = GateStats()
        self._said: dict[str, str] = {}  # pod uid -> the message last told
        self._evented: dict[str, tuple[str, float]] = {}  # pod uid -> last Event's reason, when
        self._refused_until: dict[str, float] = {}  # pod uid -> when to try its un-gate again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="admission-gate", daemon=True)
            self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._elector.release()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # the loop must outlive any one failure
                self.stats.errors += 1
                log.exception(
                    "admission gate round failed; retrying in %.0fs", self.settings.interval_s
                )
            self._stop.wait(self.settings.interval_s)

    # -- one round ----------------------------------------------------------------------------

    def run_once(self) -> dict[str, GateNote]:
        """One round; what it concluded per pod key (empty for a follower or a blind cache)."""
        leader = self._elector.try_acquire_or_renew()
        self.stats.is_leader = leader
        if not leader:
            self._said.clear()  # a new leader tells again
            self._evented.clear()
            self.stats.waiting = {}
            return {}
        problems = self._state.blindness(self._quota.max_blind_s)
        if problems:
            log.info("Admission gate waits for the caches: %s", "; ".join(problems))
            return {}
        pods = queue(self._state.gated_pods())
        notes: dict[str, GateNote] = {}
        waiting_tenants: set[str] = set()
        admitted = 0
        now = self._monotonic()
        for pod in pods:
            if admitted >= self.settings.batch:
                break
            if not self._elector.is_leader:
                log.warning(
                    "Admission gate stops its round: not leading any more (the Lease was not "
                    "renewed within its renew deadline of %gs)",
                    self.settings.lease_renew_deadline_s,
                )
                break
            if self._refused_until.get(pod.uid, 0.0) > now:
                continue  # its charge lapses meanwhile: a refused pod holds no quota for good
            why = opt_out(pod.namespace, self._exclude, self._state.namespace_labels(pod.namespace))
            if why is not None:
                try:
                    released = self._release(pod, why)
                except ApiError as error:
                    if 400 <= error.status < 500 and error.status != 429:
                        self._refused(pod, error)
                        continue
                    log.warning("Admission gate cannot let pods go now (%s); next round", error)
                    break
                if released is not None:
                    notes[pod.key] = released
                    admitted += 1
                continue
            try:
                decision = self._decision(pod, waiting_tenants)
            except UnavailableError as error:
                log.warning("Admission gate cannot decide now (%s); next round", error)
                break
            except MalformedPodError as error:
                log.warning("Admission gate skips pod=%s: %s", pod.key, error)
                continue
            if decision is None:
                continue
            note = note_of(pod, decision)
            if decision.allowed:
                try:
                    if not self._admit(pod, decision, note):
                        continue
                except ApiError as error:
                    if 400 <= error.status < 500 and error.status != 429:
                        self._refused(pod, error)  # this pod's patch is refused: the next go on
                        continue
                    log.warning("Admission gate cannot un-gate pods now (%s); next round", error)
                    break
                admitted += 1
            else:
                if decision.reason == "quota" and decision.tenant:
                    waiting_tenants.add(decision.tenant)
                self._tell(pod, note)
            notes[pod.key] = note
        gated = {pod.uid for pod in pods}
        self._said = {uid: said for uid, said in self._said.items() if uid in gated}
        self._evented = {uid: e for uid, e in self._evented.items() if uid in gated}
        self._refused_until = {u: t for u, t in self._refused_until.items() if u in gated}
        self.stats.waiting = {
            key: n.message
            for key, n in notes.items()
            if not n.admitted and n.reason != SKIPPED_REASON
        }
        return notes

    def _release(self, pod: GatedPod, why: str) -> GateNote | None:
        """Let ``pod`` go as it is (its namespace is out of migslice: ``why``), or None when
        kube-apiserver does not confirm the opt-out or the pod changed; decided next round."""
        if pod.namespace not in self._exclude:
            labels = self._api.namespace_labels(pod.namespace)
            if labels is None or opt_out(pod.namespace, self._exclude, labels) is None:
                log.info(
                    "Admission gate: namespace %s is not opted out as kube-apiserver holds it "
                    "(the cache lags); pod=%s is decided next round",
                    pod.namespace,
                    pod.key,
                )
                return None
        patch = [op.to_json() for op in release_patch(pod)]
        if not self._api.patch_pod(pod.namespace, pod.name, patch):
            return None
        self.stats.released += 1
        note = skipped_note(pod, why)
        log.info("Released gated pod=%s unadmitted: %s", pod.key, why)
        self._api.set_condition(
            pod.namespace, pod.name, admitted_condition(note, self._now(), pod.raw_pod)
        )
        self._api.record_event(pod, note)
        self._said.pop(pod.uid, None)
        return note

    def _decision(self, pod: GatedPod, waiting_tenants: set[str]) -> AdmissionDecision | None:
        """The pod's decision, charged in its tenant's ledger when allowed. A tenant that
        already waits for quota in this round is decided on the caches alone (a smaller pod
        may still fit; a larger one waits without another read of the ledger)."""
        refusal = in_place_refusal(pod)
        if refusal is not None:
            return AdmissionDecision.deny(refusal)
        with self._state.admission_lock:
            first = decide(pod.admission, self._state, self._quota.settings)
        if not first.allowed and first.reason == "quota" and first.tenant in waiting_tenants:
            return first
        return self._quota.admit(pod.admission, dry_run=False)

    def _admit(self, pod: GatedPod, decision: AdmissionDecision, note: GateNote) -> bool:
        patch = [op.to_json() for op in ungate_patch(pod, decision)]
        if not self._api.patch_pod(pod.namespace, pod.name, patch):
            log.info(
                "Admission gate: pod=%s changed or is gone since it was decided; "
                "deciding it again next round (its charge is replaced, or released unused)",
                pod.key,
            )
            return False
        self.stats.admitted += 1
        log.info(
            "Admitted gated pod=%s tenant=%s; gate %s removed",
            pod.key,
            decision.tenant,
            names.ADMISSION_GATE,
        )
        self._api.set_condition(
            pod.namespace, pod.name, admitted_condition(note, self._now(), pod.raw_pod)
        )
        self._api.record_event(pod, note)
        self._said.pop(pod.uid, None)
        return True

    def _refused(self, pod: GatedPod, error: ApiError) -> None:
        """The API server refused to un-gate ``pod`` (another admission policy, RBAC): said
        once per message, and not decided again for twice the charge's hold, so the charge
        its decision wrote lapses unused (deciding it each round renewed the charge: the pod
        held its tenant's quota for as long as it existed)."""
        self._refused_until[pod.uid] = self._monotonic() + 2 * self._quota.hold_s
        said = f"refused: {error}"
        if self._said.get(pod.uid) == said:
            return
        log.warning(
            "Admission gate cannot remove the gate of pod=%s (%s); the other gated pods go on, "
            "this one is tried again later",
            pod.key,
            error,
        )
        self._said[pod.uid] = said

    def _tell(self, pod: GatedPod, note: GateNote) -> None:
        """The pod's condition follows its message; an Event is told for a new reason at once,
        for a new message (the tenant's usage or limit changed) once :data:`EVENT_REPEAT_S`
        has passed since the pod's last Event."""
        if self._said.get(pod.uid) == note.message:
            return
        log.info("Gated pod=%s waits: %s", pod.key, note.message)
        now = self._monotonic()
        last = self._evented.get(pod.uid)
        if last is None or last[0] != note.reason or now - last[1] >= EVENT_REPEAT_S:
            self._api.record_event(pod, note)
            self._evented[pod.uid] = (note.reason, now)
        self._api.set_condition(
            pod.namespace, pod.name, admitted_condition(note, self._now(), pod.raw_pod)
        )
        self._said[pod.uid] = note.message

    def _now(self) -> str:
        return format_time(self._clock())
