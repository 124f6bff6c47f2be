"""Objects shaped like a real GPU cluster's, for ``bench.cluster`` (and offline profiling).

Nodes carry what a GPU node in a managed cluster carries: the kubelet's labels, Node Feature
Discovery's and GPU Feature Discovery's (per-profile labels of the mixed strategy included),
MIG Manager's, the node agent's ``migslice.io/gpu-layout`` annotation, a GPU taint, five
conditions, addresses, ``nodeInfo`` and 50 images (the kubelet's ``nodeStatusMaxImages``).
Pods carry what a training Job's pod carries once running: owner references, labels,
annotations (migslice's own among them), three containers and an init container with
environment, probes, mounts and resources, and a status with five conditions and a status per
container.

The cluster is described by :class:`ClusterShape` and laid out deterministically: node ``i``
gets one of four MIG layouts (8 A100-80GB GPUs each) and ``pods_per_node`` bound pods, each on
a free instance, so every count is known here (:meth:`ClusterPlan.free`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

GPUS_PER_NODE = 8
PRODUCT = "NVIDIA-A100-SXM4-80GB"
SCHEDULER = "migslice-scheduler"
STAMP = "2025-05-01T00:00:00Z"
NODE_IMAGES = 50
# (mig.config, share of nodes, instances per GPU by profile)
LAYOUTS: tuple[tuple[str, float, dict[str, int]], ...] = (
    ("all-balanced", 0.4, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),
    ("all-1g.10gb", 0.3, {"1g.10gb": 7}),
    ("all-3g.40gb", 0.2, {"3g.40gb": 2}),
    ("all-2g.20gb", 0.1, {"2g.20gb": 3}),
)
SIZES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}  # memory slices
STARTS = {  # legal starts, in the order the device plugin (and our placement) fills them
    "1g.10gb": (0, 1, 2, 3, 4, 5, 6),
    "2g.20gb": (0, 2, 4),
    "3g.40gb": (0, 4),
}


def resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile.replace("+", ".")


def node_name(index: int) -> str:
    return f"gpu-{index:05d}.cluster.internal"


def layout_of(index: int) -> tuple[str, dict[str, int]]:
    point = (index * 0.6180339887) % 1.0
    for name, share, per_gpu in LAYOUTS:
        if point < share:
            return name, per_gpu
        point -= share
    return LAYOUTS[0][0], LAYOUTS[0][2]


def gpu_instances(per_gpu: dict[str, int]) -> list[tuple[str, int, int]]:
    """(profile, start, size) of one GPU's instances, largest first at the lowest start."""
    used: set[int] = set()
    placed: list[tuple[str, int, int]] = []
    for profile in sorted(per_gpu, key=lambda p: -SIZES[p]):
        count = per_gpu[profile]
        for start in STARTS[profile]:
            span = set(range(start, start + SIZES[profile]))
            if count and not span & used:
                used |= span
                placed.append((profile, start, SIZES[profile]))
                count -= 1
    return sorted(placed, key=lambda p: p[1])


@dataclass(frozen=True)
class ClusterShape:
    nodes: int = 5000
    pods_per_node: int = 8
    tenants: int = 20
    namespaces_per_tenant: int = 2
    seed: int = 7


