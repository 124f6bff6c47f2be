"""Scheduling and re-partitioning under faults, on a control plane of its own.

* kube-apiserver killed for 20 s; right as it is back, the only node with free slices turns
  ``nvidia.com/mig.config.state=pending`` and GPU pods are created: none binds there until the
  state is ``success`` again (the extender answers an Error while its caches are blind, then
  sees ``pending``), and the tenant's quota is exact.
* MIG Manager stuck for ever on one node: a node of another pool is re-partitioned meanwhile
  at its own pace, a node of the same pool once the stuck one passed its deadline and was
  quarantined (label, annotation, Warning Event, metric); a later ``success`` releases it.

Measured times go to ``<workdir>/fault-times.json`` (and the test output).
"""

from __future__ import annotations

import calendar
import http.client
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import gpu_pod, policy
from e2e.test_faults_admission_e2e import record_times
from e2e.test_install_e2e import fresh_workdir
from e2e.test_repartition_e2e import CM_NAME, CM_NAMESPACE, node_events
from e2e.test_scheduling_e2e import mig_pod
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.controlplane import ControlPlane
from harness.faults import create_pod
from harness.image import Image
from harness.migmanager import CONFIG_LABEL, STATE_LABEL, FakeMigManager
from harness.stack import (
    BASE,
    Server,
    migslice_server,
    scheduler_configuration,
    webhook_configurations,
)
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"
A100 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"
QUARANTINE = "migslice.io/repartition-quarantine"


@pytest.fixture(scope="module")
def plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(fresh_workdir("faults-scheduling"), e2e_bin) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        core = k8s.CoreV1Api(control_plane.api_client())
        for namespace in ("migslice-system", CM_NAMESPACE):
            ensure_namespace(core, namespace)
        model = CATALOG.get("A100-80GB")
        layout = [place(model, "1g.10gb", i) for i in range(7)]
        text = render_mig_parted({"all-1g.10gb": mig_parted_entries(model, {0: layout})})
        core.create_namespaced_config_map(
            CM_NAMESPACE, {"metadata": {"name": CM_NAME}, "data": {"config.yaml": text}}
        )
        yield control_plane


