"""The large-job reserve on the real control plane (``--dra-large-reserve``): an extender with
it and a kube-scheduler calling that extender. Once 7g pods have arrived, a small claim pod
that finds no room beside others stays Pending with the reserve's reason rather than break the
idle GPU, binds beside others once room frees there, and a 7g pod is never held back.

Run: .venv/bin/pytest e2e/test_dra_reserve_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s

from harness import dra_slices
from harness.api import wait_for
from harness.controlplane import ControlPlane
from harness.dra_driver import (
    FakeDraDriver,
    allocated_devices,
    claim_objects,
    ensure_mig_class,
    release,
)
from harness.image import Image
from harness.stack import BASE, SCHEDULER_CLIENT, migslice_server, scheduler_configuration

pytestmark = pytest.mark.e2e

DRA = ("resource.k8s.io", "v1")
SCHEDULER = "migslice-reserve"
REASON = "kept whole for 7g and multi-GPU pods"


@pytest.fixture
def reserve_scheduler(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    migslice_image: Image | None,
    scheduler: Callable[..., object],
) -> Iterator[None]:
    server = migslice_server(
        control_plane,
        "extender",
        ["--dra-large-reserve"],
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        image=migslice_image,
        client_names=[SCHEDULER_CLIENT],
        replica="reserve",
    ).start()
    config = scheduler_configuration(server.bundle, server.url)
    config["profiles"] = [{"schedulerName": SCHEDULER}]
    scheduler(config, name=SCHEDULER)
    yield
    server.stop()


@pytest.fixture
def two_nodes(
    k8s_api: k8s.ApiClient, gpu_node: Callable[..., k8s.V1Node]
) -> Iterator[tuple[str, str]]:
    ensure_mig_class(k8s.CustomObjectsApi(k8s_api))
    drivers = []
    for _ in range(2):
        node = str(gpu_node({}, gfd_labels={}).metadata.name)
        driver = FakeDraDriver(k8s_api, node, [dra_slices.a100(0)])
        driver.publish()
        drivers.append((node, driver))
    yield drivers[0][0], drivers[1][0]
    for _, driver in drivers:
        driver.withdraw()


def test_a_small_pod_waits_beside_others_for_the_idle_gpu_the_reserve_keeps(
    core_v1: k8s.CoreV1Api,
    k8s_api: k8s.ApiClient,
    namespace: str,
    reserve_scheduler: None,
    two_nodes: tuple[str, str],
) -> None:
    objects = k8s.CustomObjectsApi(k8s_api)

    def create(name: str, profile: str) -> None:
        claim, pod = claim_objects(name, namespace, profile, scheduler=SCHEDULER)
        objects.create_namespaced_custom_object(*DRA, namespace, "resourceclaims", claim)
        core_v1.create_namespaced_pod(namespace, pod)

    def bound(name: str) -> str:
        return str(
            wait_for(
                f"pod {name} bound",
                lambda: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
                timeout=60,
            )
        )

    def remove(name: str) -> None:
        release(core_v1, objects, namespace, name)

    # A 4g takes one node; 7g pods arrive (never held back) and leave; their share is then
    # most of what arrived.
    create("medium", "4g.40gb")
    busy = bound("medium")
    idle = next(n for n in two_nodes if n != busy)
    for k in range(3):
        create(f"large-{k}", "7g.80gb")
        assert bound(f"large-{k}") == idle
        assert allocated_devices(objects, namespace, f"large-{k}") == ["gpu-0-mig-7g80gb-0-0"]
        remove(f"large-{k}")
    # A 2g fits beside the 4g; a second one does not (7 compute slices) and waits rather than
    # break the idle GPU, saying why.
    create("small-0", "2g.20gb")
    assert bound("small-0") == busy
    create("small-1", "2g.20gb")

    def held_back() -> bool:
        events = core_v1.list_namespaced_event(
            namespace, field_selector="involvedObject.name=small-1,reason=FailedScheduling"
        ).items
        return any(REASON in (e.message or "") for e in events)

    wait_for("small-1 held back with the reserve's reason", held_back, 60)
    assert core_v1.read_namespaced_pod("small-1", namespace).spec.node_name is None
    # Room frees beside the 4g: it binds there, and the idle GPU stays whole.
    remove("small-0")
    assert bound("small-1") == busy
    create("large-3", "7g.80gb")
    assert bound("large-3") == idle
