"""migslice's own servers in the e2e control plane: webhook and extender over TLS.

Both run as real processes through the ``migslice`` command line (gunicorn, TLS), in
in-cluster mode against the e2e kube-apiserver, each as its ServiceAccount: by default from the
container image's root filesystem, as uid 65532 on a read-only root with the token where a pod
has it (``e2e/image.py``); with ``MIGSLICE_E2E_SERVERS=venv``, from ``.venv`` with a kubeconfig
holding the token. kube-apiserver reaches the
webhook by URL (there is no Service routing without kube-proxy), so the webhook
configurations from ``manifests/base/`` (the chart's render) are installed with
``clientConfig.url`` in place of ``clientConfig.service`` and the CA from ``migslice certs``
as ``caBundle``; everything else in them (rules, failurePolicy, namespaceSelector,
matchConditions) is applied as shipped.
"""

from __future__ import annotations

import base64
import copy
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from harness.api import ensure_namespace, while_recovering
from harness.controlplane import ControlPlane
from harness.image import Image, ImageServerProcess, ServiceAccount
from harness.paths import REPO
from manifests import render
from migslice.serving.certs import TlsBundle, write_client_cert, write_tls_bundle
from migslice.serving.process import ServerProcess

MANIFESTS = REPO / "manifests"
NAMESPACE = "migslice-system"
BASE = MANIFESTS / "base"
ADMISSION_POLICY = "admission-policy.yaml"
"""The ValidatingAdmissionPolicies of a component, beside its rbac.yaml in manifests/base."""
SCHEDULER_CLIENT = "migslice-scheduler"
"""The name migslice-scheduler's client certificate carries (the extender's --client-name)."""


def load_manifests(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


Server = ServerProcess


def migslice_server(
    control_plane: ControlPlane,
    command: str,
    args: Sequence[str],
    *,
    rbac_manifest: Path,
    account: str,
    service: str | None = None,
    image: Image | None = None,
    bundle: TlsBundle | None = None,
    replica: str = "",
    client_names: Sequence[str] = (),
) -> ServerProcess:
    """``migslice <command>`` as it runs in migslice-system, as ServiceAccount ``account`` with
    the RBAC of ``rbac_manifest``: from ``image`` when given, else from this interpreter.

    Its serving certificate names the Service (``service``, default ``migslice-<command>``),
    which is also the SNI its readiness check sends; its log is ``<workdir>/<service>.log``.
    Replicas of one Service share ``bundle`` and each has a ``replica`` name (its log and pod
    volumes in ``<workdir>/<replica>/``). With ``client_names`` it answers its verbs only to a
    client certificate from the bundle's CA naming one of them (``--client-ca-file``,
    ``--client-name``), as the chart runs the extender.
    """
    service = service or f"migslice-{command}"
    bundle = bundle or tls_bundle(control_plane, service)
    name = f"{service}.{NAMESPACE}.svc"
    folder = control_plane.workdir / replica if replica else control_plane.workdir
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"{service}.log"
    token = service_account_token(control_plane, rbac_manifest, NAMESPACE, account)
    if image is None:
        kubeconfig = service_account_kubeconfig(control_plane, account, token)
        return ServerProcess(
            command,
            [*args, "--kubeconfig", str(kubeconfig)],
            bundle,
            log_path,
            name,
            cwd=REPO,
            client_names=tuple(client_names),
        )
    credentials = ServiceAccount(
        account, NAMESPACE, token, control_plane.pki.ca_cert, control_plane.server
    )
    return ImageServerProcess(
        command,
        args,
        bundle,
        log_path,
        name,
        cwd=REPO,
        client_names=tuple(client_names),
        image=image,
        account=credentials,
    )


def tls_bundle(control_plane: ControlPlane, service: str) -> TlsBundle:
    """Serving certificate for ``service`` in migslice-system, plus 127.0.0.1 as an IP SAN."""
    return write_tls_bundle(
        control_plane.workdir / f"{service}-tls", service, "migslice-system", (), ["127.0.0.1"]
    )


def webhook_configurations(bundle: TlsBundle, base_url: str) -> list[dict[str, Any]]:
    """The shipped webhook configurations, pointed at ``base_url`` with our CA."""
    ca = base64.b64encode(bundle.ca_cert.read_bytes()).decode()
    configured = []
    for name in ("mutatingwebhookconfiguration.yaml", "validatingwebhookconfiguration.yaml"):
        for document in load_manifests(BASE / "webhook" / name):
            document = copy.deepcopy(document)
            for hook in document["webhooks"]:
                path = hook["clientConfig"]["service"].get("path", "/")
                hook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca}
            configured.append(document)
    return configured