@pytest.fixture(scope="module")
def core(plane: ControlPlane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


def extender(plane: ControlPlane, image: Image | None, *args: str) -> Server:
    return migslice_server(
        plane,
        "extender",
        list(args),
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        image=image,
    ).start()


def gpu(plane: ControlPlane, product: str = A100, free_1g: int = 7) -> str:
    """A one-GPU node laid out all-1g.10gb with ``free_1g`` slices advertised."""
    name = f"gpu-{uuid.uuid4().hex[:6]}"
    register_gpu_node(
        plane.api_client(),
        name,
        {"nvidia.com/mig-1g.10gb": free_1g},
        labels={CONFIG_LABEL: "all-1g.10gb", STATE_LABEL: "success", "nvidia.com/gpu.count": "1"},
        gfd_labels={
            "nvidia.com/gpu.product": product,
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.strategy": "mixed",
        },
    )
    return name


def set_state(core: k8s.CoreV1Api, node: str, state: str) -> None:
    wait_for(
        f"node {node} labelled {state}",
        lambda: _patched(core, node, {"metadata": {"labels": {STATE_LABEL: state}}}),
        30,
    )


def _patched(core: k8s.CoreV1Api, node: str, body: dict[str, Any]) -> bool:
    try:
        core.patch_node(node, body)
    except (k8s.ApiException, OSError):
        return False
    return True


def bound_nodes(core: k8s.CoreV1Api, namespace: str) -> dict[str, str | None]:
    return {p.metadata.name: p.spec.node_name for p in core.list_namespaced_pod(namespace).items}


def test_api_server_down_20s_then_a_node_goes_pending_nothing_binds_there_and_quota_holds(
    plane: ControlPlane, core: k8s.CoreV1Api, migslice_image: Image | None
) -> None:
    webhook = migslice_server(
        plane,
        "webhook",
        ["--status-interval-s", "1"],
        rbac_manifest=BASE / "webhook" / "rbac.yaml",
        account="migslice-webhook",
        image=migslice_image,
    ).start()
    scheduling = extender(plane, migslice_image)
    plane.start_scheduler(scheduler_configuration(scheduling.bundle, scheduling.url), name="s1")
    try:
        plane.apply(webhook_configurations(webhook.bundle, webhook.url))
        node = gpu(plane)
        name = f"t-{uuid.uuid4().hex[:6]}"
        ensure_namespace(core, name)
        custom = k8s.CustomObjectsApi(plane.api_client())
        custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, policy(name, [name], quota={"instances": 6})
        )
        first = [_admitted(core, name) for _ in range(3)]
        wait_for("3 pods bound", lambda: all(bound_nodes(core, name).values()), 60)
        plane.kill_apiserver()
        time.sleep(20)
        plane.restart_apiserver()
        back = time.monotonic()
        set_state(core, node, "pending")
        pending_after = time.monotonic() - back
        ready = _ready_times(back, {"webhook": webhook, "extender": scheduling})
        with ThreadPoolExecutor(10) as pool:
            outcomes = list(pool.map(lambda _: create_pod(core, name, gpu_pod("small")), range(10)))
        decided_after = time.monotonic() - back
        admitted = [o.admitted for o in outcomes if o.admitted]
        # kube-scheduler's own caches come back on their own backoff (up to a minute after a
        # 20 s outage); until every new pod was tried and refused, nothing may bind there.
        watched_until = time.monotonic() + 120
        refusals: dict[str, str] = {}
        while len(refusals) < len(admitted) and time.monotonic() < watched_until:
            placed = bound_nodes(core, name)
            assert not any(placed[p] for p in admitted), placed  # never onto a pending node
            refusals.update(
                {p: m for p in admitted if (m := _refusal(core, name, p)) and p not in refusals}
            )
            time.sleep(0.2)
        assert len(refusals) == len(admitted), refusals
        set_state(core, node, "success")
        touched = time.monotonic()
        for pod in admitted:  # kube-scheduler retries an extender-rejected pod on its update
            core.patch_namespaced_pod(pod, name, {"metadata": {"annotations": {"e2e/touch": "1"}}})
        wait_for("the new pods bound", lambda: all(bound_nodes(core, name).values()), 60)
        bound_after = time.monotonic() - touched
        for thread in ready["threads"]:
            thread.join()
    finally:
        plane.stop_scheduler("s1")
        scheduling.stop()
        webhook.stop()
    assert len(first) == 3 and len(admitted) == 3, outcomes
    assert all(
        "being re-partitioned" in m or "node state unknown" in m for m in refusals.values()
    ), refusals
    assert all("spec.quota.instances" in o.denied for o in outcomes if not o.admitted)
    assert len(bound_nodes(core, name)) == 6
    record_times(
        plane,
        "apiserver-down-20s",
        node_pending_after_back_s=pending_after,
        webhook_ready_after_back_s=ready["webhook"],
        extender_ready_after_back_s=ready["extender"],
        ten_creates_decided_after_back_s=decided_after,
        creates_retried=sum(o.retries for o in outcomes),
        pods_bound_after_success_s=bound_after,
    )


def _refusal(core: k8s.CoreV1Api, namespace: str, pod: str) -> str:
    """kube-scheduler's message once it tried the pod and the extender refused every node."""
    for condition in core.read_namespaced_pod(pod, namespace).status.conditions or ():
        if condition.type == "PodScheduled" and condition.status == "False":
            return str(condition.message or "")
    return ""


def _admitted(core: k8s.CoreV1Api, namespace: str) -> str:
    outcome = wait_for(
        "the webhook to admit a pod",
        lambda: create_pod(core, namespace, gpu_pod("small")).admitted or None,
        30,
    )
    return str(outcome)


def _ready_times(since: float, servers: dict[str, Server]) -> dict[str, Any]:
    """Seconds from ``since`` until each server's /readyz answers 200 (polled in threads)."""
    found: dict[str, Any] = {name: -1.0 for name in servers}

    def poll(name: str, server: Server) -> None:
        while time.monotonic() - since < 60:
            if _is_ready(server):
                found[name] = time.monotonic() - since
                return
            time.sleep(0.1)

    threads = [threading.Thread(target=poll, args=item) for item in servers.items()]
    for thread in threads:
        thread.start()
    found["threads"] = threads
    return found


