"""The Helm chart's files and its default render (manifests/base, which e2e keeps equal to
``helm template``): versions, values schema, security contexts, admission exclusions, TLS."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import migslice
from manifests import render
from migslice.mig.migparted import parse_mig_parted
from tests import paths
from webhook.settings import DEFAULT_EXCLUDED_NAMESPACES

ROOT = paths.ROOT
CHART = ROOT / "charts" / "migslice"
BASE = ROOT / "manifests" / "base"


def rendered() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(BASE.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def workload(kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in rendered() if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


MIG_CAPABILITY_ENV = ("NVIDIA_MIG_MONITOR_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES")
"""What a container sets to be given a MIG capability by the NVIDIA container runtime."""

WORKLOADS = [
    (d["kind"], d["metadata"]["name"])
    for d in rendered()
    if d["kind"] in ("Deployment", "DaemonSet", "Job")
]


def test_the_chart_and_the_package_have_one_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == migslice.__version__


def test_the_default_values_satisfy_the_schema_and_the_schema_rejects_typos() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.Draft7Validator(schema).validate(values)
    for bad in (
        {**values, "repartition": {"mode": "yes"}},
        {**values, "webhok": {}},
        {**values, "tls": {"mode": "self-signed"}},
        {**values, "scheduler": {**values["scheduler"], "percentageOfNodesToScore": 101}},
        {**values, "scheduler": {**values["scheduler"], "percentageOfNodesToScore": "1%"}},
        {**values, "scheduler": {**values["scheduler"], "placement": "best-fit"}},
        # kube-apiserver refuses these PodDisruptionBudgets: the schema says so first
        *(
            {**values, part: {**values[part], "podDisruptionBudget": {"maxUnavailable": bad}}}
            for part in ("webhook", "extender")
            for bad in ("abc", -1, "50")
        ),
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft7Validator(schema).validate(bad)


def test_the_seeded_mig_parted_config_is_nvidias_default_and_parses() -> None:
    text = (CHART / "files" / "mig-parted" / "config-default.yaml").read_text()
    assert "NVIDIA/gpu-operator v26.7.0" in text
    configs = parse_mig_parted(text)
    assert {"all-disabled", "all-enabled", "all-1g.10gb", "all-balanced"} <= set(configs)
    config_map = workload("ConfigMap", "migslice-mig-config")
    assert config_map["metadata"]["namespace"] == "gpu-operator"
    assert config_map["data"]["config.yaml"].strip() == text.strip()


@pytest.mark.parametrize(("kind", "name"), WORKLOADS, ids=[f"{k}/{n}" for k, n in WORKLOADS])
def test_every_pod_runs_locked_down(kind: str, name: str) -> None:
    spec = workload(kind, name)["spec"]["template"]["spec"]
    pod = spec["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == pod["runAsGroup"] == 65532
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        # CAP_SYS_ADMIN in the bounding set is what the NVIDIA runtime asks of a container
        # given a MIG capability (below); no other container has any
        mig = any(e["name"] in MIG_CAPABILITY_ENV for e in container.get("env") or ())
        added = {"add": ["SYS_ADMIN"]} if mig else {}
        assert context["capabilities"] == {"drop": ["ALL"], **added}
        assert "privileged" not in context
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/tmp"] == "tmp"
        if container.get("command") == ["migslice"]:
            assert {"name": "HOME", "value": "/tmp"} in container["env"]
    assert not any(k in spec for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert not any("hostPath" in v for v in spec["volumes"])


def test_the_webhook_runs_three_replicas_spread_over_nodes_with_a_budget() -> None:
    deployment = workload("Deployment", "migslice-webhook")
    assert deployment["spec"]["replicas"] == 3
    (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    budget = workload("PodDisruptionBudget", "migslice-webhook")
    assert budget["spec"]["maxUnavailable"] == 1
    assert (
        budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )


def test_excluded_namespaces_are_the_same_in_the_selector_the_flag_and_the_code() -> None:
    config = workload("MutatingWebhookConfiguration", "migslice-webhook")
    (by_name, opt_out, closed) = config["webhooks"][0]["namespaceSelector"]["matchExpressions"]
    assert by_name["key"] == "kubernetes.io/metadata.name" and by_name["operator"] == "NotIn"
    assert opt_out == {"key": "migslice.io/admission", "operator": "NotIn", "values": ["disabled"]}
    assert closed == {"key": "migslice.io/outage", "operator": "NotIn", "values": ["open"]}
    container = workload("Deployment", "migslice-webhook")["spec"]["template"]["spec"]
    (flag,) = [a for a in container["containers"][0]["args"] if a.startswith("--exclude-")]
    from_flag = flag.removeprefix("--exclude-namespaces=").split(",")
    assert from_flag == by_name["values"]
    assert set(from_flag) == DEFAULT_EXCLUDED_NAMESPACES


def test_the_certificate_jobs_fill_in_what_the_manifests_leave_empty() -> None:
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in workload(kind, "migslice-webhook")["webhooks"]:
            assert "caBundle" not in hook["clientConfig"]  # a re-apply never blanks it
            assert hook["clientConfig"]["service"]["name"] == "migslice-webhook"
    jobs = {
        name: workload("Job", name)["spec"]["template"]["spec"]["containers"]
        for name in ("migslice-certs", "migslice-ca-bundle")
    }
    secrets = {
        arg.removeprefix("--secret=")
        for containers in jobs.values()
        for container in containers
        for arg in container["args"]
        if arg.startswith("--secret=")
    }
    assert secrets == {"migslice-webhook-tls", "migslice-extender-tls"}
    (inject,) = jobs["migslice-ca-bundle"]
    assert "--webhook-configuration=migslice-webhook" in inject["args"]
    volumes = [
        v["secret"]["secretName"]
        for kind, name in WORKLOADS
        if kind == "Deployment"
        for v in workload(kind, name)["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ]
    assert sorted(volumes) == [
        "migslice-extender-client",
        "migslice-extender-tls",
        "migslice-extender-tls",
        "migslice-webhook-tls",
    ]


def test_migslice_scheduler_presents_the_client_certificate_the_extender_requires() -> None:
    (certs,) = [
        c
        for c in workload("Job", "migslice-certs")["spec"]["template"]["spec"]["containers"]
        if "--service=migslice-extender" in c["args"]
    ]
    assert ["--client=migslice-scheduler", "--client-secret=migslice-extender-client"] == [
        a for a in certs["args"] if a.startswith("--client")
    ]
    (extender,) = workload("Deployment", "migslice-extender")["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--client-ca-file=/etc/migslice/tls/ca.crt" in extender["args"]
    assert "--client-name=migslice-scheduler" in extender["args"]
    (webhook,) = workload("Deployment", "migslice-webhook")["spec"]["template"]["spec"][
        "containers"
    ]
    assert not [a for a in webhook["args"] if a.startswith("--client")]  # off by default
    spec = workload("Deployment", "migslice-scheduler")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    (client,) = [v for v in spec["volumes"] if v["name"] == "extender-client"]
    assert client["secret"]["secretName"] == "migslice-extender-client"
    config = yaml.safe_load(
        workload("ConfigMap", "migslice-scheduler-config")["data"]["config.yaml"]
    )
    (entry,) = config["extenders"]
    tls = entry["tlsConfig"]
    assert tls["certFile"] == f"{mounts['extender-client']}/tls.crt"
    assert tls["keyFile"] == f"{mounts['extender-client']}/tls.key"


def test_with_cert_manager_each_certificate_serves_or_authenticates_a_client_not_both() -> None:
    """One CA issues both servers' certificates and their clients' (tls.mode cert-manager), and
    a Certificate without usages gets no extended key usage: valid for any purpose, the
    serving certificates passed each server's client check at the handshake (only the name
    check stood)."""
    overlay = ROOT / "manifests" / "cert-manager" / "resources.yaml"
    certificates = {
        d["metadata"]["name"]: d["spec"]
        for d in yaml.safe_load_all(overlay.read_text())
        if d and d["kind"] == "Certificate" and not d["spec"].get("isCA")
    }
    usages = {name: set(spec.get("usages") or ()) for name, spec in certificates.items()}
    assert usages == {
        "migslice-webhook": {"digital signature", "server auth"},
        "migslice-extender": {"digital signature", "server auth"},
        "migslice-extender-client": {"digital signature", "client auth"},
    }


# --------------------------------------------------------------------------- least privilege


def policies() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d for d in rendered() if d["kind"] == "ValidatingAdmissionPolicy"
    }


def test_every_admission_policy_is_bound_to_deny_and_matches_one_of_the_charts_accounts() -> None:
    bindings = {
        d["spec"]["policyName"]: d
        for d in rendered()
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    accounts = {
        f"system:serviceaccount:{d['metadata']['namespace']}:{d['metadata']['name']}"
        for d in rendered()
        if d["kind"] == "ServiceAccount"
    }
    assert sorted(policies()) == sorted(bindings)
    # The outage policies hold every user, not one of the chart's accounts (docs/outages.md),
    # and so does the one on the namespace opt-out labels (docs/security.md).
    outage = {
        "migslice-admission-unavailable",
        "migslice-admission-gate-owner",
        "migslice-namespace-opt-outs",
        "migslice-pod-reservation",
    }
    assert outage <= set(policies())
    least_privilege = {n: p for n, p in policies().items() if n not in outage}
    assert sorted(least_privilege) == [
        "migslice-agent-own-node",
        "migslice-agent-own-node-events",
        "migslice-certs-ca-bundle",
        "migslice-certs-secrets",
        "migslice-extender-node-keys",
        "migslice-extender-pod-keys",
        "migslice-extender-steer-rules",
        "migslice-webhook-claim-templates",
        "migslice-webhook-events",
        "migslice-webhook-ledgers",
        "migslice-webhook-pod-writes",
    ]
    for name in outage:
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert policies()[name]["spec"]["failurePolicy"] == "Fail"
    for name, policy in least_privilege.items():
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        account = condition["expression"].split(" == ")[1].strip('"')
        assert account in accounts, name


def _keys(expression: str) -> list[str]:
    """The key list literal of a key-allowing CEL expression (``k in [...]``)."""
    return list(json.loads(expression.split(" in ", 1)[1].split("\n", 1)[0].split("]", 1)[0] + "]"))


def test_the_extenders_admission_policies_allow_exactly_the_keys_it_writes() -> None:
    from migslice import names

    node = policies()["migslice-extender-node-keys"]["spec"]["validations"]
    pod = policies()["migslice-extender-pod-keys"]["spec"]["validations"]
    assert _keys(node[0]["expression"]) == [
        names.MIG_CONFIG_LABEL,
        names.MIG_CONFIG_STATE_LABEL,
        names.QUARANTINE_LABEL,
    ]
    assert _keys(node[1]["expression"]) == [names.CARVE_ANNOTATION, names.QUARANTINE_ANNOTATION]
    assert _keys(pod[0]["expression"]) == [names.TOUCH_ANNOTATION, names.RETRY_ANNOTATION]


def test_the_ledger_policy_allows_the_names_the_webhook_gives_its_ledgers() -> None:
    from migslice.kube.ledger import PREFIX

    (validation,) = policies()["migslice-webhook-ledgers"]["spec"]["validations"]
    assert validation["expression"] == f"request.name.startsWith('{PREFIX}')"


def test_only_the_certificate_jobs_may_write_secrets_and_only_the_four_certificates() -> None:
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    named: set[str] = set()
    for document in rendered():
        if document["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in document.get("rules") or ():
            if "secrets" in rule["resources"] and writes & set(rule["verbs"]):
                assert document["metadata"]["name"] == "migslice-certs", document["metadata"]
                named |= set(rule.get("resourceNames") or ())
    (validation,) = policies()["migslice-certs-secrets"]["spec"]["validations"]
    allowed = json.loads(validation["expression"].removeprefix("request.name in "))
    assert sorted(allowed) == sorted(named)


def test_a_webhook_configuration_write_is_held_to_the_ca_bundle() -> None:
    """RBAC cannot narrow ``patch`` of a webhook configuration to its caBundle: a policy must,
    or the certificate Jobs' account could switch migslice's admission off (failurePolicy,
    namespaceSelector, clientConfig). Every account allowed to write one is held by it."""
    configurations = {"mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
    writes = {"create", "update", "patch", "delete", "deletecollection", "*"}
    writers = set()
    for document in rendered():
        if document["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in document.get("rules") or ():
            if configurations & set(rule["resources"]) and writes & set(rule["verbs"]):
                assert set(rule["verbs"]) & writes == {"patch"}, document["metadata"]
                writers.add(document["metadata"]["name"])
    assert writers == {"migslice-certs"}
    policy = policies()["migslice-certs-ca-bundle"]["spec"]
    (rule,) = policy["matchConstraints"]["resourceRules"]
    assert set(rule["resources"]) == configurations and rule["operations"] == ["UPDATE"]
    fields = policy["variables"][0]["expression"]
    held = ("url", "service", "rules", "failurePolicy", "namespaceSelector", "objectSelector",
            "matchConditions", "timeoutSeconds", "sideEffects")  # fmt: skip
    for field in held:
        assert f".?{field}" in fields, field
    assert "caBundle" not in fields


def test_the_examples_in_manifests_are_the_charts() -> None:
    for source in sorted((CHART / "files" / "examples").glob("*.yaml")):
        copy = ROOT / "manifests" / "examples" / source.name
        assert yaml.safe_load(copy.read_text()) == yaml.safe_load(source.read_text())


def _mib(quantity: str) -> float:
    from migslice.quantity import parse_quantity

    return float(parse_quantity(quantity)) / 2**20


def _peaks_at_5000_nodes() -> dict[str, float]:
    """The highest resident memory `make bench-cluster` recorded at 5,000 nodes, per container:
    kube-scheduler alone, and each service's gunicorn master and worker together."""
    runs = json.loads((ROOT / "bench" / "plane" / "report.json").read_text())["cluster"]
    peaks = {"scheduler": 0.0, "extender": 0.0, "webhook": 0.0}
    for report in runs.values():
        if report["shape"]["nodes"] != 5000:
            continue
        for run in report.get("throughput", {}).values():
            if isinstance(run, dict):
                memory = run.get("scheduler_memory_mib", {})
                peaks["scheduler"] = max(peaks["scheduler"], memory.get("peak_mib", 0.0))
        for service in ("extender", "webhook"):
            snapshot = report.get("memory_end", {})
            together = sum(
                snapshot.get(f"{service} {role}", {}).get("peak_mib", 0.0)
                for role in ("master", "worker")
            )
            peaks[service] = max(peaks[service], together)
    return peaks


