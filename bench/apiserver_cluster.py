"""A real kube-apiserver and etcd (the e2e harness, ``e2e/build.sh``), filled with the benchmark's
TenantPolicies, GPU Nodes and bound GPU Pods: what ``webhook_latency.py --api`` measures the
in-cluster webhook against, quota ledger writes included.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from e2e.controlplane import DEFAULT_BIN_DIR, ControlPlane, build, ensure_namespace

CRD = Path(__file__).resolve().parent.parent / "manifests" / "base" / "crd" / "tenantpolicies.yaml"
GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"


@contextmanager
def api_cluster(workdir: Path, documents: Sequence[Mapping[str, Any]]) -> Iterator[ControlPlane]:
    """A control plane in ``workdir`` holding ``documents`` (TenantPolicy, Node, Pod)."""
    build(DEFAULT_BIN_DIR, quiet=True)
    with ControlPlane(workdir, DEFAULT_BIN_DIR) as plane:
        plane.apply(CRD)
        api = plane.api_client()
        core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
        ensure_namespace(core, "migslice-system")
        by_kind: dict[str, list[Mapping[str, Any]]] = {}
        for document in documents:
            by_kind.setdefault(str(document["kind"]), []).append(document)
        for policy in by_kind.get("TenantPolicy", []):
            for namespace in policy["spec"]["namespaces"]:
                ensure_namespace(core, namespace)
            custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, dict(policy))
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda node: _create_node(core, node), by_kind.get("Node", [])))
            list(pool.map(lambda pod: _create_pod(core, pod), by_kind.get("Pod", [])))
        yield plane


def _create_node(core: k8s.CoreV1Api, node: Mapping[str, Any]) -> None:
    name = node["metadata"]["name"]
    core.create_node({"metadata": dict(node["metadata"])})
    allocatable = dict(node["status"]["allocatable"])
    status = {"capacity": allocatable, "allocatable": allocatable}
    core.patch_node_status(name, {"status": status})


def _create_pod(core: k8s.CoreV1Api, pod: Mapping[str, Any]) -> None:
    body = {key: pod[key] for key in ("apiVersion", "kind", "metadata", "spec")}
    core.create_namespaced_pod(pod["metadata"]["namespace"], body)
