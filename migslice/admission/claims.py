"""decide_claim(ResourceClaim or ResourceClaimTemplate CREATE, cluster view) -> AdmissionDecision.

A tenant's own claims and templates meet its TenantPolicy as its pods do (docs/policy.md,
"Claims and templates"). Order of checks: what the claim asks of NVIDIA's GPUs (nothing:
allowed untouched); the tenant by namespace (as for pods); a template under one of
migslice's names that is not migslice's; isolation (a sharing config in the claim or in a
class it uses, and for ``isolation: hardware`` also ``adminAccess``, capacity requests and
``allocationMode: All``); requests migslice cannot read exactly (denied, naming the forms
it reads); then per device asked: the tier, the profile, the product; ``maxSlicesPerPod``;
and, for a claim, quota in slice units.

A claim is charged (count x the profile's slices, as pods are) with the request uid as its
reservation, which the patch writes into ``migslice.io/reservation``; its charge settles
once the webhook's claim cache holds it. A template is checked and never charged: the
claims the resourceclaim controller makes from it are, each at its CREATE. The claim that
kube-scheduler makes for a pod's extended resources served by DRA (KEP-5004) is charged
nothing when that pod, which is charged for them, covers it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from migslice import names
from migslice.admission.decide import quota_denial
from migslice.admission.decision import AdmissionDecision, AdmissionSettings, Denial
from migslice.admission.intent import pod_label
from migslice.admission.paid_claims import covers
from migslice.admission.patch import PatchOp, set_annotations
from migslice.admission.tenant import tenant_of
from migslice.admission.usage import (
    ClaimAsk,
    SliceUsage,
    claim_asks,
    claim_usage,
)
from migslice.admission.view import ClusterView
from migslice.mig import CATALOG
from migslice.mig.catalog import product_label_of
from migslice.objects.claim_templates import migslice_template_profile, template_claim_spec
from migslice.objects.device_classes import DeviceClassFacts
from migslice.objects.device_configs import MPS, TIME_SLICING, sharing_strategies
from migslice.objects.dra_selectors import read_selectors
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.resource_claims import (
    ClaimFacts,
    GpuAsk,
    claim_facts_from_raw,
    gpu_asks,
    is_nvidia_gpu,
    too_much_to_read,
)
from migslice.objects.resource_slices import DeviceKind
from migslice.policy import Isolation, TenantPolicy, Tier
from migslice.policy.resolution import usable_offers

ACCEPTED = (
    "migslice reads requests of the form exactly: {deviceClassName: migslice-mig-<profile>, "
    "mig.nvidia.com with a selector device.attributes['gpu.nvidia.com'].profile == "
    "'<profile>', or gpu.nvidia.com; allocationMode: ExactCount; count}, with selectors joined "
    "by && of equalities on profile, productName, parentUUID, uuid or pciBusID"
)
NO_GPU = AdmissionDecision(allowed=True, reason="no-gpu")
EXTENDED_RESOURCE_CLAIM = AdmissionDecision(allowed=True, reason="extended-resource-claim")
_TIER_OF_SHARING = {TIME_SLICING: Tier.SHARED, MPS: Tier.MPS}


@dataclass(frozen=True, slots=True)
class ClaimAdmission:
    """One ResourceClaim or ResourceClaimTemplate CREATE: the namespace from the request, the
    object as sent, the request uid."""

    namespace: str
    raw_object: Mapping[str, object]
    request_uid: str
    template: bool = False


@dataclass(frozen=True, slots=True)
class ClaimReading:
    """What a claim's spec asks of NVIDIA's GPUs (see :func:`read_claim`)."""

    asks: tuple[GpuAsk, ...] = ()
    unread: tuple[str, ...] = ()
    sharing: tuple[tuple[str, str], ...] = ()
    """(where it is set, strategy) of every sharing config that applies to its GPU devices."""
    exclusive: tuple[str, ...] = ()
    """What hardware isolation refuses besides sharing: adminAccess, capacity, All."""
    touches_gpu: bool = False
    unknown_only: bool = False
    """It may touch NVIDIA's GPUs only as far as migslice cannot tell: through DeviceClasses
    that do not exist (or are not seen yet), or that with its selectors name no driver; in a
    namespace no tenant owns it is left alone."""


def read_claim(
    key: str, raw_spec: JsonObject, classes: Mapping[str, DeviceClassFacts]
) -> ClaimReading:
    """What the claim spec ``raw_spec`` (a claim's ``spec``, a template's ``spec.spec``) asks
    of NVIDIA's GPUs, read with the DeviceClasses. A request whose class is unknown, or whose
    class and selectors name no driver (a catch-all or topology-only class), counts as
    touching them: it cannot be told apart."""
    namespace, _, name = key.partition("/")
    raw_claim = {"metadata": {"name": name or "-", "namespace": namespace}, "spec": raw_spec}
    facts = claim_facts_from_raw(raw_claim)
    assert facts is not None
    raw_devices = mapping(raw_spec.get("devices"))
    raw_requests = items(raw_devices.get("requests"))
    too_much = too_much_to_read(raw_devices)
    if too_much:  # not parsed: it cannot be told apart from a GPU claim (a tenant's is denied)
        return ClaimReading(unread=(too_much,), touches_gpu=True, unknown_only=True)
    asks: list[GpuAsk] = []
    unread: list[str] = []
    sharing: list[tuple[str, str]] = []
    exclusive: list[str] = []
    touches = False
    named = False
    for raw, request in zip(raw_requests, facts.requests, strict=True):
        where = f"request {request.name}"
        entry = mapping(raw)
        exactly = mapping(entry.get("exactly"))
        parts = (
            [mapping(s) for s in items(entry.get("firstAvailable"))]
            if entry.get("firstAvailable") is not None
            else [exactly]
        )
        reaches = [(p, reach) for p in parts if (reach := _reach(p, classes)) is not None]
        gpu_parts = [p for p, _ in reaches]
        if not gpu_parts:
            continue
        touches = True
        named |= any(reach is _Reach.NAMED for _, reach in reaches)
        for part in gpu_parts:
            found = classes.get(text(part.get("deviceClassName")) or "")
            if found is not None:
                sharing += [(f"DeviceClass {found.name}", s) for s in found.sharing]
            if part.get("adminAccess") is True:
                exclusive.append(f"{where}: adminAccess (devices that other claims hold)")
            if part.get("capacity") is not None:
                exclusive.append(f"{where}: a capacity request (a consumable share of a device)")
            if part.get("allocationMode", "ExactCount") == "All":
                exclusive.append(f"{where}: allocationMode All (every matching device)")
        one = ClaimFacts(key=facts.key, requests=(request,))
        read = gpu_asks(one, classes)
        asks += read.asks
        unread += [line.replace(f"ResourceClaim {facts.key} ", "") for line in read.unread]
        if not read.asks and not read.unread:
            unread.append(f"{where}: {request.unread or _not_read(reaches)}")
    configs = sharing_strategies(mapping(raw_spec.get("devices")).get("config"))
    if touches:
        sharing += [("the claim's config", s) for s in configs]
    return ClaimReading(
        tuple(asks), tuple(unread), tuple(sharing), tuple(exclusive), touches, touches and not named
    )


def _not_read(reaches: list[tuple[JsonObject, _Reach]]) -> str:
    """Why a request that reaches NVIDIA's GPUs was read as asking nothing of them."""
    for part, reach in reaches:
        if reach is _Reach.OPEN:
            return (
                f"DeviceClass {text(part.get('deviceClassName'))!r} and the request's selectors "
                "name no driver, so it may be given NVIDIA's GPU devices; name one with a "
                f"selector device.driver == '{names.DRA_DRIVER}' (or another driver's)"
            )
    return "not read as NVIDIA GPU devices"


