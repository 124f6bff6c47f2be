"""The container image, run as the shipped Deployments run it, through the real control plane.

The session's webhook and extender run from the image's root filesystem (``harness/image.py``):
these scenarios check that they really do - uid and gid 65532, a read-only root, a writable
tmpfs ``/tmp``, nothing of the host's environment, the image's entrypoint - and that a sized
pod is admitted by that webhook and bound with that extender.
"""

from __future__ import annotations

import errno
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import (
    GROUP,
    PLURAL,
    VERSION,
    create_pod_when_webhook_knows,
    gpu_pod,
    policy,
)
from harness.api import wait_for
from harness.image import Image
from harness.paths import REPO
from harness.stack import Server
from migslice import __version__

pytestmark = pytest.mark.e2e


@pytest.fixture
def image(migslice_image: Image | None) -> Image:
    if migslice_image is None:
        pytest.skip("MIGSLICE_E2E_SERVERS=venv: the servers do not run from the image")
    return migslice_image


def mounts(pid: int) -> dict[str, tuple[str, str, set[str]]]:
    """Mount point -> (root of the mount, filesystem type, options), as ``pid`` sees them."""
    found = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        parts = fields.split()
        fstype = tail.split()[0]
        found[parts[4]] = (parts[3], fstype, set(parts[5].split(",")))
    return found


def status_ids(pid: int) -> dict[str, list[str]]:
    wanted = ("Uid", "Gid", "Groups")
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.split() for k, _, v in (line.partition(":\t") for line in lines) if k in wanted}


def server_pids(server: Server) -> list[int]:
    """The gunicorn master and its workers."""
    assert server.process is not None
    master = server.process.pid
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return [master, *map(int, children)]


def test_the_image_carries_the_version_of_pyproject_and_its_labels(image: Image) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "version" in project.get("dynamic", []) or project.get("version") == __version__
    version = __version__  # pyproject reads it from migslice.__version__
    assert image.name == f"migslice:{version}"
    assert image.labels["org.opencontainers.image.version"] == version
    assert image.labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert image.entrypoint == ("migslice",)
    assert image.user == "65532:65532"


@pytest.mark.parametrize("name", ["webhook", "extender"])
def test_the_server_runs_from_the_image_as_65532_on_a_read_only_root(
    name: str, image: Image, request: pytest.FixtureRequest
) -> None:
    server: Server = request.getfixturevalue(name)
    pids = server_pids(server)
    assert len(pids) >= 2, "a gunicorn master and at least one worker"
    for pid in pids:
        ids = status_ids(pid)
        assert ids["Uid"] == ["65532"] * 4
        assert ids["Gid"] == ["65532"] * 4
        assert ids["Groups"] == ["65532"]

        seen = mounts(pid)
        root_of_mount, _, options = seen["/"]
        assert Path(root_of_mount) == image.rootfs.resolve()
        assert "ro" in options
        assert seen["/tmp"][1] == "tmpfs" and "rw" in seen["/tmp"][2]
        assert "ro" in seen["/etc/migslice/tls"][2]
        assert "ro" in seen["/run/secrets/kubernetes.io/serviceaccount"][2]

    master = pids[0]
    # Even root cannot write through the server's root; its /tmp is writable.
    with pytest.raises(OSError) as refused:
        Path(f"/proc/{master}/root/opt/probe").write_text("x")
    assert refused.value.errno == errno.EROFS
    probe = Path(f"/proc/{master}/root/tmp/probe")
    probe.write_text("x")
    probe.unlink()

    environment = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{master}/environ").read_bytes().decode().split("\0")
        if entry
    )
    image_env = dict(entry.split("=", 1) for entry in image.env)
    assert environment == {
        **image_env,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": environment["KUBERNETES_SERVICE_PORT"],
    }
    assert environment["HOME"] == "/tmp"
    argv = Path(f"/proc/{master}/cmdline").read_bytes().decode().split("\0")
    assert argv[1:3] == ["/opt/migslice/bin/migslice", name]


def test_a_sized_pod_is_admitted_and_bound_by_the_servers_from_the_image(
    image: Image,
    webhook: Server,
    migslice_scheduler: object,
    k8s_api: k8s.ApiClient,
    core_v1: k8s.CoreV1Api,
    tenant_namespace: str,
    gpu_node: Callable[..., k8s.V1Node],
) -> None:
    gpu_node({"nvidia.com/mig-1g.10gb": 7})
    free = gpu_node({"nvidia.com/mig-2g.20gb": 3})
    custom = k8s.CustomObjectsApi(k8s_api)
    name = f"team-{uuid.uuid4().hex[:6]}"
    custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, policy(name, [tenant_namespace]))
    try:
        pod = create_pod_when_webhook_knows(core_v1, tenant_namespace, gpu_pod("medium"))
        assert pod.spec.containers[0].resources.limits == {"nvidia.com/mig-2g.20gb": "1"}
        assert pod.metadata.annotations["migslice.io/tenant"] == name
        assert pod.spec.scheduler_name == "migslice-scheduler"
        bound = wait_for(
            "the pod to be bound",
            lambda: core_v1.read_namespaced_pod(pod.metadata.name, tenant_namespace).spec.node_name,
            30,
        )
        assert bound == free.metadata.name
    finally:
        custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
