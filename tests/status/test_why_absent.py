"""``migslice why`` of a pod that is not there: the webhook refused it, so it never existed.
What the webhook would answer for it now, from its workload's pod template (a Job whose
FailedCreate Events say what it did answer) or from its manifest (``-f``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.builders import make_pod
from migslice.cli import main
from migslice.status.absent import find_workload, template_pod
from tests.status_cluster import representative_cluster

DENIAL = (
    'tenant "team-a" would use 12 compute slices (9 in use or admitted + 3 for this pod); '
    'policy "team-a" allows 9 (spec.quota.computeSlices)'
)


def job(name: str = "train", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "template": {
                "metadata": {"annotations": annotations or {"migslice.io/gpu-size": "large"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "train:1"}],
                },
            }
        },
    }


def failed_create(count: int, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "train.17f", "namespace": "team-a"},
        "involvedObject": {"kind": "Job", "name": "train", "namespace": "team-a"},
        "reason": "FailedCreate",
        "message": message,
        "count": count,
        "lastTimestamp": "2025-06-15T15:09:00Z",
    }


@pytest.fixture
def cluster_file(tmp_path: Path) -> Path:
    said = f'Error creating: admission webhook "mutate.migslice.io" denied the request: {DENIAL}'
    objects = [*representative_cluster(), job(), job("train-small"), failed_create(4, said)]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    return path


def _why(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["why", *argv, "-o", "json"]) == 0
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def test_a_jobs_pod_refused_at_admission_gets_the_webhooks_answer_and_its_events(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _why(capsys, "-n", "team-a", "train-x7k2p", "--cluster-file", str(cluster_file))
    assert document["phase"] == "not found"
    absent = document["absent"]
    assert absent["from"] == "Job team-a/train"
    assert (absent["allowed"], absent["reason"], absent["message"]) == (False, "quota", DENIAL)
    ((event),) = absent["failedCreate"]
    assert event["count"] == 4 and event["message"].endswith(DENIAL)
    compute = next(q for q in absent["quota"] if q["dimension"] == "computeSlices")
    assert (compute["used"], compute["limit"]) == (9, 9)
    assert main(["why", "-n", "team-a", "train-x7k2p", "--cluster-file", str(cluster_file)]) == 0
    text = capsys.readouterr().out
    assert "the webhook would deny it (quota)" in text and "FailedCreate (4x" in text


def test_the_longest_workload_name_the_pod_starts_with_is_its_own(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _why(
        capsys, "-n", "team-a", "train-small-abcde", "--cluster-file", str(cluster_file)
    )
    assert document["absent"]["from"] == "Job team-a/train-small"
    assert document["absent"]["failedCreate"] == []


def test_a_manifest_the_webhook_would_admit_says_the_profile(
    tmp_path: Path, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = make_pod("serve-9", namespace="team-b", stored=False)
    pod["metadata"]["annotations"] = {"migslice.io/gpu-size": "small"}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **pod}))
    document = _why(capsys, "-f", str(manifest), "--cluster-file", str(cluster_file))
    assert document["pod"] == "team-b/serve-9"
    assert document["absent"]["from"] == f"file {manifest}"
    assert document["absent"]["allowed"] is True


def test_a_manifest_with_generate_name_is_the_pod_it_would_create(
    tmp_path: Path, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured before: the shipped example pods (generateName) were refused with "name the
    pod (POD), or give its manifest with -f FILE", though -f was given."""
    pod = make_pod("serve-9", namespace="team-b", stored=False)
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "serve-"
    pod["metadata"]["annotations"] = {"migslice.io/gpu-size": "small"}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **pod}))
    document = _why(capsys, "-f", str(manifest), "--cluster-file", str(cluster_file))
    assert document["pod"] == "team-b/serve-"
    assert document["absent"]["allowed"] is True
    del pod["metadata"]["generateName"]
    manifest.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", **pod}))
    assert main(["why", "-f", str(manifest), "--cluster-file", str(cluster_file)]) == 1
    assert "no metadata.name or generateName; name the pod (POD)" in capsys.readouterr().err


def test_a_manifest_of_the_wrong_shape_is_said_plainly(
    tmp_path: Path, cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Measured before: metadata that was a string crashed why -f (AttributeError); a list
    for a namespace was printed as the pod's namespace."""
    manifest = tmp_path / "pod.yaml"
    for metadata, said in (
        ("oops", "metadata must be an object"),
        ({"name": "p", "namespace": ["a", "b"]}, "metadata.namespace must be a string"),
    ):
        manifest.write_text(
            yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": metadata})
        )
        argv = ["why", "p", "-f", str(manifest), "--cluster-file", str(cluster_file)]
        assert main(argv) == 1
        assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("kind", "template", "field"),
    [
        ("Pod", None, "spec.containers[0] must be an object"),
        ("Job", ("spec", "template"), "spec.template.spec.containers[0] must be an object"),
        (
            "CronJob",
            ("spec", "jobTemplate", "spec", "template"),
            "spec.jobTemplate.spec.template.spec.containers[0] must be an object",
        ),
    ],
    ids=["pod", "job", "cronjob"],
)
def test_a_pod_template_kube_apiserver_would_refuse_names_its_file_and_field_as_written(
    tmp_path: Path,
    cluster_file: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    template: tuple[str, ...] | None,
    field: str,
) -> None:
    """Measured before: "migslice: error: object.spec.containers[0] must be an object", the
    webhook's path in an AdmissionReview, naming neither the file nor the workload."""
    spec = {"containers": ["oops"]}
    manifest: dict[str, Any] = {"kind": kind, "metadata": {"name": "w", "namespace": "team-a"}}
    if template is None:
        manifest["spec"] = spec
    else:
        inner = manifest
        for key in template:
            inner = inner.setdefault(key, {})
        inner["spec"] = spec
    path = tmp_path / "manifest.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["why", "-f", str(path), "--cluster-file", str(cluster_file)]) == 1
    err = capsys.readouterr().err
    assert err == f"migslice: error: file {path}: {field}; kube-apiserver would refuse it\n"
    if kind == "Job":  # a workload in the cluster is named as the pod's source
        objects = [*representative_cluster(), {"apiVersion": "batch/v1", **manifest}]
        cluster_file.write_text(yaml.safe_dump_all(objects))
        argv = ["why", "-n", "team-a", "w-x7k2p", "--cluster-file", str(cluster_file)]
        assert main(argv) == 1
        assert f"error: Job team-a/w: {field}; kube-apiserver" in capsys.readouterr().err


def test_nothing_to_go_on_says_how_to_ask(
    cluster_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["why", "-n", "team-a", "nope", "--cluster-file", str(cluster_file)]) == 1
    assert "give its manifest with -f FILE" in capsys.readouterr().err
    assert main(["why", "--cluster-file", str(cluster_file)]) == 1
    assert "name the pod (POD), or give its manifest" in capsys.readouterr().err


def test_a_template_becomes_the_pod_its_controller_creates() -> None:
    pod = template_pod(job(), "team-a")
    assert pod is not None
    assert pod["metadata"] == {
        "annotations": {"migslice.io/gpu-size": "large"},
        "generateName": "train-",
        "namespace": "team-a",
    }
    named = template_pod(job(), "team-a", name="train-0")
    assert named is not None and named["metadata"]["name"] == "train-0"
    assert "generateName" not in named["metadata"]
    assert template_pod({"kind": "Job", "metadata": {"name": "x"}, "spec": {}}, "team-a") is None
    assert find_workload([job()], "team-b", "train-1") is None
    assert find_workload([job()], "team-a", "trainer") is None
