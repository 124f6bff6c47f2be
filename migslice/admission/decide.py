"""decide(pod CREATE, cluster view) -> AdmissionDecision: tenant, GPU plan, limits, patch.

Order of checks: GPU intent (none: allowed untouched, no patch; GPU resources the apiserver
would refuse: denied, naming the field); tenant by namespace (none:
the documented default, two: a configuration error naming both); the GPU plan under the
policy; ``spec.maxSlicesPerPod``; quota in slice units; for a hardware-isolation tenant, a
claim the pod would share with another; the pod's node selector against the policy's. The
patch sets the resource (annotated pods; for a ``deviceAPI: ResourceClaim`` tenant, claims
from migslice's template of the profile instead, not charged: their claims are), the output
annotations, node affinity, the policy's node selector and the scheduler name, and removes the
admission gate (``migslice.io/admission``) when the pod carries it: an allowed pod is
admitted. A pod that asks for no GPU resource but names claims for NVIDIA GPUs is its
tenant's too (not charged: its claims are). Claims and templates themselves:
:mod:`migslice.admission.claims`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from migslice import names
from migslice.admission.decision import (
    AdmissionDecision,
    AdmissionSettings,
    Denial,
    PodAdmission,
)
from migslice.admission.intent import PodIntent, pod_label, read_intent
from migslice.admission.patch import (
    PatchOp,
    remove_scheduling_gate,
    require_node_labels,
    set_annotations,
    set_container_resource,
    set_node_selector,
    set_pod_claims,
    set_scheduler_name,
)
from migslice.admission.sizing import GpuPlan, plan_annotated, plan_direct
from migslice.admission.tenant import tenant_of
from migslice.admission.usage import SliceUsage
from migslice.admission.view import ClusterView, TemplateFacts
from migslice.mig import profile_from_resource
from migslice.objects.pod_gpus import implicit_gpu_asks, is_gpu_resource
from migslice.objects.pods import bound_node_of
from migslice.objects.resource_claims import is_nvidia_gpu
from migslice.policy import DeviceApi, Isolation, TenantPolicy

NO_GPU = AdmissionDecision(allowed=True, reason="no-gpu")
NO_GPU_CLAIM = AdmissionDecision(allowed=True, reason="no-gpu-claim")
"""A pod naming claims, none of them for NVIDIA GPUs: decided on the claim caches, so not
made while they are blind (unlike a pod with no GPU intent at all)."""
DEFAULT_SETTINGS = AdmissionSettings()
LARGER_THAN_QUOTA = "larger-than-quota"
"""A quota denial that no fall of the tenant's usage lifts: the pod or claim alone asks more
than a limit (``reason`` ``quota`` is one that usage falling may lift)."""


def decide(
    admission: PodAdmission, view: ClusterView, settings: AdmissionSettings = DEFAULT_SETTINGS
) -> AdmissionDecision:
    """The admission decision for one pod CREATE; MalformedPodError if the object is no Pod."""
    intent = read_intent(admission.raw_pod)
    implicit = _implicit_class_asks(admission, view)
    if implicit is not None:
        return implicit
    if not intent.has_gpu_intent:
        unasked = _claims_only(admission, intent, view, settings) if intent.claims else NO_GPU
        return _ungated(unasked, admission.raw_pod)
    subject = f"pod {pod_label(admission.namespace, admission.raw_pod)}"
    if intent.problems:
        # The apiserver's validation, after admission, would refuse the pod; say why now,
        # and reserve no quota for a pod that will never exist.
        return AdmissionDecision.deny(
            _prefixed(subject, Denial("bad-resource", "; ".join(intent.problems), 422))
        )
    found = tenant_of(admission.namespace, subject, "asks for a GPU", view, settings)
    if isinstance(found, AdmissionDecision):
        if found.allowed:  # unmatched namespaces allowed: admitted untouched, less the gate
            gate = remove_scheduling_gate(admission.raw_pod, names.ADMISSION_GATE)
            return replace(found, patch=tuple(gate))
        return found
    policy = found
    plan = _plan(policy, intent, view)
    if isinstance(plan, Denial):
        return AdmissionDecision.deny(_prefixed(subject, plan), tenant=policy.name)
    if policy.device_api is DeviceApi.RESOURCE_CLAIM:
        plan = _as_claims(plan, intent, bound_node_of(admission.raw_pod))
        if isinstance(plan, Denial):
            return AdmissionDecision.deny(_prefixed(subject, plan), tenant=policy.name)
    # This very request may hold a charge already: a reinvocation (the pod carries the
    # reservation we wrote) or a retry after an answer that never arrived. It is not counted
    # twice. The request uid is kube-apiserver's, so a tenant cannot name another pod's here.
    named = _named_instances(admission, intent, view, _own_claims(plan))
    limit = _check_limits(policy, plan, view, admission.request_uid, named)
    if limit is None:
        limit = _shared_claim(admission, intent, policy, view)
    if limit is None:
        limit = _node_selector_conflict(policy, admission)
    if limit is not None:
        return AdmissionDecision.deny(_prefixed(subject, limit), tenant=policy.name)
    # A pod that gets claims is not charged: each claim is, when it is created from the
    # template (docs/policy.md, "Claims and templates").
    claimed = plan.claim_template is not None
    return AdmissionDecision(
        allowed=True,
        reason="admitted",
        patch=tuple(_patch(admission, policy, plan, settings)),
        tenant=policy.name,
        charge=None if claimed else plan.charge,
        reservation=None if claimed else admission.request_uid,
        templates=((admission.namespace, plan.profile),) if claimed else (),
    )


def _ungated(decision: AdmissionDecision, raw_pod: Mapping[str, object]) -> AdmissionDecision:
    """An allowed pod without the admission gate: the gate policy's matchConditions are the
    pod hook's, so a fail-open namespace's pod that asks for no GPU migslice reads (another
    DeviceClass's implicit extended resource, an ``nvidia.com/*`` resource that is no GPU)
    is stored gated though the webhook answers; admitted, it comes off here as for any pod."""
    if not decision.allowed or any(
        op.path.startswith("/spec/schedulingGates/") for op in decision.patch
    ):
        return decision
    gate = remove_scheduling_gate(raw_pod, names.ADMISSION_GATE)
    return replace(decision, patch=(*decision.patch, *gate)) if gate else decision


def _implicit_class_asks(admission: PodAdmission, view: ClusterView) -> AdmissionDecision | None:
    """A tenant's pod that asks for NVIDIA GPU devices by a DeviceClass's implicit extended
    resource (KEP-5004, ``deviceclass.resource.kubernetes.io/<class>``) is refused naming the
    resource to ask instead: read as asking nothing, it passed every check and every node."""
    namespace = admission.namespace
    if not (view.tenant_policies(namespace) or view.invalid_selecting(namespace)):
        return None
    asks = implicit_gpu_asks(admission.raw_pod, _gpu_classes(view))
    if not asks:
        return None
    resource, explicit = asks[0]
    instead = (
        f"ask for {explicit} (the DeviceClass's extendedResourceName) instead"
        if explicit
        else "ask for a MIG profile as nvidia.com/mig-<profile>, or by size "
        "(migslice.io/gpu-size), instead"
    )
    subject = f"pod {pod_label(namespace, admission.raw_pod)}"
    message = (
        f"asks for {resource}, a DeviceClass's implicit extended resource, which migslice does "
        f"not check against the tenant's policy or place; {instead}"
    )
    return AdmissionDecision.deny(_prefixed(subject, Denial("implicit-device-class", message, 422)))


def _gpu_classes(view: ClusterView) -> dict[str, str]:
    """The DeviceClasses that may give NVIDIA's GPU devices (their selectors name NVIDIA's
    driver, or no driver: a catch-all class), each with its extendedResourceName when that is
    a GPU resource migslice checks (else ``""``)."""
    found = {}
    for name, facts in view.device_classes().items():
        selection = facts.selection
        if is_nvidia_gpu(selection) or selection.driver is None:
            extended = facts.extended_resource or ""
            found[name] = extended if is_gpu_resource(extended) else ""
    return found


def _as_claims(plan: GpuPlan, intent: PodIntent, node: str | None) -> GpuPlan | Denial:
    """The plan of a ResourceClaim tenant: a MIG resource becomes claims from migslice's
    template of the profile (other tiers never reach here: the policy allows only mig). A pod
    that names its node (``node``, its ``spec.nodeName``) bypasses kube-scheduler, the only
    allocator of a claim: its claims would never be allocated, so it is refused."""
    target = plan.set_resource
    if target is None or profile_from_resource(target.resource) is None:
        return plan
    if node is not None:
        return Denial(
            "node-name",
            f'sets spec.nodeName "{node}", which bypasses the scheduler; only kube-scheduler '
            "allocates the ResourceClaims migslice gives a sized pod of a deviceAPI: "
            "ResourceClaim tenant, so the kubelet would never start it: choose the node by "
            f"required node affinity instead (matchFields metadata.name In [{node}])",
            422,
        )
    template = names.mig_claim_template(plan.profile)
    for ref in intent.claims:
        if ref.name in pod_claim_names(target.count) and ref.template != template:
            return Denial(
                "mixed-request",
                f'sets migslice GPU annotations and also names a claim "{ref.name}" in '
                "spec.resourceClaims, which migslice gives its own claims; rename it",
                422,
            )
    return replace(plan, claim_template=template)


def pod_claim_names(count: int) -> tuple[str, ...]:
    """``migslice-gpu``, ``migslice-gpu-1``, ...: the names of the claims migslice adds."""
    return tuple(names.POD_CLAIM if i == 0 else f"{names.POD_CLAIM}-{i}" for i in range(count))


def _claims_only(
    admission: PodAdmission, intent: PodIntent, view: ClusterView, settings: AdmissionSettings
) -> AdmissionDecision:
    """A pod that asks for no GPU resource but names ResourceClaims: untouched unless a claim
    asks for NVIDIA GPUs; then its tenant's, pointed at migslice-scheduler, and for a
    hardware-isolation tenant never sharing a claim with another pod."""
    namespace = admission.namespace
    # A claim or template not seen yet (the pod may be created first) may ask for GPUs: in a
    # tenant's namespace it is the tenant's, as one that does.
    unseen = bool(view.tenant_policies(namespace))
    gpu = any(
        (_or(view.claim_asks_gpu(namespace, ref.claim), unseen) if ref.claim else False)
        or (
            _or(_template_asks(view.template(namespace, ref.template)), unseen)
            if ref.template
            else False
        )
        for ref in intent.claims
    )
    if not gpu:
        return NO_GPU_CLAIM
    subject = f"pod {pod_label(namespace, admission.raw_pod)}"
    found = tenant_of(namespace, subject, "uses ResourceClaims for NVIDIA GPUs", view, settings)
    if isinstance(found, AdmissionDecision):
        return found
    policy = found
    problem = (
        _max_slices(policy, 0, _named_instances(admission, intent, view, {}))
        or _shared_claim(admission, intent, policy, view)
        or _node_selector_conflict(policy, admission)
    )
    if problem is not None:
        return AdmissionDecision.deny(_prefixed(subject, problem), tenant=policy.name)
    raw_pod = admission.raw_pod
    ops = set_annotations(raw_pod, {names.TENANT: policy.name, names.POLICY: policy.ref})
    ops += set_node_selector(raw_pod, dict(policy.node_selector))
    if settings.scheduler_name:
        ops += set_scheduler_name(raw_pod, settings.scheduler_name)
    return AdmissionDecision(allowed=True, reason="admitted", patch=tuple(ops), tenant=policy.name)


def _or(known: bool | None, unseen: bool) -> bool:
    return unseen if known is None else known


def _template_asks(found: TemplateFacts | None) -> bool | None:
    return None if found is None else found.asks_gpu


def _shared_claim(
    admission: PodAdmission, intent: PodIntent, policy: TenantPolicy, view: ClusterView
) -> Denial | None:
    """A pod naming kube-scheduler's claim for a pod's extended resources (whatever the tier:
    kube-scheduler never has a pod name one, and the pod it was made for pays for it), or a
    hardware-isolation tenant's pod naming a claim that another live pod uses."""
    for ref in intent.claims:
        if ref.claim is not None and view.extended_claim(admission.namespace, ref.claim):
            return Denial(
                "extended-claim",
                f"names ResourceClaim {admission.namespace}/{ref.claim} (spec.resourceClaims "
                f"\"{ref.name}\"), which is marked as kube-scheduler's claim for a pod's "
                f"extended resources ({names.EXTENDED_RESOURCE_CLAIM_ANNOTATION}); only that "
                "pod uses it: name a claim of your own (resourceClaimTemplateName)",
            )
    if policy.isolation is not Isolation.HARDWARE:
        return None
    own = pod_label(admission.namespace, admission.raw_pod).partition("/")[2]
    for ref in intent.claims:
        if ref.claim is None or view.claim_asks_gpu(admission.namespace, ref.claim) is False:
            continue  # a claim not seen yet may be a GPU claim: who names it counts
        others = [p for p in view.claim_users(admission.namespace, ref.claim) if p != own]
        if others:
            return Denial(
                "isolation",
                f"uses ResourceClaim {admission.namespace}/{ref.claim} (spec.resourceClaims "
                f'"{ref.name}"), which pod {admission.namespace}/{others[0]} uses too; policy '
                f'"{policy.name}" is isolation: hardware (spec.isolation): give each pod its '
                "own claim (resourceClaimTemplateName)",
            )
    return None


