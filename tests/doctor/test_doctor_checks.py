"""doctor's checks over recorded API objects (the chart's render, NVIDIA's sample ClusterPolicy,
certificates from ``migslice certs``), read through a real local HTTP server: the healthy
cluster passes every check, and each thing broken is named by its check, with the fix."""

from __future__ import annotations

import base64
import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.builders import make_namespace, make_node, make_policy
from migslice.doctor.checks.nodes import (
    TROUBLES,
    NodesFacts,
    NodeView,
    Trouble,
    judge_nodes_in_trouble,
)
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Verdict
from migslice.doctor.registry import CHECKS
from migslice.objects import AgentGpu, AgentReport, render_layout_annotation
from migslice.objects.times import format_time
from migslice.serving.certs import TlsBundle, write_client_cert
from tests.doctor_cluster import (
    ADMISSION,
    APPS,
    CORE,
    CRDS,
    NAMESPACE,
    DoctorCluster,
    gpu_node,
    make_bundle,
    patched_cluster_policy,
    sample_cluster_policy,
    tls_secret,
)
from tests.doctor_serve import judge

VALIDATING = f"{ADMISSION}/validatingwebhookconfigurations/migslice-webhook"
MUTATING = f"{ADMISSION}/mutatingwebhookconfigurations/migslice-webhook"
POLICIES = "/apis/migslice.io/v1alpha1/tenantpolicies"
CLUSTER_POLICIES = "/apis/nvidia.com/v1/clusterpolicies"
README_PATCH = (
    "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
    '\'{"spec":{"migManager":{"config":{"name":"migslice-mig-config"}}}}\''
)


@pytest.fixture
def cluster() -> Iterator[DoctorCluster]:
    made = DoctorCluster()
    yield made
    made.close()


def other_ca_bundle(tmp_path: Path, service: str = "migslice-webhook") -> str:
    """The caBundle of a CA made anew for the same Service (same name, another key)."""
    bundle = make_bundle(service, str(tmp_path / "other"))
    return base64.b64encode(Path(bundle.ca_cert).read_bytes()).decode()


DEFAULT_WARNINGS = ("webhook-client-auth", "network-policies")
"""What the chart's defaults leave open: kube-apiserver is not authenticated (it must be
configured first), no NetworkPolicy (the control plane's and scraper's addresses are the
cluster's)."""


@pytest.mark.parametrize("name", [c.name for c in CHECKS])
def test_the_healthy_cluster_passes_every_check(cluster: DoctorCluster, name: str) -> None:
    cluster.harden()
    found = judge(cluster, name)
    assert (found.verdict, found.fix) == (Verdict.OK, ""), found.detail


@pytest.mark.parametrize("name", [c.name for c in CHECKS])
def test_the_charts_defaults_pass_every_check_but_two_warnings(
    cluster: DoctorCluster, name: str
) -> None:
    found = judge(cluster, name)
    expected = Verdict.WARNING if name in DEFAULT_WARNINGS else Verdict.OK
    assert found.verdict is expected, found.detail


# -- the CRD -------------------------------------------------------------------------------------


def test_a_missing_crd_fails_with_the_install_command(cluster: DoctorCluster) -> None:
    del cluster.objects[f"{CRDS}/tenantpolicies.migslice.io"]
    found = judge(cluster, "tenantpolicy-crd")
    assert found.verdict is Verdict.FAILED
    assert found.detail == "CustomResourceDefinition tenantpolicies.migslice.io not found"
    assert found.fix == (
        "helm upgrade --install migslice charts/migslice -n migslice-system "
        "(or kubectl apply --server-side -k manifests)"
    )


def test_a_crd_whose_version_is_not_served_or_established_fails(cluster: DoctorCluster) -> None:
    crd = cluster.objects[f"{CRDS}/tenantpolicies.migslice.io"]
    crd["spec"]["versions"][0]["served"] = False
    crd["status"]["conditions"] = [
        {"type": "Established", "status": "False", "message": "not all names are accepted"}
    ]
    found = judge(cluster, "tenantpolicy-crd")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "version v1alpha1 is not served; tenantpolicies.migslice.io not Established (not all "
        "names are accepted)"
    )


# -- the webhook ---------------------------------------------------------------------------------


def test_a_webhook_without_endpoints_fails_with_the_proxy_error(cluster: DoctorCluster) -> None:
    path = f"{CORE}/services/https:migslice-webhook:443/proxy/healthz"
    message = 'no endpoints available for service "migslice-webhook"'
    found = judge(cluster, "webhook-reachable", errors={path: (503, message)})
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "GET /healthz through the API server's proxy to Service migslice-system/migslice-webhook "
        f"port 443: HTTP 503: GET {path}: {message}"
    )
    assert found.fix == (
        "kubectl -n migslice-system rollout status deploy/migslice-webhook && "
        "kubectl -n migslice-system logs deploy/migslice-webhook"
    )


