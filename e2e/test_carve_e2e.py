"""Carve mode against the real API server and kube-scheduler.

A node in carve mode (label ``migslice.io/repartition-mode=carve``) runs a busy 3g.40gb
(a bound pod, processes on it) beside two idle 1g.10gb; a pending pod wants a 3g.40gb, which
fits only once the 1g instances are destroyed and a 3g.40gb is created at slice 0. The
repartition controller (a ``migslice extender --repartition`` process) plans and asks; the
node agent's real carve code (:class:`agent.service.AgentService`, pynvml over the fake
``libnvidia-ml``, as the ``migslice-agent`` ServiceAccount with the shipped RBAC) carves;
the device plugin actor re-advertises; the pod binds. The busy instance is never touched.
A carve during which a container starts on an instance it would destroy is rolled back.
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from agent.nvml import nvml_session, read_gpus
from agent.publisher import Publisher
from agent.service import AgentService
from agent.settings import AgentSettings
from e2e.test_scheduling_e2e import mig_pod
from harness.api import ensure_namespace, wait_for
from harness.binaries import DEFAULT_BIN_DIR
from harness.controlplane import ControlPlane
from harness.deviceplugin import FakeDevicePlugin
from harness.image import Image
from harness.install import render_chart
from harness.scheduler import Scheduler
from harness.stack import (
    BASE,
    Server,
    migslice_server,
    service_account_kubeconfig,
    service_account_token,
)
from migslice.kube.nodes import KubeNodeStore
from migslice.kube.transport import KubernetesTransport
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary, installed

pytestmark = pytest.mark.e2e

CM_NAMESPACE, CM_NAME = "gpu-operator", "migslice-mig-config"
RECORD = "migslice.io/repartition"
CARVE = "migslice.io/carve"


@pytest.fixture
def carve_controller(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, migslice_image: Image | None
) -> Iterator[Server]:
    """``migslice extender --repartition`` with fast rounds, and the ConfigMap that keeps its
    record (carve mode needs no mig-parted configs in it)."""
    ensure_namespace(core_v1, "migslice-system")
    ensure_namespace(core_v1, CM_NAMESPACE)
    body = {"metadata": {"name": CM_NAME}, "data": {"config.yaml": "version: v1\n"}}
    core_v1.create_namespaced_config_map(CM_NAMESPACE, body)
    server = migslice_server(
        control_plane,
        "extender",
        [
            "--repartition",
            "--repartition-interval-s",
            "1",
            "--repartition-min-pending-s",
            "1",
            "--repartition-lease-s",
            "3",
            "--repartition-carve-min-pending-s",
            "1",
            "--repartition-carve-cooldown-s",
            "0",
            "--log-level",
            "debug",
        ],
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        service="migslice-carve",
        image=migslice_image,
    ).start()
    yield server
    server.stop()
    core_v1.delete_namespaced_config_map(CM_NAME, CM_NAMESPACE)


def fake_gpu() -> FakeNvmlLibrary:
    return FakeNvmlLibrary(
        [
            FakeGpu(
                "NVIDIA A100-SXM4-80GB",
                "A100-80GB",
                instances=[
                    FakeInstance("3g.40gb", 4, processes=1, holder="running"),
                    FakeInstance("1g.10gb", 0),
                    FakeInstance("1g.10gb", 1),
                ],
            )
        ]
    )


CARVE_RBAC = {
    "migslice-agent-carve",
    "migslice-agent-device-plugin",
    "migslice-agent-own-node-device-plugin",
}


class Agent:
    """The node agent's loop (publish, carve) in a thread, as ``migslice agent --carve`` runs
    it, over the fake driver and as the ``migslice-agent`` ServiceAccount."""

    def __init__(self, control_plane: ControlPlane, node: str, library: FakeNvmlLibrary) -> None:
        # The agent's token is bound to a pod on its node, as the kubelet's: its admission
        # policies let it write to that node only.
        token = service_account_token(
            control_plane,
            BASE / "agent" / "rbac.yaml",
            "migslice-system",
            "migslice-agent",
            node=node,
        )
        # The carve RBAC and policy as the chart renders them with agent.carve on (off by
        # default).
        carve_rbac = [
            document
            for document in render_chart(DEFAULT_BIN_DIR / "helm", "agent.carve=true")
            if document["metadata"]["name"] in CARVE_RBAC
        ]
        assert sorted(d["kind"] for d in carve_rbac) == [
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ]
        control_plane.apply(carve_rbac)
        kubeconfig = service_account_kubeconfig(control_plane, "migslice-agent", token)
        transport = KubernetesTransport.from_environment(str(kubeconfig))
        self.library = library
        self.passes: list[str] = []
        self._stop = threading.Event()

        def read() -> Any:
            with nvml_session():
                return read_gpus()

        def now() -> datetime.datetime:
            return datetime.datetime.now(datetime.UTC)

        self.publisher = Publisher(node, KubeNodeStore(transport), read, now)
        settings = AgentSettings(node_name=node, carve=True, device_plugin_timeout_s=30)
        self.service = AgentService(settings, transport, self.publisher, now)
        self._thread = threading.Thread(target=self._loop, name="agent", daemon=True)

    def __enter__(self) -> Agent:
        self._installed = installed(self.library)
        self._installed.__enter__()
        self.publisher.publish_once()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self._installed.__exit__(None, None, None)

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.publisher.publish_once()
            said = self.service.carve_pass()
            if said:
                self.passes.append(said)


def carve_node(gpu_node: Callable[..., k8s.V1Node], core_v1: k8s.CoreV1Api, ns: str) -> str:
    node = gpu_node(
        {"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2},
        labels={"migslice.io/repartition-mode": "carve", "nvidia.com/gpu.count": "1"},
    )
    name = str(node.metadata.name)
    running = mig_pod("3g.40gb")
    running["metadata"] = {"name": "running"}
    running["spec"]["nodeName"] = name
    core_v1.create_namespaced_pod(ns, running)
    return name


def events(core_v1: k8s.CoreV1Api, node: str, reason: str) -> list[str]:
    listed = core_v1.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={node},reason={reason}"
    )
    return [e.message for e in listed.items]


def record(core_v1: k8s.CoreV1Api) -> dict[str, Any]:
    config_map = core_v1.read_namespaced_config_map(CM_NAME, CM_NAMESPACE)
    text = (config_map.metadata.annotations or {}).get(RECORD)
    return dict(json.loads(text)) if text else {}


def test_a_pod_that_fits_only_after_a_carve_binds_and_the_busy_pod_is_untouched(
    carve_controller: Server,
    migslice_scheduler: Scheduler,
    control_plane: ControlPlane,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    name = carve_node(gpu_node, core_v1, namespace)
    library = fake_gpu()
    busy = library.gpus[0].instances[0]
    with FakeDevicePlugin(k8s_api, name, library) as plugin, Agent(control_plane, name, library):
        started = time.monotonic()
        pod = core_v1.create_namespaced_pod(namespace, mig_pod("3g.40gb"))
        bound = wait_for(
            "the pod to bind after the node was carved",
            lambda: core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name,
            90,
        )
        took = time.monotonic() - started
    assert bound == name
    assert busy in library.gpus[0].instances and busy.processes == 1 and busy.serial == 1
    assert sorted((i.profile, i.start) for i in library.gpus[0].instances) == [
        ("3g.40gb", 0),
        ("3g.40gb", 4),
    ]
    assert sorted((i.profile, i.start) for i in library.destroyed) == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
    ]
    assert plugin.restarts == 1
    assert core_v1.read_namespaced_pod("running", namespace).spec.node_name == name
    node = core_v1.read_node(name)
    assert node.status.allocatable["nvidia.com/mig-3g.40gb"] == "2"
    assert "nvidia.com/mig.config" not in (node.metadata.labels or {})  # never MIG Manager's
    wait_for(
        "the controller to close the carve",
        lambda: CARVE not in (core_v1.read_node(name).metadata.annotations or {}),
        15,
    )
    state = json.loads(node.metadata.annotations["migslice.io/carve-state"])
    assert state["state"] == "success"
    messages = events(core_v1, name, "MigCarve")
    assert any("destroy 1g.10gb@0, 1g.10gb@1; create 3g.40gb@0" in m for m in messages), messages
    assert name in wait_for("the cooldown entry", lambda: record(core_v1).get("finished"), 10)
    print(f"carve e2e: pending to bound in {took:.1f}s")


def test_a_carve_interrupted_by_a_starting_container_is_rolled_back_and_backed_off(
    carve_controller: Server,
    migslice_scheduler: Scheduler,
    control_plane: ControlPlane,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    name = carve_node(gpu_node, core_v1, namespace)
    library = fake_gpu()
    second = library.gpus[0].instances[2]  # 1g.10gb@1

    def container_starts(call: str) -> None:
        if call == "nvmlGpuInstanceDestroy":  # after 1g.10gb@0 went, before 1g.10gb@1 goes
            second.processes = 1

    library.on_call = container_starts
    with FakeDevicePlugin(k8s_api, name, library), Agent(control_plane, name, library):
        pod = core_v1.create_namespaced_pod(namespace, mig_pod("3g.40gb"))
        messages = wait_for(
            "a MigCarveFailed warning", lambda: events(core_v1, name, "MigCarveFailed"), 90
        )
        wait_for("the backoff", lambda: name in (record(core_v1).get("backoff") or {}), 20)
    assert any("1g.10gb@1 has processes running" in m for m in messages), messages
    assert any("rolled back" in m for m in messages), messages
    assert sorted((i.profile, i.start) for i in library.gpus[0].instances) == [
        ("1g.10gb", 0),
        ("1g.10gb", 1),
        ("3g.40gb", 4),
    ]
    assert second in library.gpus[0].instances and library.gpus[0].instances[0].processes == 1
    assert "carve" not in record(core_v1)
    assert core_v1.read_namespaced_pod(pod.metadata.name, namespace).spec.node_name is None
    state = json.loads(core_v1.read_node(name).metadata.annotations["migslice.io/carve-state"])
    assert state["state"] == "failed"
