"""doctor's ``outage-modes``: each tenant's namespaces fail-closed or fail-open, the policies
fail-open needs, and the extender's ignorable setting, over the chart's render served by a
real local HTTP server (docs/outages.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from harness.builders import make_namespace
from migslice.doctor.findings import Verdict
from tests.doctor_cluster import ADMISSION, CORE, DoctorCluster
from tests.doctor_serve import judge

MUTATING = f"{ADMISSION}/mutatingwebhookconfigurations/migslice-webhook"
NAMESPACES = "/api/v1/namespaces"
CHECK = "outage-modes"


@pytest.fixture
def cluster() -> Iterator[DoctorCluster]:
    made = DoctorCluster()
    yield made
    made.close()


def label_open(cluster: DoctorCluster, namespace: str) -> None:
    spaces = [n for n in cluster.objects[NAMESPACES] if n["metadata"]["name"] != namespace]
    cluster.objects[NAMESPACES] = [
        *spaces,
        make_namespace(namespace, {"migslice.io/outage": "open"}),
    ]


def test_the_default_install_is_fail_closed_everywhere_with_fail_open_ready(
    cluster: DoctorCluster,
) -> None:
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.OK, found.detail
    assert 'tenant "inference": fail-closed (inference)' in found.detail
    assert "fail-open policies present (migslice-admission-gate, " in found.detail
    assert "extender ignorable: false (while it is down, GPU pods wait unscheduled)" in (
        found.detail
    )


def test_a_namespace_labelled_open_makes_its_tenant_fail_open(cluster: DoctorCluster) -> None:
    label_open(cluster, "inference")
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.OK, found.detail
    assert 'tenant "inference": fail-open (inference)' in found.detail


def test_fail_open_without_the_gate_policy_fails_naming_what_is_missing(
    cluster: DoctorCluster,
) -> None:
    del cluster.objects[f"{ADMISSION}/mutatingadmissionpolicies/migslice-admission-gate"]
    label_open(cluster, "inference")
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.FAILED
    assert "MutatingAdmissionPolicy migslice-admission-gate" in found.detail
    assert "would skip quota" in found.detail
    assert found.fix.startswith("helm upgrade --install migslice")
    assert 'tenant "inference": fail-closed (inference)' not in found.detail


def test_ignore_on_the_fail_closed_webhook_is_a_warning(cluster: DoctorCluster) -> None:
    cluster.objects[MUTATING]["webhooks"][0]["failurePolicy"] = "Ignore"
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.WARNING
    assert "pods.webhook.migslice.io has failurePolicy Ignore" in found.detail
    assert "--set webhook.failurePolicy=Fail" in found.fix


def test_a_label_without_the_fail_open_objects_is_a_warning_and_stays_fail_closed(
    cluster: DoctorCluster,
) -> None:
    cluster.objects[MUTATING]["webhooks"] = cluster.objects[MUTATING]["webhooks"][:1]
    for path in [p for p in cluster.objects if "admissionpolic" in p]:
        del cluster.objects[path]
    label_open(cluster, "inference")
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.WARNING
    assert "namespace(s) inference are labelled migslice.io/outage=open" in found.detail
    assert 'tenant "inference": fail-closed (inference)' in found.detail
    assert "no fail-open policies: every namespace is fail-closed" in found.detail


def test_an_ignorable_extender_is_reported(cluster: DoctorCluster) -> None:
    config_map = cluster.objects[f"{CORE}/configmaps/migslice-scheduler-config"]
    config = yaml.safe_load(config_map["data"]["config.yaml"])
    config["extenders"][0]["ignorable"] = True
    config_map["data"]["config.yaml"] = yaml.safe_dump(config)
    found = judge(cluster, CHECK)
    assert found.verdict is Verdict.OK
    assert "extender ignorable: true" in found.detail
