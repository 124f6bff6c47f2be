"""Each check's facts, read from the cluster (the shell of the room): which objects to GET,
and the references to follow (a Deployment's ``--tls-cert`` to the Secret it mounts, the
scheduler's ``--config`` to its ConfigMap, the configuration's ``caFile`` to its Secret).
The judgements over these facts are pure (:mod:`migslice.doctor.checks`)."""

from __future__ import annotations

import base64
import binascii

from migslice import names
from migslice.doctor.checks.gpu_operator import GpuOperatorFacts
from migslice.doctor.checks.install import CrdFacts, WebhookTrustFacts, migslice_hooks
from migslice.doctor.checks.nodes import AgentFacts, NodesFacts
from migslice.doctor.checks.outage import FAIL_OPEN_OBJECTS, OutageFacts
from migslice.doctor.checks.policies import PolicyFacts
from migslice.doctor.checks.scheduler import (
    ExtenderTrustFacts,
    SchedulerConfig,
    SchedulerFacts,
    leader_lease,
    migslice_extender,
    parse_scheduler_config,
)
from migslice.doctor.checks.serving import url_host
from migslice.doctor.checks.trust import (
    WEBHOOK_CLIENT_SECRET,
    ClientAuthFacts,
    NetworkPolicyFacts,
    client_names,
)
from migslice.doctor.facts import Pem, Probe, Settings
from migslice.doctor.podspec import (
    FileSource,
    command_line,
    container_with_flag,
    file_source,
    flag_value,
    pod_spec,
)
from migslice.doctor.reading import ClusterReader
from migslice.kube.gpu_operator import CLUSTER_POLICIES_PATH
from migslice.kube.transport import ApiError, RawObject
from migslice.objects.json import JsonObject, mapping, text

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
WEBHOOK_CONFIGURATIONS = (
    ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
    ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
)
DEFAULT_MIG_CONFIG_MAP = f"{names.GPU_OPERATOR_NAMESPACE}/{names.MIG_CONFIG_MAP}"


def _apps(reader: ClusterReader, kind: str, namespace: str, name: str) -> RawObject | None:
    return reader.get(f"/apis/apps/v1/namespaces/{namespace}/{kind}/{name}")


def read_deployment(reader: ClusterReader, settings: Settings, name: str) -> RawObject | None:
    return _apps(reader, "deployments", settings.namespace, name)


# -- files of pods --------------------------------------------------------------------------------


