"""Admission under faults, on a control plane of its own (its etcd and kube-apiserver die here).

* etcd killed for 45 s while two creates are held between migslice's admission and storage:
  the creates fail, their charges are released once they are overdue, and the quota is free
  again; nothing is admitted while the ledger cannot be written.
* the webhook SIGKILLed and restarted beside 3,000 pods: until its caches have listed it answers
  503 (kube-apiserver retries, then reports), never a wrong allow and never a wrong "no
  TenantPolicy" / "products in the cluster: none".
* three webhook replicas (one with two gunicorn workers) behind one address, one SIGKILLed in
  a 200-pod burst from three tenants: never more than the quota, exactly the quota once the
  dead replica's charges are settled, and clients see only quota denials and the retried
  errors of failurePolicy Fail.

Measured times go to ``<workdir>/fault-times.json`` (and the test output).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.test_admission_e2e import gpu_pod, policy
from e2e.test_install_e2e import fresh_workdir
from harness.api import ensure_namespace, register_gpu_node, wait_for, while_recovering
from harness.builders import make_pod
from harness.controlplane import ControlPlane
from harness.faults import (
    Balancer,
    Outcome,
    create_pod,
    kill_tree,
    labeler,
    mutating_configuration,
    slow_validator,
    validating_configuration,
)
from harness.image import Image
from harness.stack import BASE, Server, migslice_server, tls_bundle, webhook_configurations

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"
WEBHOOK_RBAC = BASE / "webhook" / "rbac.yaml"


@pytest.fixture(scope="module")
def plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(fresh_workdir("faults-admission"), e2e_bin) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        core = k8s.CoreV1Api(control_plane.api_client())
        ensure_namespace(core, "migslice-system")
        register_gpu_node(control_plane.api_client(), "gpu-a100", {"nvidia.com/mig-1g.10gb": 7})
        yield control_plane


@pytest.fixture(scope="module")
def core(plane: ControlPlane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


@pytest.fixture(scope="module")
def custom(plane: ControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(plane.api_client())


def record_times(plane: ControlPlane, scenario: str, **times: float) -> None:
    path = plane.workdir / "fault-times.json"
    found = json.loads(path.read_text()) if path.exists() else {}
    found[scenario] = {k: round(v, 2) for k, v in times.items()}
    path.write_text(json.dumps(found, indent=2))
    print(f"\n{scenario}: " + ", ".join(f"{k}={v:.2f}" for k, v in times.items()))


def webhooks(
    plane: ControlPlane,
    image: Image | None,
    args: Sequence[Sequence[str]],
) -> list[Server]:
    """Webhook replicas sharing one certificate (one per entry of ``args``), started."""
    bundle = tls_bundle(plane, "migslice-webhook")
    servers = [
        migslice_server(
            plane,
            "webhook",
            ["--status-interval-s", "1", *extra],
            rbac_manifest=WEBHOOK_RBAC,
            account="migslice-webhook",
            image=image,
            bundle=bundle,
            replica=f"webhook-{i}",
        )
        for i, extra in enumerate(args)
    ]
    for server in servers:
        server.start()
    return servers


def tenant(
    plane: ControlPlane, core: k8s.CoreV1Api, custom: k8s.CustomObjectsApi, quota: int
) -> str:
    """A namespace and a TenantPolicy (``small`` = 1g.10gb) with ``quota`` instances, once
    the webhook has seen it (it wrote the policy's status)."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    while_recovering(lambda: ensure_namespace(core, name))
    while_recovering(
        lambda: custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, policy(name, [name], quota={"instances": quota})
        ),
        done=(409,),
    )
    wait_for(
        f"the webhook to write the status of TenantPolicy {name}",
        lambda: (
            custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {}
        ).get("quotaSummary"),
        30,
    )
    return name


def admitted_in(core: k8s.CoreV1Api, namespace: str) -> int:
    listed = while_recovering(lambda: core.list_namespaced_pod(namespace))
    assert listed is not None
    return len(listed.items)


