"""``migslice doctor`` on an installed cluster: all ok after the README's Helm install, and
each broken piece named by its own check (and only by it).

One fresh control plane for the module: the GPU Operator's ClusterPolicy CRD and its sample
ClusterPolicy (vendored, ``e2e/fixtures/gpu-operator/``, named ``cluster-policy`` as the
GPU Operator's chart names it), an A100 node, then the README's Helm commands as written
(:class:`harness.actors.ClusterActors` runs what the install created). doctor runs as the admin
would, from outside the cluster with the admin kubeconfig: it reaches the webhook and the
extender through the API server's service proxy. Each scenario breaks one thing, runs
doctor, and puts the thing back.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from harness.api import wait_for
from harness.builders import make_policy
from harness.controlplane import ControlPlane
from harness.install import FIXTURES, Cluster, fresh_workdir, readme_commands
from harness.paths import REPO
from migslice.kube.nodes import LAYOUT_FIELD_MANAGER
from migslice.objects import AgentGpu, AgentInstance, AgentReport, render_layout_annotation
from migslice.objects.device_taint_rules import steer_rule
from migslice.objects.times import format_time
from migslice.serving.certs import write_tls_bundle

pytestmark = pytest.mark.e2e

NAMESPACE = "migslice-system"
NODE = "gpu-a100-1"
CHECKS = (
    "tenantpolicy-crd",
    "webhook-reachable",
    "webhook-ca-bundle",
    "webhook-client-auth",
    "scheduler",
    "extender-reachable",
    "extender-trusted",
    "extender-client-auth",
    "network-policies",
    "gpu-operator",
    "mig-strategy",
    "mig-manager-config",
    "gpu-products",
    "agent-layouts",
    "tenant-policies",
    "outage-modes",
    "nodes-in-trouble",
    "dra-api",
    "dra-nodes",
    "dra-device-classes",
    "dra-steer",
)
DEFAULT_WARNINGS = ("webhook-client-auth", "network-policies")
DEFAULTS_SAID = {(name, "warning") for name in DEFAULT_WARNINGS}
"""What the chart's defaults leave open, and doctor says so: kube-apiserver is not asked for a
certificate (it must be configured first), no NetworkPolicy (the addresses are the cluster's)."""


def sample_cluster_policy() -> dict[str, Any]:
    """NVIDIA's sample ClusterPolicy (MIG strategy single, MIG Manager's own config)."""
    (policy,) = [d for d in yaml.safe_load_all((FIXTURES / "v1_clusterpolicy.yaml").read_text())]
    policy["metadata"]["name"] = "cluster-policy"
    return dict(policy)


class Installed:
    """The cluster after the README's Helm install, and doctor run against it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        api = cluster.cp.api_client()
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.admission = k8s.AdmissionregistrationV1Api(api)
        self.extensions = k8s.ApiextensionsV1Api(api)
        self.doctor_seconds: list[float] = []

    def doctor(self, *extra: str) -> tuple[int, dict[str, dict[str, Any]], str]:
        """Run ``migslice doctor -o json``; (exit status, checks by name, stderr)."""
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "migslice.cli", "doctor", "-o", "json", *extra],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=self.cluster.env,
            timeout=120,
        )
        self.doctor_seconds.append(time.monotonic() - started)
        self.cluster.transcript.append(f"$ migslice doctor -o json\n{done.stdout}{done.stderr}")
        assert done.stdout, done.stderr
        report = json.loads(done.stdout)
        return done.returncode, {c["name"]: c for c in report["checks"]}, done.stderr

    def failing(self, *extra: str) -> dict[str, dict[str, Any]]:
        """The checks that did not pass (exit status 1 when one failed)."""
        code, checks, _ = self.doctor(*extra)
        bad = {
            name: c
            for name, c in checks.items()
            if c["result"] != "ok" and (name, c["result"]) not in DEFAULTS_SAID
        }
        failed = any(c["result"] == "failed" for c in bad.values())
        assert code == (1 if failed else 0), bad
        return bad

    def publish_layout(self, observed: datetime.datetime) -> None:
        """The node agent's annotation, as it publishes it for an all-1g.10gb A100."""
        instances = tuple(
            AgentInstance(profile="1g.10gb", start=i, size=1, busy=False) for i in range(7)
        )
        report = AgentReport(
            product="NVIDIA-A100-SXM4-80GB",
            gpus=(AgentGpu(index=0, mig_enabled=True, instances=instances, pci_device_id=0x20B2),),
            observed_at=format_time(observed),
            pci_device_id=0x20B2,
        )
        self.core.patch_node(
            NODE,
            {
                "metadata": {
                    "annotations": {"migslice.io/gpu-layout": render_layout_annotation(report)}
                }
            },
            field_manager=LAYOUT_FIELD_MANAGER,  # as the agent writes it
        )

    def label_node(self, **labels: str) -> None:
        self.core.patch_node(NODE, {"metadata": {"labels": labels}})

    def repartition_metric(self) -> float:
        """migslice_repartition_mig_manager_config_mismatch on the extender's /metrics."""
        status, text = self.cluster.actors.servers["migslice-extender"].request("GET", "/metrics")
        assert status == 200
        for line in str(text).splitlines():
            if line.startswith("migslice_repartition_mig_manager_config_mismatch "):
                return float(line.split()[1])
        raise AssertionError("no migslice_repartition_mig_manager_config_mismatch on /metrics")


@pytest.fixture(scope="module")
def installed(e2e_bin: Path) -> Iterator[Installed]:
    workdir = fresh_workdir("doctor")
    with ControlPlane(workdir, e2e_bin) as control_plane:
        cluster = Cluster(control_plane, workdir / "home", policy=sample_cluster_policy())
        if cluster.actors.pod_address is None:
            pytest.skip(
                "this machine has no address but loopback: kube-apiserver's service proxy "
                "refuses loopback endpoints, so doctor cannot reach the servers from outside"
            )
        cluster.actors.start()
        try:
            for command in readme_commands(REPO / "README.md", "### With Helm"):
                cluster.sh(command)
            cluster.sized_pod_lands()
            cluster.actors.expose_webhook_port()
            made = Installed(cluster)
            made.publish_layout(datetime.datetime.now(datetime.UTC))
            yield made
        finally:
            cluster.actors.stop()
            (workdir / "transcript.txt").write_text("\n".join(cluster.transcript))


def test_the_installed_stack_is_all_ok(installed: Installed) -> None:
    code, checks, stderr = installed.doctor()
    assert list(checks) == list(CHECKS)
    expected = {name: "warning" if name in DEFAULT_WARNINGS else "ok" for name in CHECKS}
    assert {name: c["result"] for name, c in checks.items()} == expected, checks
    assert code == 0, stderr
    assert "webhook.clientAuth.enabled=true" in checks["webhook-client-auth"]["fix"]
    assert "networkPolicy.enabled=true" in checks["network-policies"]["fix"]
    assert (
        "naming migslice-scheduler; migslice-scheduler presents tlsConfig.certFile"
        in (checks["extender-client-auth"]["detail"])
    )
    assert "through the API server's proxy" in checks["webhook-reachable"]["detail"]
    assert "Lease migslice-system/migslice-scheduler held by" in checks["scheduler"]["detail"]
    # The README's command as written: the human table, one line per check, and the summary.
    (command,) = readme_commands(REPO / "README.md", "### Check the install")
    lines = installed.cluster.sh(command).splitlines()
    assert lines[0].split() == ["CHECK", "RESULT", "DETAIL"]
    assert [line.split()[:2] for line in lines[1 : 1 + len(CHECKS)]] == [
        [c, expected[c]] for c in CHECKS
    ]
    assert lines[-1] == f"{len(CHECKS)} checks: {len(CHECKS) - 2} ok, 2 warning"


def test_a_wrong_ca_bundle_is_named(installed: Installed) -> None:
    path = "/webhooks/0/clientConfig/caBundle"
    before = installed.admission.read_validating_webhook_configuration("migslice-webhook")
    with tempfile.TemporaryDirectory() as other:
        bundle = write_tls_bundle(other, "migslice-webhook", NAMESPACE, [], [], 30)
        wrong = base64.b64encode(Path(bundle.ca_cert).read_bytes()).decode()
    installed.admission.patch_validating_webhook_configuration(
        "migslice-webhook", [{"op": "replace", "path": path, "value": wrong}]
    )
    try:
        bad = installed.failing()
    finally:
        installed.admission.patch_validating_webhook_configuration(
            "migslice-webhook",
            [{"op": "replace", "path": path, "value": before.webhooks[0].client_config.ca_bundle}],
        )
    assert set(bad) == {"webhook-ca-bundle"}
    detail = bad["webhook-ca-bundle"]["detail"]
    assert "ValidatingWebhookConfiguration webhook tenantpolicies.webhook.migslice.io" in detail
    assert "MutatingWebhookConfiguration" not in detail
    assert bad["webhook-ca-bundle"]["fix"].startswith("migslice certs --service migslice-webhook")


def test_the_extender_down_is_named(installed: Installed) -> None:
    extender = installed.cluster.actors.servers["migslice-extender"]
    extender.stop()
    try:
        bad = installed.failing()
    finally:
        extender.start()
    assert set(bad) == {"extender-reachable"}
    assert "connection refused" in bad["extender-reachable"]["detail"]
    assert "rollout status deploy/migslice-extender" in bad["extender-reachable"]["fix"]


def test_steer_rules_an_extender_left_behind_are_named(installed: Installed) -> None:
    """The extender crash-looping (its process gone, its Deployment with no available
    replica) after its DRA steer wrote a rule: the rule stays on the real kube-apiserver, and
    dra-steer names it with the fix, beside extender-reachable."""
    apps = k8s.AppsV1Api(installed.cluster.cp.api_client())
    name = "migslice-extender"
    rule = steer_rule(NODE, "gpu-0-mig-1g10gb-19-0", "1g.10gb")
    rules = ("resource.k8s.io", "v1", "devicetaintrules")
    status = apps.read_namespaced_deployment_status(name, NAMESPACE).status
    extender = installed.cluster.actors.servers[name]
    extender.stop()
    try:
        installed.custom.create_cluster_custom_object(*rules, rule)
        apps.patch_namespaced_deployment_status(
            name, NAMESPACE, {"status": {"availableReplicas": 0, "readyReplicas": 0}}
        )
        bad = installed.failing()
    finally:
        apps.patch_namespaced_deployment_status(
            name,
            NAMESPACE,
            {
                "status": {
                    "availableReplicas": status.available_replicas,
                    "readyReplicas": status.ready_replicas,
                }
            },
        )
        installed.custom.delete_cluster_custom_object(*rules, rule["metadata"]["name"])
        extender.start()
    assert set(bad) == {"extender-reachable", "dra-steer"}
    steer = bad["dra-steer"]
    assert steer["result"] == "warning"
    assert steer["detail"].startswith(f"1 steer rule(s) on 1 node(s) ({NODE}) and no extender")
    assert f"(Deployment {name}: 0/" in steer["detail"]
    assert "xargs -r kubectl delete" in steer["fix"]


def test_mig_strategy_single_on_a_node_is_named(installed: Installed) -> None:
    installed.label_node(**{"nvidia.com/mig.strategy": "single"})
    try:
        bad = installed.failing()
    finally:
        installed.label_node(**{"nvidia.com/mig.strategy": "mixed"})
    assert set(bad) == {"mig-strategy"}
    assert f"MIG node(s) {NODE} (single)" in bad["mig-strategy"]["detail"]


def test_mig_manager_reading_another_config_map_is_named_and_stops_the_controller(
    installed: Installed,
) -> None:
    patch = {"spec": {"migManager": {"config": {"name": "default-mig-parted-config"}}}}
    installed.custom.patch_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy", patch
    )
    try:
        bad = installed.failing()
        # The repartition controller (dry-run, as installed) stops planning and says so on
        # /metrics at its next round (every 15 s), with the chart's RBAC.
        wait_for(
            "the controller to see the ConfigMap", lambda: installed.repartition_metric() == 1, 40
        )
    finally:
        patch["spec"]["migManager"]["config"]["name"] = "migslice-mig-config"
        installed.custom.patch_cluster_custom_object(
            "nvidia.com", "v1", "clusterpolicies", "cluster-policy", patch
        )
    assert set(bad) == {"mig-manager-config"}
    assert (
        'MIG Manager reads "default-mig-parted-config", not migslice-mig-config'
        in (bad["mig-manager-config"]["detail"])
    )
    assert bad["mig-manager-config"]["fix"] == (
        "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
        '\'{"spec":{"migManager":{"config":{"name":"migslice-mig-config"}}}}\''
    )


