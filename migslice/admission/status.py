"""The status a TenantPolicy should show: what the tenant uses, and whether the policy is in force.

``policy_status`` and ``invalid_policy_status`` return the desired ``.status`` of a policy
(``TenantPolicyStatusWire``, the CRD's status schema); a writer in ``migslice.kube`` patches it
when it differs from what the API server holds. Time is an input: a condition keeps its
previous ``lastTransitionTime`` while its status stays the same (as ``meta.SetStatusCondition``
does in Go).

Conditions:

* ``Ready``: True (``Active``) when the webhook admits pods by this policy; False with
  ``InvalidSpec`` (the spec does not parse, or names profiles/products/sizes the catalog cannot
  serve), or ``NamespaceConflict`` (another policy selects one of its namespaces: GPU pods
  there are denied).
* ``QuotaExhausted``: True when a limit of ``spec.quota`` is reached (``LimitReached``: pods
  that need more of it are denied) or passed (``OverLimit``, e.g. after the quota was
  lowered); False (``WithinQuota``, or ``NoQuota`` without limits). A limit of 0 forbids
  rather than fills, so it never counts as reached.

``quotaSummary`` (the ``Quota`` printer column): ``"6/16 compute slices"`` for each limited
dimension (compute slices, memory slices, instances, joined by ``", "``), or
``"6 compute slices"`` when the policy sets no such limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, cast

from migslice.admission.usage import SliceUsage
from migslice.objects.times import format_time
from migslice.policy import FieldError, TenantPolicy
from migslice.policy.wire import ConditionWire, TenantPolicyStatusWire, UsageWire

READY = "Ready"
QUOTA_EXHAUSTED = "QuotaExhausted"

ConditionStatus = Literal["True", "False", "Unknown"]


WRITTEN_KEYS = frozenset({"observedGeneration", "used", "quotaSummary", "conditions"})
"""The status fields the status writer keeps. Any other is left as it is: ``quotaLedger``
(the ledger's own mark) and those a newer version writes (a rolling update's older replica
must not erase them); so are the fields of ``used`` and the condition types it does not
write (:func:`owned_status`)."""
USED_KEYS = frozenset({"instances", "computeSlices", "memorySlices", "profiles"})
CONDITION_TYPES = frozenset({READY, QUOTA_EXHAUSTED})


def owned_status(status: Mapping[str, object]) -> dict[str, object]:
    """The part of a stored status this version writes, which its merge patch may change or
    remove: the keys of :data:`WRITTEN_KEYS`, ``used`` without fields it does not know (its
    conditions keep the other types as they are: :func:`_keep_transition_times`)."""
    owned: dict[str, object] = {k: v for k, v in status.items() if k in WRITTEN_KEYS}
    used = owned.get("used")
    if isinstance(used, Mapping):
        owned["used"] = {k: v for k, v in used.items() if k in USED_KEYS}
    return owned


@dataclass(frozen=True, slots=True)
class _Limit:
    """One limited dimension of a quota: its name in messages and summary, used and limit."""

    label: str  # "compute slices"
    field: str  # "spec.quota.computeSlices"
    used: int
    limit: int


def policy_status(
    policy: TenantPolicy,
    usage: SliceUsage,
    *,
    now: datetime,
    problems: Sequence[FieldError] = (),
    conflicts: Sequence[FieldError] = (),
    previous: Mapping[str, object] | None = None,
) -> TenantPolicyStatusWire:
    """The desired status of a parsed policy.

    ``usage`` is the tenant's usage in slice units (as quota counts it); ``problems`` are the
    catalog checks' errors, ``conflicts`` the namespaces another policy also selects;
    ``previous`` is the status the API server holds (for ``lastTransitionTime``).
    """
    generation = policy.generation
    if problems:
        ready = _condition(
            READY,
            "False",
            "InvalidSpec",
            f'TenantPolicy "{policy.name}" has problems; sizes that hit them are refused: '
            + "; ".join(str(p) for p in problems),
            generation,
        )
    elif conflicts:
        ready = _condition(
            READY,
            "False",
            "NamespaceConflict",
            f'TenantPolicy "{policy.name}" shares namespaces with another policy; GPU pods '
            "there are denied until one policy lets go: " + "; ".join(str(c) for c in conflicts),
            generation,
        )
    else:
        ready = _condition(
            READY,
            "True",
            "Active",
            f'TenantPolicy "{policy.name}" generation {generation} is in force for admission',
            generation,
        )
    limits = _limits(policy, usage)
    quota = _quota_condition(policy.name, limits + _profile_limits(policy, usage), generation)
    conditions = [ready, quota]
    return {
        "observedGeneration": generation,
        "used": _usage_wire(usage),
        "quotaSummary": quota_summary(policy, usage),
        "conditions": _keep_transition_times(conditions, previous, now),
    }


def invalid_policy_status(
    name: str,
    generation: int,
    errors: Sequence[FieldError],
    *,
    now: datetime,
    previous: Mapping[str, object] | None = None,
) -> TenantPolicyStatusWire:
    """The desired status of a policy that does not parse: Ready False, no usage is counted."""
    ready = _condition(
        READY,
        "False",
        "InvalidSpec",
        f'TenantPolicy "{name}" is ignored by admission (GPU pods in its namespaces are denied): '
        + "; ".join(str(e) for e in errors),
        generation,
    )
    return {
        "observedGeneration": generation,
        "conditions": _keep_transition_times([ready], previous, now),
    }


def quota_summary(policy: TenantPolicy, usage: SliceUsage) -> str:
    """``"6/16 compute slices"`` per limited dimension, else ``"6 compute slices"``."""
    limits = _limits(policy, usage)
    if not limits:
        return f"{usage.compute_slices} compute slices"
    return ", ".join(f"{limit.used}/{limit.limit} {limit.label}" for limit in limits)


# -- internals ---------------------------------------------------------------------------------


def _limits(policy: TenantPolicy, usage: SliceUsage) -> list[_Limit]:
    quota = policy.quota
    found = []
    for label, field, used, limit in (
        ("compute slices", "computeSlices", usage.compute_slices, quota.compute_slices),
        ("memory slices", "memorySlices", usage.memory_slices, quota.memory_slices),
        ("instances", "instances", usage.instances, quota.instances),
    ):
        if limit is not None:
            found.append(_Limit(label, f"spec.quota.{field}", used, limit))
    return found


def _profile_limits(policy: TenantPolicy, usage: SliceUsage) -> list[_Limit]:
    return [
        _Limit(f"x {profile}", f"spec.quota.profiles.{profile}", usage.of_profile(profile), limit)
        for profile, limit in policy.quota.profiles
    ]


def _quota_condition(name: str, limits: Sequence[_Limit], generation: int) -> ConditionWire:
    if not limits:
        return _condition(
            QUOTA_EXHAUSTED,
            "False",
            "NoQuota",
            f'TenantPolicy "{name}" sets no quota (spec.quota)',
            generation,
        )
    over = [limit for limit in limits if limit.used > limit.limit]
    if over:
        return _condition(
            QUOTA_EXHAUSTED,
            "True",
            "OverLimit",
            "; ".join(
                f'tenant "{name}" uses {limit.used} {limit.label}; policy "{name}" allows '
                f"{limit.limit} ({limit.field})"
                for limit in over
            )
            + "; new pods that need any of it are denied",
            generation,
        )
    full = [limit for limit in limits if 0 < limit.limit == limit.used]
    if full:
        return _condition(
            QUOTA_EXHAUSTED,
            "True",
            "LimitReached",
            "; ".join(
                f'tenant "{name}" uses all {limit.limit} {limit.label} that policy "{name}" '
                f"allows ({limit.field})"
                for limit in full
            )
            + "; new pods that need any of it are denied",
            generation,
        )
    return _condition(
        QUOTA_EXHAUSTED,
        "False",
        "WithinQuota",
        f'tenant "{name}" uses '
        + ", ".join(f"{limit.used}/{limit.limit} {limit.label}" for limit in limits),
        generation,
    )


@dataclass(frozen=True, slots=True)
class QuotaDimension:
    """One dimension of a tenant's usage against its quota: ``dimension`` names the field
    under ``spec.quota`` (``instances``, ``computeSlices``, ``memorySlices``,
    ``profiles.<profile>``); ``limit`` None where the policy sets none."""

    dimension: str
    label: str
    used: int
    limit: int | None

    @property
    def field(self) -> str:
        return f"spec.quota.{self.dimension}"

    @property
    def is_reached(self) -> bool:
        """A limit reached or passed (a limit of 0 forbids rather than fills: never)."""
        return self.limit is not None and self.limit > 0 and self.used >= self.limit


def quota_dimensions(policy: TenantPolicy, usage: SliceUsage) -> tuple[QuotaDimension, ...]:
    """The usage in every dimension of quota: instances, compute and memory slices (limited
    or not), then each profile the policy limits, or the tenant uses."""
    quota = policy.quota
    found = [
        QuotaDimension("instances", "instances", usage.instances, quota.instances),
        QuotaDimension(
            "computeSlices", "compute slices", usage.compute_slices, quota.compute_slices
        ),
        QuotaDimension("memorySlices", "memory slices", usage.memory_slices, quota.memory_slices),
    ]
    limited = dict(quota.profiles)
    for profile in sorted(set(limited) | {p for p, c in usage.profiles if c > 0}):
        found.append(
            QuotaDimension(
                f"profiles.{profile}",
                f"x {profile}",
                usage.of_profile(profile),
                limited.get(profile),
            )
        )
    return tuple(found)


def usage_wire(usage: SliceUsage) -> UsageWire:
    """``status.used`` of a TenantPolicy for ``usage``."""
    return _usage_wire(usage)


def _usage_wire(usage: SliceUsage) -> UsageWire:
    return {
        "instances": usage.instances,
        "computeSlices": usage.compute_slices,
        "memorySlices": usage.memory_slices,
        "profiles": {profile: count for profile, count in usage.profiles if count > 0},
    }


MAX_MESSAGE_BYTES = 32768
"""The most a condition's message may hold (the CRD's maxLength, as metav1.Condition's):
kube-apiserver refuses a longer one with 422, and the whole status with it."""


def fit_message(message: str, limit: int = MAX_MESSAGE_BYTES) -> str:
    """``message``, cut to ``limit`` bytes of UTF-8 with a note saying so when it is longer
    (a policy with many problems: 64 unknown products, 64 unknown profiles, 32 sizes)."""
    data = message.encode()
    if len(data) <= limit:
        return message
    note = (
        f" ... (cut: {len(data)} bytes are more than a condition message holds; "
        "kubectl apply --dry-run=server lists every problem)"
    )
    head = data[: limit - len(note.encode())].decode(errors="ignore")
    return head + note


def _condition(
    kind: str, status: ConditionStatus, reason: str, message: str, generation: int
) -> ConditionWire:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": fit_message(message),
        "lastTransitionTime": "",
        "observedGeneration": generation,
    }


def _keep_transition_times(
    conditions: list[ConditionWire], previous: Mapping[str, object] | None, now: datetime
) -> list[ConditionWire]:
    """Each condition's time: the previous one while its status is unchanged, else ``now``;
    then the previous conditions of types this version does not write, as they were (a newer
    version's: the list is written whole)."""
    before: dict[str, tuple[object, object]] = {}
    foreign: list[ConditionWire] = []
    raw_conditions = previous.get("conditions") if previous is not None else None
    if isinstance(raw_conditions, list):
        for raw in raw_conditions:
            if isinstance(raw, Mapping) and isinstance(raw.get("type"), str):
                before[str(raw["type"])] = (raw.get("status"), raw.get("lastTransitionTime"))
                if raw["type"] not in CONDITION_TYPES:
                    foreign.append(cast(ConditionWire, dict(raw)))
    stamp = format_time(now)
    for condition in conditions:
        old_status, old_time = before.get(condition["type"], (None, None))
        keep = old_status == condition["status"] and isinstance(old_time, str) and old_time
        condition["lastTransitionTime"] = old_time if keep and isinstance(old_time, str) else stamp
    return conditions + foreign


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """A policy's status as the API server holds it (``observed``) and as it should be."""

    name: str
    observed: Mapping[str, object] | None
    desired: TenantPolicyStatusWire

    @property
    def is_current(self) -> bool:
        return self.observed is not None and dict(self.observed) == dict(self.desired)