def _is_ready(server: Server) -> bool:
    """One GET /readyz on a connection of its own (closed again)."""
    connection = http.client.HTTPSConnection(
        "127.0.0.1", server.port, timeout=2, context=server.context()
    )
    try:
        connection.sock = server.context().wrap_socket(
            socket.create_connection(("127.0.0.1", server.port), timeout=2),
            server_hostname=server.server_name,
        )
        connection.request("GET", "/readyz")
        response = connection.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def test_a_mig_manager_stuck_for_ever_holds_back_only_its_own_node(
    plane: ControlPlane, core: k8s.CoreV1Api, migslice_image: Image | None
) -> None:
    controller = extender(
        plane,
        migslice_image,
        "--repartition",
        "--repartition-interval-s",
        "1",
        "--repartition-min-pending-s",
        "1",
        "--repartition-config-propagation-s",
        "1",  # the fake MIG Manager reads the ConfigMap itself, not a kubelet's copy
        "--repartition-lease-s",
        "3",
        "--repartition-deadline-s",
        "12",
    )
    plane.start_scheduler(scheduler_configuration(controller.bundle, controller.url), name="s2")
    namespace = f"stuck-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core, namespace, {"migslice.io/admission": "disabled"})
    stuck, other = gpu(plane, A100), gpu(plane, H100)
    manager = FakeMigManager(plane.api_client(), nodes=frozenset({other}), interval_s=0.2)
    try:
        manager.start()
        first = _create(core, namespace, "3g.40gb", A100)
        wait_for(f"{stuck} labelled", lambda: _state(core, stuck) == "pending", 60)
        labelled = time.time()
        created = time.monotonic()
        second = _create(core, namespace, "3g.40gb", H100)
        on = wait_for("the H100 pod bound", lambda: bound_nodes(core, namespace)[second], 60)
        other_pool_s = time.monotonic() - created
        same_pool = gpu(plane, A100)
        manager.nodes = frozenset({other, same_pool})
        third = _create(core, namespace, "3g.40gb", A100)
        created = time.monotonic()
        wait_for("the A100 pods bound", lambda: _bound(core, namespace, first, third), 90)
        same_pool_s = time.monotonic() - created
        quarantined_after = _quarantined_since(core, stuck) - labelled
        metrics = controller.request("GET", "/metrics")[1]
        set_state(core, stuck, "success")  # MIG Manager comes back
        wait_for("the quarantine released", lambda: _label(core, stuck) is None, 30)
    finally:
        manager.stop()
        plane.stop_scheduler("s2")
        controller.stop()
    assert on == other
    assert bound_nodes(core, namespace)[first] == same_pool
    warnings = node_events(core, stuck, "MigRepartitionQuarantined")
    assert warnings and "quarantined: no re-partition touches the node" in warnings[0]
    assert node_events(core, stuck, "MigRepartitionQuarantineReleased")
    assert "migslice_repartition_nodes_quarantined 1.0" in str(metrics)
    record_times(
        plane,
        "mig-manager-stuck",
        other_pool_pod_bound_s=other_pool_s,
        same_pool_pod_bound_s=same_pool_s,
        quarantined_after_labelled_s=quarantined_after,
    )


def _create(core: k8s.CoreV1Api, namespace: str, profile: str, product: str) -> str:
    body = mig_pod(profile)
    expression = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}
    term = {"matchExpressions": [expression]}
    body["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    return str(core.create_namespaced_pod(namespace, body).metadata.name)


def _state(core: k8s.CoreV1Api, node: str) -> str | None:
    labels: dict[str, str] = core.read_node(node).metadata.labels or {}
    return labels.get(STATE_LABEL)


def _label(core: k8s.CoreV1Api, node: str) -> str | None:
    labels: dict[str, str] = core.read_node(node).metadata.labels or {}
    return labels.get(QUARANTINE)


def _bound(core: k8s.CoreV1Api, namespace: str, *pods: str) -> bool:
    placed = bound_nodes(core, namespace)
    return all(placed[p] for p in pods)


def _quarantined_since(core: k8s.CoreV1Api, node: str) -> float:
    """When the quarantine began (epoch seconds), from the node's annotation."""
    metadata = core.read_node(node).metadata
    note = json.loads((metadata.annotations or {})[QUARANTINE])
    assert metadata.labels[QUARANTINE] == "timeout" and note["reason"] == "timeout"
    return float(calendar.timegm(time.strptime(note["since"], "%Y-%m-%dT%H:%M:%SZ")))
