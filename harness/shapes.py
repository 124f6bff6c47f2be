"""What real GPU Nodes and training Pods carry besides what migslice reads, for
:func:`harness.builders.make_node` and :func:`harness.builders.make_pod` with ``real=True``.

A node: the kubelet's labels, Node Feature Discovery's and GPU Feature Discovery's (per-profile
labels of the mixed strategy included), MIG Manager's, a GPU taint, four conditions, addresses,
``nodeInfo`` and 50 images (the kubelet's ``nodeStatusMaxImages``). A pod: a training Job's,
with owner references, labels, annotations, three containers and an init container with
environment, probes, mounts and resources; once running, a status with five conditions and a
status per container. Everything is deterministic in the object's index.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

STAMP = "2025-05-01T00:00:00Z"
NODE_IMAGES = 50
CPU_FLAGS = (
    "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL", "AVX512VNNI",
    "FMA3", "IBPB", "STIBP", "VMX", "X87", "XSAVE",
)  # fmt: skip
DEPLOYED = (
    "container-toolkit", "dcgm", "dcgm-exporter", "device-plugin", "driver",
    "gpu-feature-discovery", "mig-manager", "node-status-exporter", "operator-validator",
)  # fmt: skip
NFD = {
    "cpu-hardware_multithreading": "true",
    "cpu-model.family": "6",
    "cpu-model.id": "106",
    "cpu-model.vendor_id": "Intel",
    "kernel-version.full": "5.15.0-1051-aws",
    "kernel-version.major": "5",
    "kernel-version.minor": "15",
    "pci-10de.present": "true",
    "system-os_release.ID": "ubuntu",
    "system-os_release.VERSION_ID": "22.04",
}
GFD = {
    "cuda.driver-version.full": "550.90.07",
    "cuda.driver.major": "550",
    "cuda.driver.minor": "90",
    "cuda.driver.rev": "07",
    "cuda.runtime-version.full": "12.4",
    "cuda.runtime.major": "12",
    "cuda.runtime.minor": "4",
    "gfd.timestamp": "1714521600",
    "gpu-driver-upgrade-state": "upgrade-done",
    "gpu.compute.major": "8",
    "gpu.compute.minor": "0",
    **{f"gpu.deploy.{part}": "true" for part in DEPLOYED},
    "gpu.family": "ampere",
    "gpu.machine": "p4de.24xlarge",
    "gpu.memory": "81920",
    "gpu.mode": "compute",
    "gpu.present": "true",
    "gpu.replicas": "1",
    "gpu.sharing-strategy": "none",
}
CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "KubeletReady", "kubelet is posting ready status"),
)
NODE_RESOURCES = {
    "cpu": "96",
    "ephemeral-storage": "956757878Ki",
    "hugepages-1Gi": "0",
    "hugepages-2Mi": "0",
    "memory": "1176333156Ki",
    "pods": "250",
}


def managed_fields(managers: Iterable[str], fields: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``metadata.managedFields`` as kube-apiserver serves them, one entry per manager."""
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": STAMP,
            "fieldsType": "FieldsV1",
            "fieldsV1": dict(fields),
            **({"subresource": "status"} if manager == "kubelet" else {}),
        }
        for manager in managers
    ]


# -- nodes ---------------------------------------------------------------------------------------


def node_address(index: int) -> str:
    return f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"


def instance_id(index: int) -> str:
    return f"i-{index:017x}"


def kubelet_labels(name: str, index: int) -> dict[str, str]:
    zone = f"us-west-2{'abc'[index % 3]}"
    return {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "p4de.24xlarge",
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": zone,
        "node-role.example.com/gpu": "",
        "pool.example.com/name": "gpu-a100",
    }


def profile_labels(product: str, mig: Mapping[str, int]) -> dict[str, str]:
    """GPU Feature Discovery's per-profile labels (mixed strategy) for ``mig`` counts."""
    labels: dict[str, str] = {}
    for profile in sorted(mig):
        prefix = "nvidia.com/mig-" + profile.replace("+", ".")
        slices = profile[0]
        memory_slices = int(profile.split(".")[1].removesuffix("gb")) // 10
        labels.update(
            {
                f"{prefix}.count": str(mig[profile]),
                f"{prefix}.engines.copy": slices,
                f"{prefix}.engines.decoder": "0" if slices == "1" else slices,
                f"{prefix}.memory": str(memory_slices * 9856),
                f"{prefix}.multiprocessors": str(int(slices) * 14),
                f"{prefix}.product": f"{product}-MIG-{profile}",
                f"{prefix}.replicas": "1",
                f"{prefix}.slices.ci": slices,
                f"{prefix}.slices.gi": slices,
            }
        )
    return labels


def node_labels(name: str, index: int, product: str, mig: Mapping[str, int]) -> dict[str, str]:
    """Every label of a real GPU node but migslice's inputs (product, count, strategy, config)."""
    labels = kubelet_labels(name, index)
    for flag in CPU_FLAGS:
        labels[f"feature.node.kubernetes.io/cpu-cpuid.{flag}"] = "true"
    labels.update({f"feature.node.kubernetes.io/{k}": v for k, v in NFD.items()})
    labels.update({f"nvidia.com/{k}": v for k, v in GFD.items()})
    labels.update(profile_labels(product, mig))
    return labels


