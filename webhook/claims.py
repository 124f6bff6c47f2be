"""The DRA objects the webhook keeps: DeviceClasses, the ResourceClaims of every namespace (what
each asks, its reservation, its allocation's node, the pod that controls it), which live pods
name which claims, and ResourceClaimTemplates. Claims are priced by the state
(``webhook.state``), which owns the usage; this keeps the facts and the indexes.

A claim kube-scheduler made for a pod's extended resources (KEP-5004: annotation
``resource.kubernetes.io/extended-resource-claim: "true"``, controlled by the pod) is paid for
by that pod, which is charged for those resources, when the pod is live, its uid is the one
the claim names, and its GPU requests include what the claim asks: of the claims one pod
controls, the first by name that it covers (kube-scheduler makes one per pod).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migslice import names
from migslice.admission.claims import controlling_pod
from migslice.admission.paid_claims import claim_users
from migslice.admission.usage import ClaimAsk, claim_asks
from migslice.admission.view import TemplateFacts
from migslice.objects.claim_templates import migslice_template_profile, template_claim_spec
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.json import JsonObject, mapping, text
from migslice.objects.resource_claims import ClaimFacts, claim_facts_from_raw, gpu_asks


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    """One claim as cached: its facts, reservation (the admission uid the webhook wrote),
    the (name, uid) of the pod controlling it, the node of its allocation."""

    namespace: str
    facts: ClaimFacts
    reservation: str | None
    owner: tuple[str, str] | None
    node: str | None

    @property
    def key(self) -> str:
        return self.facts.key


def claim_record(raw_claim: JsonObject) -> ClaimRecord | None:
    facts = claim_facts_from_raw(raw_claim)
    if facts is None:
        return None
    metadata = mapping(raw_claim.get("metadata"))
    reservation = text(mapping(metadata.get("annotations")).get(names.RESERVATION))
    node = facts.devices[0][0] if facts.devices else None
    namespace = facts.key.partition("/")[0]
    return ClaimRecord(namespace, facts, reservation or None, controlling_pod(metadata), node)


def template_facts(
    raw_template: JsonObject, classes: Mapping[str, DeviceClassFacts]
) -> TemplateFacts:
    """Whether a template's claims ask for NVIDIA GPUs, and whether it is migslice's."""
    metadata = mapping(raw_template.get("metadata"))
    raw_claim = {
        "metadata": {"name": metadata.get("name") or "-", "namespace": metadata.get("namespace")},
        "spec": template_claim_spec(raw_template),
    }
    facts = claim_facts_from_raw(raw_claim)
    read = gpu_asks(facts, classes) if facts is not None else None
    asks_gpu = read is not None and bool(read.asks or read.unread)
    instances = sum(a.count for a in read.asks) if read is not None else 0
    return TemplateFacts(asks_gpu, migslice_template_profile(raw_template), instances)


class ClaimBook:
    """Claims, classes, templates and which pods name which claims (see the module
    docstring). Not thread-safe: the state holds its lock around every call."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClassFacts] = {}
        self.claims: dict[str, ClaimRecord] = {}
        self._templates: dict[str, JsonObject] = {}
        self._owned: dict[str, set[str]] = {}  # pod key -> extended-resource claims it controls
        self._named: dict[str, set[str]] = {}  # namespace/claim -> pods naming it
        self._names_of: dict[str, tuple[str, ...]] = {}  # pod key -> the claim keys it names
        self._live: set[str] = set()  # every live (non-terminal) pod, by key

    # -- claims ---------------------------------------------------------------------------

    def put_claim(self, record: ClaimRecord) -> tuple[str, ...]:
        """Keep ``record``; the keys of the claims whose price may have changed."""
        old = self.claims.get(record.key)
        touched = self._unlink(old) if old is not None else set()
        self.claims[record.key] = record
        if record.facts.extended_resource and record.owner is not None:
            owner = f"{record.namespace}/{record.owner[0]}"
            self._owned.setdefault(owner, set()).add(record.key)
            touched |= self._owned[owner]
        return tuple(sorted(touched | {record.key}))

    def forget_claim(self, key: str) -> tuple[str, ...]:
        old = self.claims.pop(key, None)
        return tuple(sorted(self._unlink(old))) if old is not None else ()

    def _unlink(self, record: ClaimRecord) -> set[str]:
        if not (record.facts.extended_resource and record.owner is not None):
            return set()
        owner = f"{record.namespace}/{record.owner[0]}"
        owned = self._owned.get(owner, set())
        owned.discard(record.key)
        if not owned:
            self._owned.pop(owner, None)
        return set(owned)

    def owned_by(self, pod_key: str) -> tuple[str, ...]:
        return tuple(sorted(self._owned.get(pod_key, ())))

    def named_by(self, pod_key: str) -> tuple[str, ...]:
        """The claims the live pod ``pod_key`` names by ``resourceClaimName``."""
        return self._names_of.get(pod_key, ())

    def asks_of(self, record: ClaimRecord) -> tuple[ClaimAsk, ...]:
        return claim_asks(gpu_asks(record.facts, self.classes).asks)

    def asks_gpu(self, key: str) -> bool | None:
        record = self.claims.get(key)
        if record is None:
            return None
        read = gpu_asks(record.facts, self.classes)
        return bool(read.asks or read.unread)

    def instances(self, key: str) -> int:
        record = self.claims.get(key)
        if record is None:
            return 0
        return sum(ask.count for ask in gpu_asks(record.facts, self.classes).asks)

    # -- pods naming claims ---------------------------------------------------------------

    def set_pod_claims(
        self, pod_key: str, claim_keys: Iterable[str], *, live: bool = False
    ) -> None:
        """The claims a live pod names by ``resourceClaimName`` (none: forget the pod);
        ``live``: the pod is live whatever it names (it may use a claim made from a template
        or for its extended resources, which reservedFor or the claim's owner names)."""
        if live:
            self._live.add(pod_key)
        else:
            self._live.discard(pod_key)
        for key in self._names_of.pop(pod_key, ()):
            named = self._named.get(key, set())
            named.discard(pod_key)
            if not named:
                self._named.pop(key, None)
        keys = tuple(claim_keys)
        if keys:
            self._names_of[pod_key] = keys
            for key in keys:
                self._named.setdefault(key, set()).add(pod_key)

    def users(self, claim_key: str) -> tuple[str, ...]:
        """The pods (names) that name the claim, or that it is reserved for and that name it."""
        naming = self._named.get(claim_key, ())
        record = self.claims.get(claim_key)
        if record is None:
            return tuple(sorted({p.partition("/")[2] for p in naming}))
        return claim_users(record.facts, naming, self._is_live)

    def _is_live(self, pod_key: str) -> bool:
        return pod_key in self._names_of or pod_key in self._live

    # -- classes and templates --------------------------------------------------------------

    def put_class(self, facts: DeviceClassFacts) -> bool:
        changed = self.classes.get(facts.name) != facts
        self.classes[facts.name] = facts
        return changed

    def forget_class(self, name: str) -> bool:
        return self.classes.pop(name, None) is not None

    def put_template(self, key: str, raw_template: JsonObject) -> None:
        self._templates[key] = raw_template

    def forget_template(self, key: str) -> None:
        self._templates.pop(key, None)

    def template(self, key: str) -> TemplateFacts | None:
        """The template as admission reads it now (its claims read with today's classes)."""
        raw = self._templates.get(key)
        return None if raw is None else template_facts(raw, self.classes)
