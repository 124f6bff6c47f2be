"""The cluster side of an install: the controllers, kubelet and kube-proxy this control plane
lacks, for e2e/test_install_e2e.py and test_doctor_e2e.py.

An admin installs migslice with ``helm install`` or ``kubectl apply -k``; the API objects that
creates are real, but this control plane has no kube-controller-manager, no kubelet and no
kube-proxy to act on them. :class:`ClusterActors` plays exactly those parts for the release
namespace, from the objects as stored in the API server:

* Job controller + kubelet: each Job's containers run here, with their ``command`` and
  ``args``, and the Job's status is set to Complete (or Failed after ``backoffLimit`` retries,
  like ``restartPolicy: OnFailure``); Helm waits on that for its hooks.
* Deployment controller + kubelet: migslice's Deployments (webhook, extender) run as
  ``migslice`` processes with the container's ``command`` and ``args``, kube-scheduler's
  Deployment as the e2e kube-scheduler with the mounted configuration; once ready, the
  Deployment's status says it is rolled out (what ``kubectl rollout status`` reads). One
  process stands for all replicas.
* kube-proxy: no Service's cluster IP leads anywhere here, so kube-apiserver is pointed at the
  webhook process through an ExternalName Service and the configurations' service port, and
  kube-scheduler at the extender through ``urlPrefix``; the TLS name checked stays the
  Service's DNS name.
* ServiceAccount controller: every namespace gets its ``default`` ServiceAccount (without it,
  admission refuses every pod there), e.g. after the README's ``kubectl create namespace``.
* Endpoints and EndpointSlice controllers + kubelet, for the API server's service proxy (what
  ``migslice doctor`` calls from outside the cluster): a Pod object stands for each server
  process, Running at this machine's own address, and the Service's Endpoints and
  EndpointSlice name it. kube-apiserver refuses
  loopback endpoints, so the servers also listen there (``--host=0.0.0.0``); a machine
  without a global address gets no Endpoints (``ClusterActors.pod_address`` is None). The
  webhook's Service gets the port its configurations call on request
  (:meth:`ClusterActors.expose_webhook_port`).

What is substituted, and nothing else: paths under a volume's ``mountPath`` become files the
actors write from the Secret, ConfigMap or emptyDir; ``--port`` becomes a free port (worktrees
run e2e side by side); the pod's service account token becomes ``--kubeconfig`` with a
TokenRequest token for that ServiceAccount, so every process has only the chart's RBAC.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from harness.controlplane import ControlPlane
from harness.paths import REPO
from harness.scheduler import Scheduler
from migslice.serving.certs import TlsBundle
from migslice.serving.process import ServerProcess, free_port

log = logging.getLogger(__name__)

NAMESPACE = "migslice-system"
Obj = dict[str, Any]


class NotYetError(Exception):
    """A pod cannot start yet (a Secret it mounts does not exist): try again later."""


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ClusterActors:
    """Job controller, Deployment controller, kubelet and kube-proxy for one namespace."""

    def __init__(self, control_plane: ControlPlane, namespace: str, workdir: Path) -> None:
        self.control_plane = control_plane
        self.namespace = namespace
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        api = control_plane.api_client()
        self.core = k8s.CoreV1Api(api)
        self.discovery = k8s.DiscoveryV1Api(api)
        self.apps = k8s.AppsV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.admission = k8s.AdmissionregistrationV1Api(api)
        self.servers: dict[str, ServerProcess] = {}
        self.schedulers: dict[str, Scheduler] = {}
        self.jobs_done: dict[str, str] = {}  # Job name -> "Complete" / "Failed" (latest run)
        self._jobs_seen: set[str] = set()  # uids: Helm re-creates hook Jobs by name
        self.job_runs: list[tuple[str, str, int]] = []  # (job, container, exit status)
        self.errors: list[str] = []
        self._kubeconfigs: dict[str, Path] = {}
        self._unrouted: Obj | None = None  # the webhook's Deployment, until routed
        self.halted: set[str] = set()  # Deployments whose pods are down and stay down
        self.pod_address = global_address()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ClusterActors:
        self._thread = threading.Thread(target=self._loop, name="cluster-actors", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        for server in self.servers.values():
            server.stop()
        for name in self.schedulers:
            self.control_plane.stop_scheduler(name)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._round()
            except Exception as error:  # keep acting; the test reads self.errors
                self.errors.append(f"{type(error).__name__}: {error}")
                log.exception("cluster actors: round failed")
            self._stop.wait(0.3)

    def _round(self) -> None:
        accounts = {
            a.metadata.namespace
            for a in self.core.list_service_account_for_all_namespaces(
                field_selector="metadata.name=default"
            ).items
        }
        for namespace in self.core.list_namespace().items:
            name = namespace.metadata.name
            if name not in accounts and not namespace.metadata.deletion_timestamp:
                try:
                    self.core.create_namespaced_service_account(
                        name, {"metadata": {"name": "default"}}
                    )
                except k8s.ApiException as error:
                    if error.status != 409:  # made meanwhile (ensure_namespace)
                        raise
        for job in self.batch.list_namespaced_job(self.namespace).items:
            name = job.metadata.name
            if job.metadata.uid not in self._jobs_seen and not _finished(job):
                self._jobs_seen.add(job.metadata.uid)
                self._run_job(self.batch.api_client.sanitize_for_serialization(job))
        deployments = {
            d.metadata.name: self.apps.api_client.sanitize_for_serialization(d)
            for d in self.apps.list_namespaced_deployment(self.namespace).items
        }
        # A Deployment deleted (helm uninstall, kubectl delete -k): its pods go, as the
        # garbage collector and the kubelet would have them go.
        for name in [n for n in self.servers if n not in deployments]:
            self.servers.pop(name).stop()
            self._remove_pod(name)
            if name == "migslice-webhook":
                self._unrouted = None
        for name in [n for n in self.halted if n not in deployments]:
            self._remove_pod(name)  # a halted process's pod, crash-looping, goes the same way
        self.halted &= set(deployments)
        for name in [n for n in self.schedulers if n not in deployments]:
            del self.schedulers[name]
            self.control_plane.stop_scheduler(name)
        for name in ("migslice-webhook", "migslice-extender"):
            if name in deployments and name not in self.servers and name not in self.halted:
                self._start_migslice(deployments[name])
        if self._unrouted is not None and self._route_webhooks(self.servers["migslice-webhook"]):
            self._rolled_out(self._unrouted)
            self._unrouted = None
        if (
            "migslice-scheduler" in deployments
            and "migslice-extender" in self.servers
            and "migslice-scheduler" not in self.schedulers
        ):
            self._start_scheduler(deployments["migslice-scheduler"])

    # -- what a pod gets ---------------------------------------------------------------------

    def kubeconfig(self, account: str) -> Path:
        """A kubeconfig with a TokenRequest token of ``account`` (the mounted token), made anew
        when the ServiceAccount was re-created (Helm re-creates hook ServiceAccounts)."""
        uid = self.core.read_namespaced_service_account(account, self.namespace).metadata.uid
        key = f"{account}/{uid}"
        if key not in self._kubeconfigs:
            request = self.core.create_namespaced_service_account_token(
                account, self.namespace, {"spec": {"expirationSeconds": 7200}}
            )
            config = yaml.safe_load(self.control_plane.kubeconfig.read_text())
            config["users"] = [{"name": account, "user": {"token": request.status.token}}]
            config["contexts"] = [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}]
            path = self.workdir / f"{account}-{uid[:8]}.kubeconfig"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            path.chmod(0o600)
            self._kubeconfigs[key] = path
        return self._kubeconfigs[key]

    def mounts(
        self, pod: str, spec: Mapping[str, Any], container: Mapping[str, Any]
    ) -> dict[str, Path]:
        """mountPath -> a folder holding the volume's files (Secret, ConfigMap or emptyDir)."""
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        found: dict[str, Path] = {}
        for mount in container.get("volumeMounts") or ():
            volume = volumes[mount["name"]]
            folder = self.workdir / pod / container["name"] / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                source = volume["secret"]
                try:
                    secret = self.core.read_namespaced_secret(source["secretName"], self.namespace)
                except k8s.ApiException as error:
                    if error.status == 404:
                        raise NotYetError(f"Secret {source['secretName']}") from None
                    raise
                files = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
                _write_volume(folder, files, source.get("items"))
            elif "configMap" in volume:
                source = volume["configMap"]
                config_map = self.core.read_namespaced_config_map(source["name"], self.namespace)
                files = {k: v.encode() for k, v in (config_map.data or {}).items()}
                _write_volume(folder, files, source.get("items"))
            elif "emptyDir" not in volume:
                raise ValueError(
                    f"{pod}: volume {mount['name']} is neither Secret, ConfigMap nor emptyDir"
                )
            found[mount["mountPath"]] = folder
        return found

    @staticmethod
    def substitute(argv: Sequence[str], mounts: Mapping[str, Path]) -> list[str]:
        """``argv`` with every mounted path replaced by the local folder's path."""
        out = []
        longest_first = sorted(mounts.items(), key=lambda m: -len(m[0]))
        for arg in argv:
            for mount_path, folder in longest_first:  # one mount per argument: a local folder
                prefix = mount_path.rstrip("/") + "/"  # may itself start like a mount (/tmp)
                if f"={prefix}" in arg:
                    arg = arg.replace(f"={prefix}", f"={folder}/")
                    break
                if arg.startswith(prefix):
                    arg = f"{folder}/{arg[len(prefix) :]}"
                    break
            out.append(arg)
        return out

    # -- Jobs --------------------------------------------------------------------------------

    def _run_job(self, job: Obj) -> None:
        name = job["metadata"]["name"]
        spec = job["spec"]["template"]["spec"]
        attempts = int(job["spec"].get("backoffLimit", 6)) + 1
        kubeconfig = self.kubeconfig(spec.get("serviceAccountName", "default"))
        started = _now()
        for attempt in range(attempts):
            failed = False
            for container in spec["containers"]:
                mounts = self.mounts(f"{name}-{attempt}", spec, container)
                command = [*container.get("command", ()), *container.get("args", ())]
                argv = self._migslice_argv(name, self.substitute(command, mounts))
                env = {**os.environ, "HOME": str(mounts.get("/tmp", self.workdir))}
                done = subprocess.run(
                    [*argv, f"--kubeconfig={kubeconfig}"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                    env=env,
                    cwd=REPO,
                )
                log_path = self.workdir / f"job-{name}-{container['name']}-{attempt}.log"
                log_path.write_text(done.stdout + done.stderr)
                self.job_runs.append((name, container["name"], done.returncode))
                failed = failed or done.returncode != 0
            if not failed:
                self._finish_job(name, started, complete=True)
                return
            time.sleep(1.0)  # restartPolicy OnFailure backs off before the next try
        self._finish_job(name, started, complete=False)

    @staticmethod
    def _migslice_argv(owner: str, command: Sequence[str]) -> list[str]:
        if not command or command[0] != "migslice":
            raise ValueError(f"{owner}: command is {list(command)!r}, expected migslice ...")
        return [sys.executable, "-m", "migslice.cli", *command[1:]]

    def _finish_job(self, name: str, started: str, *, complete: bool) -> None:
        now = _now()
        if complete:
            conditions = [
                {
                    "type": "SuccessCriteriaMet",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Complete",
                    "status": "True",
                    "reason": "CompletionsReached",
                    "message": "Reached expected number of succeeded pods",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            ]
            status = {
                "startTime": started,
                "completionTime": now,
                "succeeded": 1,
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
                "conditions": conditions,
            }
        else:
            conditions = [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": now,
                    "lastTransitionTime": now,
                },
            ]
            status = {
                "startTime": started,
                "failed": 1,
                "active": 0,
                "ready": 0,
                "terminating": 0,
                "uncountedTerminatedPods": {},
                "conditions": conditions,
            }
        self.batch.patch_namespaced_job_status(name, self.namespace, {"status": status})
        self.jobs_done[name] = "Complete" if complete else "Failed"

    # -- Deployments -------------------------------------------------------------------------

    def _start_migslice(self, deployment: Obj) -> None:
        name = deployment["metadata"]["name"]
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        try:
            mounts = self.mounts(name, spec, container)
        except NotYetError:
            return
        tls = mounts["/etc/migslice/tls"]
        port = free_port()
        argv = self.substitute([*container["command"], *container["args"]], mounts)
        argv = [f"--port={port}" if a.startswith("--port=") else a for a in argv]
        self._migslice_argv(name, argv)
        listen = ["--host=0.0.0.0"] if self.pod_address else []
        server = ServerProcess(
            argv[1],
            [*argv[2:], f"--kubeconfig={self.kubeconfig(spec['serviceAccountName'])}", *listen],
            TlsBundle(tls / "ca.crt", tls / "ca.key", tls / "tls.crt", tls / "tls.key"),
            self.workdir / f"{name}.log",
            f"{name}.{self.namespace}.svc",
            port=port,
            cwd=REPO,
        ).start()
        self.servers[name] = server
        self._publish_endpoints(deployment, port)
        if name == "migslice-webhook":
            self._unrouted = deployment  # routed once the configurations exist
        else:
            self._rolled_out(deployment)

    def _route_webhooks(self, server: ServerProcess) -> bool:
        """kube-proxy's part for the webhook: kube-apiserver dials the Service's address and
        checks the certificate against ``<service>.<namespace>.svc``. There is no cluster IP
        routing here, so the Service becomes ExternalName 127.0.0.1 (kube-apiserver dials
        that) and the webhook configurations' service port the process's port; the Service
        reference, the CA and the name the certificate is checked against stay as installed.
        False until both configurations exist."""
        if not self._set_webhook_port(server.port):
            return False
        self.core.patch_namespaced_service(
            "migslice-webhook",
            self.namespace,
            [
                {"op": "replace", "path": "/spec/type", "value": "ExternalName"},
                {"op": "add", "path": "/spec/externalName", "value": "127.0.0.1"},
                {"op": "remove", "path": "/spec/clusterIP"},
                {"op": "remove", "path": "/spec/clusterIPs"},
            ],
        )
        return True

    def halt(self, name: str) -> None:
        """Stop the server of the Deployment ``name`` and start it no more while the Deployment
        exists (its pods crash-looping, or its node gone): what it wrote stays as it left it."""
        self.halted.add(name)
        server = self.servers.pop(name, None)
        if server is not None:
            server.stop()

    def unroute_webhooks(self) -> None:
        """Undo :meth:`_route_webhooks` (before ``helm upgrade``, which would otherwise see the
        routing as drift to repair); nothing when it is not routed (an upgrade that did not
        change the webhook's Deployment leaves it so)."""
        service = self.core.read_namespaced_service("migslice-webhook", self.namespace)
        if service.spec.type != "ExternalName":
            return
        self.core.patch_namespaced_service(
            "migslice-webhook",
            self.namespace,
            [
                {"op": "replace", "path": "/spec/type", "value": "ClusterIP"},
                {"op": "remove", "path": "/spec/externalName"},
            ],
        )
        self._set_webhook_port(443)

    def _set_webhook_port(self, port: int) -> bool:
        configs = {}
        for kind in ("mutating", "validating"):
            read = getattr(self.admission, f"read_{kind}_webhook_configuration")
            try:
                configs[kind] = read("migslice-webhook")
            except k8s.ApiException as error:
                if error.status == 404:
                    return False
                raise
        for kind, config in configs.items():
            patch = getattr(self.admission, f"patch_{kind}_webhook_configuration")
            ops: list[Obj] = []
            for index, hook in enumerate(config.webhooks):
                service = hook.client_config.service
                if service is None or service.name != "migslice-webhook":
                    continue
                ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook.name})
                ops.append(
                    {
                        "op": "replace",
                        "path": f"/webhooks/{index}/clientConfig/service/port",
                        "value": port,
                    }
                )
            if ops:
                patch("migslice-webhook", ops)
        return True

    def expose_webhook_port(self) -> None:
        """The webhook's Service gets the port its configurations call (the process's, see
        :meth:`_route_webhooks`), so the API server's service proxy finds it too. Not done by
        itself: a server-side re-apply of the chart would then add port 443 beside it."""
        port = self.servers["migslice-webhook"].port
        self.core.patch_namespaced_service(
            "migslice-webhook",
            self.namespace,
            [{"op": "replace", "path": "/spec/ports/0/port", "value": port}],
        )

    def _remove_pod(self, deployment: str) -> None:
        """The Pod object :meth:`_publish_endpoints` made for a Deployment's process, deleted
        once the process stops, as the garbage collector and the kubelet remove a deleted
        Deployment's pods (``migslice cleanup`` waits for the extender's to be gone)."""
        try:
            self.core.delete_namespaced_pod(
                f"{deployment}-e2e", self.namespace, grace_period_seconds=0
            )
        except k8s.ApiException as error:
            if error.status != 404:  # none made (no global address), or gone already
                raise

    def _publish_endpoints(self, deployment: Obj, port: int) -> None:
        """A Pod object for the process (on the first node, Running at :attr:`pod_address`)
        and the Endpoints of the Deployment's Service (same name) with its ``https`` port at
        the process's port: what the API server's service proxy dials."""
        if self.pod_address is None:
            return
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        node = self.core.list_node().items[0].metadata.name
        pod = self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": f"{name}-e2e", "labels": template["metadata"]["labels"]},
                "spec": {**template["spec"], "nodeName": node},
            },
        )
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            self.namespace,
            {
                "status": {
                    "phase": "Running",
                    "podIP": self.pod_address,
                    "podIPs": [{"ip": self.pod_address}],
                    "conditions": [{"type": "Ready", "status": "True"}],
                }
            },
        )
        target = {"kind": "Pod", "namespace": self.namespace, "name": pod.metadata.name}
        self.core.create_namespaced_endpoints(
            self.namespace,
            {
                "metadata": {"name": name},
                "subsets": [
                    {
                        "addresses": [
                            {
                                "ip": self.pod_address,
                                "targetRef": {**target, "uid": pod.metadata.uid},
                            }
                        ],
                        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                    }
                ],
            },
        )
        # kube-apiserver's service proxy reads EndpointSlices from 1.37 (Endpoints before):
        # the one the EndpointSlice controller would write for that Pod.
        self.discovery.create_namespaced_endpoint_slice(
            self.namespace,
            {
                "metadata": {
                    "name": f"{name}-e2e",
                    "labels": {
                        "kubernetes.io/service-name": name,
                        "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                    },
                },
                "addressType": "IPv6" if ":" in self.pod_address else "IPv4",
                "endpoints": [
                    {
                        "addresses": [self.pod_address],
                        "conditions": {"ready": True, "serving": True, "terminating": False},
                        "nodeName": node,
                        "targetRef": {**target, "uid": pod.metadata.uid},
                    }
                ],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        )

    def _start_scheduler(self, deployment: Obj) -> None:
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        try:
            mounts = self.mounts("migslice-scheduler", spec, container)
        except NotYetError:
            return
        command = self.substitute(container["command"], mounts)
        if command[0] != "kube-scheduler":
            raise ValueError(f"migslice-scheduler runs {command[0]!r}, expected kube-scheduler")
        (config_path,) = [a.removeprefix("--config=") for a in command if a.startswith("--config=")]
        config = yaml.safe_load(Path(config_path).read_text())
        extender = self.servers["migslice-extender"]
        for entry in config.get("extenders") or ():
            entry["urlPrefix"] = extender.url  # no Service routing here
            tls = entry.get("tlsConfig") or {}
            for key in ("caFile", "certFile", "keyFile"):
                if key in tls:
                    (tls[key],) = self.substitute([tls[key]], mounts)
        self.schedulers["migslice-scheduler"] = self.control_plane.start_scheduler(
            config,
            name="migslice-scheduler",
            leader_elect=None,  # as configured: a Lease in the release namespace
            kubeconfig=self.kubeconfig(spec["serviceAccountName"]),
        )
        self._rolled_out(deployment)

    def _rolled_out(self, deployment: Obj) -> None:
        """The Deployment controller's part: the status ``kubectl rollout status`` waits for."""
        replicas = deployment["spec"].get("replicas", 1)
        now = _now()
        status = {
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable",
                    "message": "ReplicaSet has successfully progressed.",
                    "lastUpdateTime": now,
                    "lastTransitionTime": now,
                },
            ],
        }
        self.apps.patch_namespaced_deployment_status(
            deployment["metadata"]["name"], self.namespace, {"status": status}
        )


def global_address() -> str | None:
    """This machine's own IPv4 address that is not loopback or link-local, if it has one: the
    source of its default route (no packet is sent), else one its host name resolves to."""
    candidates: list[str] = []
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("198.51.100.1", 9))
        candidates.append(str(probe.getsockname()[0]))
    except OSError:
        pass
    finally:
        probe.close()
    try:
        found = socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)
        candidates += [str(entry[4][0]) for entry in found]
    except OSError:
        pass
    for address in candidates:
        parsed = ipaddress.ip_address(address)
        if not (parsed.is_loopback or parsed.is_link_local or parsed.is_unspecified):
            return address
    return None


def _finished(job: Any) -> bool:
    return any(
        c.type in ("Complete", "Failed") and c.status == "True"
        for c in (job.status and job.status.conditions) or ()
    )


def _write_volume(folder: Path, files: Mapping[str, bytes], items: Any) -> None:
    if items:
        files = {i.get("path", i["key"]): files[i["key"]] for i in items}
    for name, data in files.items():
        (folder / name).write_bytes(data)
