"""Builders for Kubernetes objects shaped as the API server and kube-scheduler send them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

A100_80GB = "NVIDIA-A100-SXM4-80GB"


def mig_resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile.replace("+", ".")


def make_node(
    name: str,
    *,
    product: str | None = A100_80GB,
    gpu_count: int | None = 8,
    mig: Mapping[str, int] | None = None,
    whole_gpus: int = 0,
    strategy: str | None = "mixed",
    mig_capable: bool | None = True,
    config: str | None = None,
    config_state: str | None = None,
    layout_annotation: str | None = None,
    resource_version: str = "",
    extra_labels: Mapping[str, str] | None = None,
    with_type_meta: bool = False,
) -> dict[str, Any]:
    """A GPU Node with GFD labels and ``nvidia.com/*`` allocatable (mixed strategy)."""
    labels: dict[str, str] = {"kubernetes.io/hostname": name}
    if product is not None:
        labels["nvidia.com/gpu.product"] = product
    if gpu_count is not None:
        labels["nvidia.com/gpu.count"] = str(gpu_count)
    if mig_capable is not None:
        labels["nvidia.com/mig.capable"] = "true" if mig_capable else "false"
    if strategy is not None:
        labels["nvidia.com/mig.strategy"] = strategy
    if config is not None:
        labels["nvidia.com/mig.config"] = config
    if config_state is not None:
        labels["nvidia.com/mig.config.state"] = config_state
    labels.update(extra_labels or {})
    allocatable: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    for profile, count in (mig or {}).items():
        allocatable[mig_resource(profile)] = str(count)
    if whole_gpus:
        allocatable["nvidia.com/gpu"] = str(whole_gpus)
    metadata: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "creationTimestamp": "2025-05-01T00:00:00Z",
        "labels": labels,
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    if layout_annotation is not None:
        metadata["annotations"] = {"migslice.io/gpu-layout": layout_annotation}
    node: dict[str, Any] = {
        "metadata": metadata,
        "spec": {},
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kernelVersion": "",
                "osImage": "",
                "containerRuntimeVersion": "",
                "kubeletVersion": "v1.34.0",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }
    if with_type_meta:
        node = {"apiVersion": "v1", "kind": "Node", **node}
    return node


def make_pod(
    name: str,
    *,
    namespace: str = "team-a",
    requests: Mapping[str, Any] | None = None,
    profile: str | None = None,
    count: int = 1,
    node_name: str | None = None,
    nominated_node_name: str | None = None,
    phase: str = "Pending",
    node_selector: Mapping[str, str] | None = None,
    affinity_products: Sequence[str] | None = None,
    with_type_meta: bool = False,
) -> dict[str, Any]:
    """A Pod as kube-scheduler sends it (no managedFields, no apiVersion/kind by default).

    ``profile``/``count`` request ``nvidia.com/mig-<profile>`` in limits; ``requests`` puts
    arbitrary quantities in limits instead.
    """
    limits: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if profile is not None:
        limits[mig_resource(profile)] = str(count)
    limits.update(requests or {})
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "train:1",
                "resources": {"limits": limits},
            }
        ],
        "schedulerName": "migslice-scheduler",
        "restartPolicy": "Always",
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if affinity_products is not None:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": "In",
                                    "values": list(affinity_products),
                                }
                            ]
                        }
                    ]
                }
            }
        }
    status: dict[str, Any] = {"phase": phase}
    if nominated_node_name is not None:
        status["nominatedNodeName"] = nominated_node_name
    annotations = {"migslice.io/tenant": "team-a"}
    if profile is not None:
        annotations["migslice.io/profile"] = profile
    pod: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "creationTimestamp": "2025-05-01T00:00:00Z",
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }
    if with_type_meta:
        pod = {"apiVersion": "v1", "kind": "Pod", **pod}
    return pod


def unschedulable(pod: dict[str, Any], since: str = "2025-05-01T00:00:00Z") -> dict[str, Any]:
    """``pod`` as kube-scheduler leaves a pod it could not place (PodScheduled False)."""
    pod["status"] = {
        **pod.get("status", {}),
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available",
                "lastTransitionTime": since,
            }
        ],
    }
    return pod


def make_mig_config_map(
    config_text: str = (
        "version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n"
    ),
    *,
    namespace: str = "gpu-operator",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """MIG Manager's mig-parted ConfigMap (``migslice-mig-config``), as the chart creates it."""
    metadata: dict[str, Any] = {
        "name": "migslice-mig-config",
        "namespace": namespace,
        "resourceVersion": "1",
    }
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {"config.yaml": config_text},
    }


# --- admission webhook builders -------------------------------------------------------------


def make_policy(
    name: str = "team-a",
    *,
    namespaces: Sequence[str] | None = ("team-a",),
    generation: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    """A TenantPolicy object; ``spec`` keys are the CRD's camelCase fields."""
    body: dict[str, Any] = {}
    if namespaces is not None:
        body["namespaces"] = list(namespaces)
    body.setdefault(
        "sizes",
        {
            "small": {"memory": "10Gi", "computeSlices": 1},
            "medium": {"memory": "20Gi", "computeSlices": 2},
            "large": {"memory": "40Gi", "computeSlices": 3},
        },
    )
    body.update(spec)
    return {
        "apiVersion": "migslice.io/v1alpha1",
        "kind": "TenantPolicy",
        "metadata": {"name": name, "generation": generation, "uid": f"uid-policy-{name}"},
        "spec": body,
    }


def make_namespace(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/metadata.name": name, **(labels or {})},
        },
    }


def make_created_pod(
    *,
    namespace: str = "team-a",
    generate_name: str = "train-",
    annotations: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    containers: Sequence[str] = ("main",),
    k8s_minor: int = 34,
    with_annotations_map: bool | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Pod exactly as kube-apiserver puts it in a CREATE AdmissionReview.

    ``generateName`` and no name, no uid, no resourceVersion, ``managedFields`` present,
    defaults applied (``resources: {}``, tolerations from DefaultTolerationSeconds, ...),
    ``creationTimestamp: null`` up to 1.33 and absent from 1.34, ``status: {}``. No
    ``metadata.annotations`` unless some are given (or ``with_annotations_map``).
    """
    metadata: dict[str, Any] = {
        "generateName": generate_name,
        "namespace": namespace,
        "managedFields": [
            {
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2025-05-01T00:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": {"f:containers": {}}},
            }
        ],
    }
    if k8s_minor <= 33:
        metadata["creationTimestamp"] = None
    if annotations or with_annotations_map:
        metadata["annotations"] = dict(annotations or {})
    built: list[dict[str, Any]] = []
    for name in containers:
        resources: dict[str, Any] = {}
        if limits and name == containers[0]:
            resources = {"limits": dict(limits), "requests": dict(limits)}
        built.append(
            {
                "name": name,
                "image": "train:1",
                "resources": resources,
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
            }
        )
    spec: dict[str, Any] = {
        "containers": built,
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": {}}


def make_review(
    raw_object: Mapping[str, Any] | None,
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    namespace: str = "team-a",
    operation: str = "CREATE",
    kind: tuple[str, str, str] = ("", "v1", "Pod"),
    resource: str = "pods",
    dry_run: bool = False,
) -> dict[str, Any]:
    """An ``admission.k8s.io/v1`` AdmissionReview request as kube-apiserver sends it."""
    group, version, kind_name = kind
    gvk = {"group": group, "version": version, "kind": kind_name}
    gvr = {"group": group, "version": version, "resource": resource}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "operation": operation,
        "userInfo": {"username": "alice", "uid": "u-1", "groups": ["system:authenticated"]},
        "object": raw_object,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if namespace:
        request["namespace"] = namespace
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}