class _Reach(Enum):
    NAMED = "its class and selectors name NVIDIA's driver"
    OPEN = "its class is not known, or it and the selectors name no driver"


def _reach(raw_request: JsonObject, classes: Mapping[str, DeviceClassFacts]) -> _Reach | None:
    """How a request may reach NVIDIA's GPU devices; None: its class and selectors name
    another driver."""
    found = classes.get(text(raw_request.get("deviceClassName")) or "")
    if found is None:
        return _Reach.OPEN
    expressions = [
        text(mapping(mapping(s).get("cel")).get("expression")) or ""
        for s in items(raw_request.get("selectors"))
    ]
    selection = found.selection.both(read_selectors(expressions))
    if is_nvidia_gpu(selection):
        return _Reach.NAMED
    return _Reach.OPEN if selection.driver is None else None


def decide_claim(
    admission: ClaimAdmission, view: ClusterView, settings: AdmissionSettings
) -> AdmissionDecision:
    """The admission decision for one claim or template CREATE (see the module docstring)."""
    raw = admission.raw_object
    what = "claim template" if admission.template else "claim"
    label = pod_label(admission.namespace, raw)
    subject = f"{what} {label}"
    spec = template_claim_spec(raw) if admission.template else mapping(raw.get("spec"))
    reading = read_claim(label, spec, view.device_classes())
    if not reading.touches_gpu:
        return NO_GPU
    if reading.unknown_only and not view.tenant_policies(admission.namespace):
        return NO_GPU
    found = tenant_of(admission.namespace, subject, "asks for NVIDIA GPUs", view, settings)
    if isinstance(found, AdmissionDecision):
        return found
    policy = found
    denial = _refusal(admission, reading, policy, view, subject)
    if denial is not None:
        return AdmissionDecision.deny(denial, tenant=policy.name)
    asks = claim_asks(reading.asks)
    models = tuple(sorted({o.model.key for o in view.offers()}))
    wanted = claim_usage(asks, models)
    if admission.template:  # each of its claims asks this: maxSlicesPerPod, never quota
        too_many = _max_slices(policy, wanted, subject)
        if too_many is not None:
            return AdmissionDecision.deny(too_many, tenant=policy.name)
        return AdmissionDecision(allowed=True, reason="admitted", tenant=policy.name)
    if _is_covered(admission, asks, view):
        return EXTENDED_RESOURCE_CLAIM
    limit = _limits(policy, wanted, view, admission.request_uid, subject)
    if limit is not None:
        return AdmissionDecision.deny(limit, tenant=policy.name)
    profiles = ",".join(dict.fromkeys(a.profile or "gpu" for a in reading.asks))
    return AdmissionDecision(
        allowed=True,
        reason="admitted",
        patch=tuple(_patch(admission, policy, profiles)),
        tenant=policy.name,
        charge=wanted,
        reservation=admission.request_uid,
    )


