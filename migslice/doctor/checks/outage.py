"""What stops while migslice is down (docs/outages.md): each tenant's namespaces fail-closed or
fail-open, the admission policies fail-open needs, and the extender's ``ignorable``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.install import install_fix, migslice_hooks
from migslice.doctor.checks.nodes import listing
from migslice.doctor.checks.scheduler import SchedulerConfig, migslice_extender
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.policy import PolicyError, parse_tenant_policy
from migslice.policy.tenancy import Tenancy

OUTAGE_CHECK = "outage-modes"

FAIL_OPEN_OBJECTS = (
    ("MutatingAdmissionPolicy", names.GATE_POLICY),
    ("MutatingAdmissionPolicyBinding", names.GATE_POLICY),
    ("ValidatingAdmissionPolicy", names.UNAVAILABLE_POLICY),
    ("ValidatingAdmissionPolicyBinding", names.UNAVAILABLE_POLICY),
    ("ValidatingAdmissionPolicy", names.GATE_OWNER_POLICY),
    ("ValidatingAdmissionPolicyBinding", names.GATE_OWNER_POLICY),
)
"""What makes a fail-open namespace keep quota while the webhook is down: the gate, the
refusal of sized pods, and the gate's owner."""


@dataclass(frozen=True, slots=True)
class OutageFacts:
    """``mutating``: the MutatingWebhookConfiguration (None: missing); ``objects``: each of
    :data:`FAIL_OPEN_OBJECTS` by (kind, name), None where missing or not served (Kubernetes
    before 1.36); ``policies`` and ``namespaces``: every TenantPolicy and Namespace;
    ``scheduler``: migslice-scheduler's configuration; ``excluded``: the namespaces the
    webhook never admits (``--exclude-namespaces`` of its Deployment)."""

    mutating: JsonObject | None
    objects: Mapping[tuple[str, str], JsonObject | None]
    policies: Sequence[JsonObject]
    namespaces: Sequence[JsonObject]
    scheduler: SchedulerConfig
    excluded: frozenset[str]


def _has_expression(hook: JsonObject, operator: str) -> bool:
    for expression in items(mapping(hook.get("namespaceSelector")).get("matchExpressions")):
        found = mapping(expression)
        values = items(found.get("values"))
        if (
            text(found.get("key")) == names.OUTAGE_LABEL
            and text(found.get("operator")) == operator
            and names.OUTAGE_OPEN in values
        ):
            return True
    return False


def _pod_hooks(raw: JsonObject | None) -> list[JsonObject]:
    return [
        hook
        for hook in migslice_hooks(raw or {})
        if any("pods" in items(mapping(rule).get("resources")) for rule in items(hook.get("rules")))
    ]


def judge_outage_modes(facts: OutageFacts, settings: Settings) -> Finding:
    problems: list[Problem] = []
    fix = install_fix(settings.namespace)
    hooks = _pod_hooks(facts.mutating)
    open_hooks = [h for h in hooks if _has_expression(h, "In")]
    closed_hooks = [h for h in hooks if not _has_expression(h, "In")]
    missing = [f"{kind} {name}" for (kind, name), raw in facts.objects.items() if raw is None]
    fail_open = bool(open_hooks) and not missing
    if open_hooks and missing:
        problems.append(
            Problem(
                Verdict.FAILED,
                f"the webhook {text(open_hooks[0].get('name'))} ignores failures for namespaces "
                f"labelled {names.OUTAGE_LABEL}={names.OUTAGE_OPEN}, but {listing(missing)} "
                "is missing: GPU pods created there while the webhook is down would skip quota",
                fix,
            )
        )
    for hook in closed_hooks:
        if text(hook.get("failurePolicy")) == "Ignore":
            problems.append(
                Problem(
                    Verdict.WARNING,
                    f"the webhook {text(hook.get('name'))} has failurePolicy Ignore: while it "
                    "is down, GPU pods of its namespaces are created unchecked, past quota; "
                    f"label such namespaces {names.OUTAGE_LABEL}={names.OUTAGE_OPEN} instead",
                    f"helm upgrade migslice charts/migslice -n {settings.namespace} "
                    "--reset-then-reuse-values --set webhook.failurePolicy=Fail",
                )
            )
    labels = _namespace_labels(facts.namespaces)
    labelled_open = sorted(
        ns
        for ns, found in labels.items()
        if found.get(names.OUTAGE_LABEL) == names.OUTAGE_OPEN and ns not in facts.excluded
    )
    if labelled_open and not open_hooks:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"namespace(s) {listing(labelled_open)} are labelled "
                f"{names.OUTAGE_LABEL}={names.OUTAGE_OPEN}, but the chart's fail-open objects "
                "are not installed (outage.failOpen.enabled, Kubernetes 1.36+): they are "
                "fail-closed",
                f"helm upgrade migslice charts/migslice -n {settings.namespace} "
                "--reset-then-reuse-values --set outage.failOpen.enabled=true",
            )
        )
    opened = set(labelled_open) if fail_open else set()
    detail = "; ".join(
        [
            _tenants(facts.policies, labels, opened, facts.excluded),
            _policies_detail(fail_open, missing),
            _extender_detail(facts.scheduler),
        ]
    )
    return finding(OUTAGE_CHECK, problems, detail)


