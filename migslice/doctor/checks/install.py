"""Checks of what the chart installs for admission: the TenantPolicy CRD, the webhook Service,
and the caBundle of both webhook configurations against the certificate the webhook serves."""

from __future__ import annotations

import base64
import binascii
import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.serving import service_dns_name, trust_problem, url_host
from migslice.doctor.facts import Pem, Settings
from migslice.doctor.findings import Finding, Problem, Verdict, failed, finding
from migslice.doctor.tls import CertificateTextError, load_pem_chain
from migslice.objects.json import JsonObject, items, mapping, text

CRD_CHECK = "tenantpolicy-crd"
WEBHOOK_REACHABLE = "webhook-reachable"
WEBHOOK_CA_BUNDLE = "webhook-ca-bundle"
CERT_MANAGER_INJECT = "cert-manager.io/inject-ca-from"
RENEW_WARNING_DAYS = 30


def install_fix(namespace: str) -> str:
    return (
        f"helm upgrade --install migslice charts/migslice -n {namespace} "
        "(or kubectl apply --server-side -k manifests)"
    )


# -- the CRD ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CrdFacts:
    raw_crd: JsonObject | None


def judge_crd(facts: CrdFacts, settings: Settings) -> Finding:
    crd = facts.raw_crd
    fix = install_fix(settings.namespace)
    if crd is None:
        return failed(CRD_CHECK, f"CustomResourceDefinition {names.POLICY_CRD} not found", fix)
    spec = mapping(crd.get("spec"))
    versions = {text(mapping(v).get("name")): mapping(v) for v in items(spec.get("versions"))}
    version = versions.get(names.VERSION)
    problems: list[Problem] = []
    if version is None:
        have = ", ".join(sorted(v for v in versions if v)) or "none"
        problems.append(
            Problem(
                Verdict.FAILED, f"{names.POLICY_CRD} has no version {names.VERSION} ({have})", fix
            )
        )
    else:
        for field in ("served", "storage"):
            if version.get(field) is not True:
                problems.append(
                    Problem(Verdict.FAILED, f"version {names.VERSION} is not {field}", fix)
                )
    established = _condition(crd, "Established")
    if established is None or text(established.get("status")) != "True":
        said = text(mapping(established).get("message")) or "no Established condition"
        problems.append(
            Problem(Verdict.FAILED, f"{names.POLICY_CRD} not Established ({said})", fix)
        )
    return finding(
        CRD_CHECK,
        problems,
        f"{names.POLICY_CRD}: {names.VERSION} served and stored, Established",
    )


def _condition(raw: JsonObject, kind: str) -> JsonObject | None:
    for condition in items(mapping(raw.get("status")).get("conditions")):
        if text(mapping(condition).get("type")) == kind:
            return mapping(condition)
    return None


# -- the webhook configurations' caBundle ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WebhookTrustFacts:
    """``configurations``: (kind, the raw configuration or None). ``served``: the certificate
    the webhook serves (seen on the connection, or the Secret its Deployment mounts)."""

    configurations: Sequence[tuple[str, JsonObject | None]]
    served: Pem


def migslice_hooks(raw_configuration: JsonObject) -> list[JsonObject]:
    """The webhooks of a configuration that call migslice's webhook (by Service or URL)."""
    found = []
    for hook in (mapping(h) for h in items(raw_configuration.get("webhooks"))):
        client = mapping(hook.get("clientConfig"))
        service = mapping(client.get("service"))
        if text(service.get("name")) == names.WEBHOOK_SERVICE or (
            text(client.get("url")) and (text(hook.get("name")) or "").endswith(names.GROUP)
        ):
            found.append(hook)
    return found


def server_name_of(hook: JsonObject) -> str:
    """The name kube-apiserver checks the webhook's certificate against."""
    client = mapping(hook.get("clientConfig"))
    service = mapping(client.get("service"))
    if service:
        return service_dns_name(
            text(service.get("name")) or "", text(service.get("namespace")) or ""
        )
    return url_host(text(client.get("url")) or "")[0]


def judge_webhook_trust(facts: WebhookTrustFacts, settings: Settings) -> Finding:
    problems: list[Problem] = []
    checked: list[str] = []
    certs_fix = (
        f"migslice certs --service {names.WEBHOOK_SERVICE} --namespace {settings.namespace} "
        f"--out /tmp/migslice-webhook-certs --secret {names.WEBHOOK_SERVICE}-tls "
        f"--webhook-configuration {names.WEBHOOK_CONFIGURATION}"
    )
    for kind, raw in facts.configurations:
        if raw is None:
            problems.append(
                Problem(
                    Verdict.FAILED,
                    f"{kind} {names.WEBHOOK_CONFIGURATION} not found",
                    install_fix(settings.namespace),
                )
            )
            continue
        injected = text(
            mapping(mapping(raw.get("metadata")).get("annotations")).get(CERT_MANAGER_INJECT)
        )
        fix = (
            f"cert-manager's cainjector fills caBundle from Certificate {injected} "
            f"({CERT_MANAGER_INJECT}): kubectl -n cert-manager logs deploy/cert-manager-cainjector"
            if injected
            else certs_fix
        )
        hooks = migslice_hooks(raw)
        if not hooks:
            problems.append(
                Problem(
                    Verdict.FAILED,
                    f"{kind}: no webhook calls Service {names.WEBHOOK_SERVICE}",
                    install_fix(settings.namespace),
                )
            )
        for hook in hooks:
            problem = _hook_problem(kind, hook, facts.served, settings.now)
            if problem:
                problems.append(Problem(Verdict.FAILED, problem, fix))
        checked.append(kind)
    if facts.served.data is None and not problems:
        return finding(
            WEBHOOK_CA_BUNDLE,
            [Problem(Verdict.WARNING, f"not compared: {facts.served.problem}")],
            "",
        )
    expiry = _expiry_problem(facts.served, settings.now, certs_fix)
    if expiry is not None:
        problems.append(expiry)
    return finding(
        WEBHOOK_CA_BUNDLE,
        problems,
        f"the caBundle of {' and '.join(checked)} verifies the certificate of "
        f"{facts.served.source}",
    )


def _hook_problem(kind: str, hook: JsonObject, served: Pem, now: float) -> str:
    name = text(hook.get("name")) or "?"
    bundle = text(mapping(hook.get("clientConfig")).get("caBundle")) or ""
    if not bundle:
        return f"{kind} webhook {name}: caBundle is empty"
    try:
        ca_pem = base64.b64decode(bundle, validate=True)
    except (binascii.Error, ValueError):
        return f"{kind} webhook {name}: caBundle is not base64"
    if served.data is None:
        return ""  # nothing to compare it with: said once, as a warning
    problem = trust_problem(served, Pem(f"{kind} caBundle", ca_pem), server_name_of(hook), now)
    if problem:
        return f"{kind} webhook {name}: caBundle does not verify the serving certificate: {problem}"
    return ""


def _expiry_problem(served: Pem, now: float, fix: str) -> Problem | None:
    if served.data is None:
        return None
    try:
        leaf = load_pem_chain(served.data, served.source)[0]
    except (CertificateTextError, IndexError):
        return None
    left = leaf.not_valid_after_utc - datetime.datetime.fromtimestamp(now, datetime.UTC)
    if datetime.timedelta(0) <= left < datetime.timedelta(days=RENEW_WARNING_DAYS):
        return Problem(
            Verdict.WARNING,
            f"the serving certificate expires {leaf.not_valid_after_utc:%Y-%m-%d} "
            f"(in {left.days} days)",
            fix,
        )
    return None
