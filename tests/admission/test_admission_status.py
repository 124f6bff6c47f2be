"""TenantPolicy.status as values: usage, quotaSummary, Ready and QuotaExhausted conditions,
transition times kept while a status holds, and every result valid for the CRD's schema."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import jsonschema
import pytest
import yaml

from harness.builders import make_policy
from migslice.admission import SliceUsage
from migslice.admission.status import (
    fit_message,
    format_time,
    invalid_policy_status,
    policy_status,
    quota_summary,
)
from migslice.mig import CATALOG
from migslice.policy import FieldError, check_against_catalog, parse_tenant_policy
from tests import paths

ROOT = paths.ROOT
NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
LATER = NOW + timedelta(minutes=5)
MEDIUM = SliceUsage(1, 2, 2, (("2g.20gb", 1),))


def status_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "manifests" / "base" / "crd" / "tenantpolicies.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["status"])


def condition(status: Any, kind: str) -> dict[str, Any]:
    found = [c for c in status["conditions"] if c["type"] == kind]
    assert len(found) == 1, status["conditions"]
    return dict(found[0])


def policy(quota: dict[str, Any] | None = None, generation: int = 3) -> Any:
    spec = {"quota": quota} if quota is not None else {}
    return parse_tenant_policy(make_policy(generation=generation, **spec))


@pytest.mark.parametrize(
    ("quota", "usage", "summary"),
    [
        (None, MEDIUM, "2 compute slices"),
        ({"computeSlices": 8}, MEDIUM, "2/8 compute slices"),
        ({"computeSlices": 16}, SliceUsage(3, 6, 6), "6/16 compute slices"),
        ({"instances": 4}, MEDIUM, "1/4 instances"),
        (
            {"computeSlices": 8, "memorySlices": 8, "instances": 4},
            MEDIUM,
            "2/8 compute slices, 2/8 memory slices, 1/4 instances",
        ),
        ({"profiles": {"1g.10gb": 2}}, MEDIUM, "2 compute slices"),
        ({"computeSlices": 8}, SliceUsage(), "0/8 compute slices"),
    ],
    ids=[
        "no-quota-shows-usage-only",
        "compute-limit",
        "the-documented-example",
        "instances-only",
        "every-dimension-in-a-fixed-order",
        "profile-limits-stay-out-of-the-column",
        "nothing-used",
    ],
)
def test_quota_summary_shows_used_over_limit_for_each_limited_dimension(
    quota: dict[str, Any] | None, usage: SliceUsage, summary: str
) -> None:
    assert quota_summary(policy(quota), usage) == summary
    assert policy_status(policy(quota), usage, now=NOW)["quotaSummary"] == summary


def test_a_policy_in_force_reports_its_generation_usage_and_ready_true() -> None:
    usage = SliceUsage(3, 4, 4, (("1g.10gb", 2), ("2g.20gb", 1)))
    status = policy_status(policy({"computeSlices": 8}), usage, now=NOW)
    assert status == {
        "observedGeneration": 3,
        "used": {
            "instances": 3,
            "computeSlices": 4,
            "memorySlices": 4,
            "profiles": {"1g.10gb": 2, "2g.20gb": 1},
        },
        "quotaSummary": "4/8 compute slices",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Active",
                "message": 'TenantPolicy "team-a" generation 3 is in force for admission',
                "lastTransitionTime": "2025-03-01T12:00:00Z",
                "observedGeneration": 3,
            },
            {
                "type": "QuotaExhausted",
                "status": "False",
                "reason": "WithinQuota",
                "message": 'tenant "team-a" uses 4/8 compute slices',
                "lastTransitionTime": "2025-03-01T12:00:00Z",
                "observedGeneration": 3,
            },
        ],
    }


CATALOG_PROBLEM = FieldError("spec.allowedProducts[0]", '"NVIDIA-Z9" is no known GPU product')
CONFLICT = FieldError(
    "spec.namespaces",
    'namespace team-a already belongs to TenantPolicy "team-b"; a namespace can have only one '
    "tenant",
)


@pytest.mark.parametrize(
    ("problems", "conflicts", "status", "reason", "says"),
    [
        ((), (), "True", "Active", "is in force for admission"),
        ((CATALOG_PROBLEM,), (), "False", "InvalidSpec", "spec.allowedProducts[0]: "),
        ((), (CONFLICT,), "False", "NamespaceConflict", 'belongs to TenantPolicy "team-b"'),
        ((CATALOG_PROBLEM,), (CONFLICT,), "False", "InvalidSpec", "NVIDIA-Z9"),
    ],
    ids=["clean", "catalog-problem", "namespace-conflict", "spec-problems-come-first"],
)
def test_ready_says_whether_admission_uses_the_policy_and_why_not(
    problems: tuple[FieldError, ...],
    conflicts: tuple[FieldError, ...],
    status: str,
    reason: str,
    says: str,
) -> None:
    result = policy_status(policy(), MEDIUM, now=NOW, problems=problems, conflicts=conflicts)
    ready = condition(result, "Ready")
    assert (ready["status"], ready["reason"]) == (status, reason)
    assert says in ready["message"]
    assert result["quotaSummary"] == "2 compute slices"  # usage is reported either way


@pytest.mark.parametrize(
    ("quota", "usage", "status", "reason", "message"),
    [
        (None, MEDIUM, "False", "NoQuota", 'TenantPolicy "team-a" sets no quota (spec.quota)'),
        (
            {"computeSlices": 8, "instances": 4},
            MEDIUM,
            "False",
            "WithinQuota",
            'tenant "team-a" uses 2/8 compute slices, 1/4 instances',
        ),
        (
            {"computeSlices": 2},
            MEDIUM,
            "True",
            "LimitReached",
            'tenant "team-a" uses all 2 compute slices that policy "team-a" allows '
            "(spec.quota.computeSlices); new pods that need any of it are denied",
        ),
        (
            {"computeSlices": 1, "memorySlices": 8},
            MEDIUM,
            "True",
            "OverLimit",
            'tenant "team-a" uses 2 compute slices; policy "team-a" allows 1 '
            "(spec.quota.computeSlices); new pods that need any of it are denied",
        ),
        (
            {"profiles": {"2g.20gb": 1}},
            MEDIUM,
            "True",
            "LimitReached",
            'tenant "team-a" uses all 1 x 2g.20gb that policy "team-a" allows '
            "(spec.quota.profiles.2g.20gb); new pods that need any of it are denied",
        ),
        (
            {"profiles": {"1g.10gb": 0}, "computeSlices": 8},
            MEDIUM,
            "False",
            "WithinQuota",
            'tenant "team-a" uses 2/8 compute slices, 0/0 x 1g.10gb',
        ),
        (
            {"computeSlices": 0},
            SliceUsage(),
            "False",
            "WithinQuota",
            'tenant "team-a" uses 0/0 compute slices',
        ),
    ],
    ids=[
        "no-quota",
        "within",
        "a-limit-reached",
        "over-after-a-lowered-quota",
        "a-profile-limit-reached",
        "a-zero-limit-forbids-rather-than-fills",
        "zero-of-zero-is-not-exhausted",
    ],
)
def test_quota_exhausted_names_the_dimension_the_numbers_and_the_field(
    quota: dict[str, Any] | None, usage: SliceUsage, status: str, reason: str, message: str
) -> None:
    exhausted = condition(policy_status(policy(quota), usage, now=NOW), "QuotaExhausted")
    assert (exhausted["status"], exhausted["reason"], exhausted["message"]) == (
        status,
        reason,
        message,
    )


@pytest.mark.parametrize(
    ("before", "after", "ready_time", "quota_time"),
    [
        ({}, {}, "2025-03-01T12:00:00Z", "2025-03-01T12:00:00Z"),
        (
            {"computeSlices": 8},
            {"computeSlices": 8},
            "2025-03-01T12:00:00Z",
            "2025-03-01T12:00:00Z",
        ),
        (
            {"computeSlices": 8},
            {"computeSlices": 2},
            "2025-03-01T12:00:00Z",
            "2025-03-01T12:05:00Z",
        ),
    ],
    ids=["no-quota-both-times-kept", "same-status-new-numbers-keeps-times", "a-flip-restamps-it"],
)
def test_a_condition_keeps_its_transition_time_until_its_status_changes(
    before: dict[str, Any], after: dict[str, Any], ready_time: str, quota_time: str
) -> None:
    first = policy_status(policy(before or None), MEDIUM, now=NOW)
    second = policy_status(policy(after or None), MEDIUM, now=LATER, previous=first)
    assert condition(second, "Ready")["lastTransitionTime"] == ready_time
    assert condition(second, "QuotaExhausted")["lastTransitionTime"] == quota_time


def test_a_ready_flip_restamps_ready_only() -> None:
    first = policy_status(policy(), MEDIUM, now=NOW)
    second = policy_status(policy(), MEDIUM, now=LATER, conflicts=(CONFLICT,), previous=first)
    assert condition(second, "Ready")["lastTransitionTime"] == "2025-03-01T12:05:00Z"
    assert condition(second, "QuotaExhausted")["lastTransitionTime"] == "2025-03-01T12:00:00Z"


@pytest.mark.parametrize(
    "previous",
    [
        None,
        {},
        {"conditions": "not a list"},
        {"conditions": [{"type": "Ready", "status": "True"}]},
        {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": 7}]},
        {"conditions": [None, {"status": "True"}]},
    ],
    ids=["none", "empty", "not-a-list", "no-time", "time-not-a-string", "junk-entries"],
)
def test_a_previous_status_without_usable_times_gets_now(previous: Any) -> None:
    status = policy_status(policy(), MEDIUM, now=NOW, previous=previous)
    assert condition(status, "Ready")["lastTransitionTime"] == "2025-03-01T12:00:00Z"


def test_a_policy_that_does_not_parse_is_not_ready_and_counts_no_usage() -> None:
    errors = (FieldError("spec.sizes.x.memory", '"lots" is not a quantity'),)
    previous = policy_status(policy(), MEDIUM, now=NOW)
    status = invalid_policy_status("team-a", 4, errors, now=LATER, previous=previous)
    assert status == {
        "observedGeneration": 4,
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "InvalidSpec",
                "message": 'TenantPolicy "team-a" is ignored by admission (GPU pods in its '
                'namespaces are denied): spec.sizes.x.memory: "lots" is not a quantity',
                "lastTransitionTime": "2025-03-01T12:05:00Z",
                "observedGeneration": 4,
            }
        ],
    }


def test_every_status_fits_the_crd_status_schema() -> None:
    schema = status_schema()
    usage = SliceUsage(2, 3, 3, (("1g.10gb", 1), ("2g.20gb", 1)))
    statuses = [
        policy_status(policy(), usage, now=NOW),
        policy_status(policy({"computeSlices": 1, "profiles": {"1g.10gb": 1}}), usage, now=NOW),
        policy_status(policy(), usage, now=NOW, conflicts=(CONFLICT,)),
        invalid_policy_status("team-a", 1, (CATALOG_PROBLEM,), now=NOW),
    ]
    for status in statuses:
        jsonschema.validate(status, schema)
        assert len(status["conditions"]) <= schema["properties"]["conditions"]["maxItems"]


@pytest.mark.parametrize(
    ("now", "text"),
    [
        (NOW, "2025-03-01T12:00:00Z"),
        (datetime(2025, 3, 1, 13, 0, 0, 999_999, tzinfo=UTC), "2025-03-01T13:00:00Z"),
        (
            datetime(2025, 3, 1, 14, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=2))),
            "2025-03-01T14:00:00Z",
        ),
    ],
    ids=["utc", "drops-microseconds", "converts-to-utc"],
)
def test_times_are_written_as_kubernetes_writes_them(now: datetime, text: str) -> None:
    assert format_time(now) == text


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_time(datetime(2025, 3, 1, 12, 0))


def test_a_policy_with_more_problems_than_a_message_holds_still_gets_a_status_that_fits() -> None:
    """A policy the CRD accepts (64 products and 64 profiles the catalog does not know, 32
    sizes none of them can serve) has about 35 KB of problems; kube-apiserver refused the
    whole status for a condition message over 32768 bytes, so Ready=False never showed."""
    raw = make_policy(
        allowedProducts=[f"GPU-{i:03d}-" + "x" * 120 for i in range(64)],
        allowedProfiles=[f"7g.{9000 + i}gb" for i in range(64)],
        sizes={f"size-{i}": {"memory": "10Gi"} for i in range(32)},
    )
    parsed = parse_tenant_policy(raw)
    problems = check_against_catalog(parsed, CATALOG)
    assert len("; ".join(str(p) for p in problems).encode()) > 32768
    status = policy_status(parsed, MEDIUM, now=NOW, problems=problems)
    jsonschema.validate(status, status_schema())
    ready = condition(status, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert len(ready["message"].encode()) <= 32768
    assert ready["message"].startswith('TenantPolicy "team-a" has problems')
    assert ready["message"].endswith("kubectl apply --dry-run=server lists every problem)")
    invalid = invalid_policy_status("team-a", 1, problems, now=NOW)
    jsonschema.validate(invalid, status_schema())


def test_a_message_is_cut_on_a_character_boundary() -> None:
    cut = fit_message("é" * 40000)
    assert len(cut.encode()) <= 32768 and cut.startswith("é" * 100)
    assert fit_message("short") == "short"
