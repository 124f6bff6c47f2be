"""Under pressure: a slow-client flood against the webhook and the extender while 200 sized
pods are created through the real kube-apiserver. Every pod is admitted or denied exactly as
without the flood (quota decides, nothing times out), and the admitted ones bind."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import (  # noqa: F401 - fixtures used by name
    api_message,
    create_pod_when_webhook_knows,
    custom,
    gpu_pod,
    tenant,
)
from harness.api import wait_for
from harness.flood import Flood
from harness.stack import Server

pytestmark = pytest.mark.e2e

PODS = 200
QUOTA = 24  # instances: 24 admitted, 176 refused, whatever the order
FLOOD = 300  # connections against each server


def create(core_v1: k8s.CoreV1Api, namespace: str) -> str:
    """One pod CREATE through the API server: ``admitted`` or the refusal's kind."""
    try:
        core_v1.create_namespaced_pod(namespace, gpu_pod("small"))
    except k8s.ApiException as error:
        message = api_message(error)
        if error.status == 403 and "spec.quota.instances" in message:
            return "quota"
        return f"{error.status}: {message}"
    return "admitted"


def test_a_slow_client_flood_changes_no_admission_and_no_binding(
    tenant: Callable[..., str],  # noqa: F811
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
    webhook: Server,
    extender: Server,
    migslice_scheduler: object,
) -> None:
    for _ in range(4):
        gpu_node({"nvidia.com/mig-1g.10gb": 7})
    tenant(quota={"instances": QUOTA})
    create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("small"))
    with (
        Flood("127.0.0.1", webhook.port, FLOOD) as on_webhook,
        Flood("127.0.0.1", extender.port, FLOOD) as on_extender,
        ThreadPoolExecutor(max_workers=8) as pool,
    ):
        opened = {"webhook": on_webhook.stats, "extender": on_extender.stats}
        assert all(s.opened >= FLOOD for s in opened.values()), f"flood not open: {opened}"
        outcomes = Counter(pool.map(lambda _: create(core_v1, tenant_namespace), range(PODS - 1)))

        def bound() -> bool:
            pods = core_v1.list_namespaced_pod(tenant_namespace).items
            return len(pods) == QUOTA and all(p.spec.node_name for p in pods)

        wait_for(f"the {QUOTA} admitted pods to be bound during the flood", bound, 120)
    assert outcomes == {"admitted": QUOTA - 1, "quota": PODS - QUOTA}, outcomes
    per_node = Counter(
        p.spec.node_name for p in core_v1.list_namespaced_pod(tenant_namespace).items
    )
    assert all(count <= 7 for count in per_node.values()), per_node