def test_an_unknown_gpu_product_is_named(installed: Installed) -> None:
    installed.label_node(**{"nvidia.com/gpu.product": "NVIDIA-Z900-SXM9-512GB"})
    try:
        bad = installed.failing()
    finally:
        installed.label_node(**{"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert set(bad) == {"gpu-products"}
    assert f"{NODE} (NVIDIA-Z900-SXM9-512GB)" in bad["gpu-products"]["detail"]


def test_an_overlapping_tenant_policy_is_named(installed: Installed) -> None:
    # The validating webhook refuses a policy that overlaps when it is written; a namespace
    # labelled afterwards makes two policies select it all the same.
    overlapping = make_policy(
        "ml-platform",
        namespaces=None,
        namespaceSelector={"matchLabels": {"team": "ml"}},
        sizes={"small": {"memory": "10Gi", "computeSlices": 1}},
    )
    installed.custom.create_cluster_custom_object(
        "migslice.io", "v1alpha1", "tenantpolicies", overlapping
    )
    installed.core.patch_namespace("inference", {"metadata": {"labels": {"team": "ml"}}})
    try:
        bad = installed.failing()
    finally:
        installed.core.patch_namespace("inference", {"metadata": {"labels": {"team": None}}})
        installed.custom.delete_cluster_custom_object(
            "migslice.io", "v1alpha1", "tenantpolicies", "ml-platform"
        )
    assert set(bad) == {"tenant-policies"}
    assert (
        'TenantPolicies "inference" and "ml-platform" all select namespace(s) inference'
        in (bad["tenant-policies"]["detail"])
    )


def test_a_layout_whose_observed_at_is_off_the_api_servers_stamp_names_the_node_clock(
    installed: Installed,
) -> None:
    """A layout written now whose observedAt reads 2 h ago: the node's clock is 2 h behind.
    Its age is the API server's stamp of the write (managedFields), so it is fresh, and the
    skew is a warning of its own (a stale layout by that stamp is a unit test's: no e2e waits
    out the 10 min bound)."""
    now = datetime.datetime.now(datetime.UTC)
    installed.publish_layout(now - datetime.timedelta(hours=2))
    try:
        bad = installed.failing()
    finally:
        installed.publish_layout(now)
    assert set(bad) == {"agent-layouts"}
    assert bad["agent-layouts"]["result"] == "warning", bad
    detail = bad["agent-layouts"]["detail"]
    assert f"observedAt is off the API server's stamp of its write on {NODE} (2h)" in detail
    assert "with a fresh migslice.io/gpu-layout" in detail


def test_a_node_mig_manager_failed_on_is_named(installed: Installed) -> None:
    installed.label_node(**{"nvidia.com/mig.config.state": "failed"})
    try:
        bad = installed.failing()
    finally:
        installed.label_node(**{"nvidia.com/mig.config.state": "success"})
    assert set(bad) == {"nodes-in-trouble"}
    assert f"{NODE} (nvidia.com/mig.config=all-1g.10gb)" in bad["nodes-in-trouble"]["detail"]


def test_the_crd_missing_is_named(installed: Installed) -> None:
    """Last: deleting the CRD deletes every TenantPolicy with it."""
    installed.extensions.delete_custom_resource_definition("tenantpolicies.migslice.io")
    wait_for(
        "the CRD to be gone",
        lambda: (
            not installed.extensions.list_custom_resource_definition(
                field_selector="metadata.name=tenantpolicies.migslice.io"
            ).items
        ),
        30,
    )
    bad = installed.failing()
    assert set(bad) == {"tenantpolicy-crd", "tenant-policies"}
    assert bad["tenantpolicy-crd"]["detail"] == (
        "CustomResourceDefinition tenantpolicies.migslice.io not found"
    )
    assert bad["tenantpolicy-crd"]["fix"].startswith("helm upgrade --install migslice")
