"""Checks of the scheduling side: migslice-scheduler running and leading, the extender
answering, and the scheduler trusting the extender's certificate."""

from __future__ import annotations

from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.install import install_fix
from migslice.doctor.checks.serving import trust_problem, url_host
from migslice.doctor.facts import Pem, Settings
from migslice.doctor.findings import Finding, Problem, Verdict, failed, finding
from migslice.objects.clusterfile import ClusterFileError, load_yaml_documents
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.times import parse_micro_epoch_s

SCHEDULER_CHECK = "scheduler"
EXTENDER_REACHABLE = "extender-reachable"
EXTENDER_TRUSTED = "extender-trusted"
MIN_LEASE_SLACK_S = 30.0


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """A KubeSchedulerConfiguration as the scheduler's pods read it (``source`` says from
    where), or why it could not be read (``problem``)."""

    source: str
    document: JsonObject | None = None
    problem: str = ""


def parse_scheduler_config(config_text: str, source: str) -> SchedulerConfig:
    """The configuration in ``config_text``, or its problem: not YAML, more than one document,
    nested or aliased past any configuration (:func:`load_yaml_documents`, which refuses
    what ``yaml.safe_load`` raised RecursionError on or expanded to billions of values), no
    mapping."""
    try:
        documents = load_yaml_documents(
            config_text, source, fix="write the configuration out without YAML aliases"
        )
    except ClusterFileError as error:
        return SchedulerConfig(source, problem=str(error))
    if len(documents) > 1:
        return SchedulerConfig(
            source,
            problem=f"{source} holds {len(documents)} YAML documents; kube-scheduler reads one",
        )
    document = documents[0] if documents else None
    if not isinstance(document, dict):
        return SchedulerConfig(source, problem=f"{source} is not a KubeSchedulerConfiguration")
    return SchedulerConfig(source, document)


def leader_lease(config: SchedulerConfig) -> str:
    """``namespace/name`` of the scheduler's leader-election Lease; "" when it elects none
    (kube-scheduler's defaults: on, ``kube-system/kube-scheduler``)."""
    election = mapping(mapping(config.document).get("leaderElection"))
    if election.get("leaderElect") is False:
        return ""
    namespace = text(election.get("resourceNamespace")) or "kube-system"
    return f"{namespace}/{text(election.get('resourceName')) or 'kube-scheduler'}"


def migslice_extender(config: SchedulerConfig) -> JsonObject | None:
    """The ``extenders`` entry that calls migslice's extender (its Service in ``urlPrefix``,
    else the only extender)."""
    extenders = [mapping(e) for e in items(mapping(config.document).get("extenders"))]
    for entry in extenders:
        if names.EXTENDER_SERVICE in (text(entry.get("urlPrefix")) or ""):
            return entry
    return extenders[0] if len(extenders) == 1 else None


# -- migslice-scheduler ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulerFacts:
    deployment: JsonObject | None
    config: SchedulerConfig
    lease_ref: str
    lease: JsonObject | None


def judge_scheduler(facts: SchedulerFacts, settings: Settings) -> Finding:
    namespace = settings.namespace
    name = names.SCHEDULER_DEPLOYMENT
    if facts.deployment is None:
        return failed(
            SCHEDULER_CHECK, f"Deployment {namespace}/{name} not found", install_fix(namespace)
        )
    look = (
        f"kubectl -n {namespace} describe deploy/{name} && "
        f"kubectl -n {namespace} logs deploy/{name}"
    )
    spec = mapping(facts.deployment.get("spec"))
    status = mapping(facts.deployment.get("status"))
    wanted = spec.get("replicas", 1)
    available = status.get("availableReplicas") or 0
    if wanted == 0:
        return failed(
            SCHEDULER_CHECK,
            f"Deployment {name} is scaled to 0 replicas",
            f"kubectl -n {namespace} scale deploy/{name} --replicas=2",
        )
    if not isinstance(available, int) or available < 1:
        return failed(SCHEDULER_CHECK, f"Deployment {name}: 0/{wanted} replicas available", look)
    running = f"Deployment {name} {available}/{wanted} available"
    if facts.config.problem:
        problem = Problem(Verdict.WARNING, f"Lease not checked: {facts.config.problem}", look)
        return finding(SCHEDULER_CHECK, [problem], running)
    if not facts.lease_ref:
        return finding(SCHEDULER_CHECK, [], f"{running}; leader election off")
    return finding(
        SCHEDULER_CHECK, _lease_problems(facts, settings, look), _lease_ok(facts, settings, running)
    )