def test_each_memory_limit_holds_what_its_container_used_at_5000_nodes() -> None:
    # The scheduler's limit was 512Mi: kube-scheduler held 2.4-3.4 GiB there, and would have
    # been killed above a few hundred nodes.
    peaks = _peaks_at_5000_nodes()
    assert all(peaks.values()), peaks  # the bench's report has them
    names = {
        "scheduler": "migslice-scheduler",
        "extender": "migslice-extender",
        "webhook": "migslice-webhook",
    }
    for component, name in names.items():
        (container,) = workload("Deployment", name)["spec"]["template"]["spec"]["containers"]
        limit = _mib(container["resources"]["limits"]["memory"])
        assert limit >= 1.1 * peaks[component], (component, limit, peaks[component])


# --------------------------------------------------------------------------- the cleanup hook

HELM = render.default_helm()
needs_helm = pytest.mark.skipif(
    not Path(HELM).exists(), reason="no helm (e2e/build.sh; MIGSLICE_E2E_BIN)"
)
CLEANUP_POLICIES = ["migslice-cleanup-node-keys", "migslice-cleanup-steer-rules"]


def helm_render(*values: str) -> list[dict[str, Any]]:
    """``helm template`` with every hook (manifests/base leaves the uninstall hooks out)."""
    text = render.helm_template(HELM, values)
    return [d for d in yaml.safe_load_all(text) if d]


