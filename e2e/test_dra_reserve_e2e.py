"""The large-job reserve on the real control plane (``--dra-large-reserve``): an extender with
it and a kube-scheduler calling that extender. Once 7g pods have arrived, a small claim pod
that finds no room beside others stays Pending with the reserve's reason rather than break the
idle GPU, binds beside others once room frees there, and a 7g pod is never held back; held
back its longest (``--dra-large-reserve-max-hold``), it takes the idle GPU, touched by the
extender (``migslice.io/retry``) with nothing else changing in the cluster.

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
from migslice.kube.pod_touch import touch_pod
from migslice.kube.transport import KubernetesTransport
from migslice.names import RETRY_ANNOTATION

pytestmark = pytest.mark.e2e

DRA = ("resource.k8s.io", "v1")
SCHEDULER = "migslice-reserve"
REASON = "kept whole for 7g and multi-GPU pods"
MAX_HOLD_S = 5


@pytest.fixture
def reserve_scheduler(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    migslice_image: Image | None,
    scheduler: Callable[..., object],
) -> Iterator[None]:
    """An extender with the reserve, holding a pod back at most ``request.param`` seconds."""
    server = migslice_server(
        control_plane,
        "extender",
        ["--dra-large-reserve", f"--dra-large-reserve-max-hold={request.param}"],
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


class Run:
    """Claim pods of the reserve's scheduler in ``namespace``."""

    def __init__(self, core_v1: k8s.CoreV1Api, k8s_api: k8s.ApiClient, namespace: str) -> None:
        self.core_v1 = core_v1
        self.objects = k8s.CustomObjectsApi(k8s_api)
        self.namespace = namespace

    def create(self, name: str, profile: str) -> None:
        claim, pod = claim_objects(name, self.namespace, profile, scheduler=SCHEDULER)
        self.objects.create_namespaced_custom_object(*DRA, self.namespace, "resourceclaims", claim)
        self.core_v1.create_namespaced_pod(self.namespace, pod)

    def bound(self, name: str) -> str:
        return str(
            wait_for(
                f"pod {name} bound",
                lambda: self.core_v1.read_namespaced_pod(name, self.namespace).spec.node_name,
                timeout=60,
            )
        )

    def remove(self, name: str) -> None:
        release(self.core_v1, self.objects, self.namespace, name)

    def held_back(self, name: str) -> None:
        """Wait for ``name``'s FailedScheduling Event with the reserve's reason."""

        def said() -> bool:
            events = self.core_v1.list_namespaced_event(
                self.namespace,
                field_selector=f"involvedObject.name={name},reason=FailedScheduling",
            ).items
            return any(REASON in (e.message or "") for e in events)

        wait_for(f"{name} held back with the reserve's reason", said, 60)
        assert self.core_v1.read_namespaced_pod(name, self.namespace).spec.node_name is None

    def fill(self, two_nodes: tuple[str, str]) -> tuple[str, str]:
        """A 4g takes one node; 7g pods arrive (never held back) and leave, so their share is
        most of what arrived; a 2g fits beside the 4g; a second one does not (7 compute
        slices): (the busy node, the idle one), ``small-1`` waiting."""
        self.create("medium", "4g.40gb")
        busy = self.bound("medium")
        idle = next(n for n in two_nodes if n != busy)
        for k in range(3):
            self.create(f"large-{k}", "7g.80gb")
            assert self.bound(f"large-{k}") == idle
            devices = allocated_devices(self.objects, self.namespace, f"large-{k}")
            assert devices == ["gpu-0-mig-7g80gb-0-0"]
            self.remove(f"large-{k}")
        self.create("small-0", "2g.20gb")
        assert self.bound("small-0") == busy
        self.create("small-1", "2g.20gb")
        self.held_back("small-1")
        return busy, idle


@pytest.fixture
def filled(
    core_v1: k8s.CoreV1Api,
    k8s_api: k8s.ApiClient,
    namespace: str,
    reserve_scheduler: None,
    two_nodes: tuple[str, str],
) -> tuple[Run, str, str]:
    """:meth:`Run.fill` on the reserve's scheduler: the run, the busy node, the idle one."""
    run = Run(core_v1, k8s_api, namespace)
    return (run, *run.fill(two_nodes))


@pytest.mark.parametrize("reserve_scheduler", [3600], indirect=True)
def test_a_small_pod_waits_beside_others_for_the_idle_gpu_the_reserve_keeps(
    filled: tuple[Run, str, str],
) -> None:
    run, busy, idle = filled
    create, bound, remove = run.create, run.bound, run.remove
    # Room frees beside the 4g: it binds there, and the idle GPU stays whole.
    remove("small-0")
    assert bound("small-1") == busy
    create("large-3", "7g.80gb")
    assert bound("large-3") == idle


@pytest.mark.parametrize("reserve_scheduler", [MAX_HOLD_S], indirect=True)
def test_a_small_pod_held_back_its_longest_takes_the_idle_gpu(
    core_v1: k8s.CoreV1Api, filled: tuple[Run, str, str]
) -> None:
    """Nothing else changes in the cluster: kube-scheduler tries a pod its extender turned away
    again on the next cluster event, and the extender supplies it, the pod's own update once
    its hold is over (before, the pod waited for the unschedulable pool's flush, 5 minutes)."""
    run, _, idle = filled
    node = wait_for(
        "small-1 bound once its hold is over",
        lambda: core_v1.read_namespaced_pod("small-1", run.namespace).spec.node_name,
        timeout=MAX_HOLD_S + 30,
    )
    assert node == idle
    annotations = core_v1.read_namespaced_pod("small-1", run.namespace).metadata.annotations
    assert annotations[RETRY_ANNOTATION].startswith("hold-ended ")


def test_a_touch_names_the_pod_by_uid_and_leaves_another_of_its_name_alone(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, namespace: str
) -> None:
    """kube-apiserver refuses a merge patch that would change ``metadata.uid``: a pod deleted
    and created again under its name while its touch was due is not touched."""
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="same-name"),
        spec=k8s.V1PodSpec(
            containers=[k8s.V1Container(name="main", image="busybox")],
            scheduler_name="nobody",
        ),
    )
    created = core_v1.create_namespaced_pod(namespace, pod)
    transport = KubernetesTransport.from_environment(str(control_plane.kubeconfig))
    note = {RETRY_ANNOTATION: "hold-ended 2026-01-01T00:00:00Z"}
    assert not touch_pod(transport, namespace, "same-name", note, uid="not-its-uid")
    assert not touch_pod(transport, namespace, "gone", note, uid="any")
    read = core_v1.read_namespaced_pod("same-name", namespace)
    assert RETRY_ANNOTATION not in (read.metadata.annotations or {})
    assert touch_pod(transport, namespace, "same-name", note, uid=created.metadata.uid)
    read = core_v1.read_namespaced_pod("same-name", namespace)
    assert read.metadata.annotations[RETRY_ANNOTATION] == note[RETRY_ANNOTATION]
