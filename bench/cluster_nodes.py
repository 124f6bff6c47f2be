"""Nodes shaped like a real GPU node's, for ``bench.cluster`` (see ``bench/cluster_objects.py``).

The kubelet's labels, Node Feature Discovery's and GPU Feature Discovery's (per-profile labels
of the mixed strategy included), MIG Manager's, the node agent's ``migslice.io/gpu-layout``
annotation, a GPU taint, four conditions, addresses, ``nodeInfo`` and 50 images (the kubelet's
``nodeStatusMaxImages``).
"""

from __future__ import annotations

import json
from typing import Any

from bench.cluster_objects import GPUS_PER_NODE, PRODUCT, SIZES, STAMP, NodePlan, resource

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
    "gpu.count": str(GPUS_PER_NODE),
    **{f"gpu.deploy.{part}": "true" for part in DEPLOYED},
    "gpu.family": "ampere",
    "gpu.machine": "p4de.24xlarge",
    "gpu.memory": "81920",
    "gpu.mode": "compute",
    "gpu.present": "true",
    "gpu.product": PRODUCT,
    "gpu.replicas": "1",
    "gpu.sharing-strategy": "none",
    "mig.capable": "true",
    "mig.strategy": "mixed",
}
CONDITIONS = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "KubeletReady", "kubelet is posting ready status"),
)


def kubelet_labels(plan: NodePlan) -> dict[str, str]:
    zone = f"us-west-2{'abc'[plan.index % 3]}"
    return {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "p4de.24xlarge",
        "beta.kubernetes.io/os": "linux",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": plan.name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4de.24xlarge",
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": zone,
        "node-role.example.com/gpu": "",
        "pool.example.com/name": "gpu-a100",
    }


def profile_labels(plan: NodePlan) -> dict[str, str]:
    """GPU Feature Discovery's per-profile labels (mixed strategy)."""
    labels: dict[str, str] = {}
    allocatable = plan.allocatable()
    for profile in sorted({p for gpu in plan.instances for p, _, _ in gpu}):
        prefix = "nvidia.com/" + resource(profile).removeprefix("nvidia.com/")
        slices = str(int(profile[0]))
        labels.update(
            {
                f"{prefix}.count": str(allocatable[resource(profile)]),
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


def node_labels(plan: NodePlan) -> dict[str, str]:
    labels = kubelet_labels(plan)
    for flag in CPU_FLAGS:
        labels[f"feature.node.kubernetes.io/cpu-cpuid.{flag}"] = "true"
    labels.update({f"feature.node.kubernetes.io/{k}": v for k, v in NFD.items()})
    labels.update({f"nvidia.com/{k}": v for k, v in GFD.items()})
    labels["nvidia.com/mig.config"] = plan.config
    labels["nvidia.com/mig.config.state"] = "success"
    labels.update(profile_labels(plan))
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


def instance_id(plan: NodePlan) -> str:
    return f"i-{plan.index:017x}"


def node_address(plan: NodePlan) -> str:
    return f"10.{plan.index // 65536 % 256}.{plan.index // 256 % 256}.{plan.index % 256}"


def node_metadata(plan: NodePlan) -> dict[str, Any]:
    labels = node_labels(plan)
    features = (k for k in sorted(labels) if k.startswith("feature.node.kubernetes.io/"))
    return {
        "name": plan.name,
        "labels": labels,
        "annotations": {
            "alpha.kubernetes.io/provided-node-ip": node_address(plan),
            "csi.volume.kubernetes.io/nodeid": json.dumps({"ebs.csi.aws.com": instance_id(plan)}),
            "node.alpha.kubernetes.io/ttl": "0",
            "nfd.node.kubernetes.io/feature-labels": ",".join(
                k.removeprefix("feature.node.kubernetes.io/") for k in features
            ),
            "nfd.node.kubernetes.io/master.version": "v0.15.4",
            "nvidia.com/gpu-driver-upgrade-enabled": "true",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "migslice.io/gpu-layout": agent_annotation(plan),
        },
    }  # fmt: skip


def node_status(plan: NodePlan) -> dict[str, Any]:
    resources = {
        "cpu": "96",
        "ephemeral-storage": "956757878Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
        "memory": "1176333156Ki",
        "pods": "250",
        **{k: str(v) for k, v in plan.allocatable().items()},
    }
    address, name = node_address(plan), plan.name
    return {
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
            for kind, reason, message in CONDITIONS
        ],
        "addresses": [
            {"type": "InternalIP", "address": address},
            {"type": "InternalDNS", "address": name},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": node_info(plan),
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


def node_info(plan: NodePlan) -> dict[str, str]:
    return {
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
    }


def node_body(plan: NodePlan) -> dict[str, Any]:
    """The Node to POST (status included: a Node's status may be set on create)."""
    cidr = f"100.{plan.index // 256 % 256}.{plan.index % 256}.0/24"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": node_metadata(plan),
        "spec": {
            "podCIDR": cidr,
            "podCIDRs": [cidr],
            "providerID": f"aws:///us-west-2a/{instance_id(plan)}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": node_status(plan),
    }