def _namespace_labels(namespaces: Sequence[JsonObject]) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for raw in namespaces:
        metadata = mapping(raw.get("metadata"))
        name = text(metadata.get("name"))
        if name:
            found[name] = {
                k: v for k, v in mapping(metadata.get("labels")).items() if isinstance(v, str)
            }
    return found


def _tenants(
    policies: Sequence[JsonObject],
    labels: Mapping[str, Mapping[str, str]],
    opened: set[str],
    excluded: frozenset[str],
) -> str:
    tenancy = Tenancy()
    for name, found in labels.items():
        tenancy.put_namespace(name, dict(found))
    valid = []
    for raw in policies:
        try:
            valid.append(parse_tenant_policy(raw))
        except PolicyError:
            continue  # the tenant-policies check names it
    for policy in valid:
        tenancy.put_policy(policy)
    spaces: dict[str, list[str]] = {p.name: [] for p in valid}
    for namespace in sorted(labels):
        if namespace in excluded:
            continue
        for policy in tenancy.selecting(namespace):
            spaces[policy.name].append(namespace)
    if not spaces:
        return "no TenantPolicy"
    said = []
    for tenant, namespaces in sorted(spaces.items()):
        open_ones = [ns for ns in namespaces if ns in opened]
        closed = [ns for ns in namespaces if ns not in opened]
        if not namespaces:
            said.append(f'tenant "{tenant}": no namespace yet')
        elif open_ones and closed:
            said.append(
                f'tenant "{tenant}": fail-open {listing(open_ones)}, fail-closed {listing(closed)}'
            )
        else:
            mode = "fail-open" if open_ones else "fail-closed"
            said.append(f'tenant "{tenant}": {mode} ({listing(namespaces)})')
    return "; ".join(said)


def _policies_detail(fail_open: bool, missing: Sequence[str]) -> str:
    if fail_open:
        return (
            f"fail-open policies present ({names.GATE_POLICY}, {names.UNAVAILABLE_POLICY}, "
            f"{names.GATE_OWNER_POLICY})"
        )
    if len(missing) == len(FAIL_OPEN_OBJECTS):
        return "no fail-open policies: every namespace is fail-closed"
    return f"fail-open incomplete ({listing(missing)} missing)"


def _extender_detail(config: SchedulerConfig) -> str:
    if config.document is None:
        return "extender ignorable: not read"
    entry = migslice_extender(config)
    if entry is None:
        return "extender ignorable: no migslice extender configured"
    if entry.get("ignorable") is True:
        return (
            "extender ignorable: true (while it is down, migslice-scheduler places GPU pods "
            "by its own counts, blind to MIG geometry)"
        )
    return "extender ignorable: false (while it is down, GPU pods wait unscheduled)"
