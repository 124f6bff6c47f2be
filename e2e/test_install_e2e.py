"""Installing migslice as an admin would: the Helm chart and the kustomize tree.

Rendering: ``helm lint``, ``helm template`` for every mode (valid objects, values schema),
the committed kustomize tree equal to a fresh render, and ``kustomize build`` / ``kubectl
kustomize`` equal to ``helm template`` object for object.

Installing: the README's commands, run as written with the helm, kubectl and kustomize built
here, each on a fresh control plane with the GPU Operator's namespace and ClusterPolicy CRD
and an A100 node. :class:`harness.actors.ClusterActors` plays the Job and Deployment controllers,
the kubelet and kube-proxy (see there for what it substitutes); the webhook, the extender and
kube-scheduler run with the command and args of the Deployments the install created.
"""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client as k8s

from harness.api import ensure_namespace, wait_for
from harness.builders import make_pod
from harness.controlplane import ControlPlane
from harness.install import Cluster, fresh_workdir, readme_commands, render_chart
from harness.paths import REPO
from manifests import render
from migslice.objects.device_taint_rules import steer_rule

pytestmark = pytest.mark.e2e

README = REPO / "README.md"
NAMESPACE = "migslice-system"
TOOLS = ("helm", "kustomize", "kubectl")
MODES = {
    "defaults": (),
    "cert-manager": ("tls.mode=cert-manager",),
    "repartition-on": ("repartition.mode=on",),
    "repartition-off": ("repartition.mode=off",),
    "examples-no-agent": ("examplePolicies.enabled=true", "agent.enabled=false"),
    "pinned-scheduler-one-webhook": ("scheduler.image.tag=v1.31.4", "webhook.replicas=1"),
    "webhook-client-auth-network-policy-carve": (
        "webhook.clientAuth.enabled=true",
        "networkPolicy.enabled=true",
        "networkPolicy.webhook.from[0].ipBlock.cidr=10.0.0.0/28",
        "agent.carve=true",
    ),
    "cert-manager-client-certificates": (
        "tls.mode=cert-manager",
        "webhook.clientAuth.issueCertificate=true",
    ),
    "no-extender-client-auth-no-policies": (
        "extender.clientAuth.enabled=false",
        "admissionPolicies.enabled=false",
    ),
}


@pytest.fixture(scope="module")
def tools(e2e_bin: Path) -> dict[str, Path]:
    missing = [t for t in TOOLS if not (e2e_bin / t).is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing in {e2e_bin}: run e2e/build.sh", pytrace=False)
    return {t: e2e_bin / t for t in TOOLS}


def run(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=300, **kw)


def identities(documents: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], Any]:
    return {render.identity(d): d for d in documents}


# --------------------------------------------------------------------------- rendering


def test_helm_lint_passes_strictly(tools: dict[str, Path]) -> None:
    done = run([str(tools["helm"]), "lint", "--strict", str(REPO / "charts" / "migslice")])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("mode", list(MODES))
def test_helm_template_renders_valid_objects(tools: dict[str, Path], mode: str) -> None:
    documents = render_chart(tools["helm"], *MODES[mode])
    kinds = {d["kind"] for d in documents}
    assert {"CustomResourceDefinition", "MutatingWebhookConfiguration", "Deployment"} <= kinds
    for document in documents:
        if document["apiVersion"].split("/")[0] in ("cert-manager.io", "migslice.io"):
            continue
        # resource.k8s.io/v1 (migslice's DeviceClasses) is served from 1.34 on;
        # MutatingAdmissionPolicy is GA from 1.36: the chart renders it only from there.
        dra = document["apiVersion"].startswith("resource.k8s.io/")
        for version in ("1.34", "1.37") if dra else ("1.30", "1.34", "1.37"):
            if document["kind"].startswith("MutatingAdmissionPolicy") and version < "1.36":
                continue
            kubernetes_validate.validate(document, version, strict=True)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("repartition.mode=yes", "at '/repartition/mode': value must be one of"),
        ("tls.mode=self-signed", "at '/tls/mode': value must be one of"),
        ("webhook.excludeNamespaces[0]=Kube_System", "at '/webhook/excludeNamespaces/0'"),
        ("webhok.replicas=2", "additional properties 'webhok' not allowed"),
    ],
    ids=["repartition-mode", "tls-mode", "namespace-name", "typo"],
)
def test_bad_values_are_refused_naming_the_field(
    tools: dict[str, Path], value: str, message: str
) -> None:
    done = run([str(tools["helm"]), "template", "migslice", "charts/migslice", "--set", value])
    assert done.returncode != 0
    assert message in done.stderr