def cleanup_objects(*values: str) -> list[dict[str, Any]]:
    return [d for d in helm_render(*values) if d["metadata"]["name"].startswith("migslice-cleanup")]


@needs_helm
def test_the_certificate_jobs_and_what_they_need_run_on_a_rollback_too() -> None:
    """A rollback re-adds webhooks (the fail-open twins) as the older manifest has them, with
    no caBundle (e2e: after one, the fail-open hooks had none and every call failed TLS)."""
    hooks = {
        (d["kind"], d["metadata"]["name"]): set(
            d["metadata"]["annotations"]["helm.sh/hook"].split(",")
        )
        for d in helm_render()
        if d["metadata"].get("name", "").startswith(("migslice-certs", "migslice-ca-bundle"))
        and "helm.sh/hook" in (d["metadata"].get("annotations") or {})
    }
    assert "post-rollback" in hooks[("Job", "migslice-ca-bundle")]
    assert "pre-rollback" in hooks[("Job", "migslice-certs")]
    for key, phases in hooks.items():
        if key[0] != "Job":  # their account, RBAC and policies: there in both phases
            assert {"pre-rollback", "post-rollback"} <= phases, key


@needs_helm
def test_the_mig_parted_config_map_is_made_once_and_never_in_a_release_manifest() -> None:
    """The controller writes its configs and plan record into the mig-parted ConfigMap. Held
    in a release's manifest, ``helm rollback`` put back that revision's copy (its configs, its
    record: the configs that nodes' nvidia.com/mig.config labels name gone, a plan under way
    forgotten), and ``helm upgrade`` put back the copy read before its pre-upgrade hooks ran.
    It is made by an install or upgrade that finds none (a hook: in no manifest), and never
    replaced (no hook deletion before creation)."""
    (config_map,) = [
        d
        for d in helm_render()
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "migslice-mig-config"
    ]
    annotations = config_map["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" not in annotations.get("helm.sh/hook-delete-policy", "")
    assert "helm.sh/hook-delete-policy" in annotations  # helm's default is before-hook-creation
    assert annotations["helm.sh/resource-policy"] == "keep"  # the earlier releases' manifests
    assert config_map["data"]["config.yaml"].startswith("# NVIDIA MIG Manager's default")


@needs_helm
def test_the_cleanup_job_and_everything_it_needs_are_post_delete_hooks_gone_once_it_succeeds() -> (
    None
):
    found = {(d["kind"], d["metadata"]["name"]): d for d in cleanup_objects()}
    assert sorted(found) == sorted(
        [
            ("ServiceAccount", "migslice-cleanup"),
            ("ClusterRole", "migslice-cleanup"),
            ("ClusterRoleBinding", "migslice-cleanup"),
            ("Job", "migslice-cleanup"),
            *(("ValidatingAdmissionPolicy", n) for n in CLEANUP_POLICIES),
            *(("ValidatingAdmissionPolicyBinding", n) for n in CLEANUP_POLICIES),
        ]
    )
    for (kind, _), document in found.items():
        annotations = document["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "post-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        # its account, RBAC and policies are in place before the Job starts
        assert int(annotations["helm.sh/hook-weight"]) < 0 or kind == "Job"
    job = found[("Job", "migslice-cleanup")]["spec"]["template"]["spec"]
    assert job["serviceAccountName"] == "migslice-cleanup"
    (container,) = job["containers"]
    assert container["command"] == ["migslice"] and container["args"] == ["cleanup"]
    # locked down as every other pod of the chart's
    assert job["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "HOME", "value": "/tmp"} in container["env"]
    rules = found[("ClusterRole", "migslice-cleanup")]["rules"]
    grants = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert grants == {
        ("devicetaintrules", "list"),
        ("devicetaintrules", "delete"),
        ("nodes", "list"),
        ("nodes", "patch"),
        ("pods", "list"),
    }


@needs_helm
def test_the_cleanup_hooks_policies_hold_its_account_as_the_certificate_jobs_are_held() -> None:
    from migslice.kube.cleanup import NODE_ANNOTATIONS, NODE_LABELS

    documents = cleanup_objects()
    found = {
        d["metadata"]["name"]: d for d in documents if d["kind"] == "ValidatingAdmissionPolicy"
    }
    bindings = {
        d["spec"]["policyName"]: d
        for d in documents
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    }
    assert sorted(found) == sorted(bindings) == CLEANUP_POLICIES
    for name, policy in found.items():
        assert bindings[name]["spec"]["validationActions"] == ["Deny"]
        assert policy["spec"]["failurePolicy"] == "Fail"
        (condition,) = policy["spec"]["matchConditions"]
        account = condition["expression"].split(" == ")[1].strip('"')
        assert account == "system:serviceaccount:migslice-system:migslice-cleanup", name
    labels, annotations, _ = found["migslice-cleanup-node-keys"]["spec"]["validations"]
    assert _keys(labels["expression"].split("&&", 1)[1]) == list(NODE_LABELS)
    assert _keys(annotations["expression"].split("&&", 1)[1]) == list(NODE_ANNOTATIONS)
    (rule,) = found["migslice-cleanup-steer-rules"]["spec"]["validations"]
    assert "request.operation == 'DELETE'" in rule["expression"]
    assert "startsWith('migslice-steer-')" in rule["expression"]
    assert "'app.kubernetes.io/managed-by'" in rule["expression"]
    without = {d["kind"] for d in cleanup_objects("admissionPolicies.enabled=false")}
    assert without == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}


@needs_helm
def test_the_cleanup_hook_is_optional_and_never_in_the_kustomize_tree() -> None:
    assert cleanup_objects("cleanup.enabled=false") == []
    # with createNamespace the namespace goes with the release, before a post-delete Job could
    # run in it; manifests/ is rendered so
    assert cleanup_objects("createNamespace=true") == []
    assert not [d for d in rendered() if d["metadata"]["name"].startswith("migslice-cleanup")]
    # and the render leaves out any hook of helm uninstall, had the chart rendered one
    text = render.helm_template(HELM, ())
    assert "migslice-cleanup" in text
    assert not [d for _, d in render.split_render(text) if "cleanup" in d["metadata"]["name"]]


@needs_helm
def test_every_helm_upgrade_we_print_keeps_the_new_charts_defaults(tmp_path: Path) -> None:
    """``helm upgrade --reuse-values`` renders the new chart with the *old release's* values in
    place of its values.yaml, so a value a later chart added is missing: upgrading a release of
    the chart before commit 6df457c to this one, as NOTES.txt, docs/security.md and the
    doctor's fixes said, failed with ``nil pointer evaluating interface {}.enabled``
    (cleanup.enabled; measured against kube-apiserver v1.37.2, while
    ``--reset-then-reuse-values``, Helm 3.14+, upgraded). What Helm does, then what we print."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    older = tmp_path / "migslice"
    shutil.copytree(CHART, older)
    (older / "values.yaml").write_text(
        yaml.safe_dump({k: v for k, v in values.items() if k != "cleanup"})
    )
    # --reuse-values: the chart's defaults are the older release's values
    reused = subprocess.run([HELM, "template", "migslice", str(older)], capture_output=True)
    assert reused.returncode != 0
    sources = [
        CHART / "templates" / "NOTES.txt",
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "migslice" / "doctor").rglob("*.py")),
    ]
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sources
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "--reuse-values" in line
    ]
    assert found == [], "use --reset-then-reuse-values"


def test_every_private_key_we_tell_to_copy_out_is_written_readable_by_root_only() -> None:
    """NOTES.txt and docs/security.md had kube-apiserver's client key copied out of its Secret
    with a plain redirect, so the file took the shell's umask: 0644 on most control-plane
    nodes, kube-apiserver's key readable by every user there (kubeadm keeps its own 0600)."""
    sources = [CHART / "templates" / "NOTES.txt", ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    written = [
        (f"{path.relative_to(ROOT)}:{number}", line)
        for path in sorted(sources)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r">\s*\S+\.key\b", line)
    ]
    assert len(written) >= 2  # the commands are still there
    assert [where for where, line in written if "umask 077" not in line] == []


@needs_helm
def test_image_pull_secrets_reach_every_pod_the_chart_makes() -> None:
    """migslice-scheduler pulls kube-scheduler from ``<your registry>/kube-scheduler``
    (scheduler.image.repository): where that registry needs imagePullSecrets, as migslice's
    own image does there, a scheduler without them stayed in ImagePullBackOff and no GPU pod
    was scheduled."""
    pods = {
        (d["kind"], d["metadata"]["name"]): d["spec"]["template"]["spec"]
        for d in helm_render("imagePullSecrets[0].name=regcred")
        if d["kind"] in ("Deployment", "DaemonSet", "Job")
    }
    assert ("Deployment", "migslice-scheduler") in pods
    for key, spec in pods.items():
        assert spec.get("imagePullSecrets") == [{"name": "regcred"}], key
    default = [d for d in helm_render() if d["kind"] in ("Deployment", "DaemonSet", "Job")]
    assert all("imagePullSecrets" not in d["spec"]["template"]["spec"] for d in default)


@needs_helm
@pytest.mark.parametrize("values", [(), ("agent.carve=true",)], ids=["read-only", "carve"])
def test_a_container_given_a_mig_capability_has_cap_sys_admin_in_its_bounding_set(
    values: tuple[str, ...],
) -> None:
    """The NVIDIA container runtime hook refuses to start a container that sets
    NVIDIA_MIG_MONITOR_DEVICES or NVIDIA_MIG_CONFIG_DEVICES without CAP_SYS_ADMIN in its
    bounding set ("cannot set MIG_MONITOR_DEVICES in non privileged container";
    NVIDIA/nvidia-container-toolkit ``cmd/nvidia-container-runtime-hook/container_config.go``,
    ``isPrivileged``; its CDI mode refuses the same), which is why NVIDIA's device plugin
    chart adds SYS_ADMIN for its MIG strategies. With every capability dropped, the agent
    never started on a GPU node."""
    given = [
        container
        for d in helm_render(*values)
        if d["kind"] in ("Deployment", "DaemonSet", "Job")
        for container in d["spec"]["template"]["spec"]["containers"]
        if any(e["name"] in MIG_CAPABILITY_ENV for e in container.get("env") or ())
    ]
    assert [c["name"] for c in given] == ["agent"]
    for container in given:
        context = container["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"], "add": ["SYS_ADMIN"]}
        assert context["allowPrivilegeEscalation"] is False


@needs_helm
def test_the_carving_agent_runs_as_the_user_the_mig_config_capability_belongs_to() -> None:
    """Creating and destroying MIG instances needs the mig/config capability, whose device
    file (/dev/nvidia-caps/nvidia-cap1) the driver makes root's alone by default (cr--------;
    MIG User Guide, "Device Nodes and Capabilities"; mig/monitor's is world-readable): as uid
    65532 every carve ended NVML_ERROR_NO_PERMISSION. The read-only agent stays uid 65532."""
    for values, uid in (((), 65532), (("agent.carve=true",), 0)):
        (agent,) = [
            d
            for d in helm_render(*values)
            if d["metadata"]["name"] == "migslice-agent" and d["kind"] == "DaemonSet"
        ]
        (container,) = agent["spec"]["template"]["spec"]["containers"]
        context = container["securityContext"]
        assert context["runAsUser"] == uid and context["runAsNonRoot"] is (uid != 0), values
        assert context["allowPrivilegeEscalation"] is False
        assert context["readOnlyRootFilesystem"] is True


RESOURCE_PARTS = ("webhook", "scheduler", "extender", "agent", "cleanup")


@pytest.mark.parametrize(
    "quantity", [0.5, 2, 1073741824, "500m", "1.5", "3Gi", "128Mi", "1e3", "+1", "0", ".5"]
)
def test_a_resource_quantity_kubernetes_takes_is_taken_in_every_resources_value(
    quantity: object,
) -> None:
    """``cpu: 0.5`` is a number in YAML and a quantity to Kubernetes; the schema refused it
    (string or integer only), so an install with it failed before it began."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in RESOURCE_PARTS:
        for kind in ("requests", "limits"):
            given = {**values[part], "resources": {kind: {"cpu": quantity}}}
            jsonschema.Draft7Validator(schema).validate({**values, part: given})
    certs = {**values["tls"]["certsJob"], "resources": {"requests": {"cpu": quantity}}}
    jsonschema.Draft7Validator(schema).validate(
        {**values, "tls": {**values["tls"], "certsJob": certs}}
    )


@pytest.mark.parametrize("quantity", [-1, -0.5, "-1", "lots", "1GB", "1 Gi", "", "1Gib", "0x10"])
def test_a_resource_quantity_kube_apiserver_refuses_is_refused_by_the_schema_first(
    quantity: object,
) -> None:
    """These rendered, and kube-apiserver refused the Deployment mid-install ('quantities
    must match the regular expression', 'must be greater than or equal to 0')."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for part in RESOURCE_PARTS:
        given = {**values[part], "resources": {"limits": {"memory": quantity}}}
        with pytest.raises(jsonschema.ValidationError) as refused:
            jsonschema.Draft7Validator(schema).validate({**values, part: given})
        assert list(refused.value.absolute_path) == [part, "resources", "limits", "memory"]


@pytest.mark.parametrize("part", ["webhook", "scheduler", "extender"])
def test_a_budget_percentage_over_100_is_refused_and_100_is_taken(part: str) -> None:
    """kube-apiserver refuses a PodDisruptionBudget whose maxUnavailable is over 100%; the
    schema's pattern took any digits before the %."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for taken in ("0%", "5%", "50%", "100%", 0, 7):
        budget = {**values[part], "podDisruptionBudget": {"maxUnavailable": taken}}
        jsonschema.Draft7Validator(schema).validate({**values, part: budget})
    for bad in ("101%", "150%", "1000%", "-5%", "%"):
        budget = {**values[part], "podDisruptionBudget": {"maxUnavailable": bad}}
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.Draft7Validator(schema).validate({**values, part: budget})


def helm_notes(tmp_path: Path, *values: str, release: str = "migslice") -> str:
    """NOTES.txt as ``helm install`` prints it (``helm template`` renders no NOTES): a copy of
    the chart whose one template renders it, through ``tpl``, into a ConfigMap."""
    chart = tmp_path / "migslice"
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n'
    )
    sets = [arg for value in values for arg in ("--set", value)]
    text = subprocess.run(
        [HELM, "template", release, str(chart), "-s", "templates/notes.yaml", *sets],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return str(yaml.safe_load(text)["data"]["notes"])


@needs_helm
@pytest.mark.parametrize(
    ("values", "said", "unsaid"),
    [
        (["repartition.mode=on"], ["labelling nodes nvidia.com/mig.config"], ["node agent"]),
        (
            ["repartition.mode=on", "agent.carve=true"],
            ["labelling nodes nvidia.com/mig.config", "repartition-mode=carve", "node agent"],
            [],
        ),
        (
            ["repartition.mode=on", "repartition.defaultNodeMode=carve", "agent.carve=true"],
            ["node agent", "repartition-mode=mig-manager"],
            ["labelling nodes nvidia.com/mig.config"],
        ),
    ],
    ids=["mig-manager", "mig-manager-and-carve-nodes", "carve-by-default"],
)
def test_the_notes_say_how_the_controller_reshapes_gpus_in_each_node_mode(
    tmp_path: Path, values: list[str], said: list[str], unsaid: list[str]
) -> None:
    """With repartition.defaultNodeMode=carve the notes said the controller labels nodes
    nvidia.com/mig.config, which it does on no node but those labelled mig-manager: the agent
    carves the rest."""
    notes = " ".join(helm_notes(tmp_path, *values).split())
    step = notes.split(" 4. ", 1)[1].split(" 5. ", 1)[0]
    for phrase in said:
        assert phrase in step, step
    for phrase in unsaid:
        assert phrase not in step, step


PLACED_PARTS = ("webhook", "scheduler", "extender", "agent")


def test_a_pod_placement_value_kube_apiserver_would_refuse_is_refused_by_the_schema_first() -> None:
    """Each of these rendered, and kube-apiserver refused the Deployment or the DaemonSet
    mid-install (a priority or runtime class name is a DNS subdomain; a toleration's operator
    and effect are enums); a misspelt toleration field was dropped, so the toleration
    tolerated more than it said."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    validator = jsonschema.Draft7Validator(schema)
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    good: list[tuple[str, object]] = [
        ("priorityClassName", ""),
        ("priorityClassName", "system-node-critical"),
        ("priorityClassName", "gpu.high"),
        ("tolerations", []),
        ("tolerations", [toleration]),
        ("tolerations", [{"operator": "Exists"}]),
        ("tolerations", [{"key": "a", "operator": "Equal", "value": "b", "effect": ""}]),
        ("tolerations", [{"key": "a", "effect": "NoExecute", "tolerationSeconds": 30}]),
    ]
    bad: list[tuple[str, object]] = [
        ("priorityClassName", "High_Priority"),
        ("priorityClassName", "high priority"),
        ("tolerations", [{**toleration, "operator": "exists"}]),
        ("tolerations", [{**toleration, "effect": "NoSchedul"}]),
        ("tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists", "efect": "NoSchedule"}]),
        ("tolerations", [{**toleration, "tolerationSeconds": "30"}]),
        ("tolerations", ["nvidia.com/gpu"]),
    ]
    for part in PLACED_PARTS:
        for key, value in good:
            validator.validate({**values, part: {**values[part], key: value}})
        for key, value in bad:
            with pytest.raises(jsonschema.ValidationError) as refused:
                validator.validate({**values, part: {**values[part], key: value}})
            assert list(refused.value.absolute_path)[:2] == [part, key], (part, value)
    for name in ("", "nvidia", "nvidia-cdi", "kata.qemu"):
        validator.validate({**values, "agent": {**values["agent"], "runtimeClassName": name}})
    for name in ("NVIDIA", "nvidia_cdi", "-nvidia"):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate({**values, "agent": {**values["agent"], "runtimeClassName": name}})


