"""The repartition controller against the real API server and kube-scheduler.

A second ``migslice extender`` process runs the controller (``--repartition``, one-second
rounds, one second of pending before GPUs change); the session extender keeps serving the
scheduler without it, so the other scenarios' pending pods never trigger a re-partition. The
actor playing MIG Manager applies what the controller labels.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.test_scheduling_e2e import mig_pod
from harness.api import ensure_namespace, wait_for
from harness.controlplane import ControlPlane
from harness.image import Image
from harness.migmanager import CONFIG_LABEL, STATE_LABEL, FakeMigManager
from harness.scheduler import Scheduler
from harness.stack import BASE, Server, migslice_server
from migslice.mig import CATALOG, place
from migslice.mig.migparted import mig_parted_entries, render_mig_parted

pytestmark = pytest.mark.e2e

CM_NAMESPACE, CM_NAME = "gpu-operator", "migslice-mig-config"
RECORD = "migslice.io/repartition"


@pytest.fixture
def repartition_extender(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, migslice_image: Image | None
) -> Iterator[Server]:
    """``migslice extender --repartition`` with fast rounds (its own process and certificate)."""
    ensure_namespace(core_v1, "migslice-system")
    server = migslice_server(
        control_plane,
        "extender",
        [
            "--repartition",
            "--repartition-interval-s",
            "1",
            "--repartition-min-pending-s",
            "1",
            "--repartition-config-propagation-s",
            "1",  # the fake MIG Manager reads the ConfigMap itself, not a kubelet's copy
            "--repartition-lease-s",
            "3",
            "--log-level",
            "debug",
        ],
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        service="migslice-repartition",
        image=migslice_image,
    ).start()
    yield server
    server.stop()


@pytest.fixture
def all_1g_config_map(core_v1: k8s.CoreV1Api) -> Iterator[None]:
    """The MIG Manager ConfigMap with ``all-1g.10gb`` (7 x 1g.10gb per A100-80GB)."""
    ensure_namespace(core_v1, CM_NAMESPACE)
    model = CATALOG.get("A100-80GB")
    layout = [place(model, "1g.10gb", i) for i in range(7)]
    text = render_mig_parted({"all-1g.10gb": mig_parted_entries(model, {0: layout})})
    body = {"metadata": {"name": CM_NAME}, "data": {"config.yaml": text}}
    core_v1.create_namespaced_config_map(CM_NAMESPACE, body)
    yield
    core_v1.delete_namespaced_config_map(CM_NAME, CM_NAMESPACE)


def idle_1g_node(gpu_node: Callable[..., k8s.V1Node]) -> str:
    node = gpu_node(
        {"nvidia.com/mig-1g.10gb": 7},
        labels={CONFIG_LABEL: "all-1g.10gb", STATE_LABEL: "success", "nvidia.com/gpu.count": "1"},
    )
    return str(node.metadata.name)


def node_events(core_v1: k8s.CoreV1Api, node: str, reason: str) -> list[str]:
    events = core_v1.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason={reason}"
    )
    return [e.message for e in events.items]


def record(core_v1: k8s.CoreV1Api) -> dict[str, Any]:
    config_map = core_v1.read_namespaced_config_map(CM_NAME, CM_NAMESPACE)
    text = (config_map.metadata.annotations or {}).get(RECORD)
    return dict(json.loads(text)) if text else {}


def bound_after_repartition(
    k8s_api: k8s.ApiClient, core_v1: k8s.CoreV1Api, namespace: str, name: str
) -> tuple[str, FakeMigManager]:
    """A 3g.40gb pod created while node ``name`` (all-1g.10gb, idle) is the only one MIG
    Manager applies on: the node it binds to once the controller re-partitioned one, and the
    fake MIG Manager (its history)."""
    manager = FakeMigManager(k8s_api, nodes=frozenset({name}), applied={name: "all-1g.10gb"})
    with manager:
        pod = core_v1.create_namespaced_pod(namespace, mig_pod("3g.40gb"))
        bound = wait_for(
            f"the pod to bind after the controller re-partitioned {name}",
            lambda: core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name,
            90,
        )
    return str(bound), manager


def test_the_controller_reshapes_an_idle_gpu_and_the_pending_pod_binds(
    repartition_extender: Server,
    migslice_scheduler: Scheduler,
    all_1g_config_map: None,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    name = idle_1g_node(gpu_node)
    bound, manager = bound_after_repartition(k8s_api, core_v1, namespace, name)
    assert bound == name
    labels = core_v1.read_node(name).metadata.labels
    assert labels[CONFIG_LABEL].startswith(f"migslice-{name}-")
    assert labels[STATE_LABEL] == "success"
    assert [(n, c, s) for n, c, s in manager.history] == [(name, labels[CONFIG_LABEL], "success")]
    text = core_v1.read_namespaced_config_map(CM_NAME, CM_NAMESPACE).data["config.yaml"]
    assert "all-1g.10gb" in text and labels[CONFIG_LABEL] in text
    messages = wait_for(
        "the MigRepartition events", lambda: node_events(core_v1, name, "MigRepartition"), 10
    )
    assert any("re-partitioning idle GPUs [0]" in m for m in messages), messages
    done = wait_for(
        "the plan to be finished", lambda: record(core_v1).get("plan") is None or None, 10
    )
    assert done
    assert name in record(core_v1)["finished"]


def test_a_failed_mig_manager_run_is_rolled_back_reported_and_backed_off(
    repartition_extender: Server,
    migslice_scheduler: Scheduler,
    all_1g_config_map: None,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    name = idle_1g_node(gpu_node)
    manager = FakeMigManager(
        k8s_api,
        nodes=frozenset({name}),
        applied={name: "all-1g.10gb"},
        fail_prefix="migslice-",
    )
    with manager:
        pod = core_v1.create_namespaced_pod(namespace, mig_pod("3g.40gb"))
        messages = wait_for(
            "a MigRepartitionFailed event",
            lambda: node_events(core_v1, name, "MigRepartitionFailed"),
            90,
        )
        assert "MIG Manager reported state failed" in messages[0]
        assert "label restored to all-1g.10gb" in messages[0]
        wait_for(
            "the previous config to be applied again",
            lambda: (name, "all-1g.10gb", "success") in manager.history or None,
            30,
        )
    assert name in record(core_v1)["backoff"]
    assert record(core_v1)["plan"] is None
    assert core_v1.read_node(name).metadata.labels[CONFIG_LABEL] == "all-1g.10gb"
    assert core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name is None


def test_a_node_with_a_long_name_is_labelled_with_a_config_name_the_api_server_accepts(
    repartition_extender: Server,
    migslice_scheduler: Scheduler,
    all_1g_config_map: None,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    """A config name is the value of ``nvidia.com/mig.config`` (at most 63 characters). The
    name ``migslice-<node>-<8 hex>`` of a node named over 45 characters (a GKE node
    ``gke-<cluster>-<pool>-<hash>-<id>``) was refused with a 422 every round until the
    deadline quarantined the node; the pod never bound."""
    long_name = f"gke-ml-prod-cluster-a100-mig-pool-{uuid.uuid4().hex[:8]}-x7yz"
    assert len(long_name) > 45
    name = str(
        gpu_node(
            {"nvidia.com/mig-1g.10gb": 7},
            name=long_name,
            labels={
                CONFIG_LABEL: "all-1g.10gb",
                STATE_LABEL: "success",
                "nvidia.com/gpu.count": "1",
            },
        ).metadata.name
    )
    bound, manager = bound_after_repartition(k8s_api, core_v1, namespace, name)
    assert bound == name
    config = core_v1.read_node(name).metadata.labels[CONFIG_LABEL]
    assert config.startswith("migslice-gke-ml-prod-cluster-") and len(config) <= 63
    assert [(n, c, s) for n, c, s in manager.history] == [(name, config, "success")]