def _plan(policy: TenantPolicy, intent: PodIntent, view: ClusterView) -> GpuPlan | Denial:
    offers = view.offers()
    if not intent.annotations:
        return plan_direct(policy, intent.direct, offers)
    plan = plan_annotated(policy, intent, offers)
    if isinstance(plan, Denial):
        return plan
    target = plan.set_resource
    # On reinvocation the pod carries the resource we set last time; anything else is a
    # second, conflicting way of asking.
    extra = [
        r
        for r in intent.direct
        if target is None
        or (r.field, r.index, r.resource, r.count)
        != (target.field, target.index, target.resource, target.count)
    ]
    if extra:
        first = extra[0]
        return Denial(
            "mixed-request",
            f"sets migslice GPU annotations and also requests {first.resource}: {first.count} in "
            f'container "{first.container}"; use the annotations or the resource, not both',
            422,
        )
    return plan


def _check_limits(
    policy: TenantPolicy,
    plan: GpuPlan,
    view: ClusterView,
    reservation: str | None,
    named: int = 0,
) -> Denial | None:
    too_many = _max_slices(policy, plan.charge.instances, named)
    if too_many is not None:
        return too_many
    used = view.tenant_usage(policy.name, exclude_reservation=reservation)
    return quota_denial(policy, used, plan.charge)