def node_annotations(labels: Mapping[str, str], index: int) -> dict[str, str]:
    features = (k for k in sorted(labels) if k.startswith("feature.node.kubernetes.io/"))
    return {
        "alpha.kubernetes.io/provided-node-ip": node_address(index),
        "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": instance_id(index)}),
        "node.alpha.kubernetes.io/ttl": "0",
        "nfd.node.kubernetes.io/feature-labels": ",".join(
            k.removeprefix("feature.node.kubernetes.io/") for k in features
        ),
        "nfd.node.kubernetes.io/master.version": "v0.15.4",
        "nvidia.com/gpu-driver-upgrade-enabled": "true",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }


def node_spec(index: int) -> dict[str, Any]:
    cidr = f"100.{index // 256 % 256}.{index % 256}.0/24"
    return {
        "podCIDR": cidr,
        "podCIDRs": [cidr],
        "providerID": f"aws:///us-west-2a/{instance_id(index)}",
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    }


def node_info(index: int) -> dict[str, str]:
    return {
        "machineID": f"ec2{index:029x}",
        "systemUUID": f"ec2{index:033x}",
        "bootID": f"{index:08x}-0000-4000-8000-000000000000",
        "kernelVersion": "5.15.0-1051-aws",
        "osImage": "Ubuntu 22.04.4 LTS",
        "containerRuntimeVersion": "containerd://1.7.13",
        "kubeletVersion": "v1.34.4",
        "kubeProxyVersion": "",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def node_status(name: str, index: int) -> dict[str, Any]:
    """Conditions, addresses, the kubelet's endpoint, ``nodeInfo`` and images."""
    return {
        "conditions": [
            {
                "type": kind,
                "status": "True" if kind == "Ready" else "False",
                "lastHeartbeatTime": STAMP,
                "lastTransitionTime": STAMP,
                "reason": reason,
                "message": message,
            }
            for kind, reason, message in CONDITIONS
        ],
        "addresses": [
            {"type": "InternalIP", "address": node_address(index)},
            {"type": "InternalDNS", "address": name},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info(index),
        "images": [
            {
                "names": [
                    f"registry.example.com/ml/train-{i}@sha256:{i:064x}",
                    f"registry.example.com/ml/train-{i}:v1.{i}.0",
                ],
                "sizeBytes": 9_000_000_000 + i,
            }
            for i in range(NODE_IMAGES)
        ],
    }


# -- pods ----------------------------------------------------------------------------------------


def _env(count: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": f"TRAIN_SETTING_{e:02d}", "value": f"value-{e}"} for e in range(count)
    ]
    field_ref = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    env.append({"name": "POD_NAME", "valueFrom": field_ref})
    return env


def trainer(limits: Mapping[str, str]) -> dict[str, Any]:
    """The training container, with ``limits`` (its requests equal)."""
    return {
        "name": "trainer",
        "image": "registry.example.com/ml/train:v1.2.3",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-m", "train"],
        "args": ["--config", "/etc/train/config.yaml", "--checkpoint-dir", "/checkpoints"],
        "env": _env(12),
        "ports": [{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}],
        "resources": {"limits": dict(limits), "requests": dict(limits)},
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


def job_metadata(name: str, namespace: str) -> dict[str, Any]:
    """The labels, annotations and owner reference of a Job's pod (the Job: ``name`` less its
    last ``-part``)."""
    job = name.rsplit("-", 1)[0]
    uid = f"{zlib.crc32(job.encode()):012d}"
    return {
        "labels": {
            "app.kubernetes.io/name": "train",
            "app.kubernetes.io/part-of": "ml-platform",
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": job,
            "controller-uid": uid,
            "job-name": job,
            "team": namespace.rsplit("-", 1)[0],
        },
        "annotations": {
            "kubectl.kubernetes.io/default-container": "trainer",
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9100",
        },
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


def job_spec(name: str, limits: Mapping[str, str], product: str) -> dict[str, Any]:
    """A Job's pod spec: an init container, the trainer with ``limits``, two sidecars,
    volumes, the GPU toleration and a required affinity to ``product``."""
    job = name.rsplit("-", 1)[0]
    match = {"key": "nvidia.com/gpu.product", "operator": "In", "values": [product]}
    return {
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
        "containers": [trainer(limits), *sidecars()],
        "volumes": [
            {"name": "config", "configMap": {"name": f"{job}-config", "defaultMode": 420}},
            {"name": "checkpoints", "emptyDir": {}},
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [match]}]
                }
            }
        },
    }


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
                container_status(c, number, running=False) for c in spec.get("initContainers", ())
            ],
            "containerStatuses": [
                container_status(c, number, running=True) for c in spec["containers"]
            ],
        }
    }