def test_the_webhook_is_probed_at_the_port_its_configurations_call(cluster: DoctorCluster) -> None:
    for path in (MUTATING, VALIDATING):
        cluster.objects[path]["webhooks"][0]["clientConfig"]["service"]["port"] = 8443
    found = judge(cluster, "webhook-reachable")
    assert found.verdict is Verdict.FAILED
    assert "https:migslice-webhook:8443" in found.detail


def test_a_ca_bundle_of_another_ca_fails_naming_the_configuration(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    cluster.objects[VALIDATING]["webhooks"][0]["clientConfig"]["caBundle"] = other_ca_bundle(
        tmp_path
    )
    found = judge(cluster, "webhook-ca-bundle")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "ValidatingWebhookConfiguration webhook tenantpolicies.webhook.migslice.io: caBundle "
        "does not verify the serving certificate: the certificate's issuer "
        "CN=migslice-ca-migslice-webhook.migslice-system is in the CA bundle with another key "
        "(a CA made anew?): the signature does not verify"
    )
    assert found.fix == (
        "migslice certs --service migslice-webhook --namespace migslice-system --out "
        "/tmp/migslice-webhook-certs --secret migslice-webhook-tls --webhook-configuration "
        "migslice-webhook"
    )


@pytest.mark.parametrize(
    ("ca_bundle", "said"),
    [("", "caBundle is empty"), ("not base64!", "caBundle is not base64")],
    ids=["empty", "garbage"],
)
def test_an_empty_or_garbled_ca_bundle_fails(
    cluster: DoctorCluster, ca_bundle: str, said: str
) -> None:
    cluster.objects[MUTATING]["webhooks"][0]["clientConfig"]["caBundle"] = ca_bundle
    found = judge(cluster, "webhook-ca-bundle")
    assert found.verdict is Verdict.FAILED
    assert found.detail == f"MutatingWebhookConfiguration webhook pods.webhook.migslice.io: {said}"


def test_a_missing_webhook_configuration_fails(cluster: DoctorCluster) -> None:
    del cluster.objects[MUTATING]
    found = judge(cluster, "webhook-ca-bundle")
    assert found.verdict is Verdict.FAILED
    assert found.detail == "MutatingWebhookConfiguration migslice-webhook not found"


def test_a_cert_manager_configuration_gets_the_cainjector_fix(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    validating = cluster.objects[VALIDATING]
    validating["metadata"]["annotations"] = {
        "cert-manager.io/inject-ca-from": "migslice-system/migslice-webhook"
    }
    validating["webhooks"][0]["clientConfig"]["caBundle"] = other_ca_bundle(tmp_path)
    found = judge(cluster, "webhook-ca-bundle")
    assert found.verdict is Verdict.FAILED
    assert found.fix.startswith(
        "cert-manager's cainjector fills caBundle from Certificate migslice-system/migslice-webhook"
    )


def test_a_serving_certificate_that_expires_soon_is_a_warning(cluster: DoctorCluster) -> None:
    soon = cluster.now + 355 * 86400  # made for 365 days
    found = judge(cluster, "webhook-ca-bundle", now=soon)
    assert found.verdict is Verdict.WARNING
    assert "the serving certificate expires" in found.detail
    assert "(in 9 days)" in found.detail or "(in 10 days)" in found.detail
    assert found.fix.startswith("migslice certs --service migslice-webhook")


def test_a_secret_doctor_may_not_read_leaves_the_certificate_uncompared(
    cluster: DoctorCluster,
) -> None:
    path = f"{CORE}/secrets/migslice-webhook-tls"
    found = judge(cluster, "webhook-ca-bundle", errors={path: (403, "secrets is forbidden")})
    assert found.verdict is Verdict.WARNING
    assert found.detail.startswith(
        "not compared: cannot read Secret migslice-system/migslice-webhook-tls (HTTP 403"
    )


# -- the scheduler and the extender ---------------------------------------------------------------


def test_a_scheduler_without_available_replicas_fails(cluster: DoctorCluster) -> None:
    cluster.objects[f"{APPS}/deployments/migslice-scheduler"]["status"] = {"replicas": 2}
    found = judge(cluster, "scheduler")
    assert found.verdict is Verdict.FAILED
    assert found.detail == "Deployment migslice-scheduler: 0/2 replicas available"
    assert "describe deploy/migslice-scheduler" in found.fix


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (None, "Lease migslice-system/migslice-scheduler not found: no scheduler has led"),
        ({"holderIdentity": ""}, "Lease migslice-system/migslice-scheduler has no holder"),
        (
            {"holderIdentity": "a", "leaseDurationSeconds": 15, "renewTime": "OLD"},
            "Lease migslice-system/migslice-scheduler held by a, last renewed 300s ago (lease "
            "15s): the leader stopped renewing it",
        ),
    ],
    ids=["missing", "no-holder", "stale"],
)
def test_a_scheduler_lease_that_nobody_renews_fails(
    cluster: DoctorCluster, spec: dict[str, object] | None, said: str
) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/migslice-system/leases/migslice-scheduler"
    if spec is None:
        del cluster.objects[path]
    else:
        if spec.get("renewTime") == "OLD":
            spec["renewTime"] = datetime.datetime.fromtimestamp(
                cluster.now - 300, datetime.UTC
            ).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        cluster.objects[path]["spec"] = spec
    found = judge(cluster, "scheduler")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(said)


