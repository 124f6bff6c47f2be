"""The harness's calls to kube-apiserver: namespaces, CRDs, server-side apply, fake GPU
nodes, and waiting for a condition."""

from __future__ import annotations

import datetime as dt
import functools
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client as k8s

from harness.builders import make_node
from harness.process import ControlPlaneError

T = TypeVar("T")

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
        # kube-apiserver answers 504 when etcd is slow to commit (right after a fault
        # scenario restarted etcd, or thousands of pods were written): a server-side apply is
        # idempotent, so it is tried again rather than failing a scenario on its setup.
        results.append(while_recovering(apply_one, deadline_s=60))
        if doc["kind"] == "CustomResourceDefinition":
            wait_crd_established(api, doc["metadata"]["name"])
            dyn.resources.invalidate_cache()
    return results


RECOVERING_STATUSES = frozenset({500, 503, 504})
"""What kube-apiserver answers while etcd is slow or coming back: 504 (a write etcd did not
commit in time; it may still land), 503, and 500 with etcd's own error."""
RECOVERING_500 = ("etcdserver", "deadline exceeded", "request timed out", "Unavailable")


def is_recovering(error: BaseException) -> bool:
    """Whether ``error`` is kube-apiserver refusing a call while etcd recovers (or the
    connection dropping under it), not an answer about the call itself."""
    if isinstance(error, (ConnectionError, urllib3.exceptions.HTTPError)):
        return True
    status = getattr(error, "status", None)
    if status not in RECOVERING_STATUSES:
        return False
    if status != 500:
        return True
    body = str(getattr(error, "body", "") or getattr(error, "summary", lambda: "")() or error)
    return any(word in body for word in RECOVERING_500)


def while_recovering(
    call: Callable[[], T],
    *,
    deadline_s: float = 90.0,
    done: Collection[int] = (),
    first_pause_s: float = 1.0,
) -> T | None:
    """``call()``, again (after 1, 2, 4, ... s, at most 8 s apart) while kube-apiserver refuses
    it as it does while etcd recovers (:func:`is_recovering`), for at most ``deadline_s``.

    For the harness's setup and cleanup calls, which are safe to repeat: a retried write may
    find its first try landed after all, so an error whose status is in ``done`` (404 for a
    delete, 409 for a create) ends it with None. A scenario's own creates, whose 5xx is the
    answer under test, are not made through this."""
    deadline = time.monotonic() + deadline_s
    pause = first_pause_s
    while True:
        try:
            return call()
        except Exception as error:
            if getattr(error, "status", None) in done:
                return None
            if not is_recovering(error) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 8.0)


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