def read_file(reader: ClusterReader, namespace: str, source: FileSource) -> Pem:
    """The bytes of ``source`` (a Secret or ConfigMap key in ``namespace``)."""
    where = f"{source.kind} {namespace}/{source.name} key {source.key}"
    resource = "secrets" if source.kind == "Secret" else "configmaps"
    try:
        raw = reader.get(f"/api/v1/namespaces/{namespace}/{resource}/{source.name}")
    except ApiError as error:
        return Pem(where, problem=f"cannot read {source.kind} {namespace}/{source.name} ({error})")
    if raw is None:
        return Pem(where, problem=f"{source.kind} {namespace}/{source.name} not found")
    plain = mapping(raw.get("data")).get(source.key)
    if source.kind == "ConfigMap" and isinstance(plain, str):
        return Pem(where, plain.encode())
    encoded = plain if source.kind == "Secret" else mapping(raw.get("binaryData")).get(source.key)
    if not isinstance(encoded, str):
        return Pem(
            where, problem=f"{source.kind} {namespace}/{source.name} has no key {source.key}"
        )
    try:
        return Pem(where, base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return Pem(where, problem=f"{where} is not base64")


def _mounted_file(
    reader: ClusterReader, settings: Settings, deployment: str, flag: str
) -> tuple[Pem, str]:
    """The file a Deployment's container names with ``flag``, and the path it names."""
    raw = read_deployment(reader, settings, deployment)
    what = f"{flag} of Deployment {settings.namespace}/{deployment}"
    if raw is None:
        return Pem(what, problem=f"Deployment {settings.namespace}/{deployment} not found"), ""
    spec = pod_spec(raw)
    found = container_with_flag(spec, flag)
    if found is None:
        return Pem(what, problem=f"Deployment {deployment} runs no container with {flag}"), ""
    container, path = found
    source = file_source(spec, container, path)
    if source is None:
        return Pem(what, problem=f"{what} ({path}) is on no Secret or ConfigMap volume"), path
    return read_file(reader, settings.namespace, source), path


def served_certificate(
    reader: ClusterReader, settings: Settings, probe: Probe, deployment: str
) -> Pem:
    """The certificate a server serves: as presented on a direct connection, else the file
    its Deployment serves from (``--tls-cert``, from the Secret it mounts)."""
    if probe.certificate_pem is not None:
        return Pem(f"the server at {probe.target}", probe.certificate_pem)
    pem, _ = _mounted_file(reader, settings, deployment, "--tls-cert")
    return pem


# -- the CRD and the webhook ----------------------------------------------------------------------


def gather_crd(reader: ClusterReader, settings: Settings) -> CrdFacts:
    return CrdFacts(reader.get(f"{CRDS}/{names.POLICY_CRD}"))


def webhook_configurations(reader: ClusterReader) -> list[tuple[str, JsonObject | None]]:
    return [
        (kind, reader.get(f"{ADMISSION}/{resource}/{names.WEBHOOK_CONFIGURATION}"))
        for kind, resource in WEBHOOK_CONFIGURATIONS
    ]


def gather_webhook_probe(reader: ClusterReader, settings: Settings) -> Probe:
    """``/healthz`` of the webhook as the configurations call it (Service or URL)."""
    for _, raw in webhook_configurations(reader):
        for hook in migslice_hooks(raw or {}):
            client = mapping(hook.get("clientConfig"))
            service = mapping(client.get("service"))
            if service:
                port = service.get("port")
                return reader.probe_service(
                    text(service.get("namespace")) or settings.namespace,
                    text(service.get("name")) or names.WEBHOOK_SERVICE,
                    port if isinstance(port, int) else 443,
                )
            url = text(client.get("url"))
            if url:
                return reader.probe_url(url)
    return reader.probe_service(settings.namespace, names.WEBHOOK_SERVICE, 443)


def release_elsewhere(reader: ClusterReader, settings: Settings) -> str:
    """A note when ``settings.namespace`` holds no webhook Deployment and migslice's webhook
    configuration calls a Service of another namespace (doctor run without the ``-n`` of a
    release installed elsewhere: every check says "not found" and to install it); else ""."""
    try:
        if read_deployment(reader, settings, names.WEBHOOK_SERVICE) is not None:
            return ""
        configurations = webhook_configurations(reader)
    except ApiError:
        return ""
    for kind, raw in configurations:
        for hook in migslice_hooks(raw or {}):
            service = mapping(mapping(hook.get("clientConfig")).get("service"))
            namespace = text(service.get("namespace"))
            if namespace and namespace != settings.namespace:
                return (
                    f"no Deployment {names.WEBHOOK_SERVICE} in {settings.namespace}, and {kind} "
                    f"{names.WEBHOOK_CONFIGURATION} calls Service {namespace}/"
                    f"{text(service.get('name'))}: if migslice is installed there, run "
                    f"`migslice doctor -n {namespace}`"
                )
    return ""


def gather_webhook_trust(reader: ClusterReader, settings: Settings) -> WebhookTrustFacts:
    probe = gather_webhook_probe(reader, settings)
    return WebhookTrustFacts(
        configurations=webhook_configurations(reader),
        served=served_certificate(reader, settings, probe, names.WEBHOOK_SERVICE),
    )


# -- the scheduler and the extender ---------------------------------------------------------------


def scheduler_config(reader: ClusterReader, settings: Settings) -> SchedulerConfig:
    pem, _ = _mounted_file(reader, settings, names.SCHEDULER_DEPLOYMENT, "--config")
    if pem.data is None:
        return SchedulerConfig(pem.source, problem=pem.problem)
    source = f"KubeSchedulerConfiguration ({pem.source})"
    return parse_scheduler_config(pem.data.decode("utf-8", "replace"), source)


def gather_scheduler(reader: ClusterReader, settings: Settings) -> SchedulerFacts:
    deployment = read_deployment(reader, settings, names.SCHEDULER_DEPLOYMENT)
    config = scheduler_config(reader, settings) if deployment is not None else SchedulerConfig("")
    lease_ref = leader_lease(config) if config.document is not None else ""
    lease = None
    if lease_ref:
        namespace, _, name = lease_ref.partition("/")
        lease = reader.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    return SchedulerFacts(deployment, config, lease_ref, lease)


def gather_extender_probe(reader: ClusterReader, settings: Settings) -> Probe:
    """``/healthz`` of the extender as the scheduler calls it (``urlPrefix``)."""
    config = scheduler_config(reader, settings)
    entry = migslice_extender(config) if config.document is not None else None
    url = text(mapping(entry).get("urlPrefix"))
    if not url:
        return reader.probe_service(settings.namespace, names.EXTENDER_SERVICE, 443)
    host, port = url_host(url)
    parts = host.split(".")
    if (
        len(parts) >= 3
        and parts[2] == "svc"
        and (len(parts) == 3 or parts[3:] == ["cluster", "local"])
    ):
        return reader.probe_service(parts[1], parts[0], port)
    return reader.probe_url(url)


def gather_extender_trust(reader: ClusterReader, settings: Settings) -> ExtenderTrustFacts:
    config = scheduler_config(reader, settings)
    entry = migslice_extender(config) if config.document is not None else None
    probe = gather_extender_probe(reader, settings)
    served = served_certificate(reader, settings, probe, names.EXTENDER_SERVICE)
    return ExtenderTrustFacts(config, entry, _trusted_ca(reader, settings, entry), served)


def _trusted_ca(reader: ClusterReader, settings: Settings, entry: JsonObject | None) -> Pem:
    tls = mapping(mapping(entry).get("tlsConfig"))
    ca_data = text(tls.get("caData"))
    if ca_data:
        try:
            return Pem("tlsConfig.caData", base64.b64decode(ca_data, validate=True))
        except (binascii.Error, ValueError):
            return Pem("tlsConfig.caData", problem="tlsConfig.caData is not base64")
    ca_file = text(tls.get("caFile"))
    if not ca_file:
        return Pem(
            "tlsConfig",
            problem="tlsConfig has neither caData nor caFile: the scheduler trusts only its "
            "system roots, which did not issue the extender's certificate",
        )
    raw = read_deployment(reader, settings, names.SCHEDULER_DEPLOYMENT)
    spec = pod_spec(raw)
    found = container_with_flag(spec, "--config")
    source = file_source(spec, found[0], ca_file) if found is not None else None
    if source is None:
        return Pem(
            f"tlsConfig.caFile {ca_file}",
            problem=f"tlsConfig.caFile {ca_file} is on no Secret or ConfigMap volume of the "
            "scheduler's pods: not checked",
        )
    pem = read_file(reader, settings.namespace, source)
    return Pem(f"tlsConfig.caFile ({pem.source})", pem.data, pem.problem)


# -- who may call the servers ------------------------------------------------------------------


def _client_ca(
    reader: ClusterReader, settings: Settings, deployment: str
) -> tuple[RawObject | None, Pem | None, tuple[str, ...]]:
    """A server's Deployment, the CA behind its ``--client-ca-file`` (None: no such flag) and
    its ``--client-name`` names."""
    raw = read_deployment(reader, settings, deployment)
    spec = pod_spec(raw)
    found = container_with_flag(spec, "--client-ca-file")
    if raw is None or found is None:
        return raw, None, ()
    container, path = found
    allowed = client_names(flag_value(command_line(container), "--client-name"))
    source = file_source(spec, container, path)
    if source is None:
        problem = f"--client-ca-file {path} is on no Secret or ConfigMap volume: not checked"
        return raw, Pem(f"--client-ca-file {path}", problem=problem), allowed
    pem = read_file(reader, settings.namespace, source)
    return raw, Pem(f"--client-ca-file ({pem.source})", pem.data, pem.problem), allowed


def gather_webhook_client_auth(reader: ClusterReader, settings: Settings) -> ClientAuthFacts:
    """The webhook's client CA, and the certificate the chart keeps for kube-apiserver (Secret
    migslice-webhook-client), if there is one."""
    raw, ca, allowed = _client_ca(reader, settings, names.WEBHOOK_SERVICE)
    client: Pem | None = None
    if ca is not None:
        path = f"/api/v1/namespaces/{settings.namespace}/secrets/{WEBHOOK_CLIENT_SECRET}"
        try:
            found = reader.get(path) is not None
        except ApiError as error:
            found = True
            client = Pem(f"Secret {WEBHOOK_CLIENT_SECRET}", problem=f"cannot read it ({error})")
        if found and client is None:
            source = FileSource("Secret", WEBHOOK_CLIENT_SECRET, "tls.crt")
            client = read_file(reader, settings.namespace, source)
    return ClientAuthFacts(raw, ca, allowed, client)


def gather_extender_client_auth(reader: ClusterReader, settings: Settings) -> ClientAuthFacts:
    """The extender's client CA, and the certificate migslice-scheduler presents to it (its
    extender entry's ``tlsConfig.certData``, or ``certFile`` followed to its volume)."""
    raw, ca, allowed = _client_ca(reader, settings, names.EXTENDER_SERVICE)
    if ca is None:
        return ClientAuthFacts(raw, ca, allowed, None)
    config = scheduler_config(reader, settings)
    entry = migslice_extender(config) if config.document is not None else None
    tls = mapping(mapping(entry).get("tlsConfig"))
    cert_data, cert_file = text(tls.get("certData")), text(tls.get("certFile"))
    client: Pem | None = None
    if cert_data:
        try:
            client = Pem("tlsConfig.certData", base64.b64decode(cert_data, validate=True))
        except (binascii.Error, ValueError):
            client = Pem("tlsConfig.certData", problem="tlsConfig.certData is not base64")
    elif cert_file:
        spec = pod_spec(read_deployment(reader, settings, names.SCHEDULER_DEPLOYMENT))
        found = container_with_flag(spec, "--config")
        source = file_source(spec, found[0], cert_file) if found is not None else None
        if source is None:
            client = Pem(
                f"tlsConfig.certFile {cert_file}",
                problem=f"tlsConfig.certFile {cert_file} is on no Secret or ConfigMap volume "
                "of the scheduler's pods",
            )
        else:
            pem = read_file(reader, settings.namespace, source)
            client = Pem(f"tlsConfig.certFile ({pem.source})", pem.data, pem.problem)
    return ClientAuthFacts(raw, ca, allowed, client)


def gather_network_policies(reader: ClusterReader, settings: Settings) -> NetworkPolicyFacts:
    policies = reader.list(
        f"/apis/networking.k8s.io/v1/namespaces/{settings.namespace}/networkpolicies"
    )
    labels: dict[str, dict[str, str] | None] = {}
    for server in (names.WEBHOOK_SERVICE, names.EXTENDER_SERVICE):
        raw = read_deployment(reader, settings, server)
        template = mapping(mapping(mapping(raw).get("spec")).get("template"))
        found = mapping(mapping(template.get("metadata")).get("labels"))
        labels[server.removeprefix("migslice-")] = (
            None if raw is None else {k: v for k, v in found.items() if isinstance(v, str)}
        )
    return NetworkPolicyFacts(policies, labels)


# -- the GPU Operator, the nodes, the policies ----------------------------------------------------


def mig_config_map(reader: ClusterReader, settings: Settings) -> str:
    """``namespace/name`` of the ConfigMap the extender writes (its ``--mig-config-map``)."""
    raw = read_deployment(reader, settings, names.EXTENDER_SERVICE)
    found = container_with_flag(pod_spec(raw), "--mig-config-map")
    return found[1] if found is not None and "/" in found[1] else DEFAULT_MIG_CONFIG_MAP


def gather_gpu_operator(reader: ClusterReader, settings: Settings) -> GpuOperatorFacts:
    crd = reader.get(f"{CRDS}/{names.CLUSTER_POLICY_CRD}")
    policies = (reader.list(CLUSTER_POLICIES_PATH) or []) if crd is not None else []
    where = mig_config_map(reader, settings)
    namespace, _, name = where.partition("/")
    config_map = reader.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    return GpuOperatorFacts(crd, policies, nodes(reader), where, config_map)


def nodes(reader: ClusterReader) -> list[RawObject]:
    return reader.list("/api/v1/nodes") or []


def gather_nodes(reader: ClusterReader, settings: Settings) -> NodesFacts:
    return NodesFacts(nodes(reader))


def gather_agent(reader: ClusterReader, settings: Settings) -> AgentFacts:
    daemonset = _apps(reader, "daemonsets", settings.namespace, names.AGENT_DAEMONSET)
    return AgentFacts(daemonset, nodes(reader) if daemonset is not None else [])


def gather_policies(reader: ClusterReader, settings: Settings) -> PolicyFacts:
    policies = reader.list(f"/apis/{names.GROUP}/{names.VERSION}/{names.POLICY_PLURAL}")
    namespaces = reader.list("/api/v1/namespaces") if policies else []
    return PolicyFacts(policies, namespaces or [])


# -- outages --------------------------------------------------------------------------------------

DEFAULT_EXCLUDED = ("gpu-operator", "kube-system", "kube-public", "kube-node-lease")


def _excluded_namespaces(reader: ClusterReader, settings: Settings) -> frozenset[str]:
    """The webhook Deployment's ``--exclude-namespaces`` (its defaults when it sets none)."""
    raw = read_deployment(reader, settings, names.WEBHOOK_SERVICE)
    found = container_with_flag(pod_spec(raw), "--exclude-namespaces")
    if found is None:
        return frozenset((*DEFAULT_EXCLUDED, settings.namespace))
    return frozenset(n for n in found[1].split(",") if n)


def plural(kind: str) -> str:
    """The resource of an admission kind: ``MutatingAdmissionPolicy`` ->
    ``mutatingadmissionpolicies``, ``...Binding`` -> ``...bindings``."""
    lower = kind.lower()
    return lower[:-1] + "ies" if lower.endswith("y") else lower + "s"


def gather_outage(reader: ClusterReader, settings: Settings) -> OutageFacts:
    (_, mutating), _ = webhook_configurations(reader)
    objects = {
        (kind, name): reader.get(f"{ADMISSION}/{plural(kind)}/{name}")
        for kind, name in FAIL_OPEN_OBJECTS
    }
    policies = reader.list(f"/apis/{names.GROUP}/{names.VERSION}/{names.POLICY_PLURAL}")
    namespaces = reader.list("/api/v1/namespaces") or []
    return OutageFacts(
        mutating,
        objects,
        policies or [],
        namespaces,
        scheduler_config(reader, settings),
        _excluded_namespaces(reader, settings),
    )