def _max_slices(policy: TenantPolicy, own: int, named: int) -> Denial | None:
    """``spec.maxSlicesPerPod`` over the pod's own GPU resources (``own``) and the GPU
    devices of the claims and templates it names (``named``): a pod naming several claims
    holds them all."""
    limit = policy.max_slices_per_pod
    if limit is None or own + named <= limit:
        return None
    claims = f" ({named} of them from the ResourceClaims it names)" if named else ""
    return Denial(
        "max-slices",
        f'asks for {own + named} GPU slices{claims}; policy "{policy.name}" allows '
        f"{limit} per pod (spec.maxSlicesPerPod)",
    )


def _own_claims(plan: GpuPlan) -> Mapping[str, str]:
    """The claims (name -> template) migslice gives a ResourceClaim tenant's sized pod by
    ``plan``; none for any other pod."""
    target = plan.set_resource
    if target is None or plan.claim_template is None:
        return {}
    return dict.fromkeys(pod_claim_names(target.count), plan.claim_template)


def _named_instances(
    admission: PodAdmission, intent: PodIntent, view: ClusterView, own: Mapping[str, str]
) -> int:
    """The GPU devices of the claims (``resourceClaimName``, as cached) and templates the pod
    names, less the claims migslice gives a ResourceClaim tenant's sized pod (``own``, from
    :func:`_own_claims`: counted in its plan, and a reinvocation sees them). A claim the pod
    names itself counts, whatever its name; a claim it names twice, once (the allocator gives
    a claim its devices once)."""
    total = 0
    for claim in dict.fromkeys(ref.claim for ref in intent.claims if ref.claim is not None):
        total += view.claim_instances(admission.namespace, claim)
    for ref in intent.claims:
        if ref.claim is None and ref.template is not None and own.get(ref.name) != ref.template:
            found = view.template(admission.namespace, ref.template)
            total += found.instances if found is not None else 0
    return total