def _lease_problems(facts: SchedulerFacts, settings: Settings, look: str) -> list[Problem]:
    ref = facts.lease_ref
    if facts.lease is None:
        return [Problem(Verdict.FAILED, f"Lease {ref} not found: no scheduler has led", look)]
    spec = mapping(facts.lease.get("spec"))
    holder = text(spec.get("holderIdentity")) or ""
    if not holder:
        return [Problem(Verdict.FAILED, f"Lease {ref} has no holder: no scheduler leads", look)]
    age, duration = _lease_age(spec, settings.now)
    if age is None:
        return [Problem(Verdict.FAILED, f"Lease {ref} held by {holder} has no renewTime", look)]
    if age > max(2 * duration, MIN_LEASE_SLACK_S):
        return [
            Problem(
                Verdict.FAILED,
                f"Lease {ref} held by {holder}, last renewed {age:.0f}s ago (lease "
                f"{duration:.0f}s): the leader stopped renewing it",
                look,
            )
        ]
    return []


def _lease_ok(facts: SchedulerFacts, settings: Settings, running: str) -> str:
    spec = mapping(mapping(facts.lease).get("spec"))
    age, _ = _lease_age(spec, settings.now)
    renewed = "" if age is None else f", renewed {max(age, 0.0):.0f}s ago"
    return f"{running}; Lease {facts.lease_ref} held by {text(spec.get('holderIdentity'))}{renewed}"


def _lease_age(spec: JsonObject, now: float) -> tuple[float | None, float]:
    duration = spec.get("leaseDurationSeconds")
    seconds = float(duration) if isinstance(duration, int) and duration > 0 else 15.0
    renewed = parse_micro_epoch_s(spec.get("renewTime"))
    return (None if renewed is None else now - renewed), seconds


# -- trust between migslice-scheduler and the extender --------------------------------------------


@dataclass(frozen=True, slots=True)
class ExtenderTrustFacts:
    """The scheduler's configuration and its migslice extender entry, the CA that entry
    trusts (``caData``, or ``caFile`` read from the volume the scheduler mounts it from), and
    the certificate the extender serves."""

    config: SchedulerConfig
    entry: JsonObject | None
    ca: Pem
    served: Pem


def extender_server_name(entry: JsonObject) -> str:
    tls = mapping(entry.get("tlsConfig"))
    return text(tls.get("serverName")) or url_host(text(entry.get("urlPrefix")) or "")[0]


def judge_extender_trust(facts: ExtenderTrustFacts, settings: Settings) -> Finding:
    namespace = settings.namespace
    if facts.config.problem:
        return failed(EXTENDER_TRUSTED, facts.config.problem, install_fix(namespace))
    entry = facts.entry
    if entry is None:
        return failed(
            EXTENDER_TRUSTED,
            f"{facts.config.source} calls no migslice extender (extenders[].urlPrefix)",
            install_fix(namespace),
        )
    url = text(entry.get("urlPrefix")) or ""
    tls = mapping(entry.get("tlsConfig"))
    if entry.get("enableHTTPS") is not True and not url.startswith("https://"):
        return failed(
            EXTENDER_TRUSTED,
            f"the scheduler calls {url} without TLS (enableHTTPS is not true); the extender "
            "serves HTTPS",
            f"set enableHTTPS: true and tlsConfig.caFile in {facts.config.source}",
        )
    if tls.get("insecure") is True:
        return finding(
            EXTENDER_TRUSTED,
            [
                Problem(
                    Verdict.WARNING,
                    "tlsConfig.insecure is true: the scheduler does not check the extender's "
                    "certificate",
                    f"set tlsConfig.caFile or caData in {facts.config.source}",
                )
            ],
            "",
        )
    server_name = extender_server_name(entry)
    problem = trust_problem(facts.served, facts.ca, server_name, settings.now)
    if problem:
        service = names.EXTENDER_SERVICE
        fix = (
            f"migslice certs --service {service} --namespace {namespace} "
            f"--out /tmp/{service}-certs --secret {service}-tls && kubectl -n {namespace} "
            f"rollout restart deploy/{service} deploy/{names.SCHEDULER_DEPLOYMENT}"
        )
        return failed(
            EXTENDER_TRUSTED,
            f"{facts.ca.source} does not verify the extender's certificate: {problem}",
            fix,
        )
    return finding(
        EXTENDER_TRUSTED,
        [],
        f"{facts.ca.source} verifies the certificate of {facts.served.source} for {server_name}",
    )