def scheduler_config(cluster: DoctorCluster) -> dict[str, object]:
    config_map = cluster.objects[f"{CORE}/configmaps/migslice-scheduler-config"]
    loaded: dict[str, object] = yaml.safe_load(config_map["data"]["config.yaml"])
    return loaded


def set_scheduler_config(cluster: DoctorCluster, config: dict[str, object]) -> None:
    config_map = cluster.objects[f"{CORE}/configmaps/migslice-scheduler-config"]
    config_map["data"]["config.yaml"] = yaml.safe_dump(config)


ALIASES = "\n".join(
    ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
)


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ("a: " + "[" * 3000 + "]" * 3000 + "\n", "nests too deep"),
        (ALIASES, "YAML aliases expand it to 1,234,567,909 nodes"),
        (ALIASES, "; write the configuration out without YAML aliases"),  # not a cluster file's
        ("a: 1\n---\nb: 2\n", "holds 2 YAML documents; kube-scheduler reads one"),
    ],
    ids=["nested-too-deep", "alias-bomb", "alias-bomb-fix", "two-documents"],
)
def test_a_scheduler_configuration_doctor_cannot_read_is_named_not_a_failure_of_doctor(
    cluster: DoctorCluster, config: str, said: str
) -> None:
    """Nested too deep, it was "the check itself failed (RecursionError: ...) ... report it";
    aliased, yaml.safe_load expanded it to a billion values past the check's time."""
    config_map = cluster.objects[f"{CORE}/configmaps/migslice-scheduler-config"]
    config_map["data"]["config.yaml"] = config
    found = judge(cluster, "scheduler")
    assert found.verdict is Verdict.WARNING
    source = (
        "KubeSchedulerConfiguration (ConfigMap migslice-system/migslice-scheduler-config key "
        "config.yaml)"
    )
    assert found.detail.startswith(f"Lease not checked: {source}"), found.detail
    assert said in found.detail


def test_scheduler_without_leader_election_needs_no_lease(cluster: DoctorCluster) -> None:
    config = scheduler_config(cluster)
    config["leaderElection"] = {"leaderElect": False}
    set_scheduler_config(cluster, config)
    found = judge(cluster, "scheduler")
    assert found.verdict is Verdict.OK
    assert found.detail == "Deployment migslice-scheduler 2/2 available; leader election off"