@needs_helm
@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["tls.certManager.renewBefore=2160h"], "tls.certManager.renewBefore"),
        (["tls.certManager.renewBefore=3000h"], "tls.certManager.renewBefore"),
        (
            ["tls.certManager.duration=30m", "tls.certManager.renewBefore=10m"],
            "tls.certManager.duration",
        ),
        (["tls.certManager.renewBefore=4m59s"], "tls.certManager.renewBefore"),
        (["tls.certManager.clientRenewBefore=8760h"], "tls.certManager.clientRenewBefore"),
        (["tls.certManager.clientDuration=59m"], "tls.certManager.clientDuration"),
    ],
    ids=[
        "renew-at-issue",
        "renew-before-issue",
        "under-an-hour",
        "renew-under-5m",
        "client-renew",
        "client-under-an-hour",
    ],
)
def test_certificate_lifetimes_cert_manager_would_refuse_are_refused_naming_the_value(
    values: list[str], named: str
) -> None:
    """cert-manager's webhook refuses a Certificate whose duration is under 1h, whose
    renewBefore is under 5m or not under its duration; these rendered, and the install stopped
    at the Certificates, after the webhook configurations and Deployments were made (a
    webhook with no certificate: every GPU pod of a fail-closed namespace refused)."""
    refused = subprocess.run(
        [HELM, "template", "migslice", str(CHART), "--set", "tls.mode=cert-manager"]
        + [arg for value in values for arg in ("--set", value)],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert named in refused.stderr, refused.stderr
    # certs-job mode reads none of them
    subprocess.run(
        [HELM, "template", "migslice", str(CHART), *(a for v in values for a in ("--set", v))],
        check=True,
        capture_output=True,
    )


@needs_helm
def test_certificate_lifetimes_at_cert_managers_bounds_render() -> None:
    values = [
        "tls.mode=cert-manager",
        "tls.certManager.duration=1h",
        "tls.certManager.renewBefore=5m",
        "tls.certManager.clientDuration=1h30m",
        "tls.certManager.clientRenewBefore=89m59.5s",
    ]
    (webhook,) = [
        d
        for d in helm_render(*values)
        if d["kind"] == "Certificate" and d["metadata"]["name"] == "migslice-webhook"
    ]
    assert (webhook["spec"]["duration"], webhook["spec"]["renewBefore"]) == ("1h", "5m")


@needs_helm
def test_the_helm_upgrade_the_notes_print_names_the_release_installed(tmp_path: Path) -> None:
    """Installed as another release than migslice (one per cluster, any name), the notes' own
    upgrade command failed: 'has no deployed releases'."""
    notes = helm_notes(tmp_path, "webhook.clientAuth.issueCertificate=true", release="gpu-sharing")
    upgrades = [line.split() for line in notes.splitlines() if "helm upgrade" in line]
    assert upgrades and all(words[2] == "gpu-sharing" for words in upgrades), upgrades


@needs_helm
@pytest.mark.parametrize("timeout", ["0s", "0ms", "500ms", "0.9s"])
def test_an_extender_timeout_under_a_second_is_refused_naming_the_value(timeout: str) -> None:
    """0 rendered, and kube-scheduler took it for its 5 s default (pkg/scheduler/extender.go)
    with the filter in its serial cycle; under 1 s a preemptor's filter, which may wait 0.8 s
    for its victims to leave (docs/scheduling.md), timed out."""
    value = f"scheduler.extenderTimeout={timeout}"
    refused = subprocess.run(
        [HELM, "template", "migslice", str(CHART), "--set", value],
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert f"scheduler.extenderTimeout={timeout}" in refused.stderr, refused.stderr
    for taken in ("1s", "2s", "1500ms", "1m"):
        (config,) = [
            d
            for d in helm_render(f"scheduler.extenderTimeout={taken}")
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "migslice-scheduler-config"
        ]
        assert f"httpTimeout: {taken}\n" in config["data"]["config.yaml"]
