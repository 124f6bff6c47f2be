"""Inputs and outputs of the admission decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from migslice.admission.patch import PatchOp
from migslice.admission.usage import SliceUsage
from migslice.names import SCHEDULER_NAME
from migslice.whynot import WhyNot


class Unmatched(StrEnum):
    """What happens to a GPU pod in a namespace that no TenantPolicy selects."""

    DENY = "deny"  # the default: no policy, no GPU
    ALLOW = "allow"  # untouched, with a warning (for gradual roll-out)


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    scheduler_name: str = SCHEDULER_NAME  # "" leaves spec.schedulerName alone
    unmatched_namespaces: Unmatched = Unmatched.DENY


@dataclass(frozen=True, slots=True)
class PodAdmission:
    """One pod CREATE: the namespace from the request, the pod as sent, the request uid."""

    namespace: str
    raw_pod: Mapping[str, object]
    request_uid: str


@dataclass(frozen=True, slots=True)
class Denial(WhyNot):
    """Why a pod is refused: a :class:`WhyNot` (code, message) and the HTTP status to answer."""

    code: int = 403


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """Allowed (with a patch and a quota charge to reserve) or denied (with a message)."""

    allowed: bool
    reason: str
    message: str = ""
    code: int = 200
    patch: tuple[PatchOp, ...] = ()
    tenant: str | None = None
    charge: SliceUsage | None = None
    reservation: str | None = None
    warnings: tuple[str, ...] = ()
    templates: tuple[tuple[str, str], ...] = ()
    """(namespace, profile) of migslice's ResourceClaimTemplates the patched pod names: the
    webhook makes sure they exist before it answers."""

    @staticmethod
    def deny(denial: Denial, tenant: str | None = None) -> AdmissionDecision:
        return AdmissionDecision(
            allowed=False,
            reason=denial.reason,
            message=denial.message,
            code=denial.code,
            tenant=tenant,
        )