def test_an_extender_certificate_of_another_ca_is_not_trusted(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    other = make_bundle("migslice-extender", str(tmp_path / "other"))
    secret = tls_secret("migslice-extender-tls", other)
    secret["data"]["ca.crt"] = cluster.objects[f"{CORE}/secrets/migslice-extender-tls"]["data"][
        "ca.crt"
    ]
    cluster.objects[f"{CORE}/secrets/migslice-extender-tls"] = secret
    found = judge(cluster, "extender-trusted")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(
        "tlsConfig.caFile (Secret migslice-system/migslice-extender-tls key ca.crt) does not "
        "verify the extender's certificate: "
    )
    assert found.fix == (
        "migslice certs --service migslice-extender --namespace migslice-system --out "
        "/tmp/migslice-extender-certs --secret migslice-extender-tls && kubectl -n "
        "migslice-system rollout restart deploy/migslice-extender deploy/migslice-scheduler"
    )


def test_ca_data_in_the_scheduler_configuration_is_what_is_trusted(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    config = scheduler_config(cluster)
    (entry,) = config["extenders"]  # type: ignore[misc]
    entry["tlsConfig"] = {"serverName": "migslice-extender.migslice-system.svc"}
    entry["tlsConfig"]["caData"] = other_ca_bundle(tmp_path, "migslice-extender")
    set_scheduler_config(cluster, config)
    found = judge(cluster, "extender-trusted")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith("tlsConfig.caData does not verify the extender's certificate")
    secret = cluster.objects[f"{CORE}/secrets/migslice-extender-tls"]
    entry["tlsConfig"]["caData"] = secret["data"]["ca.crt"]
    set_scheduler_config(cluster, config)
    assert judge(cluster, "extender-trusted").verdict is Verdict.OK


@pytest.mark.parametrize(
    ("tls", "verdict", "said"),
    [
        ({"insecure": True}, Verdict.WARNING, "tlsConfig.insecure is true"),
        ({}, Verdict.FAILED, "tlsConfig has neither caData nor caFile"),
    ],
    ids=["insecure", "no-ca"],
)
def test_an_extender_the_scheduler_does_not_check_is_named(
    cluster: DoctorCluster, tls: dict[str, object], verdict: Verdict, said: str
) -> None:
    config = scheduler_config(cluster)
    config["extenders"][0]["tlsConfig"] = tls  # type: ignore[index]
    set_scheduler_config(cluster, config)
    found = judge(cluster, "extender-trusted")
    assert found.verdict is verdict
    assert said in found.detail


def test_the_extender_is_probed_where_the_scheduler_calls_it(cluster: DoctorCluster) -> None:
    config = scheduler_config(cluster)
    config["extenders"][0]["urlPrefix"] = "https://migslice-extender.ml.svc.cluster.local:8443"  # type: ignore[index]
    set_scheduler_config(cluster, config)
    found = judge(cluster, "extender-reachable")
    assert found.verdict is Verdict.FAILED
    assert "Service ml/migslice-extender port 8443" in found.detail


# -- who may call the servers -------------------------------------------------------------------


def test_a_webhook_without_client_authentication_warns_with_the_steps(
    cluster: DoctorCluster,
) -> None:
    found = judge(cluster, "webhook-client-auth")
    assert found.verdict is Verdict.WARNING
    assert "Deployment migslice-webhook runs without --client-ca-file" in found.detail
    assert "a forged AdmissionReview holds a tenant's quota" in found.detail
    assert "webhook.clientAuth.issueCertificate=true" in found.fix
    assert found.fix.endswith("then --set webhook.clientAuth.enabled=true (docs/security.md)")


def test_the_webhook_requiring_kube_apiservers_certificate_is_ok(cluster: DoctorCluster) -> None:
    cluster.harden()
    found = judge(cluster, "webhook-client-auth")
    assert found.verdict is Verdict.OK
    assert found.detail.startswith(
        "Deployment migslice-webhook answers /mutate and /validate only to a client "
        "certificate from --client-ca-file (Secret migslice-system/migslice-webhook-tls key "
        "ca.crt) naming kube-apiserver; Secret migslice-system/migslice-webhook-client key "
        "tls.crt holds one"
    )


def test_a_kube_apiserver_certificate_of_another_ca_is_a_warning(
    cluster: DoctorCluster, tmp_path: Path
) -> None:
    cluster.harden()
    other = make_bundle("migslice-webhook", str(tmp_path / "other"))
    cert, key = write_client_cert(other, "kube-apiserver")
    stale = TlsBundle(other.ca_cert, other.ca_key, cert, key)
    cluster.objects[f"{CORE}/secrets/migslice-webhook-client"] = tls_secret(
        "migslice-webhook-client", stale
    )
    found = judge(cluster, "webhook-client-auth")
    assert found.verdict is Verdict.WARNING
    assert "the certificate for kube-apiserver: it does not verify against the client CA" in (
        found.detail
    )
    assert "copy it to the control plane again" in found.fix


def test_an_extender_without_client_authentication_warns(cluster: DoctorCluster) -> None:
    path = f"{APPS}/deployments/migslice-extender"
    (container,) = cluster.objects[path]["spec"]["template"]["spec"]["containers"]
    container["args"] = [a for a in container["args"] if not a.startswith("--client-")]
    found = judge(cluster, "extender-client-auth")
    assert found.verdict is Verdict.WARNING
    assert "filter and prioritize answer any caller" in found.detail
    assert found.fix.endswith("--set extender.clientAuth.enabled=true")


def test_a_scheduler_presenting_no_certificate_to_an_extender_that_requires_one_fails(
    cluster: DoctorCluster,
) -> None:
    assert judge(cluster, "extender-client-auth").verdict is Verdict.OK
    config = scheduler_config(cluster)
    for key in ("certFile", "keyFile"):
        del config["extenders"][0]["tlsConfig"][key]  # type: ignore[index]
    set_scheduler_config(cluster, config)
    found = judge(cluster, "extender-client-auth")
    assert found.verdict is Verdict.FAILED
    assert "migslice-scheduler presents none" in found.detail
    assert "no GPU pod is scheduled" in found.detail


@pytest.mark.parametrize(
    ("issuer", "name", "said"),
    [
        ("other", "migslice-scheduler", "it does not verify against the client CA"),
        ("extender", "mallory", "it names mallory, not migslice-scheduler (--client-name)"),
    ],
    ids=["another-ca", "another-name"],
)
def test_a_scheduler_certificate_the_extender_refuses_fails(
    cluster: DoctorCluster, tmp_path: Path, issuer: str, name: str, said: str
) -> None:
    other = make_bundle("migslice-extender", str(tmp_path / "other"))
    bundle = other if issuer == "other" else cluster.extender_tls
    cert, key = write_client_cert(bundle, name)
    cluster.objects[f"{CORE}/secrets/migslice-extender-client"] = tls_secret(
        "migslice-extender-client", TlsBundle(bundle.ca_cert, bundle.ca_key, cert, key)
    )
    found = judge(cluster, "extender-client-auth")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(
        "migslice-scheduler presents tlsConfig.certFile (Secret migslice-system/"
        "migslice-extender-client key tls.crt), which the extender refuses: "
    )
    assert said in found.detail
    assert "rollout restart deploy/migslice-scheduler" in found.fix


def test_a_server_no_network_policy_selects_is_named(cluster: DoctorCluster) -> None:
    found = judge(cluster, "network-policies")
    assert found.verdict is Verdict.WARNING
    assert "no NetworkPolicy in migslice-system selects the extender's pods" in found.detail
    assert "networkPolicy.enabled=true" in found.fix
    cluster.harden()
    policies = f"/apis/networking.k8s.io/v1/namespaces/{NAMESPACE}/networkpolicies"
    cluster.objects[policies] = cluster.objects[policies][:1]
    found = judge(cluster, "network-policies")
    assert found.verdict is Verdict.WARNING
    assert "selects the extender's pods" in found.detail
    assert "NetworkPolicies select the pods of webhook (migslice-webhook)" in found.detail


# -- the GPU Operator ---------------------------------------------------------------------------


def test_the_sample_cluster_policy_fails_with_the_readme_patches(cluster: DoctorCluster) -> None:
    cluster.objects[CLUSTER_POLICIES] = [sample_cluster_policy()]
    strategy = judge(cluster, "mig-strategy")
    assert strategy.verdict is Verdict.FAILED
    assert strategy.detail == "ClusterPolicy cluster-policy spec.mig.strategy is single, not mixed"
    assert strategy.fix == (
        "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
        '\'{"spec":{"mig":{"strategy":"mixed"}}}\''
    )
    config = judge(cluster, "mig-manager-config")
    assert config.verdict is Verdict.FAILED
    assert config.detail == (
        "MIG Manager reads its generated default-mig-parted-config (the field is empty), not "
        "migslice-mig-config, where migslice writes its configs (ClusterPolicy cluster-policy "
        "spec.migManager.config.name)"
    )
    assert config.fix == README_PATCH


def test_mig_manager_disabled_fails(cluster: DoctorCluster) -> None:
    policy = patched_cluster_policy()
    policy["spec"]["migManager"]["enabled"] = False
    cluster.objects[CLUSTER_POLICIES] = [policy]
    found = judge(cluster, "mig-manager-config")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith("MIG Manager is disabled (ClusterPolicy cluster-policy")
    assert '{"spec":{"migManager":{"enabled":true}}}' in found.fix


def test_a_config_map_outside_the_operators_namespace_fails(cluster: DoctorCluster) -> None:
    policy = patched_cluster_policy()
    policy["status"]["namespace"] = "nvidia-gpu-operator"
    cluster.objects[CLUSTER_POLICIES] = [policy]
    found = judge(cluster, "mig-manager-config")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "MIG Manager reads migslice-mig-config of namespace nvidia-gpu-operator, where the GPU "
        "Operator runs (ClusterPolicy cluster-policy status.namespace), not of gpu-operator, "
        "where migslice writes its configs"
    )
    assert found.fix == (
        "install migslice with --set gpuOperator.namespace=nvidia-gpu-operator (the extender's "
        "--mig-config-map=nvidia-gpu-operator/migslice-mig-config)"
    )


def test_the_oldest_cluster_policy_is_the_one_judged(cluster: DoctorCluster) -> None:
    newer = sample_cluster_policy()
    newer["metadata"].update(name="a-newer-one", creationTimestamp="2026-02-01T00:00:00Z")
    cluster.objects[CLUSTER_POLICIES] = [newer, patched_cluster_policy()]
    assert judge(cluster, "mig-manager-config").verdict is Verdict.OK
    operator = judge(cluster, "gpu-operator")
    assert (
        operator.detail
        == "ClusterPolicy cluster-policy, state ready; 1 more ignored (the oldest is used)"
    )


def test_without_the_gpu_operator_its_checks_warn(cluster: DoctorCluster) -> None:
    del cluster.objects[f"{CRDS}/clusterpolicies.nvidia.com"]
    operator = judge(cluster, "gpu-operator")
    assert operator.verdict is Verdict.WARNING
    assert operator.detail.startswith("no CRD clusterpolicies.nvidia.com")
    config = judge(cluster, "mig-manager-config")
    assert config.verdict is Verdict.WARNING
    assert "not checked that MIG Manager reads gpu-operator/migslice-mig-config" in config.detail
    assert judge(cluster, "mig-strategy").verdict is Verdict.OK  # the nodes still say mixed


def test_a_node_with_another_strategy_fails_naming_it(cluster: DoctorCluster) -> None:
    cluster.objects["/api/v1/nodes"] = [gpu_node(), gpu_node("gpu-b", strategy="single")]
    found = judge(cluster, "mig-strategy")
    assert found.verdict is Verdict.FAILED
    assert found.detail == "nvidia.com/mig.strategy is not mixed on MIG node(s) gpu-b (single)"
    assert "nvidia.com/device-plugin.config" in found.fix


def test_a_missing_mig_config_map_fails(cluster: DoctorCluster) -> None:
    del cluster.objects["/api/v1/namespaces/gpu-operator/configmaps/migslice-mig-config"]
    found = judge(cluster, "mig-manager-config")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith("ConfigMap gpu-operator/migslice-mig-config not found")
    assert found.fix.endswith("--set gpuOperator.migConfig.create=true")


def test_the_config_map_is_the_one_the_extender_writes(cluster: DoctorCluster) -> None:
    extender = cluster.objects[f"{APPS}/deployments/migslice-extender"]
    args = extender["spec"]["template"]["spec"]["containers"][0]["args"]
    args[:] = [a for a in args if not a.startswith("--mig-config-map")]
    args.append("--mig-config-map=nvidia-gpu-operator/ours")
    found = judge(cluster, "mig-manager-config")
    assert found.verdict is Verdict.FAILED
    assert "ConfigMap nvidia-gpu-operator/ours not found" in found.detail
    assert "not ours" in found.detail


# -- the nodes ------------------------------------------------------------------------------------


def test_an_unknown_gpu_product_fails_naming_the_node(cluster: DoctorCluster) -> None:
    unknown = gpu_node("gpu-z", product="NVIDIA-Z900-SXM9-512GB")
    cluster.objects["/api/v1/nodes"] = [gpu_node(), unknown]
    found = judge(cluster, "gpu-products")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "GPU product the catalog does not know on gpu-z (NVIDIA-Z900-SXM9-512GB): the webhook "
        "sizes no pod for it"
    )
    assert found.fix.startswith("migslice models lists the known ones")