def test_etcd_down_45s_with_held_creates_frees_their_quota_once_they_failed(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    migslice_image: Image | None,
) -> None:
    (server,) = webhooks(plane, migslice_image, [[]])
    admission = k8s.AdmissionregistrationV1Api(plane.api_client())
    try:
        plane.apply(webhook_configurations(server.bundle, server.url))
        name = tenant(plane, core, custom, quota=2)
        cert, key = plane.pki.issue_serving_cert("hold")
        with slow_validator(cert, key, delay_s=4.0) as url:
            plane.apply([validating_configuration("hold", url, plane.pki.ca_cert, name)])
            time.sleep(2)  # kube-apiserver picks up the new configuration
            with ThreadPoolExecutor(2) as pool:
                held = [pool.submit(_create_once, core, name) for _ in range(2)]
                time.sleep(2.0)  # both admitted by migslice, held by the validator
                assert len(ledger_charges(core, name)) == 2
                plane.kill_etcd()
                killed = time.monotonic()
                failures = [f.result() for f in held]
            failed_after = time.monotonic() - killed
            # Not admitted: kube-apiserver's own admission (LimitRanger's live lookup) or the
            # ledger write, whichever comes first, needs etcd.
            during = _create_once(core, name)
            time.sleep(max(0.0, 45.0 - (time.monotonic() - killed)))
            plane.restart_etcd()
            back = time.monotonic()
            wait_for("the held charges released", lambda: ledger_charges(core, name) == [], 90, 0.5)
            freed_after = time.monotonic() - back
            # etcd is back, but kube-apiserver may still answer 504 (or reset) for a while.
            while_recovering(
                lambda: admission.delete_validating_webhook_configuration("hold"), done=(404,)
            )
        time.sleep(2)  # kube-apiserver drops the validator
        # kube-apiserver's own admission may still fail a moment after etcd's return
        # (LimitRanger's live lookup): the first create is retried until it is stored.
        first = wait_for(
            "kube-apiserver to store a pod again",
            lambda: create_pod(core, name, gpu_pod("small"), attempts=1).admitted or None,
            60,
            1.0,
        )
        outcomes = [create_pod(core, name, gpu_pod("small")) for _ in range(2)]
    finally:
        server.stop()
    assert all(status in (500, 504) for status, _ in failures), failures
    assert during[0] in (500, 504), during
    assert first and [bool(o.admitted) for o in outcomes] == [True, False], outcomes
    assert "spec.quota.instances" in outcomes[1].denied
    assert admitted_in(core, name) == 2
    record_times(
        plane,
        "etcd-down-45s",
        held_creates_failed_after_kill_s=failed_after,
        quota_free_after_etcd_back_s=freed_after,
    )


def test_a_pod_reinvoked_after_another_webhook_changed_it_is_charged_once(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    migslice_image: Image | None,
) -> None:
    """A second mutating webhook (a sidecar injector, a policy engine) that changes pods after
    migslice's: kube-apiserver calls migslice again with a new request uid
    (reinvocationPolicy IfNeeded). Each pod held two charges until the first was released
    after the hold: of a quota of 2 the second pod was denied with 1 pod stored."""
    (server,) = webhooks(plane, migslice_image, [[]])
    admission = k8s.AdmissionregistrationV1Api(plane.api_client())
    try:
        plane.apply(webhook_configurations(server.bundle, server.url))
        name = tenant(plane, core, custom, quota=2)
        cert, key = plane.pki.issue_serving_cert("zz-label")
        with labeler(cert, key, "sidecar.example.com/injected") as url:
            plane.apply([mutating_configuration("zz-label", url, plane.pki.ca_cert, name)])
            time.sleep(2)  # kube-apiserver picks up the new configuration
            outcomes = [create_pod(core, name, gpu_pod("small")) for _ in range(3)]
            admission.delete_mutating_webhook_configuration("zz-label")
        stored = core.list_namespaced_pod(name).items
    finally:
        server.stop()
    assert [bool(o.admitted) for o in outcomes] == [True, True, False], outcomes
    assert "spec.quota.instances" in outcomes[2].denied
    assert len(stored) == 2
    assert all(p.metadata.labels["sidecar.example.com/injected"] == "true" for p in stored)


def ledger_charges(core: k8s.CoreV1Api, tenant_name: str) -> list[Any]:
    """The charges in the tenant's ledger (what replicas count for pods not yet seen)."""
    try:
        ledger = core.read_namespaced_config_map(f"migslice-quota-{tenant_name}", "migslice-system")
    except (k8s.ApiException, OSError):
        return [None]  # unreadable: not known to be empty
    document = json.loads((ledger.data or {}).get("charges.json") or '{"charges": []}')
    return list(document["charges"])


def _create_once(core: k8s.CoreV1Api, namespace: str) -> tuple[int, str]:
    try:
        core.create_namespaced_pod(namespace, gpu_pod("small"))
    except k8s.ApiException as error:
        return error.status, str(error.body)[:200]
    return 201, ""