def test_network_policies_admit_the_scheduler_the_control_plane_and_the_scrapers(
    tools: dict[str, Path],
) -> None:
    scrapers = "networkPolicy.metrics.from[0].namespaceSelector.matchLabels.team=monitoring"
    assert not [d for d in render_chart(tools["helm"]) if d["kind"] == "NetworkPolicy"]
    documents = render_chart(tools["helm"], "networkPolicy.enabled=true", scrapers)
    deployments = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Deployment"}
    found = {d["metadata"]["name"]: d["spec"] for d in documents if d["kind"] == "NetworkPolicy"}
    assert sorted(found) == ["migslice-extender", "migslice-webhook"]
    scraper = {"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}
    for name, spec in found.items():
        labels = deployments[name]["spec"]["template"]["metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= labels.items()
        assert spec["policyTypes"] == ["Ingress"]
        (rule,) = spec["ingress"]
        assert rule["ports"] == [{"port": "https", "protocol": "TCP"}]
    scheduler = deployments["migslice-scheduler"]["spec"]["template"]["metadata"]["labels"]
    (caller, scraping) = found["migslice-extender"]["ingress"][0]["from"]
    assert caller["podSelector"]["matchLabels"].items() <= scheduler.items()
    assert scraping == scraper
    assert "from" not in found["migslice-webhook"]["ingress"][0]  # every source by default
    narrowed = render_chart(
        tools["helm"],
        "networkPolicy.enabled=true",
        "networkPolicy.webhook.from[0].ipBlock.cidr=10.0.0.0/28",
        scrapers,
    )
    (webhook,) = [
        d for d in narrowed if d["kind"] == "NetworkPolicy" and "webhook" in d["metadata"]["name"]
    ]
    assert webhook["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}}, scraper]


def test_the_committed_kustomize_tree_is_the_chart_rendered(tools: dict[str, Path]) -> None:
    assert render.differences(str(tools["helm"])) == []


@pytest.mark.parametrize(
    ("folder", "values"),
    [("manifests", render.FIXED_VALUES), ("manifests/cert-manager", render.CERT_MANAGER_VALUES)],
    ids=["base", "cert-manager"],
)
@pytest.mark.parametrize("builder", ["kustomize build", "kubectl kustomize"])
def test_kustomize_builds_exactly_what_helm_renders(
    tools: dict[str, Path], folder: str, values: tuple[str, ...], builder: str
) -> None:
    tool, verb = builder.split()
    built = run([str(tools[tool]), verb, folder])
    assert built.returncode == 0, built.stderr
    from_kustomize = identities([d for d in yaml.safe_load_all(built.stdout) if d])
    text = render.helm_template(str(tools["helm"]), values)
    from_helm = identities([d for _, d in render.split_render(text)])
    assert sorted(from_kustomize) == sorted(from_helm)
    assert from_kustomize == from_helm


# --------------------------------------------------------------------------- installing


@pytest.fixture
def cluster(e2e_bin: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    workdir = fresh_workdir(request.node.name.split("[")[0].removeprefix("test_")[:40])
    with ControlPlane(workdir, e2e_bin) as control_plane:
        made = Cluster(control_plane, workdir / "home")
        made.actors.start()
        try:
            yield made
        finally:
            made.actors.stop()
            (workdir / "transcript.txt").write_text("\n".join(made.transcript))


def test_the_readme_helm_install_admits_and_schedules_a_sized_pod(
    tools: dict[str, Path], cluster: Cluster
) -> None:
    # Before the install the chart's own CRD is not served: Helm's lookup would fail on it.
    assert example_policies(cluster) == ["inference", "payments", "research"]
    for command in readme_commands(README, "### With Helm"):
        cluster.sh(command)
    assert cluster.actors.jobs_done == {
        "migslice-certs": "Complete",
        "migslice-ca-bundle": "Complete",
    }
    assert cluster.actors.errors == []
    cluster.sized_pod_lands()
    cluster.ca_bundles_match_the_secret()
    cluster.cluster_policy_reads_back()
    # The hooks and their RBAC are gone; the release is deployed; the mig-parted ConfigMap is
    # NVIDIA's default, in the GPU Operator's namespace.
    assert (
        cluster.core.list_namespaced_service_account(
            NAMESPACE, field_selector=("metadata.name=migslice-certs")
        ).items
        == []
    )
    assert '"deployed"' in cluster.sh("helm -n migslice-system list -o json")
    # The example policies an upgrade would create leave out the one the admin already has
    # (an upgrade's hook would delete it and create it again, its edits and status lost).
    assert example_policies(cluster) == ["payments", "research"]  # "inference": the README's
    mig_config = cluster.core.read_namespaced_config_map("migslice-mig-config", "gpu-operator")
    assert "all-1g.10gb:" in mig_config.data["config.yaml"]
    # A GPU Operator pod asking for a whole GPU is left alone.
    validator = cluster.core.create_namespaced_pod("gpu-operator", gpu_operator_pod())
    assert validator.metadata.annotations is None
    assert validator.spec.scheduler_name == "default-scheduler"
    # An upgrade that switches the repartition controller on keeps what the cluster wrote:
    # the controller's configs and plan record in the mig-parted ConfigMap, the certificates
    # (the Jobs keep a valid Secret) and the caBundles.
    secret_before = cluster.core.read_namespaced_secret("migslice-webhook-tls", NAMESPACE).data
    written = mig_config.data["config.yaml"] + "  migslice-gpu-a100-1-0123abcd: []\n"
    cluster.core.patch_namespaced_config_map(
        "migslice-mig-config",
        "gpu-operator",
        {
            "metadata": {"annotations": {"migslice.io/repartition": '{"version": 1}'}},
            "data": {"config.yaml": written},
        },
    )
    cluster.actors.unroute_webhooks()
    cluster.sh(f"helm upgrade migslice charts/migslice -n {NAMESPACE} --set repartition.mode=on")
    after = cluster.core.read_namespaced_config_map("migslice-mig-config", "gpu-operator")
    assert after.data["config.yaml"] == written
    assert after.metadata.annotations["migslice.io/repartition"] == '{"version": 1}'
    assert cluster.core.read_namespaced_secret("migslice-webhook-tls", NAMESPACE).data == (
        secret_before
    )
    cluster.ca_bundles_match_the_secret()
    extender = k8s.AppsV1Api(cluster.cp.api_client()).read_namespaced_deployment(
        "migslice-extender", NAMESPACE
    )
    args = extender.spec.template.spec.containers[0].args
    assert "--repartition" in args and "--repartition-dry-run" not in args
    assert cluster.actors.errors == []
    # A rollback to a revision with webhooks the current one lacks (fail-open off drops the
    # fail-open twins) adds them back as that revision's manifest has them, without caBundle:
    # the certificate Jobs run on rollback too and put it in.
    cluster.actors.unroute_webhooks()
    cluster.sh(
        f"helm upgrade migslice charts/migslice -n {NAMESPACE} --reuse-values "
        "--set outage.failOpen.enabled=false"
    )
    cluster.ca_bundles_match_the_secret()
    # The controller writes on; a rollback puts back no revision's copy of the mig-parted
    # ConfigMap (made once, by a hook: in no manifest), so its configs and record stay.
    later = written + "  migslice-gpu-a100-1-4567cdef: []\n"
    cluster.core.patch_namespaced_config_map(
        "migslice-mig-config",
        "gpu-operator",
        {
            "metadata": {"annotations": {"migslice.io/repartition": '{"version": 2}'}},
            "data": {"config.yaml": later},
        },
    )
    cluster.actors.unroute_webhooks()
    cluster.sh(f"helm rollback migslice 2 -n {NAMESPACE}")
    cluster.ca_bundles_match_the_secret()
    assert cluster.actors.errors == []
    kept = cluster.core.read_namespaced_config_map("migslice-mig-config", "gpu-operator")
    assert kept.data["config.yaml"] == later
    assert kept.metadata.annotations["migslice.io/repartition"] == '{"version": 2}'
    # By hand instead: the commands `migslice certs` prints, run as printed, put a new CA into
    # the Secret and both webhook configurations.
    out = cluster.cp.workdir / "by-hand"
    cluster.core.delete_namespaced_secret("migslice-webhook-tls", NAMESPACE)
    printed = cluster.sh(
        f"migslice certs --service migslice-webhook --namespace {NAMESPACE} --out {out}"
    )
    for line in printed.splitlines():
        if line.startswith(("  kubectl ", "  migslice ")):
            cluster.sh(line.strip())
    cluster.ca_bundles_match_the_secret()
    by_hand = cluster.core.read_namespaced_secret("migslice-webhook-tls", NAMESPACE)
    assert base64.b64decode(by_hand.data["ca.crt"]) == (out / "ca.crt").read_bytes()


def example_policies(cluster: Cluster) -> list[str]:
    """The example TenantPolicies the chart would create now (Helm's lookup against the
    cluster, as an install or upgrade renders them)."""
    rendered = cluster.sh(
        f"helm template migslice charts/migslice -n {NAMESPACE} --dry-run=server "
        "--set examplePolicies.enabled=true"
    )
    return sorted(
        d["metadata"]["name"]
        for d in yaml.safe_load_all(rendered)
        if d and d.get("kind") == "TenantPolicy"
    )


def gpu_operator_pod() -> dict[str, Any]:
    return make_pod(
        None,
        generate_name="nvidia-cuda-validator-",
        namespace=None,
        stored=False,
        tenant=None,
        limits={"nvidia.com/gpu": "1"},
        container="cuda-validation",
        image="cuda-validator:1",
        restart_policy=None,
        scheduler_name=None,
        with_type_meta=True,
    )


def test_the_readme_kustomize_install_serves_from_its_rendered_args(
    tools: dict[str, Path], cluster: Cluster
) -> None:
    for command in readme_commands(README, "### With kustomize"):
        cluster.sh(command)
    for command in readme_commands(README, "### With Helm")[2:]:  # the patch, policy and pod
        cluster.sh(command)
    assert cluster.actors.jobs_done == {
        "migslice-certs": "Complete",
        "migslice-ca-bundle": "Complete",
    }
    assert cluster.actors.errors == []
    cluster.sized_pod_lands()
    cluster.ca_bundles_match_the_secret()
    # The webhook's own exclusion: even a configuration that sends gpu-operator's pods (an
    # admin's hand-written one, without the namespaceSelector) gets them back unchanged.
    cluster.admission.patch_mutating_webhook_configuration(
        "migslice-webhook", [{"op": "remove", "path": "/webhooks/0/namespaceSelector"}]
    )
    validator = cluster.core.create_namespaced_pod("gpu-operator", gpu_operator_pod())
    assert validator.metadata.annotations is None
    assert validator.spec.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    ensure_namespace(cluster.core, "no-tenant")
    with pytest.raises(k8s.ApiException) as denied:
        cluster.core.create_namespaced_pod("no-tenant", gpu_operator_pod())
    assert "belongs to no TenantPolicy" in denied.value.body
    # Applying the tree again keeps the injected caBundle (the manifests do not carry one).
    # --force-conflicts: this test's edits to the webhook configurations (the routing above and
    # the removed namespaceSelector) would otherwise be reported as conflicts, as they should.
    cluster.sh("kubectl apply --server-side --force-conflicts -k manifests")
    cluster.ca_bundles_match_the_secret()


OPERATE = REPO / "docs" / "operate.md"
ADMISSION_KINDS = (
    "mutating_webhook_configuration",
    "validating_webhook_configuration",
    "validating_admission_policy",
    "validating_admission_policy_binding",
    "mutating_admission_policy",
    "mutating_admission_policy_binding",
)


def test_the_documented_helm_uninstall_leaves_nothing_that_holds_the_cluster(
    tools: dict[str, Path], cluster: Cluster
) -> None:
    """docs/operate.md "Uninstalling", run as written after the README's Helm install, with
    what the running components leave behind: a pod gated in a fail-open namespace while the
    webhook could not be called, a pod waiting for migslice-scheduler, a steer rule and a
    quarantined node left by an extender that died first. ``helm uninstall --wait`` alone
    (its post-delete hook Job, ``migslice cleanup``) deletes the steer rule and the node's
    migslice keys, keeps an admin's own rule and NVIDIA's keys, and lists the stranded pods;
    the documented command deletes those. Afterwards nothing of migslice's intercepts pods or
    holds a device, a pod or a node; the hook left nothing of its own; the CRD, its
    TenantPolicies and the mig-parted ConfigMap are kept; a reinstall works."""
    for command in readme_commands(README, "### With Helm"):
        cluster.sh(command)
    cluster.sized_pod_lands()
    api = cluster.cp.api_client()
    # The webhook cannot be called: a fail-open namespace's GPU pod is stored gated.
    cluster.actors.unroute_webhooks()
    ensure_namespace(cluster.core, "batch", {"migslice.io/outage": "open"})
    gated = make_pod(
        "gated",
        stored=False,
        with_type_meta=True,
        scheduler_name=None,
        namespace="batch",
        tenant=None,
        limits={"nvidia.com/mig-1g.10gb": "1"},
    )
    made = cluster.core.create_namespaced_pod("batch", gated)
    assert [g.name for g in made.spec.scheduling_gates] == ["migslice.io/admission"]
    assert made.spec.scheduler_name == "migslice-scheduler"
    ensure_namespace(cluster.core, "plain")
    waiting = make_pod(
        "waiting",
        stored=False,
        with_type_meta=True,
        namespace="plain",
        tenant=None,
        node_selector={"nowhere": "x"},
    )
    cluster.core.create_namespaced_pod("plain", waiting)
    # The extender dies (its pods crash-loop) and leaves a steer rule and a quarantined node
    # behind: a live one would delete a rule it does not want at once.
    cluster.actors.halt("migslice-extender")
    rules = k8s.CustomObjectsApi(api)
    rules.create_cluster_custom_object(
        "resource.k8s.io", "v1", "devicetaintrules", steer_rule("gpu-a100-1", "gpu-0", "1g.10gb")
    )
    admins = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "gpu-a100-1-maintenance"},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-a100-1"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    rules.create_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules", admins)
    cluster.core.patch_node(
        "gpu-a100-1",
        {
            "metadata": {
                "labels": {"migslice.io/repartition-quarantine": "timeout"},
                "annotations": {"migslice.io/repartition-quarantine": "{}"},
            }
        },
    )
    nvidias = {
        k: v
        for k, v in (cluster.core.read_node("gpu-a100-1").metadata.labels or {}).items()
        if k.startswith("nvidia.com/")
    }
    assert nvidias

    uninstall, *pod_commands = readme_commands(OPERATE, "## Uninstalling")
    assert uninstall == f"helm uninstall migslice -n {NAMESPACE} --wait"
    cluster.sh(uninstall)

    # The hook ran after the Deployments were gone, and left nothing of its own.
    wait_for("migslice's pods to stop", lambda: not cluster.actors.servers, 30)
    assert cluster.actors.jobs_done.get("migslice-cleanup") == "Complete", cluster.actors.job_runs
    listed = (cluster.actors.workdir / "job-migslice-cleanup-cleanup-0.log").read_text()
    assert "kubectl -n batch delete pod gated --wait=false" in listed, listed
    assert "kubectl -n plain delete pod waiting --wait=false" in listed, listed
    assert cluster.core.read_namespaced_pod("gated", "batch")  # listed, not deleted
    assert not [
        a.metadata.name
        for a in cluster.core.list_namespaced_service_account(NAMESPACE).items
        if a.metadata.name == "migslice-cleanup"
    ]
    assert not cluster.actors.batch.list_namespaced_job(NAMESPACE).items
    assert [
        r["metadata"]["name"]
        for r in rules.list_cluster_custom_object("resource.k8s.io", "v1", "devicetaintrules")[
            "items"
        ]
    ] == ["gpu-a100-1-maintenance"]
    node = cluster.core.read_node("gpu-a100-1")
    marks = {**(node.metadata.labels or {}), **(node.metadata.annotations or {})}
    assert [k for k in marks if k.startswith("migslice.io/")] == []
    assert {k: v for k, v in (node.metadata.labels or {}).items() if k in nvidias} == nvidias

    for command in pod_commands:
        cluster.sh(command)

    for kind in ADMISSION_KINDS:
        listed = getattr(cluster.admission, f"list_{kind}")().items
        assert [o.metadata.name for o in listed if "migslice" in o.metadata.name] == [], kind
    stuck = [
        f"{p.metadata.namespace}/{p.metadata.name}"
        for p in cluster.core.list_pod_for_all_namespaces().items
        if not p.spec.node_name
        and (p.spec.scheduler_name == "migslice-scheduler" or p.spec.scheduling_gates)
    ]
    assert stuck == []
    # Kept: the CRD with its TenantPolicies, the mig-parted ConfigMap MIG Manager reads.
    assert rules.get_cluster_custom_object("migslice.io", "v1alpha1", "tenantpolicies", "inference")
    cluster.core.read_namespaced_config_map("migslice-mig-config", "gpu-operator")
    # A GPU pod of a former tenant is created as it is, by nobody's leave.
    plain = cluster.core.create_namespaced_pod(
        "inference",
        make_pod(
            None,
            stored=False,
            with_type_meta=True,
            generate_name="after-",
            namespace=None,
            tenant=None,
            scheduler_name=None,
            limits={"nvidia.com/mig-1g.10gb": "1"},
        ),
    )
    assert plain.metadata.annotations is None and not plain.spec.scheduling_gates
    # Reinstalling works beside what was kept (the certificates, Leases, ledgers, the CRD).
    cluster.sh(f"helm install migslice charts/migslice -n {NAMESPACE}")
    assert '"deployed"' in cluster.sh(f"helm -n {NAMESPACE} list -o json")
    cluster.ca_bundles_match_the_secret()