def _refusal(
    admission: ClaimAdmission,
    reading: ClaimReading,
    policy: TenantPolicy,
    view: ClusterView,
    subject: str,
) -> Denial | None:
    if admission.template:
        reserved = _reserved_name(admission.raw_object, subject) or _extended_mark(
            admission.raw_object, subject
        )
        if reserved is not None:
            return reserved
    isolation = _isolation(reading, policy, subject)
    if isolation is not None:
        return isolation
    unread = reading.unread  # adminAccess, capacity and All are never read, whatever the tier
    if unread:
        return Denial(
            "unread-claim",
            f"{subject}: {'; '.join(unread)}; migslice cannot read it exactly, so cannot hold "
            f'it to policy "{policy.name}"; {ACCEPTED}',
            422,
        )
    for ask in reading.asks:
        problem = _ask_problem(ask, policy, view, subject)
        if problem is not None:
            return problem
    return None


def _reserved_name(raw_template: Mapping[str, object], subject: str) -> Denial | None:
    name = text(mapping(raw_template.get("metadata")).get("name")) or ""
    if names.profile_of_device_class(name) is None:
        return None
    if migslice_template_profile(raw_template) is not None:
        return None
    return Denial(
        "reserved-name",
        f"{subject}: names {names.MIG_DEVICE_CLASS_PREFIX}<profile> are migslice's claim "
        "templates (one MIG device of migslice's class of that profile); choose another name",
        422,
    )


def _extended_mark(raw_template: Mapping[str, object], subject: str) -> Denial | None:
    """A template whose claims would carry kube-scheduler's mark of an extended-resource claim
    (which the pod's extended resources pay for): never one kube-scheduler made."""
    claim_metadata = mapping(mapping(mapping(raw_template.get("spec")).get("metadata")))
    if names.EXTENDED_RESOURCE_CLAIM_ANNOTATION not in mapping(claim_metadata.get("annotations")):
        return None
    return Denial(
        "reserved-annotation",
        f"{subject}: spec.metadata.annotations sets "
        f"{names.EXTENDED_RESOURCE_CLAIM_ANNOTATION}, which kube-scheduler sets on the claims "
        "it makes for a pod's extended resources; remove it",
        422,
    )


def _isolation(reading: ClaimReading, policy: TenantPolicy, subject: str) -> Denial | None:
    for where, strategy in reading.sharing:
        tier = _TIER_OF_SHARING.get(strategy)
        if tier is not None and policy.allows_tier(tier):
            continue
        tiers = ", ".join(t.value for t in policy.tiers)
        return Denial(
            "isolation",
            f"{subject} asks for sharing strategy {strategy} ({where}); policy "
            f'"{policy.name}" is isolation: {policy.isolation.value} with tiers {tiers} '
            "(spec.isolation, spec.tiers)"
            if policy.isolation is not Isolation.HARDWARE
            else f"{subject} asks for sharing strategy {strategy} ({where}); policy "
            f'"{policy.name}" is isolation: hardware (spec.isolation)',
        )
    if policy.isolation is Isolation.HARDWARE and reading.exclusive:
        return Denial(
            "isolation",
            f'{subject} asks for {reading.exclusive[0]}; policy "{policy.name}" is '
            "isolation: hardware (spec.isolation)",
        )
    return None


