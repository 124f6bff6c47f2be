"""migslice down, on a control plane of its own: what stops, per namespace mode, and how quota
stays exact in both (docs/outages.md).

* The webhook stopped: a fail-closed namespace's GPU pod is not created; a fail-open
  namespace's direct-request pod is created behind the scheduling gate migslice.io/admission
  and not scheduled, its sized pod refused at once ("migslice is unavailable"); the tenant's
  own ServiceAccount cannot remove the gate. The webhook back: its gate reconciler admits the
  gated pods oldest first up to the quota (2 of 4), they schedule, the other two stay gated
  with a Warning Event naming the numbers and the pod condition migslice.io/Admitted=False;
  a pod deleted frees room for the oldest waiting one. Usage is sampled throughout and never
  passes the quota.
* A pod waiting behind the gate when its namespace is opted out of migslice
  (migslice.io/admission=disabled) is let go as it is, with an Event saying why.
* Two webhook replicas reconciling: only the Lease's holder admits; it is SIGKILLed mid-way,
  the other takes over, and the tenant ends at exactly its quota, never above it.
* The chart renders fail-open only where asked (outage.failOpen, Kubernetes 1.36+) and the
  extender's ignorable choice as set.

The MutatingAdmissionPolicy and the ValidatingAdmissionPolicies are the chart's render
(manifests/base/webhook/outage-policies.yaml) as shipped; the webhook configurations too, with
URLs in place of the Service.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from e2e.test_admission_e2e import gpu_pod, policy
from e2e.test_faults_admission_e2e import record_times
from e2e.test_install_e2e import fresh_workdir
from harness.api import ensure_namespace, register_gpu_node, wait_for
from harness.builders import make_pod
from harness.controlplane import ControlPlane
from harness.faults import Balancer, kill_tree
from harness.image import Image
from harness.install import render_chart
from harness.paths import REPO
from harness.stack import (
    BASE,
    Server,
    migslice_server,
    scheduler_configuration,
    tls_bundle,
    webhook_configurations,
)
from migslice.serving.certs import TlsBundle

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = "migslice.io", "v1alpha1", "tenantpolicies"
GATE = "migslice.io/admission"
OPEN = {"migslice.io/outage": "open"}
POLICIES = BASE / "webhook" / "outage-policies.yaml"


@pytest.fixture(scope="module")
def plane(e2e_bin: Path) -> Iterator[ControlPlane]:
    with ControlPlane(fresh_workdir("outage"), e2e_bin) as control_plane:
        control_plane.apply(BASE / "crd" / "tenantpolicies.yaml")
        core = k8s.CoreV1Api(control_plane.api_client())
        ensure_namespace(core, "migslice-system")
        register_gpu_node(control_plane.api_client(), "gpu-a100", {"nvidia.com/mig-1g.10gb": 7})
        control_plane.apply(POLICIES)
        ensure_namespace(core, "probe", OPEN)  # no webhook configuration yet: policies alone
        wait_for("the admission policies to be loaded", lambda: policies_active(core), 60)
        yield control_plane


@pytest.fixture(scope="module")
def core(plane: ControlPlane) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(plane.api_client())


@pytest.fixture(scope="module")
def custom(plane: ControlPlane) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(plane.api_client())


@pytest.fixture(scope="module")
def scheduling(plane: ControlPlane, migslice_image: Image | None) -> Iterator[Server]:
    """The extender and migslice-scheduler calling it (gated pods are left alone by both)."""
    extender = migslice_server(
        plane,
        "extender",
        [],
        rbac_manifest=BASE / "extender" / "rbac.yaml",
        account="migslice-extender",
        image=migslice_image,
    ).start()
    plane.start_scheduler(
        scheduler_configuration(extender.bundle, extender.url), name="migslice-scheduler"
    )
    yield extender
    plane.stop_scheduler("migslice-scheduler")
    extender.stop()


def webhook_replicas(
    plane: ControlPlane, image: Image | None, count: int, *args: str
) -> tuple[TlsBundle, list[Server]]:
    """``count`` webhook replicas sharing one certificate (not started)."""
    bundle = tls_bundle(plane, "migslice-webhook")
    servers = [
        migslice_server(
            plane,
            "webhook",
            ["--status-interval-s", "1", *args],
            rbac_manifest=BASE / "webhook" / "rbac.yaml",
            account="migslice-webhook",
            image=image,
            bundle=bundle,
            replica=f"outage-webhook-{i}",
        )
        for i in range(count)
    ]
    return bundle, servers


def tenant(
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    quota: int,
    labels: dict[str, str] | None = None,
) -> str:
    name = f"t-{uuid.uuid4().hex[:6]}"
    ensure_namespace(core, name, labels or {})
    custom.create_cluster_custom_object(
        GROUP, VERSION, PLURAL, policy(name, [name], quota={"instances": quota})
    )
    return name


def seen_by_the_webhook(custom: k8s.CustomObjectsApi, name: str) -> None:
    wait_for(
        f"the webhook to write the status of TenantPolicy {name}",
        lambda: (
            custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name).get("status") or {}
        ).get("quotaSummary"),
        60,
    )


def direct_pod() -> dict[str, Any]:
    """A pod that asks nvidia.com/mig-1g.10gb itself and names no scheduler."""
    return make_pod(
        None,
        generate_name="direct-",
        namespace=None,
        stored=False,
        tenant=None,
        limits={},
        profile="1g.10gb",
        scheduler_name=None,
        restart_policy=None,
        with_type_meta=True,
    )


def create(
    core: k8s.CoreV1Api, namespace: str, body: dict[str, Any], *, dry_run: bool = False
) -> tuple[int, str]:
    """(201, name) or (status, message) of one create, not retried."""
    try:
        if dry_run:
            pod = core.create_namespaced_pod(namespace, body, dry_run="All")
        else:
            pod = core.create_namespaced_pod(namespace, body)
    except k8s.ApiException as error:
        return error.status, str(error.body)
    return 201, str(pod.metadata.name)


def is_gated(pod: k8s.V1Pod) -> bool:
    return any(gate.name == GATE for gate in pod.spec.scheduling_gates or ())


def admitted(core: k8s.CoreV1Api, namespace: str) -> list[k8s.V1Pod]:
    """The namespace's live pods not behind the gate: what holds the tenant's quota."""
    return [
        pod
        for pod in core.list_namespaced_pod(namespace).items
        if not is_gated(pod) and pod.status.phase not in ("Succeeded", "Failed")
    ]


def gated(core: k8s.CoreV1Api, namespace: str) -> list[k8s.V1Pod]:
    return [pod for pod in core.list_namespaced_pod(namespace).items if is_gated(pod)]


class Sampler:
    """The most pods a namespace had admitted at once, sampled every ``interval_s``."""

    def __init__(self, core: k8s.CoreV1Api, namespace: str, interval_s: float = 0.2) -> None:
        self.core, self.namespace, self.interval_s = core, namespace, interval_s
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.most = max(self.most, len(admitted(self.core, self.namespace)))
                self.samples += 1
            except (k8s.ApiException, OSError):
                pass
            self._stop.wait(self.interval_s)


def events_of(core: k8s.CoreV1Api, namespace: str, pod: str) -> list[k8s.CoreV1Event]:
    return [
        event
        for event in core.list_namespaced_event(namespace).items
        if event.involved_object.name == pod
    ]


def tenant_client(plane: ControlPlane, core: k8s.CoreV1Api, namespace: str) -> k8s.CoreV1Api:
    """A client as the tenant's own ServiceAccount, which may update and patch its pods."""
    account = "deployer"
    core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    rbac = k8s.RbacAuthorizationV1Api(plane.api_client())
    rbac.create_namespaced_role(
        namespace,
        {
            "metadata": {"name": "pods"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "update", "patch"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pods"},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        },
    )
    token = core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    configuration = plane.client_configuration()
    configuration.cert_file = None
    configuration.key_file = None
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return k8s.CoreV1Api(k8s.ApiClient(configuration))


def remove_gate(client: k8s.CoreV1Api, namespace: str, name: str) -> tuple[int, str]:
    body = [{"op": "remove", "path": "/spec/schedulingGates/0"}]
    try:
        client.patch_namespaced_pod(name, namespace, body)  # a list: a JSON Patch
    except k8s.ApiException as error:
        return error.status, str(error.body)
    return 200, ""


def policies_active(core: k8s.CoreV1Api) -> bool:
    """kube-apiserver has loaded the admission policies: in a fail-open namespace that no
    webhook is called for, a dry-run create of a direct pod is gated and one of a sized pod
    refused."""
    try:
        pod = core.create_namespaced_pod("probe", direct_pod(), dry_run="All")
    except k8s.ApiException:
        return False
    status, _ = create(core, "probe", gpu_pod("small"), dry_run=True)
    return is_gated(pod) and status == 403


# --------------------------------------------------------------------------- one replica


def test_with_the_webhook_down_fail_closed_stops_fail_open_gates_and_the_quota_holds(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    scheduling: Server,
    migslice_image: Image | None,
) -> None:
    bundle, (server,) = webhook_replicas(plane, migslice_image, 1, "--gate-interval-s", "1")
    server.start()
    try:
        plane.apply(webhook_configurations(bundle, server.url))
        closed = tenant(core, custom, 2)
        opened = tenant(core, custom, 2, OPEN)
        up = tenant(core, custom, 4, OPEN)
        for name in (closed, opened, up):
            seen_by_the_webhook(custom, name)

        # The webhook up: a fail-open namespace's pods are admitted at once, never left gated.
        for body in (direct_pod(), gpu_pod("small")):
            status, name = create(core, up, body)
            assert status == 201, name
            pod = core.read_namespaced_pod(name, up)
            assert not is_gated(pod) and pod.spec.scheduler_name == "migslice-scheduler"
            assert pod.metadata.annotations["migslice.io/tenant"] == up
        wait_for("the admitted pods to schedule", lambda: _all_bound(core, up), 60)

        server.stop()
        down = time.monotonic()
        # (a) fail-closed: not created.
        status, message = create(core, closed, direct_pod())
        assert status == 500 and "failed calling webhook" in message, message
        # (b) fail-open: created gated and not scheduled; a sized pod refused at once.
        names = []
        for _ in range(4):
            status, name = create(core, opened, direct_pod())
            assert status == 201, name
            names.append(name)
            time.sleep(1.1)  # distinct creation times: the queue's order
        started = time.monotonic()
        status, message = create(core, opened, gpu_pod("small"))
        refused_in = time.monotonic() - started
        assert status == 403 and "migslice is unavailable" in message, message
        assert "create it again" in message
        time.sleep(3)
        for pod in gated(core, opened):
            assert pod.spec.node_name is None
            assert pod.spec.scheduler_name == "migslice-scheduler"
        assert len(gated(core, opened)) == 4 and admitted(core, opened) == []
        # (d) the tenant cannot remove the gate itself.
        tenant_api = tenant_client(plane, core, opened)
        status, message = remove_gate(tenant_api, opened, names[0])
        assert status == 403 and "only the migslice webhook removes" in message, message

        # (c) the webhook back: exactly the quota is admitted, oldest first, and schedules.
        with Sampler(core, opened) as sampler:
            server.start()
            back = time.monotonic()
            wait_for("2 gated pods admitted", lambda: len(admitted(core, opened)) == 2, 60)
            admitted_after = time.monotonic() - back
            time.sleep(4)  # more rounds: nothing more is admitted
            assert sorted(p.metadata.name for p in admitted(core, opened)) == sorted(names[:2])
            wait_for("the admitted pods to schedule", lambda: _all_bound(core, opened), 60)
            waiting = sorted(p.metadata.name for p in gated(core, opened))
            assert waiting == sorted(names[2:])
            for name in waiting:
                told = wait_for(
                    f"the Warning Event on {name}",
                    lambda name=name: [
                        e for e in events_of(core, opened, name) if e.reason == "AdmissionWaiting"
                    ],
                    30,
                )
                assert told[0].type == "Warning"
                assert "would use 3 GPU instances (2 in use or admitted + 1 for this pod)" in (
                    told[0].message
                )
                assert "spec.quota.instances" in told[0].message
                condition = _condition(core, opened, name)
                assert condition is not None and condition.status == "False"
            # A pod deleted: the oldest waiting one is admitted, and only it.
            core.delete_namespaced_pod(names[0], opened, grace_period_seconds=0)
            wait_for(
                f"{names[2]} admitted",
                lambda: names[2] in {p.metadata.name for p in admitted(core, opened)},
                60,
            )
            time.sleep(3)
            assert [p.metadata.name for p in gated(core, opened)] == [names[3]]
        # (e) never above the quota.
        assert sampler.samples > 20 and sampler.most <= 2, (sampler.samples, sampler.most)
        annotations = core.read_namespaced_pod(names[1], opened).metadata.annotations
        assert annotations["migslice.io/reservation"].startswith("gate-")
        assert annotations["migslice.io/tenant"] == opened
    finally:
        server.stop()
    record_times(
        plane,
        "outage-one-replica",
        sized_pod_refused_in_s=refused_in,
        gated_admitted_after_webhook_back_s=admitted_after,
        webhook_down_s=back - down,
    )


def _all_bound(core: k8s.CoreV1Api, namespace: str) -> bool:
    pods = admitted(core, namespace)
    return bool(pods) and all(pod.spec.node_name for pod in pods)


def _condition(core: k8s.CoreV1Api, namespace: str, name: str) -> Any:
    pod = core.read_namespaced_pod(name, namespace)
    for condition in pod.status.conditions or ():
        if condition.type == "migslice.io/Admitted":
            return condition
    return None


def test_a_gated_pod_of_a_namespace_opted_out_of_migslice_is_let_go_as_it_is(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    scheduling: Server,
    migslice_image: Image | None,
) -> None:
    """A fail-open namespace's pod that waits behind the gate for its tenant's quota, then the
    namespace labelled migslice.io/admission=disabled: the reconciler skipped it and it stayed
    SchedulingGated for ever. The leader now removes the gate and nothing else (kube-apiserver
    lets the webhook's ServiceAccount do so there), with an AdmissionSkipped Event."""
    bundle, (server,) = webhook_replicas(plane, migslice_image, 1, "--gate-interval-s", "1")
    server.start()
    try:
        plane.apply(webhook_configurations(bundle, server.url))
        name = tenant(core, custom, 1, OPEN)
        seen_by_the_webhook(custom, name)
        server.stop()
        pods = []
        for _ in range(2):
            status, pod = create(core, name, direct_pod())
            assert status == 201, pod
            pods.append(pod)
            time.sleep(1.1)  # distinct creation times: the queue's order
        server.start()
        wait_for("the oldest gated pod admitted", lambda: len(admitted(core, name)) == 1, 60)
        wait_for(
            f"{pods[1]} told it waits",
            lambda: [e for e in events_of(core, name, pods[1]) if e.reason == "AdmissionWaiting"],
            30,
        )
        assert [p.metadata.name for p in gated(core, name)] == [pods[1]]
        core.patch_namespace(name, {"metadata": {"labels": {"migslice.io/admission": "disabled"}}})
        wait_for(f"{pods[1]} let go", lambda: gated(core, name) == [], 60)
        pod = core.read_namespaced_pod(pods[1], name)
        assert "migslice.io/tenant" not in (pod.metadata.annotations or {})
        assert "migslice.io/reservation" not in (pod.metadata.annotations or {})
        told = wait_for(
            f"the AdmissionSkipped Event on {pods[1]}",
            lambda: [e for e in events_of(core, name, pods[1]) if e.reason == "AdmissionSkipped"],
            30,
        )
        assert "migslice.io/admission=disabled" in told[0].message
        condition = _condition(core, name, pods[1])
        assert condition is not None and condition.reason == "AdmissionSkipped"
    finally:
        server.stop()


# --------------------------------------------------------------------------- two replicas


def test_two_replicas_reconcile_with_one_leader_and_the_next_takes_over_exactly(
    plane: ControlPlane,
    core: k8s.CoreV1Api,
    custom: k8s.CustomObjectsApi,
    scheduling: Server,
    migslice_image: Image | None,
) -> None:
    gate = ["--gate-interval-s", "1", "--gate-batch", "1", "--gate-lease-s", "4"]
    bundle, servers = webhook_replicas(plane, migslice_image, 2, *gate)
    with Balancer([s.port for s in servers]) as balancer:
        quota = 4
        try:
            for server in servers:
                server.start()
            plane.apply(webhook_configurations(bundle, f"https://127.0.0.1:{balancer.port}"))
            name = tenant(core, custom, quota, OPEN)
            seen_by_the_webhook(custom, name)
            for server in servers:
                server.stop()
                server.log_path.write_text("")  # who leads is read from the logs below
            for _ in range(8):  # no replica runs: every pod is created gated
                status, pod = create(core, name, direct_pod())
                assert status == 201, pod
            assert len(gated(core, name)) == 8
            with Sampler(core, name) as sampler:
                for server in servers:
                    server.start()
                leader = wait_for("a gate leader", lambda: _leader(servers), 60)
                wait_for("one gated pod admitted", lambda: len(admitted(core, name)) >= 1, 60)
                before_kill = len(admitted(core, name))
                follower = servers[1 - servers.index(leader)]
                assert "Admitted gated pod" not in follower.log_path.read_text()
                assert leader.process is not None
                kill_tree(leader.process.pid)
                killed = time.monotonic()
                leader.process.wait()
                leader.process = None
                wait_for(
                    "the other replica to take the Lease",
                    lambda: "became leader" in follower.log_path.read_text(),
                    60,
                )
                took_over_after = time.monotonic() - killed
                wait_for(f"{quota} pods admitted", lambda: len(admitted(core, name)) == quota, 60)
                time.sleep(4)
                assert len(admitted(core, name)) == quota
                assert len(gated(core, name)) == 8 - quota
            assert sampler.most <= quota, sampler.most
            assert before_kill < quota  # killed mid-way
        finally:
            for server in servers:
                server.stop()
    record_times(
        plane,
        "outage-gate-leader-killed",
        admitted_before_kill=before_kill,
        new_leader_after_kill_s=took_over_after,
    )


def _leader(servers: list[Server]) -> Server | None:
    leading = [
        s for s in servers if s.log_path.exists() and "became leader" in s.log_path.read_text()
    ]
    return leading[0] if len(leading) == 1 else None


# --------------------------------------------------------------------------- the chart


@pytest.fixture(scope="module")
def helm(e2e_bin: Path) -> Path:
    return e2e_bin / "helm"


def _names(documents: list[dict[str, Any]]) -> set[str]:
    """The names of the admission policies among ``documents``."""
    kinds = ("MutatingAdmissionPolicy", "ValidatingAdmissionPolicy")
    return {d["metadata"]["name"] for d in documents if d["kind"] in kinds}


def test_the_chart_renders_fail_open_only_where_asked_and_the_extenders_choice(
    helm: Path,
) -> None:
    policies = {
        "migslice-admission-gate",
        "migslice-admission-unavailable",
        "migslice-admission-gate-owner",
        "migslice-webhook-pod-writes",
    }
    on = render_chart(helm, "extender.ignorable=true")
    assert policies <= _names(on)
    # What puts the gate on new pods goes with fail-open; what admits the pods already gated
    # (the reconciler, its RBAC, the policies keeping the gate the webhook's) stays wherever a
    # gate could have been put (1.36+), so turning fail-open off strands none of them.
    keepers = {"migslice-admission-gate-owner", "migslice-webhook-pod-writes"}
    for values in (("outage.failOpen.enabled=false",), ()):
        extra = ["--kube-version", "v1.35.3"] if not values else []
        off = _render(helm, *values, *extra)
        assert _names(off) & policies == (keepers if values else set())
        (config,) = [d for d in off if d["kind"] == "MutatingWebhookConfiguration"]
        pods = [h for h in config["webhooks"] if h["name"].startswith("pods")]
        assert [h["name"] for h in pods] == ["pods.webhook.migslice.io"]
        assert "migslice.io/outage" not in str(pods[0]["namespaceSelector"])
        (deployment,) = [
            d
            for d in off
            if d["kind"] == "Deployment" and d["metadata"]["name"] == "migslice-webhook"
        ]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        reconciler = [d for d in off if d["metadata"]["name"] == "migslice-webhook-gate"]
        if values:
            assert "--gate-interval-s=0" not in args and len(reconciler) == 2
        else:
            assert "--gate-interval-s=0" in args and not reconciler
    (config_map,) = [
        d
        for d in on
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "migslice-scheduler-config"
    ]
    assert re.search(r"ignorable: true", config_map["data"]["config.yaml"])


def _render(helm: Path, *args: str) -> list[dict[str, Any]]:
    """``helm template`` with ``--set`` values (``key=value``) and flags (``--...``)."""
    values = [a for a in args if not a.startswith("--") and "=" in a]
    flags = [a for a in args if a not in values]
    command = [str(helm), "template", "migslice", str(REPO / "charts" / "migslice"), *flags]
    for value in values:
        command += ["--set", value]
    text = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(text) if d]
