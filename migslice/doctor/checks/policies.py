"""The TenantPolicies: each parses and the catalog can serve it, and no namespace has two."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from migslice.doctor.checks.install import install_fix
from migslice.doctor.checks.nodes import listing
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding
from migslice.mig import CATALOG
from migslice.objects.json import JsonObject, mapping, text
from migslice.policy import PolicyError, TenantPolicy, check_against_catalog, parse_tenant_policy
from migslice.policy.tenancy import Tenancy

POLICIES_CHECK = "tenant-policies"


@dataclass(frozen=True, slots=True)
class PolicyFacts:
    """``policies``: every TenantPolicy (None: the API server does not serve them);
    ``namespaces``: every Namespace (selectors are evaluated on their labels)."""

    policies: Sequence[JsonObject] | None
    namespaces: Sequence[JsonObject]


def judge_tenant_policies(facts: PolicyFacts, settings: Settings) -> Finding:
    if facts.policies is None:
        return finding(
            POLICIES_CHECK,
            [
                Problem(
                    Verdict.FAILED,
                    "TenantPolicies are not served (the CRD is missing)",
                    install_fix(settings.namespace),
                )
            ],
            "",
        )
    if not facts.policies:
        return finding(
            POLICIES_CHECK,
            [
                Problem(
                    Verdict.WARNING,
                    "no TenantPolicy: GPU pods outside the excluded namespaces are denied "
                    "(or admitted untouched with webhook.unmatchedNamespaces=allow)",
                    "kubectl apply -f manifests/examples/tenantpolicy-inference.yaml "
                    "(docs/policy.md)",
                )
            ],
            "",
        )
    problems: list[Problem] = []
    valid: list[TenantPolicy] = []
    for raw in facts.policies:
        name = text(mapping(raw.get("metadata")).get("name")) or "?"
        fix = f"kubectl edit tenantpolicy {name} (the fields named)"
        try:
            policy = parse_tenant_policy(raw)
        except PolicyError as error:
            problems.append(Problem(Verdict.FAILED, str(error), fix))
            continue
        errors = check_against_catalog(policy, CATALOG)
        if errors:
            listed = "; ".join(str(e) for e in errors)
            said = f'TenantPolicy "{name}" asks what the catalog cannot serve: {listed}'
            problems.append(Problem(Verdict.FAILED, said, fix))
        valid.append(policy)
    problems.extend(_overlaps(valid, facts.namespaces))
    return finding(
        POLICIES_CHECK,
        problems,
        f"{_count(len(facts.policies))} valid, no namespace selected by two",
    )


def _overlaps(policies: Sequence[TenantPolicy], namespaces: Sequence[JsonObject]) -> list[Problem]:
    """One problem per group of policies that select the same namespaces."""
    tenancy = Tenancy()
    for raw in namespaces:
        metadata = mapping(raw.get("metadata"))
        labels = {k: v for k, v in mapping(metadata.get("labels")).items() if isinstance(v, str)}
        name = text(metadata.get("name"))
        if name:
            tenancy.put_namespace(name, labels)
    for policy in policies:
        tenancy.put_policy(policy)
    shared: dict[tuple[str, ...], list[str]] = {}
    for namespace in sorted(tenancy.known_namespaces()):
        holders = tuple(p.name for p in tenancy.selecting(namespace))
        if len(holders) > 1:
            shared.setdefault(holders, []).append(namespace)
    return [
        Problem(
            Verdict.FAILED,
            f"TenantPolicies {_quoted(holders)} all select namespace(s) {listing(spaces)}: GPU "
            "pods there are denied",
            f"kubectl edit tenantpolicy {holders[-1]} (spec.namespaces, spec.namespaceSelector)",
        )
        for holders, spaces in sorted(shared.items())
    ]


def _count(policies: int) -> str:
    return f"{policies} TenantPolic{'y' if policies == 1 else 'ies'}"


def _quoted(policy_names: Sequence[str]) -> str:
    return " and ".join('"' + name + '"' for name in policy_names)
