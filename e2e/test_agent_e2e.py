"""The node agent against the real API server: it publishes what (fake) NVML reports."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from agent.nvml import nvml_session, read_gpus
from agent.publisher import Publisher
from harness.api import wait_for
from harness.controlplane import ControlPlane
from migslice.doctor.checks.nodes import _set_at
from migslice.kube.nodes import KubeNodeStore
from migslice.kube.transport import KubernetesTransport
from migslice.names import LAYOUT_ANNOTATION
from migslice.objects.gpu_layout import parse_layout_annotation
from tests.fake_nvml import FakeGpu, FakeInstance, FakeNvmlLibrary, installed

pytestmark = pytest.mark.e2e


def test_the_agent_publishes_the_nvml_layout_and_warns_with_a_node_event(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    node = gpu_node({"nvidia.com/mig-3g.40gb": 1, "nvidia.com/mig-1g.10gb": 2})
    name = node.metadata.name
    library = FakeNvmlLibrary(
        [
            FakeGpu(
                "NVIDIA A100-SXM4-80GB",
                "A100-80GB",
                instances=[
                    FakeInstance("3g.40gb", 4, processes=1),
                    FakeInstance("1g.10gb", 0),
                    FakeInstance("1g.10gb", 1),
                ],
            ),
            FakeGpu("NVIDIA A100-SXM4-80GB", "A100-80GB", instances=[]),
        ]
    )

    def read() -> object:
        with nvml_session():
            return read_gpus()

    transport = KubernetesTransport.from_environment(str(control_plane.kubeconfig))
    publisher = Publisher(
        name,
        KubeNodeStore(transport),
        read,  # type: ignore[arg-type]
        lambda: datetime.datetime.now(datetime.UTC),
    )
    with installed(library):
        written, report = publisher.publish_once()
        assert written
        assert publisher.publish_once()[0] is False

    annotations = core_v1.read_node(name).metadata.annotations
    published = parse_layout_annotation(annotations[LAYOUT_ANNOTATION])
    assert published == report.layout
    first = published.gpus[0]
    assert [(i.profile, i.start, i.busy) for i in first.instances] == [
        ("1g.10gb", 0, False),
        ("1g.10gb", 1, False),
        ("3g.40gb", 4, True),
    ]
    assert published.gpus[1].mig_enabled and published.gpus[1].instances == ()

    def warning_events() -> list[str]:
        events = core_v1.list_namespaced_event(
            "default", field_selector=f"involvedObject.name={name},reason=MigLayoutWarning"
        )
        return [e.message for e in events.items]

    messages = wait_for("a MigLayoutWarning event", warning_events, 15)
    assert any("GPU 1: MIG is enabled but the GPU has no instances" in m for m in messages)


def test_the_layout_s_managed_fields_time_is_its_own_write_not_the_extender_s(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    """kube-apiserver keeps one managedFields time per manager, moved by any write of it: the
    doctor's layout age reads the entry that owns the layout annotation alone, which the
    agent's own field manager gives it; a later write of the extender (User-Agent migslice)
    to the same node does not move it."""
    node = gpu_node({"nvidia.com/mig-1g.10gb": 1})
    name = node.metadata.name
    transport = KubernetesTransport.from_environment(str(control_plane.kubeconfig))
    KubeNodeStore(transport).write_annotation(name, LAYOUT_ANNOTATION, "{}")
    raw = transport.get_json(f"/api/v1/nodes/{name}", {})
    stamped = _set_at(raw, LAYOUT_ANNOTATION)
    assert stamped is not None, [e.get("fieldsV1") for e in raw["metadata"]["managedFields"]]
    time.sleep(2.2)  # managedFields times are to the second
    transport.patch_json(
        f"/api/v1/nodes/{name}", {"metadata": {"labels": {"nvidia.com/mig.config": "x"}}}
    )
    raw = transport.get_json(f"/api/v1/nodes/{name}", {})
    assert _set_at(raw, LAYOUT_ANNOTATION) == stamped, raw["metadata"]["managedFields"]