def test_a_cluster_without_mig_nodes_is_a_warning(cluster: DoctorCluster) -> None:
    cluster.objects["/api/v1/nodes"] = [make_node("cpu-1", product=None, mig_capable=None)]
    found = judge(cluster, "gpu-products")
    assert found.verdict is Verdict.WARNING
    assert found.detail.startswith("no MIG node")


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("stale", "migslice.io/gpu-layout stale on gpu-a (observed 2h ago)"),
        ("missing", "no migslice.io/gpu-layout on gpu-a"),
        ("unreadable", "migslice.io/gpu-layout unreadable on gpu-a"),
    ],
)
def test_an_agent_layout_that_is_not_fresh_fails(
    cluster: DoctorCluster, case: str, said: str
) -> None:
    nodes = {
        "stale": gpu_node(observed_at=cluster.now - 7200),
        "missing": make_node("gpu-a", mig={"1g.10gb": 7}),
        "unreadable": make_node("gpu-a", mig={"1g.10gb": 7}, layout_annotation="{"),
    }
    cluster.objects["/api/v1/nodes"] = [nodes[case]]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(said)
    assert "logs ds/migslice-agent" in found.fix


def test_a_layout_of_an_agent_of_an_earlier_release_is_a_warning_naming_the_node(
    cluster: DoctorCluster,
) -> None:
    """An agent the upgrade left behind (a pod not rolled, an image not pulled) writes no
    GPU's own pciDeviceId: re-partitioning cannot tell a GPU of another model on its node."""
    earlier = AgentReport(  # as the agent wrote it before gpus[].pciDeviceId
        product="NVIDIA-A100-SXM4-80GB",
        gpus=(AgentGpu(index=0, mig_enabled=False, instances=()),),
        pci_device_id=0x20B2,
        observed_at=format_time(cluster.now - 60),
    )
    node = make_node(
        "gpu-b", gpu_count=1, mig={"1g.10gb": 7},
        layout_annotation=render_layout_annotation(earlier),
    )  # fmt: skip
    cluster.objects["/api/v1/nodes"] = [gpu_node(), node]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.WARNING
    assert found.detail.startswith(
        "migslice.io/gpu-layout written by an agent of an earlier release on gpu-b"
    ), found.detail
    assert "rollout status ds/migslice-agent" in found.fix


