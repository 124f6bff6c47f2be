"""Pods shaped like a running training Job's, for ``bench.cluster`` (``bench/cluster_objects.py``).

Owner references, labels, annotations (migslice's own among them), three containers and an
init container with environment, probes, mounts and resources, and a status with five
conditions and a status per container.
"""

from __future__ import annotations

import zlib
from typing import Any

from bench.cluster_objects import PRODUCT, SCHEDULER, STAMP, resource


def _env(count: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": f"TRAIN_SETTING_{e:02d}", "value": f"value-{e}"} for e in range(count)
    ]
    field_ref = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    env.append({"name": "POD_NAME", "valueFrom": field_ref})
    return env


def main_container(gpu: str) -> dict[str, Any]:
    return {
        "name": "trainer",
        "image": "registry.example.com/ml/train:v1.2.3",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "train"],
        "args": ["--config", "/etc/train/config.yaml", "--checkpoint-dir", "/checkpoints"],
        "env": _env(12),
        "ports": [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": "4", "memory": "32Gi", gpu: "1"},
            "requests": {"cpu": "4", "memory": "32Gi", gpu: "1"},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/train", "readOnly": True},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": 9100, "scheme": "HTTP"},
            "periodSeconds": 30, "timeoutSeconds": 5, "failureThreshold": 3, "successThreshold": 1,
        },
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                            "runAsUser": 1000},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }  # fmt: skip


def sidecars() -> list[dict[str, Any]]:
    return [
        {
            "name": container,
            "image": f"registry.example.com/platform/{container}:v2.0.1",
            "imagePullPolicy": "IfNotPresent",
            "args": ["--listen", ":9200", "--target", "localhost:9100"],
            "env": _env(4),
            "resources": {
                "limits": {"cpu": "200m", "memory": "256Mi"},
                "requests": {"cpu": "100m", "memory": "128Mi"},
            },
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
        }
        for container in ("log-shipper", "metrics-exporter")
    ]


def pod_metadata(name: str, namespace: str, profile: str, *, tenant: str) -> dict[str, Any]:
    job = name.rsplit("-", 1)[0]
    uid = f"{zlib.crc32(job.encode()):012d}"
    annotations = {
        "kubectl.kubernetes.io/default-container": "trainer",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
    }
    if tenant:
        annotations["migslice.io/tenant"] = tenant
        annotations["migslice.io/profile"] = profile
        annotations["migslice.io/policy"] = f"{tenant}@1"
    return {
        "name": name,
        "namespace": namespace,
        "labels": {
            "app.kubernetes.io/name": "train",
            "app.kubernetes.io/part-of": "ml-platform",
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": job,
            "controller-uid": uid,
            "job-name": job,
            "team": namespace.rsplit("-", 1)[0],
        },
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job,
                "uid": f"6b1f4a2e-0000-4000-8000-{uid}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }


def pod_spec(job: str, gpu: str, scheduler: str) -> dict[str, Any]:
    product = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [PRODUCT]}
    return {
        "schedulerName": scheduler,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {"fsGroup": 1000},
        "initContainers": [
            {
                "name": "fetch-dataset",
                "image": "registry.example.com/platform/fetch:v1.0.0",
                "command": ["fetch", "--to", "/checkpoints/data"],
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}},
                "volumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}],
            }
        ],
        "containers": [main_container(gpu), *sidecars()],
        "volumes": [
            {"name": "config", "configMap": {"name": f"{job}-config", "defaultMode": 420}},
            {"name": "checkpoints", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [product]}]
                }
            }
        },
    }


def pod_body(
    name: str,
    namespace: str,
    profile: str,
    *,
    node: str | None,
    scheduler: str = SCHEDULER,
    tenant: str = "",
) -> dict[str, Any]:
    """A training pod (a Job's) asking for one ``profile`` instance; bound when ``node``."""
    job = name.rsplit("-", 1)[0]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod_metadata(name, namespace, profile, tenant=tenant),
        "spec": pod_spec(job, resource(profile), scheduler),
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def container_status(container: dict[str, Any], number: int, *, running: bool) -> dict[str, Any]:
    image = container["image"]
    state: dict[str, Any] = (
        {"running": {"startedAt": STAMP}}
        if running
        else {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": STAMP,
                             "finishedAt": STAMP, "containerID": f"containerd://{number:064x}"}}
    )  # fmt: skip
    return {
        "name": container["name"],
        "image": image,
        "imageID": f"{image.split(':')[0]}@sha256:{number:064x}",
        "containerID": f"containerd://{number:064x}",
        "ready": running,
        "started": running,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def running_status(body: dict[str, Any], number: int) -> dict[str, Any]:
    """What the kubelet reports for ``body`` once its containers run (a status merge patch)."""
    ip = f"100.{number // 65536 % 256}.{number // 256 % 256}.{number % 256}"
    host = "10.0.0.1"
    kinds = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    spec = body["spec"]
    return {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
                for kind in kinds
            ],
            "hostIP": host,
            "hostIPs": [{"ip": host}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": STAMP,
            "qosClass": "Burstable",
            "initContainerStatuses": [
                container_status(c, number, running=False) for c in spec["initContainers"]
            ],
            "containerStatuses": [
                container_status(c, number, running=True) for c in spec["containers"]
            ],
        }
    }
