"""A healthy installed cluster as the API server would answer doctor's GETs: the chart's
default render (manifests/base) with what the cluster adds (status, the certificate Jobs'
Secrets and caBundles, the scheduler's Lease), NVIDIA's sample ClusterPolicy patched as the
README says, an A100 node with the node agent's annotation, and the example TenantPolicies.

Tests change one object (``cluster.objects[path]``) and judge, or serve the whole thing
through a real local HTTP server to the ``migslice doctor`` command.
"""

from __future__ import annotations

import base64
import copy
import functools
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from harness.builders import make_namespace, make_node
from migslice.doctor.gather import plural
from migslice.objects import AgentGpu, AgentInstance, AgentReport, render_layout_annotation
from migslice.objects.times import format_micro_time, format_time
from migslice.serving.certs import TlsBundle, write_client_cert, write_tls_bundle

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "manifests" / "base"
EXAMPLES = ROOT / "manifests" / "examples"
GPU_OPERATOR = ROOT / "e2e" / "fixtures" / "gpu-operator"
NAMESPACE = "migslice-system"
NODE = "gpu-a"

Obj = dict[str, Any]


@functools.cache
def _documents(path: Path) -> tuple[Obj, ...]:
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d)


def documents(path: Path) -> list[Obj]:
    """The YAML documents of a file (parsed once; each caller gets its own copy)."""
    return copy.deepcopy(list(_documents(path)))


def rendered(relative: str) -> list[Obj]:
    """The objects of one file of the chart's default render."""
    return documents(BASE / relative)


def rendered_one(relative: str, kind: str) -> Obj:
    (found,) = [d for d in rendered(relative) if d["kind"] == kind]
    return found


def sample_cluster_policy() -> Obj:
    """NVIDIA's sample ClusterPolicy, unchanged but for the name the GPU Operator's chart uses."""
    (policy,) = documents(GPU_OPERATOR / "v1_clusterpolicy.yaml")
    policy["metadata"].update(
        name="cluster-policy", uid="uid-cluster-policy", creationTimestamp="2026-01-01T00:00:00Z"
    )
    return dict(policy)


def patched_cluster_policy() -> Obj:
    """The sample after the README's ``kubectl patch`` (mixed, migslice's ConfigMap)."""
    policy = sample_cluster_policy()
    policy["spec"]["mig"]["strategy"] = "mixed"
    policy["spec"]["migManager"]["config"]["name"] = "migslice-mig-config"
    policy["status"] = {"state": "ready", "namespace": "gpu-operator"}
    return policy


def make_bundle(service: str, folder: str) -> TlsBundle:
    return write_tls_bundle(folder, service, NAMESPACE, [], [], 365)


def tls_secret(name: str, bundle: TlsBundle) -> Obj:
    def b64(path: Path) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {
            "tls.crt": b64(bundle.cert),
            "tls.key": b64(bundle.key),
            "ca.crt": b64(bundle.ca_cert),
        },
    }


def ca_bundle(bundle: TlsBundle) -> str:
    return base64.b64encode(Path(bundle.ca_cert).read_bytes()).decode()


def available(deployment: Obj) -> Obj:
    replicas = deployment["spec"].get("replicas", 1)
    deployment["status"] = {
        "replicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
        "conditions": [{"type": "Available", "status": "True"}],
    }
    return deployment


def agent_annotation(observed_at: float) -> str:
    instances = tuple(
        AgentInstance(profile="1g.10gb", start=i, size=1, busy=False) for i in range(7)
    )
    report = AgentReport(  # as the agent writes it: each GPU's PCI device id, and GPU 0's
        product="NVIDIA-A100-SXM4-80GB",
        gpus=(AgentGpu(index=0, mig_enabled=True, instances=instances, pci_device_id=0x20B2),),
        pci_device_id=0x20B2,
        observed_at=format_time(observed_at),
    )
    return render_layout_annotation(report)


def gpu_node(name: str = NODE, *, observed_at: float | None = None, **kw: Any) -> Obj:
    """A MIG node (all-1g.10gb, state success) with the agent's annotation, observed at
    ``observed_at`` (a minute ago by default)."""
    kw.setdefault("config", "all-1g.10gb")
    kw.setdefault("config_state", "success")
    return make_node(
        name,
        gpu_count=1,
        mig={"1g.10gb": 7},
        layout_annotation=agent_annotation(
            time.time() - 60 if observed_at is None else observed_at
        ),
        **kw,
    )


