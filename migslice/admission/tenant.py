"""Which TenantPolicy an object in a namespace answers to, or the decision when none or two do
(pods, claims and claim templates alike)."""

from __future__ import annotations

from migslice.admission.decision import AdmissionDecision, AdmissionSettings, Denial, Unmatched
from migslice.admission.view import ClusterView
from migslice.policy import TenantPolicy


def tenant_of(
    namespace: str, subject: str, asks: str, view: ClusterView, settings: AdmissionSettings
) -> TenantPolicy | AdmissionDecision:
    """The one policy selecting ``namespace``, else the decision: a policy that selects it but
    cannot be read (denied, whatever ``unmatched_namespaces`` says: the namespace has a
    tenant), no policy (the documented default, deny or allow with a warning), or two (a
    configuration error naming both).
    ``asks``: what the subject asks for, as the message says it (``asks for a GPU``)."""
    selecting = view.tenant_policies(namespace)
    if not selecting:
        invalid = view.invalid_selecting(namespace)
        if invalid:  # the tenant's policy is there, unreadable: its rules cannot be applied
            name, problems = sorted(invalid)[0]
            return AdmissionDecision.deny(
                Denial(
                    "invalid-policy",
                    f'{subject} {asks}, but namespace "{namespace}" belongs to TenantPolicy '
                    f'"{name}", which is invalid ({problems}); ask a cluster admin to fix it '
                    f"(kubectl describe tenantpolicy {name})",
                )
            )
        message = (
            f'{subject} {asks}, but namespace "{namespace}" belongs to no TenantPolicy; ask a '
            "cluster admin to add it to spec.namespaces (or spec.namespaceSelector) of a "
            "TenantPolicy"
        )
        if settings.unmatched_namespaces is Unmatched.ALLOW:
            return AdmissionDecision(allowed=True, reason="no-policy", warnings=(message,))
        return AdmissionDecision.deny(Denial("no-policy", message))
    if len(selecting) > 1:
        listed = " and ".join(f'"{p.name}"' for p in sorted(selecting, key=lambda p: p.name))
        return AdmissionDecision.deny(
            Denial(
                "conflicting-policies",
                f'namespace "{namespace}" is selected by TenantPolicies {listed}; a namespace '
                "can have only one tenant; ask a cluster admin to fix spec.namespaces or "
                "spec.namespaceSelector",
            )
        )
    return selecting[0]
