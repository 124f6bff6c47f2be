"""The harness's calls to kube-apiserver: namespaces, CRDs, server-side apply, fake GPU
nodes, and waiting for a condition."""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from harness.builders import make_node
from harness.process import ControlPlaneError

# Default GFD-style labels of a fake A100 node (NVIDIA GPU Feature Discovery / MIG Manager names).
A100_LABELS: dict[str, str] = {
    "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81920",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mig.strategy": "mixed",
}


def server_side_apply(
    api: k8s.ApiClient,
    manifests: Path | str | Iterable[Mapping[str, Any]],
    *,
    cache_file: Path,
    field_manager: str = "migslice-e2e",
    namespace: str | None = None,
) -> list[Any]:
    """Server-side apply YAML file(s)/objects (CRDs are waited for until Established)."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    if isinstance(manifests, (str, Path)):
        docs = [d for d in yaml.safe_load_all(Path(manifests).read_text()) if d]
    else:
        docs = [dict(d) for d in manifests]
    dyn = DynamicClient(api, cache_file=str(cache_file))
    results = []
    for doc in docs:
        try:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:
            dyn.resources.invalidate_cache()
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        ns = doc.get("metadata", {}).get("namespace") or namespace
        kwargs: dict[str, Any] = {"field_manager": field_manager, "force_conflicts": True}
        if res.namespaced:
            kwargs["namespace"] = ns or "default"
        apply_one = functools.partial(dyn.server_side_apply, res, body=doc, **kwargs)
        results.append(_retrying_5xx(apply_one))
        if doc["kind"] == "CustomResourceDefinition":
            wait_crd_established(api, doc["metadata"]["name"])
            dyn.resources.invalidate_cache()
    return results


def _retrying_5xx(call: Callable[[], Any], attempts: int = 4) -> Any:
    """``call()``, again after 2, 4, 8 s while kube-apiserver answers 500, 503 or 504.

    kube-apiserver answers 504 when etcd is slow to commit (right after a fault scenario has
    restarted etcd and thousands of pods were written, its own Lease updates time out too); a
    server-side apply is idempotent, so the harness tries again rather than failing a scenario
    on its setup."""
    from kubernetes.dynamic.exceptions import DynamicApiError

    for attempt in range(1, attempts + 1):
        try:
            return call()
        except DynamicApiError as error:
            if error.status not in (500, 503, 504) or attempt == attempts:
                raise
            time.sleep(2.0**attempt)
    raise AssertionError("unreachable")


def ensure_namespace(
    core: k8s.CoreV1Api, name: str, labels: Mapping[str, str] | None = None
) -> None:
    """Create namespace ``name`` (if missing) and its ``default`` ServiceAccount.

    Without kube-controller-manager nothing creates the ``default`` ServiceAccount, and the
    ServiceAccount admission plugin rejects pods in a namespace that lacks it.
    """
    body = {"metadata": {"name": name, "labels": dict(labels or {})}}
    try:
        core.create_namespace(body)
    except k8s.ApiException as e:
        if e.status != 409:
            raise
    try:
        core.create_namespaced_service_account(name, {"metadata": {"name": "default"}})
    except k8s.ApiException as e:
        if e.status != 409:
            raise


def wait_crd_established(api: k8s.ApiClient, name: str, timeout: float = 30.0) -> None:
    ext = k8s.ApiextensionsV1Api(api)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(name)
        for c in (crd.status and crd.status.conditions) or ():
            if c.type == "Established" and c.status == "True":
                return
        time.sleep(0.2)
    raise ControlPlaneError(f"CRD {name} not Established after {timeout}s")


def register_gpu_node(
    api: k8s.ApiClient,
    name: str,
    resources: Mapping[str, int | str] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    gfd_labels: Mapping[str, str] = A100_LABELS,
    cpu: str = "64",
    memory: str = "512Gi",
    pods: str = "110",
    taints: Sequence[Mapping[str, str]] = (),
) -> k8s.V1Node:
    """Create a fake GPU Node that the scheduler considers schedulable.

    ``resources`` are extended resources (``{"nvidia.com/mig-1g.10gb": 7}``) put into both
    ``status.capacity`` and ``status.allocatable`` next to cpu/memory/pods, and the node gets a
    Ready condition. Status is a subresource, so it is written by a second PATCH; nothing
    (no kubelet, no node controller) changes it afterwards.
    """
    core = k8s.CoreV1Api(api)
    body = make_node(
        name,
        product=None,
        gpu_count=None,
        strategy=None,
        mig_capable=None,
        extra_labels={
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **gfd_labels,
            **(labels or {}),
        },
        resources={"cpu": cpu, "memory": memory, "pods": pods},
        spec={"taints": [dict(t) for t in taints]} if taints else None,
        kubelet=False,
        with_type_meta=True,
    )
    core.create_node(body)
    node = core.read_node(name)
    if node.spec.taints and not taints:
        # Should not happen with TaintNodesByCondition disabled; be robust anyway.
        core.patch_node(name, {"spec": {"taints": None}})
    set_node_resources(api, name, resources or {}, cpu=cpu, memory=memory, pods=pods, ready=True)
    return core.read_node(name)


def set_node_resources(
    api: k8s.ApiClient,
    name: str,
    resources: Mapping[str, int | str | None],
    *,
    cpu: str | None = None,
    memory: str | None = None,
    pods: str | None = None,
    ready: bool | None = None,
) -> k8s.V1Node:
    """Patch a Node's capacity == allocatable (a value of None removes that resource).

    This is what a test actor playing MIG Manager + device plugin calls after a repartition.
    """
    amounts: dict[str, str | None] = {
        k: (None if v is None else str(v)) for k, v in resources.items()
    }
    for k, v in (("cpu", cpu), ("memory", memory), ("pods", pods)):
        if v is not None:
            amounts[k] = v
    status: dict[str, Any] = {"capacity": amounts, "allocatable": amounts}
    if ready is not None:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        status["conditions"] = [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "fake node for migslice e2e tests",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ]
        status["addresses"] = [
            {"type": "InternalIP", "address": "127.0.0.1"},
            {"type": "Hostname", "address": name},
        ]
    return k8s.CoreV1Api(api).patch_node_status(name, {"status": status})


def wait_for(
    what: str,
    fn: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.25,
) -> Any:
    """Poll ``fn`` until it returns something truthy; return that or raise TimeoutError."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