class DoctorCluster:
    """``objects``: API path -> object (a list path -> its items); ``healthz``: service proxy
    path -> (status, body); ``now``: when it was made (the Lease was renewed 2 s before, the
    certificates are valid for a year from then)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))
        self._folder = tempfile.TemporaryDirectory()
        self.webhook_tls = make_bundle("migslice-webhook", f"{self._folder.name}/webhook")
        self.extender_tls = make_bundle("migslice-extender", f"{self._folder.name}/extender")
        self.objects: dict[str, Any] = {}
        self.healthz: dict[str, tuple[int, Any]] = {}
        self._install()

    def close(self) -> None:
        self._folder.cleanup()

    def _put(self, path: str, obj: Any) -> None:
        self.objects[path] = obj

    def _install(self) -> None:
        crd = rendered_one("crd/tenantpolicies.yaml", "CustomResourceDefinition")
        crd["status"] = {"conditions": [{"type": "Established", "status": "True"}]}
        self._put(f"{CRDS}/tenantpolicies.migslice.io", crd)
        for kind, resource in WEBHOOK_FILES:
            configuration = rendered_one(f"webhook/{resource}.yaml", kind)
            for hook in configuration["webhooks"]:
                hook["clientConfig"]["caBundle"] = ca_bundle(self.webhook_tls)
            self._put(f"{ADMISSION}/{resource}s/migslice-webhook", configuration)
        for document in rendered("webhook/outage-policies.yaml"):
            kind, name = document["kind"], document["metadata"]["name"]
            self._put(f"{ADMISSION}/{plural(kind)}/{name}", document)
        for component in ("webhook", "extender", "scheduler"):
            deployment = available(rendered_one(f"{component}/deployment.yaml", "Deployment"))
            self._put(f"{APPS}/deployments/migslice-{component}", deployment)
        self._put(
            f"{APPS}/daemonsets/migslice-agent", rendered_one("agent/daemonset.yaml", "DaemonSet")
        )
        self._put(
            f"{CORE}/secrets/migslice-webhook-tls",
            tls_secret("migslice-webhook-tls", self.webhook_tls),
        )
        self._put(
            f"{CORE}/secrets/migslice-extender-tls",
            tls_secret("migslice-extender-tls", self.extender_tls),
        )
        scheduler_client = write_client_cert(self.extender_tls, "migslice-scheduler")
        self._put(
            f"{CORE}/secrets/migslice-extender-client",
            tls_secret(
                "migslice-extender-client",
                TlsBundle(self.extender_tls.ca_cert, self.extender_tls.ca_key, *scheduler_client),
            ),
        )
        self._put(
            f"{CORE}/configmaps/migslice-scheduler-config",
            rendered_one("scheduler/configmap.yaml", "ConfigMap"),
        )
        self._put(
            "/api/v1/namespaces/gpu-operator/configmaps/migslice-mig-config",
            rendered_one("mig-config/configmap.yaml", "ConfigMap"),
        )
        self._put(
            "/apis/coordination.k8s.io/v1/namespaces/migslice-system/leases/migslice-scheduler",
            {
                "metadata": {"name": "migslice-scheduler", "namespace": NAMESPACE},
                "spec": {
                    "holderIdentity": "migslice-scheduler-7d9f_1b2c",
                    "leaseDurationSeconds": 15,
                    "renewTime": format_micro_time(self.now - 2),
                    "acquireTime": format_micro_time(self.now - 3600),
                },
            },
        )
        (cluster_policy_crd,) = documents(GPU_OPERATOR / "clusterpolicies.nvidia.com.yaml")
        self._put(f"{CRDS}/clusterpolicies.nvidia.com", cluster_policy_crd)
        self._put("/apis/nvidia.com/v1/clusterpolicies", [patched_cluster_policy()])
        self._put(
            "/api/v1/nodes",
            [
                gpu_node(),
                make_node("cpu-1", product=None, gpu_count=None, strategy=None, mig_capable=None),
            ],
        )
        policies = []
        for path in sorted(EXAMPLES.glob("tenantpolicy-*.yaml")):
            policies.extend(documents(path))
        self._put("/apis/migslice.io/v1alpha1/tenantpolicies", policies)
        spaces = sorted({ns for p in policies for ns in p["spec"].get("namespaces", ())})
        self._put("/api/v1/namespaces", [make_namespace(ns) for ns in (*spaces, NAMESPACE)])
        for service in ("migslice-webhook", "migslice-extender"):
            self.healthz[f"{CORE}/services/https:{service}:443/proxy/healthz"] = (
                200,
                {"status": "ok"},
            )
        self._put(f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies", [])

    def harden(self) -> None:
        """What the chart adds with webhook.clientAuth.enabled and networkPolicy.enabled: the
        webhook's client authentication, kube-apiserver's certificate in its Secret, and a
        NetworkPolicy on each server."""
        path = f"{APPS}/deployments/migslice-webhook"
        (container,) = self.objects[path]["spec"]["template"]["spec"]["containers"]
        container["args"] += [
            "--client-ca-file=/etc/migslice/tls/ca.crt",
            "--client-name=kube-apiserver",
        ]
        cert, key = write_client_cert(self.webhook_tls, "kube-apiserver")
        self._put(
            f"{CORE}/secrets/migslice-webhook-client",
            tls_secret(
                "migslice-webhook-client",
                TlsBundle(self.webhook_tls.ca_cert, self.webhook_tls.ca_key, cert, key),
            ),
        )
        self._put(
            f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies",
            [network_policy("webhook"), network_policy("extender")],
        )


def network_policy(component: str) -> Obj:
    """The chart's NetworkPolicy of a server (its ingress rule aside)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"migslice-{component}", "namespace": NAMESPACE},
        "spec": {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "migslice",
                    "app.kubernetes.io/component": component,
                }
            },
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": "https", "protocol": "TCP"}]}],
        },
    }


CORE = f"/api/v1/namespaces/{NAMESPACE}"
APPS = f"/apis/apps/v1/namespaces/{NAMESPACE}"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
WEBHOOK_FILES = (
    ("MutatingWebhookConfiguration", "mutatingwebhookconfiguration"),
    ("ValidatingWebhookConfiguration", "validatingwebhookconfiguration"),
)
