"""Checks of who may call migslice's servers (docs/security.md): the webhook's and the
extender's client authentication (``--client-ca-file``, ``--client-name``) and the certificate
their caller presents, and the NetworkPolicies in front of them."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.install import install_fix
from migslice.doctor.facts import Pem, Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding, warning
from migslice.doctor.tls import CertificateTextError, client_problem, load_pem_chain
from migslice.objects.json import JsonObject, items, mapping, text

WEBHOOK_CLIENT_AUTH = "webhook-client-auth"
EXTENDER_CLIENT_AUTH = "extender-client-auth"
NETWORK_POLICIES = "network-policies"
WEBHOOK_CLIENT_SECRET = "migslice-webhook-client"
EXTENDER_CLIENT_SECRET = "migslice-extender-client"
RENEW_WARNING_DAYS = 30


@dataclass(frozen=True, slots=True)
class ClientAuthFacts:
    """A server's Deployment, the CA its ``--client-ca-file`` names (None: no such flag) and
    its ``--client-name`` names, and the certificate its caller presents (None: none known;
    ``client.problem`` says why it could not be read)."""

    deployment: JsonObject | None
    ca: Pem | None
    client_names: tuple[str, ...]
    client: Pem | None


def client_names(value: str | None) -> tuple[str, ...]:
    return tuple(n for n in (value or "").split(",") if n)


def _presented_problem(facts: ClientAuthFacts, now: float) -> tuple[Verdict, str] | None:
    """Whether the server would refuse the client certificate ``facts.client``: (verdict, why),
    a warning when it merely expires soon; None when it accepts it."""
    assert facts.ca is not None and facts.client is not None
    if facts.ca.data is None:
        return Verdict.WARNING, f"the client CA is not checked: {facts.ca.problem}"
    if facts.client.data is None:
        return Verdict.WARNING, f"the client certificate is not checked: {facts.client.problem}"
    try:
        chain = load_pem_chain(facts.client.data, facts.client.source)
        roots = load_pem_chain(facts.ca.data, facts.ca.source)
    except CertificateTextError as error:
        return Verdict.FAILED, str(error)
    when = datetime.datetime.fromtimestamp(now, datetime.UTC)
    problem = client_problem(chain, roots, facts.client_names, when)
    if problem:
        return Verdict.FAILED, problem
    left = chain[0].not_valid_after_utc - when
    if left < datetime.timedelta(days=RENEW_WARNING_DAYS):
        until = f"{chain[0].not_valid_after_utc:%Y-%m-%d}"
        return Verdict.WARNING, f"it expires {until}, in less than {RENEW_WARNING_DAYS} days"
    return None


def _requires(facts: ClientAuthFacts) -> str:
    assert facts.ca is not None
    named = ", ".join(facts.client_names) or "any name"
    return f"a client certificate from {facts.ca.source} naming {named}"


def judge_webhook_client_auth(facts: ClientAuthFacts, settings: Settings) -> Finding:
    namespace = settings.namespace
    name = names.WEBHOOK_SERVICE
    if facts.deployment is None:
        return warning(
            WEBHOOK_CLIENT_AUTH,
            f"Deployment {namespace}/{name} not found: not checked",
            install_fix(namespace),
        )
    if facts.ca is None:
        return warning(
            WEBHOOK_CLIENT_AUTH,
            f"Deployment {name} runs without --client-ca-file: /mutate and /validate answer "
            "any caller that reaches the webhook's port, and a forged AdmissionReview holds a "
            "tenant's quota for the hold (45 s)",
            f"helm upgrade migslice charts/migslice -n {namespace} --reset-then-reuse-values --set "
            "webhook.clientAuth.issueCertificate=true; have kube-apiserver present Secret "
            f"{namespace}/{WEBHOOK_CLIENT_SECRET} (its --admission-control-config-file, "
            "NOTES.txt); then --set webhook.clientAuth.enabled=true (docs/security.md)",
        )
    requires = f"Deployment {name} answers /mutate and /validate only to {_requires(facts)}"
    if facts.client is None:
        return finding(WEBHOOK_CLIENT_AUTH, [], requires)
    problem = _presented_problem(facts, settings.now)
    if problem is None:
        return finding(
            WEBHOOK_CLIENT_AUTH,
            [],
            f"{requires}; {facts.client.source} holds one (the copy kube-apiserver presents "
            "is not visible here)",
        )
    _, why = problem  # kube-apiserver's copy may be as stale: a warning either way
    return finding(
        WEBHOOK_CLIENT_AUTH,
        [
            Problem(
                Verdict.WARNING,
                f"{facts.client.source}, the certificate for kube-apiserver: {why}",
                f"helm upgrade migslice charts/migslice -n {namespace} --reset-then-reuse-values "
                "(the certificate Jobs renew it), then copy it to the control plane again "
                "(NOTES.txt)",
            )
        ],
        requires,
    )


def judge_extender_client_auth(facts: ClientAuthFacts, settings: Settings) -> Finding:
    namespace = settings.namespace
    name = names.EXTENDER_SERVICE
    upgrade = f"helm upgrade migslice charts/migslice -n {namespace} --reset-then-reuse-values"
    if facts.deployment is None:
        return warning(
            EXTENDER_CLIENT_AUTH,
            f"Deployment {namespace}/{name} not found: not checked",
            install_fix(namespace),
        )
    if facts.ca is None:
        return warning(
            EXTENDER_CLIENT_AUTH,
            f"Deployment {name} runs without --client-ca-file: filter and prioritize answer "
            "any caller that reaches the extender's port",
            f"{upgrade} --set extender.clientAuth.enabled=true",
        )
    requires = f"Deployment {name} answers filter and prioritize only to {_requires(facts)}"
    if facts.client is None:
        return finding(
            EXTENDER_CLIENT_AUTH,
            [
                Problem(
                    Verdict.FAILED,
                    f"{requires}, and migslice-scheduler presents none (its extender "
                    "tlsConfig has no certFile or certData): every filter call is refused and "
                    "no GPU pod is scheduled",
                    f"{upgrade} --set extender.clientAuth.enabled=true (the scheduler then "
                    f"presents Secret {namespace}/{EXTENDER_CLIENT_SECRET})",
                )
            ],
            "",
        )
    problem = _presented_problem(facts, settings.now)
    if problem is None:
        return finding(
            EXTENDER_CLIENT_AUTH,
            [],
            f"{requires}; migslice-scheduler presents {facts.client.source}",
        )
    verdict, why = problem
    fix = (
        f"{upgrade} (the certificate Jobs issue it anew) && kubectl -n {namespace} rollout "
        f"restart deploy/{names.SCHEDULER_DEPLOYMENT}"
    )
    detail = f"migslice-scheduler presents {facts.client.source}, which the extender refuses"
    if verdict is Verdict.WARNING:
        detail = f"migslice-scheduler presents {facts.client.source}"
    return finding(EXTENDER_CLIENT_AUTH, [Problem(verdict, f"{detail}: {why}", fix)], requires)


# -- NetworkPolicies ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetworkPolicyFacts:
    """The NetworkPolicies of the release namespace (None: not readable as a list) and the
    pod labels of each server's Deployment (None: no Deployment)."""

    policies: Sequence[JsonObject] | None
    pod_labels: dict[str, dict[str, str] | None]