def test_a_gpu_the_agent_cannot_read_fails_naming_the_node_gpu_and_nvml_error(
    cluster: DoctorCluster,
) -> None:
    lost = AgentReport(
        product="NVIDIA-A100-SXM4-80GB",
        gpus=(
            AgentGpu(
                index=0,
                mig_enabled=False,
                instances=(),
                error="nvmlDeviceGetGpuInstances: GPU is lost",
            ),
        ),
        observed_at=format_time(cluster.now - 60),
    )
    node = make_node(
        "gpu-a", gpu_count=1, mig={"1g.10gb": 7},
        layout_annotation=render_layout_annotation(lost),
    )  # fmt: skip
    cluster.objects["/api/v1/nodes"] = [node]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(
        "GPUs NVML cannot read on gpu-a (GPU 0: nvmlDeviceGetGpuInstances: GPU is lost)"
    ), found.detail
    assert "XID" in found.fix


def test_agent_freshness_follows_its_heartbeat_and_its_node_selector(
    cluster: DoctorCluster,
) -> None:
    daemonset = cluster.objects[f"{APPS}/daemonsets/migslice-agent"]
    args = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    args[:] = [a for a in args if not a.startswith("--heartbeat-s")] + ["--heartbeat-s=3600"]
    not_selected = gpu_node("gpu-b", mig_capable=False, observed_at=cluster.now - 86400)
    cluster.objects["/api/v1/nodes"] = [gpu_node(observed_at=cluster.now - 7200), not_selected]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.OK
    assert found.detail == (
        "1 MIG node(s) with a fresh migslice.io/gpu-layout, observed 2h ago (bound 2h)"
    )


