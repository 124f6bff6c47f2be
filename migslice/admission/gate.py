"""The admission gate: GPU pods that a fail-open namespace created while the webhook could not
be called, decided once it is back (docs/outages.md).

Such a pod carries the scheduling gate ``migslice.io/admission`` (a MutatingAdmissionPolicy
adds it in kube-apiserver, before the webhooks run; the webhook removes it as it admits, so a
pod still gated was never admitted). It holds nothing, so it is not counted, and it is decided
later with the same :func:`~migslice.admission.decide` and charged in the same ledger as any
admission, under a request uid of its own (:func:`admission_uid`), then un-gated with the
webhook's patch applied to the stored pod::

    for pod in queue(state.gated_pods()):           # oldest first
        refusal = in_place_refusal(pod)             # sized pods cannot be admitted in place
        decision = keeper.admit(pod.admission, dry_run=False)
        ops = ungate_patch(pod, decision)           # JSON Patch for the stored pod
        note = note_of(decision)                    # the Event and pod condition

Pure: values in, values out; the reconciler that runs this is ``webhook.gate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice import names
from migslice.admission.decision import AdmissionDecision, Denial, PodAdmission
from migslice.admission.intent import read_intent
from migslice.admission.patch import PatchOp, remove_scheduling_gate
from migslice.objects.json import mapping, text
from migslice.objects.pods import is_admission_gated, metadata_of

ADMISSION_UID_PREFIX = "gate-"
IMMUTABLE_PREFIXES = ("/spec/schedulerName",)
"""Paths of the webhook's patch that a stored pod cannot take: ``spec.schedulerName`` is
immutable (the MutatingAdmissionPolicy already set migslice-scheduler, so the webhook's op is
absent; where it is not, the pod keeps its scheduler, which places it by kube-scheduler's own
counts). A pod whose GPU resource the webhook would set never gets this far
(:func:`in_place_refusal`)."""
NEW_TERM = (
    "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms/-"
)
"""The path of a node selector term appended to those a pod has (the twin of each, for nodes
without GPU Feature Discovery's product label): a gated pod's non-empty terms may gain
expressions, never a term more (kube-apiserver's ``validateNodeAffinityMutation``), so such a
pod admitted in place runs only where the product label allows it."""
WAITING = frozenset({"quota", "ledger-fenced"})
"""Denials that pass by themselves (usage falls, a fence ends): the pod waits."""
UNSIZED = "created-unsized"

ADMITTED = "Admitted"
WAITING_REASON = "AdmissionWaiting"
DENIED_REASON = "AdmissionDenied"
SKIPPED_REASON = "AdmissionSkipped"
"""A gated pod whose namespace migslice no longer admits: its gate removed, nothing else."""


def admission_uid(pod_uid: str) -> str:
    """The request uid a gated pod is admitted under: one per pod, so that deciding it again
    (a conflict, a new leader, a stale cache) replaces its own charge, never adds one."""
    return ADMISSION_UID_PREFIX + pod_uid


@dataclass(frozen=True, slots=True)
class GatedPod:
    """A pod behind the admission gate, as the webhook's pod cache last saw it."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    created: str
    raw_pod: Mapping[str, object]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def admission(self) -> PodAdmission:
        return PodAdmission(self.namespace, self.raw_pod, admission_uid(self.uid))


def gated_pod(raw_pod: Mapping[str, object]) -> GatedPod | None:
    """The gated pod, or None when ``raw_pod`` is not gated or lacks what a stored pod has
    (namespace, name, uid, resourceVersion)."""
    if not is_admission_gated(raw_pod):
        return None
    metadata = metadata_of(raw_pod)
    fields = [metadata.get(k) for k in ("namespace", "name", "uid", "resourceVersion")]
    if not all(isinstance(value, str) and value for value in fields):
        return None
    namespace, name, uid, version = (str(value) for value in fields)
    created = metadata.get("creationTimestamp")
    return GatedPod(
        namespace, name, uid, version, created if isinstance(created, str) else "", raw_pod
    )


def queue(raw_pods: Iterable[Mapping[str, object]]) -> list[GatedPod]:
    """The gated pods, oldest first (creation time, then namespace and name)."""
    found = [pod for pod in (gated_pod(raw) for raw in raw_pods) if pod is not None]
    return sorted(found, key=lambda pod: (pod.created, pod.namespace, pod.name))


def in_place_refusal(pod: GatedPod) -> Denial | None:
    """Why the pod cannot be admitted as it is stored, or None. A pod that asks by size
    (``migslice.io/gpu-size``, ``gpu-memory``, ...) needs the webhook to write its GPU
    resource, and a stored pod's resources are immutable; the ValidatingAdmissionPolicy
    ``migslice-admission-unavailable`` refuses such pods at creation, so one is found here
    only where that policy was missing. ``MalformedPodError`` for an object no Pod."""
    intent = read_intent(pod.raw_pod)
    if not intent.annotations:
        return None
    asked = ", ".join(f"{key}: {value}" for key, value in intent.annotations)
    return Denial(
        UNSIZED,
        f"pod {pod.key} was created while the migslice webhook was unavailable and asks by "
        f"annotation ({asked}), which only the webhook turns into a GPU request, and a pod's "
        "resources cannot change once it is stored; it holds no GPU and never will: delete it "
        "and create it again",
        422,
    )


def opt_out(
    namespace: str, excluded: frozenset[str], labels: Mapping[str, str] | None
) -> str | None:
    """Why migslice does not admit the pods of ``namespace`` (as its webhook configurations'
    ``namespaceSelector`` and ``--exclude-namespaces`` say), or None where it does.
    ``labels``: the namespace's, None where it is not known (admitted: the safe side)."""
    if namespace in excluded:
        return (
            f"namespace {namespace} is excluded from migslice (the webhook's "
            "--exclude-namespaces, the chart's webhook.excludeNamespaces)"
        )
    if labels is not None and labels.get(names.ADMISSION_LABEL) == names.ADMISSION_DISABLED:
        return (
            f"namespace {namespace} is labelled "
            f"{names.ADMISSION_LABEL}={names.ADMISSION_DISABLED} (opted out of migslice)"
        )
    return None


def release_patch(pod: GatedPod) -> tuple[PatchOp, ...]:
    """The JSON Patch that lets a gated pod of a namespace migslice no longer admits go as it
    is stored: the gate removed and nothing else, guarded by its resourceVersion."""
    ops = [PatchOp("test", "/metadata/resourceVersion", pod.resource_version)]
    return tuple(ops + list(remove_scheduling_gate(pod.raw_pod, names.ADMISSION_GATE)))


def skipped_note(pod: GatedPod, why: str) -> GateNote:
    """What is told about a pod :func:`release_patch` lets go (``why``: :func:`opt_out`)."""
    message = (
        f"{why}; pod {pod.key}, gated ({names.ADMISSION_GATE}) while its namespace was "
        "fail-open, is not admitted: its gate is removed and the pod goes to its scheduler as "
        "it is, unchanged and charged to no tenant, as the webhook would let it be created now"
    )
    return GateNote(False, SKIPPED_REASON, message, warning=True)


def ungate_patch(pod: GatedPod, decision: AdmissionDecision) -> tuple[PatchOp, ...]:
    """The JSON Patch that admits ``pod`` as stored: the webhook's own patch for it (output
    annotations with the reservation, node affinity, the policy's node selector; a gated pod
    may gain these) less what a stored pod cannot change (its scheduler, a node selector term
    more: :data:`NEW_TERM`), the gate removed, all guarded by
    the resourceVersion it was decided on (kube-apiserver answers 422 when the pod changed
    since)."""
    ops = [PatchOp("test", "/metadata/resourceVersion", pod.resource_version)]
    ops += [
        op
        for op in decision.patch
        if not op.path.startswith(IMMUTABLE_PREFIXES) and op.path != NEW_TERM
    ]
    if not any(op.path.startswith("/spec/schedulingGates/") for op in ops):
        ops += remove_scheduling_gate(pod.raw_pod, names.ADMISSION_GATE)
    return tuple(ops)


@dataclass(frozen=True, slots=True)
class GateNote:
    """What the reconciler tells about a pod: the Event (reason, ``warning``) and the pod
    condition ``migslice.io/Admitted`` (True once admitted, False with the same reason and
    message while it waits or is denied)."""

    admitted: bool
    reason: str
    message: str
    warning: bool

    @property
    def waiting(self) -> bool:
        return not self.admitted and self.reason == WAITING_REASON


def note_of(pod: GatedPod, decision: AdmissionDecision) -> GateNote:
    if decision.allowed:
        who = f' as tenant "{decision.tenant}"' if decision.tenant else ""
        return GateNote(
            True,
            ADMITTED,
            f"pod {pod.key} admitted{who} by the migslice webhook after it was created "
            "while the webhook was unavailable; scheduling gate migslice.io/admission removed",
            warning=False,
        )
    if decision.reason in WAITING:
        message = (
            f"{decision.message}; pod {pod.key} stays gated (migslice.io/admission) and is "
            "decided again, oldest first, as the tenant's usage falls"
        )
        return GateNote(False, WAITING_REASON, message, warning=True)
    message = (
        f"{decision.message}; pod {pod.key} stays gated (migslice.io/admission) and is decided "
        "again when policies change"
    )
    return GateNote(False, DENIED_REASON, message, warning=True)


def admitted_condition(
    note: GateNote, now: str, raw_pod: Mapping[str, object] | None = None
) -> dict[str, str]:
    """The pod condition for ``note`` (``now``: an RFC 3339 stamp), as a strategic merge
    patch of ``status.conditions`` carries it (merged by ``type``). Its
    ``lastTransitionTime`` is the one ``raw_pod`` holds while the status stays the same (the
    API conventions: it moves when the status does, not with the reason or message)."""
    status = "True" if note.admitted else "False"
    since = now
    conditions = mapping(raw_pod.get("status")).get("conditions") if raw_pod else None
    for raw in conditions if isinstance(conditions, list) else ():
        held = mapping(raw)
        if held.get("type") == names.ADMITTED_CONDITION and held.get("status") == status:
            since = text(held.get("lastTransitionTime")) or now
    return {
        "type": names.ADMITTED_CONDITION,
        "status": status,
        "reason": note.reason,
        "message": note.message[:1024],
        "lastTransitionTime": since,
    }
