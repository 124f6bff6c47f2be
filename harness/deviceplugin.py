"""A test actor that plays the NVIDIA device plugin of one fake GPU node.

The real plugin (a DaemonSet pod, label ``app=nvidia-device-plugin-daemonset`` under the GPU
Operator) enumerates the GPUs' MIG devices when it starts and registers them with the
kubelet, which then publishes them as the Node's ``nvidia.com/mig-*`` allocatable; it does
not notice MIG devices created or destroyed later (NVIDIA/k8s-device-plugin#992), so whoever
changes them restarts its pod. This actor keeps such a pod bound to its node; when the pod
is deleted (it stays ``Terminating``: no kubelet here) it removes it, starts a new one and
marks it Ready as the kubelet would, then, a moment later (the new plugin's registration),
rewrites the node's allocatable from what the fake ``libnvidia-ml`` has now, one device per
compute instance, with a new heartbeat on the node's Ready condition, as the kubelet reports
it.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from harness.api import ensure_namespace, set_node_resources
from harness.builders import make_pod
from migslice.mig import MIG_RESOURCE_PREFIX
from tests.fake_nvml import FakeNvmlLibrary

log = logging.getLogger(__name__)

NAMESPACE = "gpu-operator"
LABELS = {"app": "nvidia-device-plugin-daemonset"}
REGISTRATION_S = 1.5
"""From the new plugin pod's Ready to the kubelet's report of its devices (stamps have whole
seconds: the report lands in a later second than the Ready)."""


@dataclass
class FakeDevicePlugin:
    api: k8s.ApiClient
    node: str
    library: FakeNvmlLibrary
    interval_s: float = 0.2
    restarts: int = 0
    _generation: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> FakeDevicePlugin:
        core = k8s.CoreV1Api(self.api)
        ensure_namespace(core, NAMESPACE)
        self.advertise()
        self._start_pod(core)
        self._thread = threading.Thread(target=self._loop, name="fake-device-plugin", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        core = k8s.CoreV1Api(self.api)
        for pod in self._pods(core):
            core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)

    def advertised(self) -> dict[str, int]:
        counts = Counter(
            MIG_RESOURCE_PREFIX + i.profile.replace("+", ".")
            for gpu in self.library.gpus
            for i in gpu.instances
            if i.with_compute_instance
        )
        return dict(counts)

    def advertise(self) -> None:
        node = k8s.CoreV1Api(self.api).read_node(self.node)
        old = {
            k: None for k in (node.status.allocatable or {}) if k.startswith(MIG_RESOURCE_PREFIX)
        }
        set_node_resources(self.api, self.node, {**old, **self.advertised()}, ready=True)

    def _loop(self) -> None:
        core = k8s.CoreV1Api(self.api)
        while not self._stop.wait(self.interval_s):
            try:
                pods = self._pods(core)
                if pods and all(p.metadata.deletion_timestamp is None for p in pods):
                    continue
                for pod in pods:
                    core.delete_namespaced_pod(pod.metadata.name, NAMESPACE, grace_period_seconds=0)
                self._start_pod(core)
                self._stop.wait(REGISTRATION_S)
                self.advertise()  # the new pod's registration, as the kubelet reports it
                self.restarts += 1
            except Exception:  # a test actor must keep running; the test asserts outcomes
                log.exception("fake device plugin pass failed; retrying")

    def _pods(self, core: k8s.CoreV1Api) -> list[k8s.V1Pod]:
        listed = core.list_namespaced_pod(
            NAMESPACE,
            label_selector="app=nvidia-device-plugin-daemonset",
            field_selector=f"spec.nodeName={self.node}",
        )
        return list(listed.items)

    def _start_pod(self, core: k8s.CoreV1Api) -> None:
        self._generation += 1
        body = make_pod(
            f"nvidia-device-plugin-{self.node}-{self._generation}",
            namespace=None,
            stored=False,
            tenant=None,
            labels=LABELS,
            limits={},
            container="plugin",
            image="device-plugin:1",
            restart_policy=None,
            scheduler_name=None,
            node_name=self.node,
        )
        try:
            core.create_namespaced_pod(NAMESPACE, body)
        except ApiException as error:
            if error.status != 409:
                raise
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": "True", "lastTransitionTime": now}
        status = {"status": {"phase": "Running", "conditions": [ready]}}
        core.patch_namespaced_pod_status(body["metadata"]["name"], NAMESPACE, status)