def quota_denial(
    policy: TenantPolicy, used: SliceUsage, wanted: SliceUsage, subject: str = "pod"
) -> Denial | None:
    """Every quota dimension the charge would exceed, with the numbers and the field
    (``subject``: what asks, ``pod`` or ``claim``)."""
    quota = policy.quota
    checks: list[tuple[str, int, int, int | None, str]] = [
        ("GPU instances", used.instances, wanted.instances, quota.instances, "instances"),
        (
            "compute slices",
            used.compute_slices,
            wanted.compute_slices,
            quota.compute_slices,
            "computeSlices",
        ),
        (
            "memory slices",
            used.memory_slices,
            wanted.memory_slices,
            quota.memory_slices,
            "memorySlices",
        ),
    ]
    for profile, limit in quota.profiles:
        checks.append(
            (
                f"{profile} instances",
                used.of_profile(profile),
                wanted.of_profile(profile),
                limit,
                f"profiles.{profile}",
            )
        )
    over = [
        (what, held, asked, limit, field)
        for what, held, asked, limit, field in checks
        if limit is not None and asked > 0 and held + asked > limit
    ]
    problems = [
        f'tenant "{policy.name}" would use {held + asked} {what} ({held} in use or admitted + '
        f'{asked} for this {subject}); policy "{policy.name}" allows {limit} (spec.quota.{field})'
        for what, held, asked, limit, field in over
    ]
    if not problems:
        return None
    # Asking more than a limit by itself (a quota lowered below what a size asks, say), it fits
    # however the tenant's usage falls: never; only a change of the policy admits it.
    alone = [
        (asked, field) for _, _, asked, limit, field in over if limit is not None and asked > limit
    ]
    if alone:
        raise_to = ", ".join(f"spec.quota.{field} to at least {asked}" for asked, field in alone)
        problems.append(
            f"this {subject} alone asks more than the limit, so it is refused whatever the "
            f"tenant's usage: ask for less, or have a cluster admin raise {raise_to}"
        )
        return Denial(LARGER_THAN_QUOTA, "; ".join(problems))
    return Denial("quota", "; ".join(problems))