@dataclass
class NodePlan:
    """One node: its layout, and per GPU which instances bound pods hold (profile per pod)."""

    index: int
    config: str
    instances: list[list[tuple[str, int, int]]]
    held: list[list[bool]]
    pods: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return node_name(self.index)

    def allocatable(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for gpu in self.instances:
            for profile, _, _ in gpu:
                counts[resource(profile)] = counts.get(resource(profile), 0) + 1
        return counts

    def free(self) -> dict[str, int]:
        free = self.allocatable()
        for profile in self.pods:
            free[resource(profile)] -= 1
        return free


class ClusterPlan:
    """The whole cluster, laid out from a :class:`ClusterShape` (same shape, same cluster)."""

    def __init__(self, shape: ClusterShape) -> None:
        self.shape = shape
        rng = random.Random(shape.seed)
        self.nodes: list[NodePlan] = []
        for index in range(shape.nodes):
            config, per_gpu = layout_of(index)
            instances = [gpu_instances(per_gpu) for _ in range(GPUS_PER_NODE)]
            plan = NodePlan(index, config, instances, [[False] * len(g) for g in instances])
            for _ in range(shape.pods_per_node):
                free = [(g, k) for g, gpu in enumerate(instances) for k in range(len(gpu))]
                free = [(g, k) for g, k in free if not plan.held[g][k]]
                if not free:
                    break
                g, k = rng.choice(free)
                plan.held[g][k] = True
                plan.pods.append(instances[g][k][0])
            self.nodes.append(plan)

    def namespaces(self) -> list[str]:
        return [
            f"team-{t:02d}-{n}"
            for t in range(self.shape.tenants)
            for n in range(self.shape.namespaces_per_tenant)
        ]

    def bound_pods(self) -> Iterator[tuple[str, NodePlan, str, int]]:
        """(namespace, node, profile, number) of every bound pod."""
        namespaces = self.namespaces()
        number = 0
        for node in self.nodes:
            for profile in node.pods:
                yield namespaces[number % len(namespaces)], node, profile, number
                number += 1


# -- Nodes --------------------------------------------------------------------------------------


def node_labels(plan: NodePlan) -> dict[str, str]:
    name = plan.name
    zone = f"us-west-2{'abc'[plan.index % 3]}"
    labels = {
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
    for flag in ("AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL",
                 "AVX512VNNI", "FMA3", "IBPB", "STIBP", "VMX", "X87", "XSAVE"):  # fmt: skip
        labels[f"feature.node.kubernetes.io/cpu-cpuid.{flag}"] = "true"
    labels.update(
        {
            "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
            "feature.node.kubernetes.io/cpu-model.family": "6",
            "feature.node.kubernetes.io/cpu-model.id": "106",
            "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
            "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1051-aws",
            "feature.node.kubernetes.io/kernel-version.major": "5",
            "feature.node.kubernetes.io/kernel-version.minor": "15",
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
            "nvidia.com/cuda.driver-version.full": "550.90.07",
            "nvidia.com/cuda.driver.major": "550",
            "nvidia.com/cuda.driver.minor": "90",
            "nvidia.com/cuda.driver.rev": "07",
            "nvidia.com/cuda.runtime-version.full": "12.4",
            "nvidia.com/cuda.runtime.major": "12",
            "nvidia.com/cuda.runtime.minor": "4",
            "nvidia.com/gfd.timestamp": "1714521600",
            "nvidia.com/gpu-driver-upgrade-state": "upgrade-done",
            "nvidia.com/gpu.compute.major": "8",
            "nvidia.com/gpu.compute.minor": "0",
            "nvidia.com/gpu.count": str(GPUS_PER_NODE),
            "nvidia.com/gpu.deploy.container-toolkit": "true",
            "nvidia.com/gpu.deploy.dcgm": "true",
            "nvidia.com/gpu.deploy.dcgm-exporter": "true",
            "nvidia.com/gpu.deploy.device-plugin": "true",
            "nvidia.com/gpu.deploy.driver": "true",
            "nvidia.com/gpu.deploy.gpu-feature-discovery": "true",
            "nvidia.com/gpu.deploy.mig-manager": "true",
            "nvidia.com/gpu.deploy.node-status-exporter": "true",
            "nvidia.com/gpu.deploy.operator-validator": "true",
            "nvidia.com/gpu.family": "ampere",
            "nvidia.com/gpu.machine": "p4de.24xlarge",
            "nvidia.com/gpu.memory": "81920",
            "nvidia.com/gpu.mode": "compute",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": PRODUCT,
            "nvidia.com/gpu.replicas": "1",
            "nvidia.com/gpu.sharing-strategy": "none",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": plan.config,
            "nvidia.com/mig.config.state": "success",
        }
    )
    for profile in sorted({p for gpu in plan.instances for p, _, _ in gpu}):
        prefix = "nvidia.com/" + resource(profile).removeprefix("nvidia.com/")
        slices = str(int(profile[0]))
        labels.update(
            {
                f"{prefix}.count": str(plan.allocatable()[resource(profile)]),
                f"{prefix}.engines.copy": slices,
                f"{prefix}.engines.decoder": "0" if slices == "1" else slices,
                f"{prefix}.memory": str(SIZES[profile] * 9856),
                f"{prefix}.multiprocessors": str(int(slices) * 14),
                f"{prefix}.product": f"{PRODUCT}-MIG-{profile}",
                f"{prefix}.replicas": "1",
                f"{prefix}.slices.ci": slices,
                f"{prefix}.slices.gi": slices,
            }
        )
    return labels


def agent_annotation(plan: NodePlan) -> str:
    gpus = []
    for g, instances in enumerate(plan.instances):
        gpus.append(
            {
                "index": g,
                "uuid": f"GPU-{plan.index:08x}-{g:04x}-4000-8000-000000000000",
                "migEnabled": True,
                "instances": [
                    {
                        "profile": profile,
                        "start": start,
                        "size": size,
                        "uuid": f"MIG-{plan.index:08x}-{g:02x}{k:02x}-4000-8000-000000000000",
                        "busy": plan.held[g][k],
                    }
                    for k, (profile, start, size) in enumerate(instances)
                ],
            }
        )
    document = {
        "version": "v1",
        "product": PRODUCT,
        "pciDeviceId": "0x20B2",
        "observedAt": STAMP,
        "gpus": gpus,
    }
    return json.dumps(document, separators=(",", ":"))


def node_body(plan: NodePlan) -> dict[str, Any]:
    """The Node to POST (status included: a Node's status may be set on create)."""
    name = plan.name
    labels = node_labels(plan)
    address = f"10.{plan.index // 65536 % 256}.{plan.index // 256 % 256}.{plan.index % 256}"
    resources = {
        "cpu": "96",
        "ephemeral-storage": "956757878Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "1176333156Ki",
        "pods": "250",
        **{k: str(v) for k, v in plan.allocatable().items()},
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": address,
                "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": f"i-{plan.index:017x}"}),
                "node.alpha.kubernetes.io/ttl": "0",
                "nfd.node.kubernetes.io/feature-labels": ",".join(
                    k.removeprefix("feature.node.kubernetes.io/")
                    for k in sorted(labels)
                    if k.startswith("feature.node.kubernetes.io/")
                ),
                "nfd.node.kubernetes.io/master.version": "v0.15.4",
                "nvidia.com/gpu-driver-upgrade-enabled": "true",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "migslice.io/gpu-layout": agent_annotation(plan),
            },
        },  # fmt: skip
        "spec": {
            "podCIDR": f"100.{plan.index // 256 % 256}.{plan.index % 256}.0/24",
            "podCIDRs": [f"100.{plan.index // 256 % 256}.{plan.index % 256}.0/24"],
            "providerID": f"aws:///us-west-2a/i-{plan.index:017x}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": dict(resources),
            "allocatable": resources,
            "conditions": [
                {
                    "type": kind,
                    "status": "True" if kind == "Ready" else "False",
                    "lastHeartbeatTime": STAMP,
                    "lastTransitionTime": STAMP,
                    "reason": reason,
                    "message": message,
                }
                for kind, reason, message in (
                    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                    ("Ready", "KubeletReady", "kubelet is posting ready status"),
                )
            ],
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "InternalDNS", "address": name},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"ec2{plan.index:029x}",
                "systemUUID": f"ec2{plan.index:033x}",
                "bootID": f"{plan.index:08x}-0000-4000-8000-000000000000",
                "kernelVersion": "5.15.0-1051-aws",
                "osImage": "Ubuntu 22.04.4 LTS",
                "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.34.4",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
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
        },  # fmt: skip
    }