def test_without_the_agent_there_is_nothing_to_check(cluster: DoctorCluster) -> None:
    del cluster.objects[f"{APPS}/daemonsets/migslice-agent"]
    cluster.objects["/api/v1/nodes"] = [make_node("gpu-a", mig={"1g.10gb": 7})]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.OK
    assert found.detail == "DaemonSet migslice-agent not installed: nothing to check"


def pending_since(name: str, since: float) -> dict[str, object]:
    node = gpu_node(name, config="migslice-gpu-b-0a1b2c3d", config_state="pending")
    stamp = datetime.datetime.fromtimestamp(since, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    node["metadata"]["managedFields"] = [
        {
            "manager": "migslice-repartition",
            "operation": "Update",
            "apiVersion": "v1",
            "time": stamp,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:labels": {"f:nvidia.com/mig.config": {}, "f:nvidia.com/mig.config.state": {}}
                }
            },
        }
    ]
    return node


def test_nodes_where_mig_manager_failed_or_is_stuck_are_in_trouble(cluster: DoctorCluster) -> None:
    cluster.objects["/api/v1/nodes"] = [
        gpu_node("gpu-a", config_state="failed"),
        pending_since("gpu-b", cluster.now - 1800),
        pending_since("gpu-c", cluster.now - 60),
        gpu_node("gpu-d", config_state="pending"),  # since when: unknown, so not judged
    ]
    found = judge(cluster, "nodes-in-trouble")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        "MIG Manager failed (nvidia.com/mig.config.state=failed): gpu-a "
        "(nvidia.com/mig.config=all-1g.10gb); MIG Manager stuck "
        "(nvidia.com/mig.config.state=pending): gpu-b (pending for 30m)"
    )
    assert "kubectl -n gpu-operator logs -l app=nvidia-mig-manager" in found.fix
    assert judge(cluster, "nodes-in-trouble", pending_bound_s=3600).detail.count("gpu-b") == 0


def test_a_new_kind_of_trouble_is_one_more_entry() -> None:
    def quarantined(node: NodeView, settings: Settings) -> str | None:
        return node.name if "example.com/quarantine" in node.annotations else None

    node = gpu_node("gpu-q")
    node["metadata"]["annotations"]["example.com/quarantine"] = "MIG Manager stuck"
    troubles = (*TROUBLES, Trouble("quarantined", Verdict.WARNING, "look", quarantined))
    found = judge_nodes_in_trouble(NodesFacts([node]), Settings(now=time.time()), troubles)
    assert (found.verdict, found.detail, found.fix) == (
        Verdict.WARNING,
        "quarantined: gpu-q; no node in trouble (MIG Manager state: 1 success; pending bound 10m)",
        "look",
    )


# -- the policies -------------------------------------------------------------------------------


def test_an_invalid_policy_fails_naming_the_field(cluster: DoctorCluster) -> None:
    bad = make_policy("team-x", namespaces=["team-x"], sizes={"small": {"memory": "lots"}})
    cluster.objects[POLICIES] = [*cluster.objects[POLICIES], bad]
    found = judge(cluster, "tenant-policies")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith('TenantPolicy "team-x" is invalid: spec.sizes.small.memory')
    assert found.fix == "kubectl edit tenantpolicy team-x (the fields named)"