def _node_selector_conflict(policy: TenantPolicy, admission: PodAdmission) -> Denial | None:
    spec = admission.raw_pod.get("spec")
    current = spec.get("nodeSelector") if isinstance(spec, dict) else None
    if not isinstance(current, dict):
        return None
    for key, value in policy.node_selector:
        if key in current and current[key] != value:
            return Denial(
                "node-selector-conflict",
                f'sets nodeSelector {key}={current[key]}; policy "{policy.name}" requires '
                f"{key}={value} (spec.nodeSelector)",
            )
    return None


def _patch(
    admission: PodAdmission, policy: TenantPolicy, plan: GpuPlan, settings: AdmissionSettings
) -> Sequence[PatchOp]:
    raw_pod = admission.raw_pod
    ops: list[PatchOp] = []
    target = plan.set_resource
    output = {names.TENANT: policy.name, names.PROFILE: plan.profile, names.POLICY: policy.ref}
    if target is not None and plan.claim_template is not None:
        claims = dict.fromkeys(pod_claim_names(target.count), plan.claim_template)
        ops += set_pod_claims(raw_pod, target.field, target.index, claims)
    else:
        output[names.RESERVATION] = admission.request_uid
        if target is not None:
            ops += set_container_resource(
                raw_pod, target.field, target.index, resource=target.resource, count=target.count
            )
    ops += set_annotations(raw_pod, output)
    unlabelled = names.PRODUCT_LABEL if plan.unlabelled else None
    ops += require_node_labels(raw_pod, plan.node_requirements, or_unlabelled=unlabelled)
    ops += set_node_selector(raw_pod, dict(policy.node_selector))
    if settings.scheduler_name:
        ops += set_scheduler_name(raw_pod, settings.scheduler_name)
    # Admitted: the gate a fail-open namespace's MutatingAdmissionPolicy put on it comes off.
    ops += remove_scheduling_gate(raw_pod, names.ADMISSION_GATE)
    return ops


def _prefixed(subject: str, denial: Denial) -> Denial:
    message = denial.message
    if message.startswith(("asks ", "sets ")):
        message = f"{subject} {message}"
    elif not message.startswith("tenant "):
        message = f"{subject}: {message}"
    return Denial(denial.reason, message, denial.code)
