"""decide(pod CREATE, cluster view) -> AdmissionDecision: tenant, GPU plan, limits, patch.

Order of checks: GPU intent (none: allowed untouched, no patch; GPU resources the apiserver
would refuse: denied, naming the field); tenant by namespace (none:
the documented default, two: a configuration error naming both); the GPU plan under the
policy; ``spec.maxSlicesPerPod``; quota in slice units; the pod's node selector against the
policy's. The patch sets the resource (annotated pods), the output annotations, node
affinity, the policy's node selector and the scheduler name, and removes the admission gate
(``migslice.io/admission``) when the pod carries it: an allowed pod is admitted.
"""

from __future__ import annotations

from collections.abc import Sequence

from migslice import names
from migslice.admission.decision import (
    AdmissionDecision,
    AdmissionSettings,
    Denial,
    PodAdmission,
    Unmatched,
)
from migslice.admission.intent import PodIntent, pod_label, read_intent
from migslice.admission.patch import (
    PatchOp,
    remove_scheduling_gate,
    require_node_labels,
    set_annotations,
    set_container_resource,
    set_node_selector,
    set_scheduler_name,
)
from migslice.admission.sizing import GpuPlan, plan_annotated, plan_direct
from migslice.admission.usage import SliceUsage
from migslice.admission.view import ClusterView
from migslice.policy import TenantPolicy

NO_GPU = AdmissionDecision(allowed=True, reason="no-gpu")
DEFAULT_SETTINGS = AdmissionSettings()


def decide(
    admission: PodAdmission, view: ClusterView, settings: AdmissionSettings = DEFAULT_SETTINGS
) -> AdmissionDecision:
    """The admission decision for one pod CREATE; MalformedPodError if the object is no Pod."""
    intent = read_intent(admission.raw_pod)
    if not intent.has_gpu_intent:
        return NO_GPU
    subject = f"pod {pod_label(admission.namespace, admission.raw_pod)}"
    if intent.problems:
        # The apiserver's validation, after admission, would refuse the pod; say why now,
        # and reserve no quota for a pod that will never exist.
        return AdmissionDecision.deny(
            _prefixed(subject, Denial("bad-resource", "; ".join(intent.problems), 422))
        )
    selecting = view.tenant_policies(admission.namespace)
    if not selecting:
        message = (
            f'{subject} asks for a GPU, but namespace "{admission.namespace}" belongs to no '
            "TenantPolicy; ask a cluster admin to add it to spec.namespaces (or "
            "spec.namespaceSelector) of a TenantPolicy"
        )
        if settings.unmatched_namespaces is Unmatched.ALLOW:
            return AdmissionDecision(
                allowed=True,
                reason="no-policy",
                patch=tuple(remove_scheduling_gate(admission.raw_pod, names.ADMISSION_GATE)),
                warnings=(message,),
            )
        return AdmissionDecision.deny(Denial("no-policy", message))
    if len(selecting) > 1:
        listed = " and ".join(f'"{p.name}"' for p in sorted(selecting, key=lambda p: p.name))
        return AdmissionDecision.deny(
            Denial(
                "conflicting-policies",
                f'namespace "{admission.namespace}" is selected by TenantPolicies {listed}; a '
                "namespace can have only one tenant; ask a cluster admin to fix spec.namespaces "
                "or spec.namespaceSelector",
            )
        )
    policy = selecting[0]
    plan = _plan(policy, intent, view)
    if isinstance(plan, Denial):
        return AdmissionDecision.deny(_prefixed(subject, plan), tenant=policy.name)
    # This very request may hold a charge already: a reinvocation (the pod carries the
    # reservation we wrote) or a retry after an answer that never arrived. It is not counted
    # twice. The request uid is kube-apiserver's, so a tenant cannot name another pod's here.
    limit = _check_limits(policy, plan, view, admission.request_uid)
    if limit is not None:
        return AdmissionDecision.deny(_prefixed(subject, limit), tenant=policy.name)
    conflict = _node_selector_conflict(policy, admission)
    if conflict is not None:
        return AdmissionDecision.deny(_prefixed(subject, conflict), tenant=policy.name)
    return AdmissionDecision(
        allowed=True,
        reason="admitted",
        patch=tuple(_patch(admission, policy, plan, settings)),
        tenant=policy.name,
        charge=plan.charge,
        reservation=admission.request_uid,
    )


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
    policy: TenantPolicy, plan: GpuPlan, view: ClusterView, reservation: str | None
) -> Denial | None:
    if policy.max_slices_per_pod is not None and plan.charge.instances > policy.max_slices_per_pod:
        return Denial(
            "max-slices",
            f'asks for {plan.charge.instances} GPU slices; policy "{policy.name}" allows '
            f"{policy.max_slices_per_pod} per pod (spec.maxSlicesPerPod)",
        )
    used = view.tenant_usage(policy.name, exclude_reservation=reservation)
    return quota_denial(policy, used, plan.charge)


def quota_denial(policy: TenantPolicy, used: SliceUsage, wanted: SliceUsage) -> Denial | None:
    """Every quota dimension the charge would exceed, with the numbers and the field."""
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
    problems = [
        f'tenant "{policy.name}" would use {held + asked} {what} ({held} in use or admitted + '
        f'{asked} for this pod); policy "{policy.name}" allows {limit} (spec.quota.{field})'
        for what, held, asked, limit, field in checks
        if limit is not None and asked > 0 and held + asked > limit
    ]
    return Denial("quota", "; ".join(problems)) if problems else None


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
    if target is not None:
        ops += set_container_resource(
            raw_pod, target.field, target.index, resource=target.resource, count=target.count
        )
    ops += set_annotations(
        raw_pod,
        {
            names.TENANT: policy.name,
            names.PROFILE: plan.profile,
            names.POLICY: policy.ref,
            names.RESERVATION: admission.request_uid,
        },
    )
    ops += require_node_labels(raw_pod, plan.node_requirements)
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