def _ask_problem(
    ask: GpuAsk, policy: TenantPolicy, view: ClusterView, subject: str
) -> Denial | None:
    problem = _policy_problem(ask, policy, subject)
    if problem is not None:
        return problem
    usable = usable_offers(policy, view.offers())
    if ask.kind == DeviceKind.GPU:
        products = {o.product for o in usable}
    else:
        products = {o.product for o in usable if o.model.has_profile(ask.profile or "")}
    shown = ask.profile or "whole GPUs"
    named = ask.selection.value(f"{names.DRA_DRIVER}/productName")
    # kube-scheduler compares the selector with the devices' productName exactly: NVML's name
    # as NVIDIA's DRA driver publishes it, not the GFD label or the catalog key
    published = sorted(n for n in view.dra_product_names() if product_label_of(n) in products)
    if named is not None:
        label = product_label_of(named)
        model = CATALOG.by_product(label)
        if model is None or not any(CATALOG.by_product(p) == model for p in products):
            allowed = ", ".join(policy.allowed_products) or "every product"
            return Denial(
                "no-model",
                f'{subject} asks for {shown} of productName "{named}"; policy '
                f'"{policy.name}" allows {allowed} (spec.allowedProducts), and the cluster\'s '
                f"products that do and offer {shown}: {', '.join(sorted(products)) or 'none'}",
            )
        spelled = [n for n in published if CATALOG.by_product(product_label_of(n)) == model]
        if spelled and named not in spelled:
            return Denial(
                "no-model",
                f'{subject} asks for {shown} of productName "{named}", a name no device '
                "carries: NVIDIA's DRA driver publishes NVML's name, and kube-scheduler "
                "compares it exactly; the cluster's devices of that model are named "
                f"{_quoted(spelled)}: device.attributes['{names.DRA_DRIVER}'].productName == "
                f"'{spelled[0]}'",
            )
        return None
    if not products:
        return Denial(
            "no-model",
            f"{subject} asks for {shown}; no GPU product in the cluster that policy "
            f'"{policy.name}" allows offers it (spec.allowedProducts)',
        )
    if policy.allowed_products:
        return Denial(
            "no-model",
            f'{subject} asks for {shown} of any product; policy "{policy.name}" allows only '
            f"{', '.join(policy.allowed_products)} (spec.allowedProducts): add a selector "
            f"device.attributes['{names.DRA_DRIVER}'].productName == '<product>' naming one"
            + (f", as NVIDIA's DRA driver names it: {_quoted(published)}" if published else ""),
        )
    return None


def _quoted(products: Sequence[str]) -> str:
    return ", ".join(f"'{p}'" for p in products)


def _profile_message(subject: str, profile: str, policy: TenantPolicy) -> str:
    if profile in policy.denied_profiles:
        return (
            f'{subject} asks for {profile}; policy "{policy.name}" denies it (spec.deniedProfiles)'
        )
    if policy.allowed_profiles:
        allowed = ", ".join(p for p in policy.allowed_profiles if p not in policy.denied_profiles)
        return f'{subject} asks for {profile}; policy "{policy.name}" allows {allowed} ' + (
            "(spec.allowedProfiles)"
        )
    return (
        f'{subject} asks for {profile}; policy "{policy.name}" allows every plain profile, '
        "and media or graphics variants only when listed (spec.allowedProfiles)"
    )


def _is_covered(admission: ClaimAdmission, asks: tuple[ClaimAsk, ...], view: ClusterView) -> bool:
    """Whether this is kube-scheduler's claim for a pod's extended resources that the pod,
    charged for them, pays for (see :func:`covers`)."""
    metadata = mapping(admission.raw_object.get("metadata"))
    annotations = mapping(metadata.get("annotations"))
    if annotations.get(names.EXTENDED_RESOURCE_CLAIM_ANNOTATION) != "true":
        return False
    owner = controlling_pod(metadata)
    if owner is None:
        return False
    name = text(metadata.get("name")) or text(metadata.get("generateName")) or ""
    if any(p != owner[0] for p in view.claim_users(admission.namespace, name)):
        return False  # named by another pod: kube-scheduler's claim is its owner's alone
    requests = view.covering_pod(admission.namespace, owner[0], owner[1], name)
    return requests is not None and covers(requests, asks)


