"""Loading a :class:`~bench.plane.objects.ClusterPlan` into kube-apiserver, fast.

Direct POSTs from a few threads: namespaces (with their ``default`` ServiceAccount, which no
controller creates here), TenantPolicies, Nodes (status included in the POST), then every
bound pod as a POST with ``spec.nodeName`` followed by a status merge patch (a Pod's status
cannot be set on create), the way the kubelet reports a running pod.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from bench.plane.api import Api, in_parallel
from bench.plane.objects import ClusterPlan, NodePlan, node_body, pod_body, tenant_policy
from harness.builders import running_status

POLICIES = "/apis/migslice.io/v1alpha1/tenantpolicies"


def pod_name(number: int) -> str:
    return f"train-{number // 4:06d}-{number % 4}"


def ensure_namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> None:
    api.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    api.create(f"/api/v1/namespaces/{name}/serviceaccounts", {"metadata": {"name": "default"}})


def load_tenancy(api: Api, plan: ClusterPlan) -> None:
    namespaces = plan.namespaces()
    for name in namespaces:
        ensure_namespace(api, name)
    per = plan.shape.namespaces_per_tenant
    for tenant in range(plan.shape.tenants):
        api.create(POLICIES, tenant_policy(tenant, namespaces[tenant * per : (tenant + 1) * per]))


def load_nodes(api: Api, plan: ClusterPlan, *, threads: int) -> None:
    def post(node: NodePlan) -> None:
        api.create("/api/v1/nodes", orjson.dumps(node_body(node)))

    in_parallel(plan.nodes, post, threads=threads)


def load_pods(api: Api, plan: ClusterPlan, *, threads: int, progress: bool = True) -> None:
    started = time.monotonic()

    def post(item: tuple[str, NodePlan, str, int]) -> None:
        namespace, node, profile, number = item
        name = pod_name(number)
        body = pod_body(
            name, namespace, profile, node=node.name, tenant=namespace.rsplit("-", 1)[0]
        )
        base = f"/api/v1/namespaces/{namespace}/pods"
        api.create(base, orjson.dumps(body))
        api.merge_patch(f"{base}/{name}/status", orjson.dumps(running_status(body, number)))
        if progress and number % 5000 == 4999:
            elapsed = time.monotonic() - started
            print(f"  {number + 1} pods loaded ({elapsed:.0f}s)", flush=True)

    in_parallel(plan.bound_pods(), post, threads=threads)


def load_cluster(api: Api, plan: ClusterPlan, *, threads: int = 6) -> dict[str, Any]:
    """Load everything; the seconds each part took."""
    timings: dict[str, float] = {}
    began = time.monotonic()
    load_tenancy(api, plan)
    timings["tenancy_s"] = time.monotonic() - began
    began = time.monotonic()
    load_nodes(api, plan, threads=threads)
    timings["nodes_s"] = time.monotonic() - began
    print(f"  {len(plan.nodes)} nodes loaded ({timings['nodes_s']:.0f}s)", flush=True)
    began = time.monotonic()
    load_pods(api, plan, threads=threads)
    timings["pods_s"] = time.monotonic() - began
    timings["total_s"] = sum(timings.values())
    return timings