def scheduler_configuration(
    bundle: TlsBundle, base_url: str, values: Sequence[str] = ()
) -> dict[str, Any]:
    """The shipped KubeSchedulerConfiguration, calling the extender at ``base_url``; with
    ``values`` (``--set`` strings), the chart's scheduler ConfigMap rendered with them. Where
    it presents a client certificate (``certFile``), that is one named migslice-scheduler
    issued from ``bundle``'s CA, as the chart's certificate Job issues it."""
    if values:
        text = render.helm_template(
            render.default_helm(),
            [*render.FIXED_VALUES, *values],
            "--show-only",
            "templates/scheduler/configmap.yaml",
        )
        documents = [d for d in yaml.safe_load_all(text) if d]
    else:
        documents = load_manifests(BASE / "scheduler" / "configmap.yaml")
    for document in documents:
        if document.get("kind") != "ConfigMap":
            continue
        for text in document["data"].values():
            config = yaml.safe_load(text)
            if config.get("kind") == "KubeSchedulerConfiguration":
                break
        else:
            continue
        ca = base64.b64encode(bundle.ca_cert.read_bytes()).decode()
        for extender in config.get("extenders", []):
            extender["urlPrefix"] = base_url
            tls = extender.setdefault("tlsConfig", {})
            tls["caData"] = ca
            tls.pop("insecure", None)
            tls.pop("caFile", None)  # the Secret mounted in the pod
            if "certFile" in tls:  # the chart's migslice-extender-client, issued here
                cert, key = write_client_cert(bundle, SCHEDULER_CLIENT)
                tls.pop("certFile")
                tls.pop("keyFile", None)
                tls["certData"] = base64.b64encode(cert.read_bytes()).decode()
                tls["keyData"] = base64.b64encode(key.read_bytes()).decode()
        return dict(config)
    raise LookupError("no KubeSchedulerConfiguration in the scheduler ConfigMap")


def service_account_token(
    control_plane: ControlPlane,
    rbac_manifest: Path,
    namespace: str,
    account: str,
    *,
    node: str = "",
) -> str:
    """A token for ``account``, with only the RBAC the shipped manifests grant it, under the
    admission policies shipped beside them (``admission-policy.yaml`` of the same folder).

    The manifest is applied as shipped (its namespaces created first), with the other RBAC
    files of its folder (``*-rbac.yaml``: rules of one feature, e.g. the webhook's gate
    reconciler); the token comes from the TokenRequest API, as a projected service-account
    token would in a pod. With ``node`` it is bound to a Pod object on that node, as the
    kubelet's are: kube-apiserver then puts the node's name into it
    (``authentication.kubernetes.io/node-name``), which the agent's policy reads. The Pod
    (``<account>-on-<node>``, never run) must outlive the token's use.
    """
    core = k8s.CoreV1Api(control_plane.api_client())
    manifests = [rbac_manifest, *sorted(rbac_manifest.parent.glob("*-rbac.yaml"))]
    policy = rbac_manifest.with_name(ADMISSION_POLICY)
    if policy.is_file():
        manifests.append(policy)
    for manifest in manifests:
        for document in load_manifests(manifest):
            target = document["metadata"].get("namespace")
            if target:
                while_recovering(functools.partial(ensure_namespace, core, target))
        control_plane.apply(manifest)
    spec: dict[str, Any] = {"expirationSeconds": 7200}
    if node:
        pod = _pod_on(core, namespace, account, node)
        spec["boundObjectRef"] = {
            "kind": "Pod",
            "apiVersion": "v1",
            "name": pod.metadata.name,
            "uid": pod.metadata.uid,
        }
    request = while_recovering(
        lambda: core.create_namespaced_service_account_token(account, namespace, {"spec": spec})
    )
    assert request is not None
    return str(request.status.token)


def _pod_on(core: k8s.CoreV1Api, namespace: str, account: str, node: str) -> Any:
    """A Pod object of ``account`` bound to ``node`` (kept if it exists)."""
    name = f"{account}-on-{node}"[:63].rstrip("-")
    body = {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "migslice"}},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "main", "image": "migslice:e2e"}],
        },
    }
    try:
        return core.create_namespaced_pod(namespace, body)
    except k8s.ApiException as error:
        if error.status != 409:
            raise
    return core.read_namespaced_pod(name, namespace)


def service_account_kubeconfig(control_plane: ControlPlane, account: str, token: str) -> Path:
    """A kubeconfig for the e2e API server that authenticates as ``account`` with ``token``."""
    path = control_plane.workdir / f"{account}.kubeconfig"
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["users"] = [{"name": account, "user": {"token": token}}]
    config["contexts"] = [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}]
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