def test_a_webhook_restarted_beside_3000_pods_answers_nothing_wrong_before_it_has_synced(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    migslice_image: Image | None,
) -> None:
    filler = f"filler-{uuid.uuid4().hex[:6]}"
    while_recovering(lambda: ensure_namespace(core, filler, {"migslice.io/admission": "disabled"}))
    pause = make_pod(
        None,
        generate_name="idle-",
        namespace=None,
        stored=False,
        tenant=None,
        limits={},
        image="registry.invalid/idle:1",
        restart_policy=None,
        scheduler_name=None,
        with_type_meta=True,
    )
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda _: while_recovering(lambda: core.create_namespaced_pod(filler, pause)),
                range(3000),
            )
        )
    (server,) = webhooks(plane, migslice_image, [[]])
    try:
        plane.apply(webhook_configurations(server.bundle, server.url))
        full, free = tenant(plane, core, custom, 3), tenant(plane, core, custom, 3)
        for _ in range(3):
            assert create_pod(core, full, gpu_pod("small")).admitted
        assert server.process is not None
        kill_tree(server.process.pid)
        server.process.wait()
        server.process = None
        outcomes: list[tuple[str, Outcome]] = []
        stop = threading.Event()
        clients = [
            threading.Thread(target=_hammer, args=(core, ns, outcomes, stop))
            for ns in (full, free, full, free)
        ]
        for client in clients:
            client.start()
        started = time.monotonic()
        server.start(timeout_s=120)
        ready_after = time.monotonic() - started
        time.sleep(3)
        stop.set()
        for client in clients:
            client.join()
    finally:
        server.stop()
    wrong = [o.denied for _, o in outcomes if o.denied and "spec.quota" not in o.denied]
    assert not wrong, wrong  # no "no TenantPolicy", no "products in the cluster: none"
    assert not [o.failed for _, o in outcomes if o.failed]
    assert admitted_in(core, full) == 3 and admitted_in(core, free) == 3
    retried = sum(o.retries for _, o in outcomes)
    record_times(
        plane,
        "webhook-restart-3000-pods",
        ready_after_start_s=ready_after,
        creates_sent=len(outcomes),
        creates_retried_while_blind=retried,
    )


def _hammer(
    core: k8s.CoreV1Api, namespace: str, outcomes: list[tuple[str, Outcome]], stop: threading.Event
) -> None:
    while not stop.is_set():
        outcomes.append((namespace, create_pod(core, namespace, gpu_pod("small"), pause_s=0.1)))


def test_one_of_three_replicas_killed_in_a_200_pod_burst_admits_exactly_the_quota(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    migslice_image: Image | None,
) -> None:
    """A quota of 4 admitted 8 of 50 concurrent creates with --workers 2 (reservations in each
    process); here replica 3 runs two workers, replica 2 dies mid-burst."""
    hold = ["--quota-hold-s", "8"]  # etcd is healthy here: creates finish in milliseconds
    servers = webhooks(plane, migslice_image, [hold, hold, [*hold, "--workers", "2"]])
    try:
        with Balancer([s.port for s in servers]) as balancer:
            plane.apply(
                webhook_configurations(servers[0].bundle, f"https://127.0.0.1:{balancer.port}")
            )
            quotas = {tenant(plane, core, custom, q): q for q in (20, 30, 40)}
            names = [ns for ns in quotas for _ in range(200 // 3 + 1)][:200]
            burst = _burst(core, names, kill=lambda: kill_tree(_pid(servers[1])), after=60)
            for ns, quota in quotas.items():
                assert admitted_in(core, ns) <= quota
            time.sleep(8 + 5 + 2)  # the dead replica's charges: held 8 s, settled every 5 s
            for ns, quota in quotas.items():
                while create_pod(core, ns, gpu_pod("small")).admitted:
                    assert admitted_in(core, ns) <= quota
                assert admitted_in(core, ns) == quota
    finally:
        for server in servers:
            server.stop()
    outcomes = burst["outcomes"]
    assert not [o.failed for o in outcomes if o.failed]
    assert all("spec.quota.instances" in o.denied for o in outcomes if o.denied)
    record_times(
        plane,
        "replica-killed-in-200-pod-burst",
        burst_s=burst["seconds"],
        admitted_in_burst=sum(1 for o in outcomes if o.admitted),
        denied_in_burst=sum(1 for o in outcomes if o.denied),
        retried_webhook_errors=sum(o.retries for o in outcomes),
    )


def _pid(server: Server) -> int:
    assert server.process is not None
    return server.process.pid


def _burst(
    core: k8s.CoreV1Api, namespaces: Sequence[str], *, kill: Callable[[], None], after: int
) -> dict[str, Any]:
    done = [0]
    lock = threading.Lock()

    def one(namespace: str) -> Outcome:
        outcome = create_pod(core, namespace, gpu_pod("small"), pause_s=0.2)
        with lock:
            done[0] += 1
            if done[0] == after:
                kill()
        return outcome

    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(one, namespaces))
    return {"outcomes": outcomes, "seconds": time.monotonic() - started}
