"""pytest fixtures for end-to-end scenarios against a real kube-apiserver and kube-scheduler.

Session-wide: ``e2e_bin`` (runs e2e/build.sh; cached), ``control_plane`` (etcd + apiserver),
``k8s_api`` (admin ApiClient), ``core_v1``, ``default_scheduler`` (a kube-scheduler for
``default-scheduler``). Per test: ``namespace`` (fresh namespace with its default
ServiceAccount; pods force-deleted afterwards), ``gpu_node`` (factory for fake GPU Nodes,
deleted afterwards), ``scheduler`` (factory for extra kube-schedulers with custom configs,
stopped afterwards).

Environment:
  MIGSLICE_E2E_NO_BUILD=1  do not run build.sh; skip the e2e tests when a binary is missing.
  MIGSLICE_E2E_BIN=DIR     where the binaries are (default e2e/.bin).
  MIGSLICE_E2E_RUN_DIR=DIR where certificates, etcd data and logs go
                           (default e2e/.run/<timestamp>-<pid>; the newest 5 are kept).
  MIGSLICE_E2E_SERVERS=venv  run migslice's servers from .venv, not from the container image
                           (default image: image/build.sh, cached; needs root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from harness.api import ensure_namespace, register_gpu_node
from harness.binaries import DEFAULT_BIN_DIR, build, missing_binaries
from harness.controlplane import ControlPlane
from harness.image import Image, ImageUnavailableError, build_image
from harness.paths import E2E_DIR
from harness.scheduler import Scheduler, default_scheduler_config
from harness.stack import (
    BASE,
    SCHEDULER_CLIENT,
    Server,
    migslice_server,
    scheduler_configuration,
    webhook_configurations,
)

KEEP_RUNS = 5


@pytest.fixture(scope="session")
def e2e_bin() -> Path:
    bin_dir = DEFAULT_BIN_DIR
    if os.environ.get("MIGSLICE_E2E_NO_BUILD") == "1":
        missing = missing_binaries(bin_dir)
        if missing:
            pytest.skip(
                f"MIGSLICE_E2E_NO_BUILD=1 and {', '.join(missing)} missing in {bin_dir}; "
                "run e2e/build.sh (or unset MIGSLICE_E2E_NO_BUILD) to run the e2e tests"
            )
        return bin_dir
    try:
        return build(bin_dir)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"e2e/build.sh failed with exit code {e.returncode}", pytrace=False)


def _run_dir() -> Path:
    if os.environ.get("MIGSLICE_E2E_RUN_DIR"):
        return Path(os.environ["MIGSLICE_E2E_RUN_DIR"])
    root = E2E_DIR / ".run"
    root.mkdir(parents=True, exist_ok=True)
    old = sorted(p for p in root.iterdir() if p.is_dir())
    for p in old[: max(0, len(old) - (KEEP_RUNS - 1))]:
        shutil.rmtree(p, ignore_errors=True)
    return root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


@pytest.fixture(scope="session")
def control_plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(_run_dir(), e2e_bin) as cp:
        yield cp


@pytest.fixture(scope="session")
def k8s_api(control_plane: ControlPlane) -> k8s.ApiClient:
    return control_plane.api_client()  # closed by control_plane.stop()


@pytest.fixture(scope="session")
def core_v1(k8s_api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s_api)


@pytest.fixture(scope="session")
def default_scheduler(control_plane: ControlPlane) -> Iterator[Scheduler]:
    """kube-scheduler with one profile ``default-scheduler`` (pods that name no scheduler)."""
    s = control_plane.start_scheduler(default_scheduler_config(), name="default-scheduler")
    yield s
    control_plane.stop_scheduler(s.name)


@pytest.fixture
def scheduler(control_plane: ControlPlane) -> Iterator[Callable[..., Scheduler]]:
    """Factory: ``scheduler(config_dict_or_path, **kw)`` -> Scheduler, stopped after the test.

    Example (a second scheduler that calls the migslice extender)::

        cfg = default_scheduler_config("migslice", extenders=[{
            "urlPrefix": f"http://127.0.0.1:{port}/scheduler", "filterVerb": "filter",
            "nodeCacheCapable": True,
            "managedResources": [{"name": "nvidia.com/mig-1g.10gb"}]}])
        scheduler(cfg, name="migslice-scheduler")
    """
    started: list[str] = []

    def start(config: Mapping[str, Any] | Path | str | None = None, **kw: Any) -> Scheduler:
        s = control_plane.start_scheduler(config, **kw)
        started.append(s.name)
        return s

    yield start
    for name in started:
        control_plane.stop_scheduler(name)


def _fresh_namespace(core_v1: k8s.CoreV1Api, labels: Mapping[str, str]) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    ensure_namespace(core_v1, name, labels)
    yield name
    core_v1.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core_v1.delete_namespace(name)


@pytest.fixture
def namespace(core_v1: k8s.CoreV1Api) -> Iterator[str]:
    """A fresh namespace that the migslice webhook leaves alone (``migslice.io/admission:
    disabled``): pods created here arrive as written, e.g. as the webhook would leave them.

    Its pods are force-deleted after the test; the namespace stays Terminating (no namespace
    controller runs).
    """
    yield from _fresh_namespace(core_v1, {"migslice.io/admission": "disabled"})


@pytest.fixture
def tenant_namespace(core_v1: k8s.CoreV1Api) -> Iterator[str]:
    """A fresh namespace whose pods go through the migslice webhook."""
    yield from _fresh_namespace(core_v1, {})


@pytest.fixture
def gpu_node(k8s_api: k8s.ApiClient, core_v1: k8s.CoreV1Api) -> Iterator[Callable[..., k8s.V1Node]]:
    """Factory: ``gpu_node({"nvidia.com/mig-1g.10gb": 7}, name=None, **register_gpu_node_kw)``.

    Nodes are deleted after the test, so scenarios do not see each other's nodes.
    """
    created: list[str] = []

    def make(
        resources: Mapping[str, int | str] | None = None,
        name: str | None = None,
        **kw: Any,
    ) -> k8s.V1Node:
        name = name or f"gpu-{uuid.uuid4().hex[:8]}"
        node = register_gpu_node(k8s_api, name, resources, **kw)
        created.append(name)
        return node

    yield make
    for name in created:
        try:
            core_v1.delete_node(name)
        except k8s.ApiException as e:
            if e.status != 404:
                raise


# --------------------------------------------------------------------------- migslice itself


@pytest.fixture(scope="session")
def tenant_policy_crd(control_plane: ControlPlane) -> str:
    """The TenantPolicy CRD from manifests/base, applied and Established."""
    control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
    return "tenantpolicies.migslice.io"


@pytest.fixture(scope="session")
def migslice_image() -> Image | None:
    """The built image (image/build.sh, cached) the servers run from; None with
    ``MIGSLICE_E2E_SERVERS=venv`` (they run from .venv then)."""
    servers = os.environ.get("MIGSLICE_E2E_SERVERS", "image")
    if servers == "venv":
        return None
    if servers != "image":
        pytest.fail(f"MIGSLICE_E2E_SERVERS={servers}: use image or venv", pytrace=False)
    if os.environ.get("MIGSLICE_E2E_NO_BUILD") == "1":
        try:
            return Image.load()
        except OSError:
            pytest.skip(
                "MIGSLICE_E2E_NO_BUILD=1 and no image in image/.build; run `make image` "
                "(or set MIGSLICE_E2E_SERVERS=venv)"
            )
    try:
        return build_image()
    except ImageUnavailableError as error:
        pytest.fail(str(error), pytrace=False)


@pytest.fixture(scope="session")
def webhook(
    control_plane: ControlPlane,
    core_v1: k8s.CoreV1Api,
    tenant_policy_crd: str,
    migslice_image: Image | None,
) -> Iterator[Server]:
    """``migslice webhook`` in-cluster mode over TLS, registered by the shipped configurations."""
    ensure_namespace(core_v1, "migslice-system")
    server = migslice_server(
        control_plane,
        "webhook",
        ["--status-interval-s", "1"],
        rbac_manifest=BASE / "webhook" / "rbac.yaml",
        account="migslice-webhook",
        image=migslice_image,
    ).start()
    control_plane.apply(webhook_configurations(server.bundle, server.url))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def extender(
    control_plane: ControlPlane, core_v1: k8s.CoreV1Api, migslice_image: Image | None
) -> Iterator[Server]:
    """``migslice extender`` in-cluster mode over TLS, answering its verbs only to
    migslice-scheduler's client certificate (as the chart runs it)."""
    ensure_namespace(core_v1, "migslice-system")
    server = migslice_server(
        control_plane,
        "extender",
        [],
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        image=migslice_image,
        client_names=[SCHEDULER_CLIENT],
    ).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def migslice_scheduler(control_plane: ControlPlane, extender: Server) -> Iterator[Scheduler]:
    """kube-scheduler ``migslice-scheduler`` with the shipped configuration and our extender."""
    config = scheduler_configuration(extender.bundle, extender.url)
    started = control_plane.start_scheduler(config, name="migslice-scheduler")
    yield started
    control_plane.stop_scheduler(started.name)