def _selects(policy: JsonObject, labels: dict[str, str]) -> bool:
    """Whether the policy's podSelector selects pods with ``labels`` for ingress."""
    spec = mapping(policy.get("spec"))
    types = [text(t) for t in items(spec.get("policyTypes"))] or ["Ingress"]
    if "Ingress" not in types:
        return False
    selector = mapping(spec.get("podSelector"))
    wanted = mapping(selector.get("matchLabels"))
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    for expression in items(selector.get("matchExpressions")):
        rule = mapping(expression)
        key, operator = text(rule.get("key")) or "", text(rule.get("operator"))
        values = {text(v) for v in items(rule.get("values"))}
        present = key in labels
        if (
            (operator == "In" and (not present or labels[key] not in values))
            or (operator == "NotIn" and present and labels[key] in values)
            or (operator == "Exists" and not present)
            or (operator == "DoesNotExist" and present)
        ):
            return False
    return True


def _name(policy: JsonObject) -> str:
    return text(mapping(policy.get("metadata")).get("name")) or "?"


def judge_network_policies(facts: NetworkPolicyFacts, settings: Settings) -> Finding:
    namespace = settings.namespace
    fix = (
        f"helm upgrade migslice charts/migslice -n {namespace} --reset-then-reuse-values --set "
        "networkPolicy.enabled=true (and networkPolicy.webhook.from, networkPolicy.metrics.from: "
        "docs/security.md)"
    )
    if facts.policies is None:
        return warning(
            NETWORK_POLICIES,
            "the API server serves no networking.k8s.io/v1 NetworkPolicies: not checked",
        )
    problems: list[Problem] = []
    covered: list[str] = []
    for server, labels in sorted(facts.pod_labels.items()):
        if labels is None:
            continue
        selecting = sorted(_name(p) for p in facts.policies if _selects(p, labels))
        if selecting:
            covered.append(f"{server} ({', '.join(selecting)})")
        else:
            problems.append(
                Problem(
                    Verdict.WARNING,
                    f"no NetworkPolicy in {namespace} selects the {server}'s pods: its port "
                    "admits every source the network lets through",
                    fix,
                )
            )
    if not covered and not problems:
        return finding(NETWORK_POLICIES, [], "no server Deployment to check")
    ok_detail = f"NetworkPolicies select the pods of {_joined(covered)}" if covered else ""
    return finding(NETWORK_POLICIES, problems, ok_detail)


def _joined(parts: Sequence[str]) -> str:
    return " and ".join(parts)