# -- Pods -----------------------------------------------------------------------------------------


def _env(count: int) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": f"TRAIN_SETTING_{e:02d}", "value": f"value-{e}"} for e in range(count)
    ]
    env.append({"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}})  # fmt: skip
    return env


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
    gpu = resource(profile)
    job = name.rsplit("-", 1)[0]
    uid = f"{abs(hash(job)) % 10**12:012d}"
    main = {
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
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 1000},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }  # fmt: skip
    sidecars = [
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
    annotations = {
        "kubectl.kubernetes.io/default-container": "trainer",
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9100",
    }
    if tenant:
        annotations.update(
            {
                "migslice.io/tenant": tenant,
                "migslice.io/profile": profile,
                "migslice.io/policy": f"{tenant}@1",
            }
        )
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
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
        },
        "spec": {
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
            "containers": [main, *sidecars],
            "volumes": [
                {"name": "config", "configMap": {"name": f"{job}-config", "defaultMode": 420}},
                {"name": "checkpoints", "emptyDir": {}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            ],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "nvidia.com/gpu.product",
                                        "operator": "In",
                                        "values": [PRODUCT],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        },
    }
    if node is not None:
        body["spec"]["nodeName"] = node
    return body


def running_status(body: dict[str, Any], number: int) -> dict[str, Any]:
    """What the kubelet reports for ``body`` once its containers run (a status merge patch)."""
    ip = f"100.{number // 65536 % 256}.{number // 256 % 256}.{number % 256}"
    host = "10.0.0.1"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]  # fmt: skip

    def status(container: dict[str, Any], running: bool) -> dict[str, Any]:
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

    return {
        "status": {
            "phase": "Running",
            "conditions": conditions,
            "hostIP": host,
            "hostIPs": [{"ip": host}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": STAMP,
            "qosClass": "Burstable",
            "initContainerStatuses": [status(c, False) for c in body["spec"]["initContainers"]],
            "containerStatuses": [status(c, True) for c in body["spec"]["containers"]],
        }
    }


# -- Tenancy ----------------------------------------------------------------------------------------


def tenant_policy(tenant: int, namespaces: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "migslice.io/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": f"team-{tenant:02d}"},
        "spec": {
            "namespaces": namespaces,
            "isolation": "hardware",
            "tiers": ["mig"],
            "sizes": {
                "small": {"memory": "10Gi", "computeSlices": 1},
                "medium": {"memory": "20Gi", "computeSlices": 2},
                "large": {"memory": "40Gi", "computeSlices": 3},
            },
            "defaultSize": "small",
            "allowedProducts": [PRODUCT],
            "quota": {"instances": 100_000, "computeSlices": 400_000},
        },
    }