def test_a_policy_the_catalog_cannot_serve_fails(cluster: DoctorCluster) -> None:
    bad = make_policy("team-x", namespaces=["team-x"], allowedProducts=["NVIDIA-Z900"])
    cluster.objects[POLICIES] = [bad]
    found = judge(cluster, "tenant-policies")
    assert found.verdict is Verdict.FAILED
    assert found.detail.startswith(
        'TenantPolicy "team-x" asks what the catalog cannot serve: spec.allowedProducts[0]: '
        '"NVIDIA-Z900" is not a GPU product or model the catalog knows'
    )


def test_policies_that_select_one_namespace_fail_naming_both(cluster: DoctorCluster) -> None:
    selector = {"matchLabels": {"team": "ml"}}
    ml = make_policy("ml-platform", namespaces=None, namespaceSelector=selector)
    cluster.objects[POLICIES] = [*cluster.objects[POLICIES], ml]
    cluster.objects["/api/v1/namespaces"] = [
        make_namespace("inference", {"team": "ml"}),
        make_namespace("training", {"team": "ml"}),
    ]
    found = judge(cluster, "tenant-policies")
    assert found.verdict is Verdict.FAILED
    assert found.detail == (
        'TenantPolicies "inference" and "ml-platform" all select namespace(s) inference: GPU '
        "pods there are denied"
    )


def test_no_policy_at_all_is_a_warning(cluster: DoctorCluster) -> None:
    cluster.objects[POLICIES] = []
    found = judge(cluster, "tenant-policies")
    assert found.verdict is Verdict.WARNING
    assert found.detail.startswith("no TenantPolicy")


@pytest.mark.parametrize(
    ("node_skew_s", "written_ago_s", "verdict"),
    [(-900.0, 5.0, Verdict.WARNING), (7200.0, 1800.0, Verdict.FAILED)],
    ids=["node-15-min-behind-agent-alive", "node-2-h-ahead-agent-dead-30-min"],
)
def test_the_freshness_of_an_agent_layout_does_not_depend_on_the_node_s_clock(
    cluster: DoctorCluster, node_skew_s: float, written_ago_s: float, verdict: Verdict
) -> None:
    """observedAt is written with the node's clock: 15 min behind, a layout written 5 s ago
    failed as "observed 15m ago"; 2 h ahead, an agent dead for 30 min passed as fresh. The
    API server's own stamp of the write (managedFields) judges it; the node's clock being off
    is a warning of its own."""
    observed = cluster.now - written_ago_s + node_skew_s
    node = gpu_node(observed_at=observed)
    node["metadata"]["managedFields"] = [
        {
            "manager": "Python-urllib3",
            "operation": "Update",
            "apiVersion": "v1",
            "time": format_time(cluster.now - written_ago_s),
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:migslice.io/gpu-layout": {}}}},
        }
    ]
    cluster.objects["/api/v1/nodes"] = [node]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is verdict, found.detail
    if verdict is Verdict.WARNING:  # fresh by the API server's stamp; the clock is off
        assert found.detail.startswith("migslice.io/gpu-layout's observedAt is off"), found.detail
        assert "gpu-a (15m)" in found.detail
    else:
        assert "stale on gpu-a (observed 30m ago)" in found.detail, found.detail


def test_a_layout_s_age_is_not_the_time_of_another_write_by_the_same_field_manager(
    cluster: DoctorCluster,
) -> None:
    """managedFields keeps one time per manager (and operation), updated by any write of that
    manager that changes a field. The agent's layout, its carve journal and the extender's node
    labels and annotations are all written as manager "migslice" (the User-Agent's prefix: no
    fieldManager is named), so the entry that owns migslice.io/gpu-layout also carries the
    time of the extender's last relabel of the node. An agent dead for 30 min on a node the
    extender labelled a minute ago read as fresh (and its node's clock as 29 min off)."""
    node = gpu_node(observed_at=cluster.now - 1800)
    node["metadata"]["managedFields"] = [
        {
            "manager": "migslice",
            "operation": "Update",
            "apiVersion": "v1",
            "time": format_time(cluster.now - 60),
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {"f:migslice.io/gpu-layout": {}},
                    "f:labels": {"f:nvidia.com/mig.config": {}},
                }
            },
        }
    ]
    cluster.objects["/api/v1/nodes"] = [node]
    found = judge(cluster, "agent-layouts")
    assert found.verdict is Verdict.FAILED, found.detail
    assert "stale on gpu-a (observed 30m ago)" in found.detail, found.detail
    assert "clock is off" not in found.detail, found.detail
