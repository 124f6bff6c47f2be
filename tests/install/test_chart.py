"""The Helm chart's files and its default render (manifests/base, which e2e keeps equal to
``helm template``): versions, values schema, security contexts, admission exclusions, TLS."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

import migslice
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
        assert context["capabilities"] == {"drop": ["ALL"]}
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
        "migslice-extender-tls",
        "migslice-extender-tls",
        "migslice-webhook-tls",
    ]


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