def controlling_pod(metadata: JsonObject) -> tuple[str, str] | None:
    """(name, uid) of the Pod that controls the object, from ``metadata.ownerReferences``."""
    for raw in items(metadata.get("ownerReferences")):
        ref = mapping(raw)
        if ref.get("kind") == "Pod" and ref.get("apiVersion") == "v1" and ref.get("controller"):
            name, uid = text(ref.get("name")), text(ref.get("uid"))
            if name and uid:
                return name, uid
    return None


def _max_slices(policy: TenantPolicy, wanted: SliceUsage, subject: str) -> Denial | None:
    if policy.max_slices_per_pod is not None and wanted.instances > policy.max_slices_per_pod:
        return Denial(
            "max-slices",
            f'{subject} asks for {wanted.instances} GPU slices; policy "{policy.name}" allows '
            f"{policy.max_slices_per_pod} per pod (spec.maxSlicesPerPod)",
        )
    return None


def _limits(
    policy: TenantPolicy, wanted: SliceUsage, view: ClusterView, reservation: str, subject: str
) -> Denial | None:
    too_many = _max_slices(policy, wanted, subject)
    if too_many is not None:
        return too_many
    used = view.tenant_usage(policy.name, exclude_reservation=reservation)
    return quota_denial(policy, used, wanted, subject="claim")


def _patch(admission: ClaimAdmission, policy: TenantPolicy, profiles: str) -> list[PatchOp]:
    return set_annotations(
        admission.raw_object,
        {
            names.TENANT: policy.name,
            names.PROFILE: profiles,
            names.POLICY: policy.ref,
            names.RESERVATION: admission.request_uid,
        },
    )


def decide_claim_update(
    namespace: str, raw_old: JsonObject, raw_new: JsonObject, view: ClusterView
) -> AdmissionDecision:
    """A ResourceClaim UPDATE in a tenant's namespace may not add what makes a claim paid for
    by a pod (the extended-resource annotation, a controlling Pod) nor change its reservation:
    kube-scheduler sets the first two when it creates the claim, the webhook the third."""
    if not view.tenant_policies(namespace):
        return AdmissionDecision(allowed=True, reason="no-policy")
    old, new = mapping(raw_old.get("metadata")), mapping(raw_new.get("metadata"))
    subject = f"claim {pod_label(namespace, raw_new)}"
    old_notes, new_notes = mapping(old.get("annotations")), mapping(new.get("annotations"))
    changed = []
    key = names.EXTENDED_RESOURCE_CLAIM_ANNOTATION
    if new_notes.get(key) == "true" and old_notes.get(key) != "true":
        changed.append(f"annotation {key}")
    owner = controlling_pod(new)
    if owner is not None and owner != controlling_pod(old):
        changed.append("a controlling Pod in metadata.ownerReferences")
    reservation = new_notes.get(names.RESERVATION)
    if reservation is not None and reservation != old_notes.get(names.RESERVATION):
        changed.append(f"annotation {names.RESERVATION}")
    if not changed:
        return AdmissionDecision(allowed=True, reason="unchanged")
    return AdmissionDecision.deny(
        Denial(
            "claim-update",
            f"{subject}: an update may not set {' or '.join(changed)}: they say which pod or "
            "admission pays for the claim's devices, and are written only when the claim is "
            "created (by kube-scheduler and the webhook)",
        )
    )


