"""The scheduler and extender manifests (rendered from the chart into manifests/base): valid
objects and the config the issue asks for."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests import paths

BASE = paths.ROOT / "manifests" / "base"


def documents() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for folder in ("scheduler", "extender"):
        for path in sorted((BASE / folder).glob("*.yaml")):
            found.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return found


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name)


def scheduler_config() -> dict[str, Any]:
    config_map = by_kind("ConfigMap", "migslice-scheduler-config")
    config: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return config


@pytest.mark.parametrize(
    "document", documents(), ids=lambda d: f"{d['kind']}/{d['metadata']['name']}"
)
def test_every_manifest_is_a_valid_kubernetes_object(document: dict[str, Any]) -> None:
    kubernetes_validate.validate(document, "1.30", strict=True)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    files = {str(p.relative_to(BASE)) for p in BASE.rglob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_the_scheduler_calls_the_extender_over_https_with_names_only() -> None:
    config = scheduler_config()
    assert config["kind"] == "KubeSchedulerConfiguration"
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["percentageOfNodesToScore"] == 1
    connection = config["clientConnection"]
    assert connection["qps"] >= 200 and connection["burst"] == 2 * connection["qps"]
    assert config["leaderElection"]["resourceName"] == "migslice-scheduler"
    assert [p["schedulerName"] for p in config["profiles"]] == ["migslice-scheduler"]
    (extender,) = config["extenders"]
    assert extender["urlPrefix"].startswith("https://migslice-extender.migslice-system.svc")
    assert extender["enableHTTPS"] is True
    assert extender["tlsConfig"]["caFile"] == "/etc/migslice/extender-ca/ca.crt"
    assert extender["tlsConfig"]["serverName"] == "migslice-extender.migslice-system.svc"
    assert extender["nodeCacheCapable"] is True
    # placement bestFit: the filter alone ranks (e2e runs the weighted render too)
    assert extender["filterVerb"] == "filter-best-fit"
    assert "prioritizeVerb" not in extender and "weight" not in extender
    timeout = extender["httpTimeout"]
    assert timeout.endswith("s") and 0 < float(timeout[:-1]) <= 2


def test_the_extender_is_called_for_every_pod_not_only_those_naming_mig_resources() -> None:
    """kube-scheduler asks an extender with managedResources only about pods whose containers
    request one of them, never about a pod whose GPU comes through a ResourceClaim."""
    (extender,) = scheduler_config()["extenders"]
    assert "managedResources" not in extender
    assert extender["ignorable"] is False


def test_the_extender_reads_dra_objects_and_writes_only_device_taint_rules() -> None:
    """Its steer's rules (admission-policy.yaml holds it to its own); no slice, claim or class."""
    role = by_kind("ClusterRole", "migslice-extender")
    dra = [r for r in role["rules"] if "resource.k8s.io" in r["apiGroups"]]
    assert dra == [
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices", "resourceclaims", "deviceclasses", "devicetaintrules"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["devicetaintrules"],
            "verbs": ["create", "delete"],
        },
    ]


def test_the_scheduler_runs_with_the_config_and_the_extender_service_reaches_its_pods() -> None:
    scheduler = by_kind("Deployment", "migslice-scheduler")["spec"]["template"]["spec"]
    command = scheduler["containers"][0]["command"]
    assert "--config=/etc/migslice-scheduler/config.yaml" in command
    volumes = {v["name"]: v for v in scheduler["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "migslice-scheduler-config"
    # The extender's CA, and only that key of its Secret.
    assert volumes["extender-ca"]["secret"] == {
        "secretName": "migslice-extender-tls",
        "items": [{"key": "ca.crt", "path": "ca.crt"}],
    }
    mounts = {m["name"]: m["mountPath"] for m in scheduler["containers"][0]["volumeMounts"]}
    assert mounts["extender-ca"] == "/etc/migslice/extender-ca"
    service = by_kind("Service", "migslice-extender")
    extender = by_kind("Deployment", "migslice-extender")["spec"]["template"]
    assert service["spec"]["selector"].items() <= extender["metadata"]["labels"].items()
    assert service["spec"]["ports"][0]["port"] == 443


def test_a_new_install_runs_the_repartition_controller_in_dry_run() -> None:
    template = by_kind("Deployment", "migslice-extender")["spec"]["template"]
    args = template["spec"]["containers"][0]["args"]
    flags = [a for a in args if a.startswith("--repartition") and "=" not in a]
    assert flags == ["--repartition", "--repartition-dry-run"]
