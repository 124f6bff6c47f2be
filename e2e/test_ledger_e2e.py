"""The quota ledger lost or changed behind the webhook's back, with three webhook replicas behind
one address, on a control plane of its own (docs/policy.md, "When the ledger is lost or
changed").

* deleted while two creates are held between admission and storage (a second, slow validating
  webhook holds them): the tenant is fenced, and once the held pods are stored the quota holds
  exactly, 0 pods over it (a webhook that started an empty ledger admitted 6 pods against a
  quota of 4); once with a replica SIGKILLed right after the deletion;
* corrupted by a hand edit (a PUT as ``kubectl edit`` makes it): the next ``kubectl create`` of a
  GPU pod fails at once, naming the ConfigMap, with a Warning Event ``QuotaLedgerRebuilt`` on
  the TenantPolicy and ``migslice_webhook_ledger_fences_total`` counted;
* an old copy put back (``kubectl replace`` of a saved copy, and a restore that keeps the
  webhook's own field manager, as an etcd restore does): fenced.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from e2e.test_admission_e2e import gpu_pod
from e2e.test_faults_admission_e2e import (
    admitted_in,
    ledger_charges,
    record_times,
    tenant,
    webhooks,
)
from e2e.test_install_e2e import fresh_workdir
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.controlplane import ControlPlane
from harness.faults import Balancer, create_pod, kill_tree, slow_validator, validating_configuration
from harness.image import Image
from harness.stack import BASE, NAMESPACE, Server, webhook_configurations

pytestmark = pytest.mark.e2e

HOLD_S = 15
"""--quota-hold-s here: the fence lasts as long (creates are held 4 s, far under it)."""
QUOTA = 4
FENCED = "are refused until"


@pytest.fixture(scope="module")
def plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(fresh_workdir("ledger"), e2e_bin) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        core = k8s.CoreV1Api(control_plane.api_client())
        ensure_namespace(core, NAMESPACE)
        register_gpu_node(control_plane.api_client(), "gpu-a100", {"nvidia.com/mig-1g.10gb": 7})
        yield control_plane


@pytest.fixture(scope="module")
def core(plane: ControlPlane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


@pytest.fixture(scope="module")
def custom(plane: ControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(plane.api_client())


@pytest.fixture(scope="module")
def replicas(plane: ControlPlane, migslice_image: Image | None) -> Iterator[list[Server]]:
    """Three webhook replicas behind one address, registered by the shipped configurations."""
    hold = ["--quota-hold-s", str(HOLD_S)]
    servers = webhooks(plane, migslice_image, [hold, hold, hold])
    with Balancer([s.port for s in servers]) as balancer:
        plane.apply(webhook_configurations(servers[0].bundle, f"https://127.0.0.1:{balancer.port}"))
        yield servers
    for server in servers:
        server.stop()


def ledger(core: k8s.CoreV1Api, name: str) -> k8s.V1ConfigMap:
    return core.read_namespaced_config_map(f"migslice-quota-{name}", NAMESPACE)


def fences(servers: list[Server]) -> dict[str, float]:
    """``migslice_webhook_ledger_fences_total`` by damage, summed over the live replicas."""
    found: dict[str, float] = {}
    for server in servers:
        if server.process is None or server.process.poll() is not None:
            continue
        _, text = server.request("GET", "/metrics")
        for damage, value in re.findall(
            r'^migslice_webhook_ledger_fences_total\{damage="([a-z]+)"\} (\S+)$', str(text), re.M
        ):
            found[damage] = found.get(damage, 0.0) + float(value)
    return found


def rebuilt_events(core: k8s.CoreV1Api, name: str) -> list[k8s.CoreV1Event]:
    listed = core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={name},reason=QuotaLedgerRebuilt"
    )
    return [e for e in listed.items if e.involved_object.kind == "TenantPolicy"]


def fill(core: k8s.CoreV1Api, name: str) -> list[str]:
    """Create until the webhook says no other than by the fence; the denial messages."""
    said: list[str] = []
    deadline = time.monotonic() + 2 * HOLD_S + 20
    while time.monotonic() < deadline:
        outcome = create_pod(core, name, gpu_pod("small"))
        assert not outcome.failed, outcome
        if outcome.denied:
            said.append(outcome.denied)
            if FENCED not in outcome.denied:
                return said
            time.sleep(1.0)
        assert admitted_in(core, name) <= QUOTA
    raise AssertionError(f"still fenced after {2 * HOLD_S + 20}s: {said[-1:]}")


@pytest.mark.parametrize("kill_replica", [False, True], ids=["three-replicas", "one-killed"])
def test_a_ledger_deleted_under_two_held_creates_admits_nothing_over_the_quota(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    replicas: list[Server],
    kill_replica: bool,
) -> None:
    name = tenant(plane, core, custom, QUOTA)
    for _ in range(2):
        assert create_pod(core, name, gpu_pod("small")).admitted
    cert, key = plane.pki.issue_serving_cert("hold")
    admission = k8s.AdmissionregistrationV1Api(plane.api_client())
    with slow_validator(cert, key, delay_s=4.0) as url:
        plane.apply([validating_configuration(f"hold-{name}", url, plane.pki.ca_cert, name)])
        time.sleep(2)  # kube-apiserver picks up the new configuration
        with ThreadPoolExecutor(6) as pool:
            held = [pool.submit(create_pod, core, name, gpu_pod("small")) for _ in range(2)]
            time.sleep(1.5)  # both admitted by migslice, charged, held by the validator
            assert len(ledger_charges(core, name)) >= 2  # theirs (and the stored two's)
            core.delete_namespaced_config_map(f"migslice-quota-{name}", NAMESPACE)
            deleted = time.monotonic()
            if kill_replica:
                assert replicas[1].process is not None
                kill_tree(replicas[1].process.pid)
            during = [pool.submit(create_pod, core, name, gpu_pod("small")) for _ in range(4)]
            outcomes = [f.result() for f in during]
            refused_after = time.monotonic() - deleted
            assert [bool(f.result().admitted) for f in held] == [True, True]
        admission.delete_validating_webhook_configuration(f"hold-{name}")
    assert all(FENCED in o.denied for o in outcomes), outcomes
    assert f"ConfigMap {NAMESPACE}/migslice-quota-{name}" in outcomes[0].denied
    assert "was deleted" in outcomes[0].denied
    assert admitted_in(core, name) == QUOTA  # the two stored, the two held
    said = fill(core, name)
    assert "spec.quota.instances" in said[-1], said[-1]
    assert admitted_in(core, name) == QUOTA  # 0 pods over the quota
    assert fences(replicas).get("lost", 0) >= 1
    if kill_replica:
        replicas[1].process = None
        replicas[1].start()
    record_times(
        plane,
        f"ledger-deleted-{'one-killed' if kill_replica else 'three-replicas'}",
        four_creates_refused_after_deletion_s=refused_after,
    )


def kubectl_create(plane: ControlPlane, name: str, workdir: Path) -> tuple[int, str, float]:
    """``kubectl create -f`` of a GPU pod in namespace ``name``: exit status, output, seconds."""
    manifest = workdir / f"pod-{name}.yaml"
    manifest.write_text(yaml.safe_dump(gpu_pod("small")))
    started = time.monotonic()
    done = subprocess.run(
        [
            str(plane.bin_dir / "kubectl"),
            f"--kubeconfig={plane.kubeconfig}",
            *("-n", name, "create", "-f", str(manifest)),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_a_hand_edited_ledger_fails_the_next_create_at_once_and_says_so(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    replicas: list[Server],
) -> None:
    name = tenant(plane, core, custom, QUOTA)
    assert create_pod(core, name, gpu_pod("small")).admitted
    before = fences(replicas).get("corrupt", 0.0)
    stored = ledger(core, name)
    stored.data["charges.json"] = stored.data["charges.json"][:20]  # an editor's slip
    core.replace_namespaced_config_map(
        stored.metadata.name, NAMESPACE, stored, field_manager="kubectl-edit"
    )
    status, output, seconds = kubectl_create(plane, name, plane.workdir)
    assert status != 0, output
    assert seconds < 2.0, (seconds, output)  # a denial, not a 503 retried for 5-10 s
    assert FENCED in output and f"ConfigMap {NAMESPACE}/migslice-quota-{name}" in output, output
    assert "Nothing to repair" in output
    events = wait_for("a QuotaLedgerRebuilt event", lambda: rebuilt_events(core, name), 15)
    assert events[0].type == "Warning" and f"migslice-quota-{name}" in events[0].message
    assert fences(replicas).get("corrupt", 0.0) > before
    rebuilt = json.loads(ledger(core, name).data["charges.json"])
    assert rebuilt["charges"] == [] and rebuilt.get("fencedUntil")
    record_times(plane, "ledger-hand-edited", kubectl_create_failed_after_s=seconds)


def test_an_old_copy_of_the_ledger_put_back_is_fenced(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    replicas: list[Server],
) -> None:
    name = tenant(plane, core, custom, QUOTA)
    assert create_pod(core, name, gpu_pod("small")).admitted
    saved = copy.deepcopy(ledger(core, name))  # kubectl get -o yaml > saved.yaml
    for _ in range(2):
        assert create_pod(core, name, gpu_pod("small")).admitted
    before = fences(replicas).get("foreign", 0.0)
    saved.metadata.resource_version = ledger(core, name).metadata.resource_version
    saved.metadata.managed_fields = None
    core.replace_namespaced_config_map(  # kubectl replace -f saved.yaml
        saved.metadata.name, NAMESPACE, saved, field_manager="kubectl-replace"
    )
    outcome = create_pod(core, name, gpu_pod("small"), attempts=1)
    assert FENCED in outcome.denied, outcome
    assert "was written by kubectl-replace" in outcome.denied, outcome.denied
    assert fences(replicas).get("foreign", 0.0) > before
    assert admitted_in(core, name) == 3