def decide_claim_reservation(
    namespace: str, raw_old: JsonObject, raw_new: JsonObject, view: ClusterView
) -> AdmissionDecision:
    """kube-scheduler reserving a tenant's claim for a pod (``status.reservedFor`` grows, a
    ``resourceclaims/status`` UPDATE): the claim is held to its tenant's policy as it is now.

    * ``isolation: hardware``: one consumer at a time. The pods' own admission refuses a pod
      naming a claim another live pod uses, but only from what its caches have seen: two pods
      created together (a Deployment's batch, two replicas of the webhook) both passed, and
      kube-scheduler reserved the one device for both. kube-apiserver admits each status
      update against the claim it replaces, so of two reservations racing, one is refused.
    * The isolation, tier and profile rules: a claim created under an earlier policy (a
      TimeSlicing config before the tenant became ``hardware``, a profile since removed) serves
      no new pod. Pods already running keep their devices (only a new reservation is judged).

    A refusal leaves the pod pending: kube-scheduler's binding fails with this message (in the
    pod's events) and is retried, so the pod runs once the claim's other consumer has ended."""
    selecting = view.tenant_policies(namespace)
    added = _new_consumers(raw_old, raw_new)
    if len(selecting) != 1 or not added:
        return AdmissionDecision(allowed=True, reason="no-policy" if not selecting else "unchanged")
    policy = next(iter(selecting))
    label = pod_label(namespace, raw_new)
    subject = f"claim {label}"
    reading = read_claim(label, mapping(raw_new.get("spec")), view.device_classes())
    if not reading.touches_gpu:
        return NO_GPU
    applied = mapping(mapping(mapping(raw_new.get("status")).get("allocation")).get("devices"))
    allocated = [("its allocation's config", s) for s in sharing_strategies(applied.get("config"))]
    reading = replace(reading, sharing=reading.sharing + tuple(allocated))
    consumers = _consumers(raw_new)
    who = f"{added[0][0]} {added[0][1]}"
    if policy.isolation is Isolation.HARDWARE and len(consumers) > 1:
        # Told apart by uid: a pod made again under its name (a StatefulSet's) is a new
        # consumer while its old instance's entry lingers, until the resourceclaim controller
        # removes it.
        others = [
            f"{kind} {name}" + (f" (uid {uid})" if name == added[0][1] else "")
            for kind, name, uid in consumers
            if (kind, uid or name) != (added[0][0], added[0][2] or added[0][1])
        ]
        return AdmissionDecision.deny(
            Denial(
                "isolation",
                f"{subject} cannot be reserved for {who}: it is reserved for {others[0]} "
                f'(status.reservedFor), and policy "{policy.name}" is isolation: hardware '
                "(spec.isolation), one consumer per claim; give each pod its own claim "
                "(resourceClaimTemplateName), or this pod runs once the other has ended",
            ),
            tenant=policy.name,
        )
    problem = _isolation(reading, policy, subject)
    for ask in reading.asks if problem is None else ():
        problem = _policy_problem(ask, policy, subject)
        if problem is not None:
            break
    if problem is None:
        return AdmissionDecision(allowed=True, reason="admitted", tenant=policy.name)
    return AdmissionDecision.deny(
        Denial(
            problem.reason,
            f"{problem.message}; it cannot be reserved for {who}: the policy changed since "
            "the claim was created (a claim made under the policy as it is now may be)",
            problem.code,
        ),
        tenant=policy.name,
    )


def _consumers(raw_claim: JsonObject) -> list[tuple[str, str, str]]:
    """(resource, name, uid) of each entry of the claim's ``status.reservedFor``."""
    found: dict[tuple[str, str], tuple[str, str, str]] = {}
    for raw in items(mapping(raw_claim.get("status")).get("reservedFor")):
        entry = mapping(raw)
        resource, name = text(entry.get("resource")) or "", text(entry.get("name")) or ""
        uid = text(entry.get("uid")) or ""
        found.setdefault((resource, uid or name), (_kind(resource), name, uid))
    return list(found.values())


def _kind(resource: str) -> str:
    return "pod" if resource == "pods" else resource or "consumer"


def _new_consumers(raw_old: JsonObject, raw_new: JsonObject) -> list[tuple[str, str, str]]:
    before = {(kind, uid or name) for kind, name, uid in _consumers(raw_old)}
    return [c for c in _consumers(raw_new) if (c[0], c[2] or c[1]) not in before]


def _policy_problem(ask: GpuAsk, policy: TenantPolicy, subject: str) -> Denial | None:
    """The tier and profile rules of :func:`_ask_problem`, without the cluster's products (an
    allocated claim's device exists, whatever the caches hold of the nodes)."""
    if ask.kind == DeviceKind.GPU:
        if policy.allows_tier(Tier.DEDICATED):
            return None
        return Denial(
            "tier-not-allowed",
            f'{subject} asks for whole GPUs; policy "{policy.name}" allows tiers '
            f"{', '.join(t.value for t in policy.tiers)} (spec.tiers)",
        )
    profile = ask.profile or ""
    if not policy.allows_tier(Tier.MIG):
        return Denial(
            "tier-not-allowed",
            f'{subject} asks for {profile}; policy "{policy.name}" does not allow the mig '
            "tier (spec.tiers)",
        )
    if not policy.allows_profile(profile):
        return Denial("profile-not-allowed", _profile_message(subject, profile, policy))
    return None
