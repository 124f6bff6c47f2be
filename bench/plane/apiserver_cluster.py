"""A real kube-apiserver and etcd (the e2e harness, ``e2e/build.sh``), filled with the benchmark's
TenantPolicies, GPU Nodes and bound GPU Pods: what ``webhook_latency.py --api`` measures the
in-cluster webhook against, quota ledger writes included.
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonpatch
from kubernetes import client as k8s

from harness.api import ensure_namespace
from harness.binaries import DEFAULT_BIN_DIR, build
from harness.controlplane import ControlPlane
from harness.paths import REPO

CRD = REPO / "manifests" / "base" / "crd" / "tenantpolicies.yaml"
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


class PodStore:
    """What kube-apiserver does after the webhook admits a pod: apply the patch and store the
    pod, so that the webhook's pod cache sees it and its ledger charge is settled."""

    def __init__(self, plane: ControlPlane) -> None:
        self._core = k8s.CoreV1Api(plane.api_client())

    def __call__(self, review: bytes, answer: bytes) -> None:
        request = json.loads(review)["request"]
        response = json.loads(answer)["response"]
        pod = copy.deepcopy(request["object"])
        if response.get("patch"):
            pod = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
        pod["metadata"].pop("managedFields", None)
        self._core.create_namespaced_pod(request["namespace"], pod)


def round_trips(plane: ControlPlane, count: int = 300) -> dict[str, float]:
    """p50/p99 (ms) of a bare ConfigMap PUT (3 KB, resourceVersion-guarded, as a ledger write)
    and GET against this kube-apiserver: what one ledger write can cost at least, here."""
    from migslice.kube import KubernetesTransport

    transport = KubernetesTransport.from_environment(str(plane.kubeconfig))
    path = "/api/v1/namespaces/migslice-system/configmaps"
    stored = transport.post_json(path, {"metadata": {"name": "round-trip"}, "data": {"x": ""}})
    found: dict[str, float] = {}
    for verb in ("put", "get"):
        times = []
        for i in range(count):
            stored["data"]["x"] = "x" * 3000 + str(i)
            started = time.perf_counter()
            if verb == "put":
                stored = transport.put_json(f"{path}/round-trip", stored)
            else:
                transport.get_json(f"{path}/round-trip", {})
            times.append(time.perf_counter() - started)
        times.sort()
        found[f"{verb}_p50_ms"] = round(times[count // 2] * 1000, 2)
        found[f"{verb}_p99_ms"] = round(times[int(count * 0.99)] * 1000, 2)
    return found
