"""Builders of Kubernetes objects for tests, e2e and bench: Nodes, Pods, TenantPolicies,
Namespaces, ConfigMaps and AdmissionReviews, shaped as kube-apiserver and kube-scheduler send
them.

The defaults are the small objects unit tests want; the options cover every other caller: a
Node or Pod as a client creates it (``stored=False``), with a real cluster's bulk
(``real=True``: :mod:`harness.shapes`), with the ``managedFields`` kube-apiserver serves, or
with any label, annotation, spec or status field added.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from harness import shapes
from harness.shapes import STAMP, running_status

A100_80GB = "NVIDIA-A100-SXM4-80GB"
BASE_RESOURCES = {"cpu": "64", "memory": "512Gi", "pods": "110"}
LABEL_MANAGERS = ("kubelet", "gpu-feature-discovery", "nvidia-mig-manager")
POD_MANAGERS = ("kube-controller-manager", "kubelet", "migslice-scheduler")

__all__ = [
    "A100_80GB",
    "DEFAULT_TOLERATIONS",
    "STAMP",
    "make_created_pod",
    "make_gated_pod",
    "make_mig_config_map",
    "make_namespace",
    "make_node",
    "make_pod",
    "make_policy",
    "make_review",
    "mig_resource",
    "running_status",
    "unschedulable",
]


DEFAULT_TOLERATIONS: list[dict[str, Any]] = [
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
]
"""What kube-apiserver's DefaultTolerationSeconds admission adds to every pod."""


def mig_resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile.replace("+", ".")


def _merged(base: dict[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` updated with ``extra``; a value of None removes the key."""
    for key, value in (extra or {}).items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


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
    uid: str | None = None,
    extra_labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    resources: Mapping[str, str] | None = None,
    spec: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    kubelet: bool = True,
    real: bool = False,
    index: int = 0,
    managed_fields: bool = False,
    with_type_meta: bool = False,
) -> dict[str, Any]:
    """A GPU Node with GFD labels and ``nvidia.com/*`` allocatable (mixed strategy).

    ``resources``: the node's cpu, memory, pods and so on (default :data:`BASE_RESOURCES`),
    beside ``mig`` (instances by profile) and ``whole_gpus``. ``kubelet``: the kubelet's
    endpoint and ``nodeInfo`` in the status. ``real``: everything else a real GPU node carries
    (:mod:`harness.shapes`, deterministic in ``index``). ``managed_fields``: the
    ``managedFields`` kube-apiserver serves for the labels' managers. ``spec`` and ``status``
    are merged over what the other options build (None removes a key).
    """
    labels: dict[str, str] = {"kubernetes.io/hostname": name}
    if real:
        labels = shapes.node_labels(name, index, product or A100_80GB, mig or {})
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
    base = dict(
        shapes.NODE_RESOURCES if real and resources is None else resources or BASE_RESOURCES
    )
    allocatable: dict[str, str] = base
    for profile, count in (mig or {}).items():
        allocatable[mig_resource(profile)] = str(count)
    if whole_gpus:
        allocatable["nvidia.com/gpu"] = str(whole_gpus)
    metadata: dict[str, Any] = {
        "name": name,
        "uid": uid or f"uid-{name}",
        "creationTimestamp": STAMP,
        "labels": labels,
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    notes: dict[str, str] = shapes.node_annotations(labels, index) if real else {}
    notes.update(annotations or {})
    if layout_annotation is not None:
        notes["migslice.io/gpu-layout"] = layout_annotation
    if notes:
        metadata["annotations"] = notes
    if managed_fields:
        fields = {"f:metadata": {"f:labels": {f"f:{k}": {} for k in labels}}}
        metadata["managedFields"] = shapes.managed_fields(LABEL_MANAGERS, fields)
    built_status: dict[str, Any] = {"capacity": dict(allocatable), "allocatable": allocatable}
    if kubelet:
        built_status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
        built_status["nodeInfo"] = {
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
        }
    if real:
        built_status.update(shapes.node_status(name, index))
    node: dict[str, Any] = {
        "metadata": metadata,
        "spec": _merged(shapes.node_spec(index) if real else {}, spec),
        "status": _merged(built_status, status),
    }
    if with_type_meta:
        node = {"apiVersion": "v1", "kind": "Node", **node}
    return node


def make_pod(
    name: str | None,
    *,
    namespace: str | None = "team-a",
    requests: Mapping[str, Any] | None = None,
    profile: str | None = None,
    count: int = 1,
    node_name: str | None = None,
    nominated_node_name: str | None = None,
    phase: str = "Pending",
    node_selector: Mapping[str, str] | None = None,
    affinity_products: Sequence[str] | None = None,
    scheduler_name: str | None = "migslice-scheduler",
    tenant: str | None = "team-a",
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    also_requests: bool = False,
    container: str = "main",
    image: str = "train:1",
    command: Sequence[str] | None = None,
    restart_policy: str | None = "Always",
    spec: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    generate_name: str | None = None,
    uid: str | None = None,
    resource_version: str = "",
    stored: bool = True,
    real: bool = False,
    managed_fields: bool = False,
    with_type_meta: bool = False,
) -> dict[str, Any]:
    """A Pod as kube-scheduler sends it (no managedFields, no apiVersion/kind by default).

    ``profile``/``count`` request ``nvidia.com/mig-<profile>`` in limits (and in requests with
    ``also_requests``), beside ``limits`` (default cpu 1, memory 1Gi); ``requests`` puts
    arbitrary quantities in limits too. ``tenant`` (and ``profile``) are the annotations the
    webhook writes; None leaves them out. ``stored=False``: as a client creates it (no uid,
    creation time or status; ``generate_name`` for a ``generateName``). ``real``: a training
    Job's pod (:mod:`harness.shapes`: owner references, an init container, the trainer and two
    sidecars, volumes, the GPU toleration and an affinity to ``affinity_products``' first).
    ``managed_fields``: the ``managedFields`` kube-apiserver serves for a bound Job's pod.
    ``spec`` and ``metadata`` are merged over what the other options build (None removes).
    """
    wanted: dict[str, Any] = dict({"cpu": "1", "memory": "1Gi"} if limits is None else limits)
    if profile is not None:
        wanted[mig_resource(profile)] = str(count)
    wanted.update(requests or {})
    if real:
        products = affinity_products or (A100_80GB,)
        built_spec: dict[str, Any] = shapes.job_spec(name or "pod", wanted, products[0])
        built_meta: dict[str, Any] = shapes.job_metadata(name or "pod", namespace or "default")
    else:
        resources: dict[str, Any] = {}
        if wanted:
            resources = (
                {"limits": wanted, "requests": dict(wanted)}
                if also_requests
                else {"limits": wanted}
            )
        main: dict[str, Any] = {"name": container, "image": image}
        if command is not None:
            main["command"] = list(command)
        if resources:
            main["resources"] = resources
        built_spec = {"containers": [main]}
        built_meta = {"annotations": {}}
        if restart_policy is not None:
            built_spec["restartPolicy"] = restart_policy
    if scheduler_name is not None:
        built_spec = {"schedulerName": scheduler_name, **built_spec}
    if node_name is not None:
        built_spec["nodeName"] = node_name
    if node_selector is not None:
        built_spec["nodeSelector"] = dict(node_selector)
    if affinity_products is not None and not real:
        built_spec["affinity"] = {
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
    notes: dict[str, str] = built_meta["annotations"]
    if tenant is not None:
        notes["migslice.io/tenant"] = tenant
        if profile is not None:
            notes["migslice.io/profile"] = profile
        if real:
            notes["migslice.io/policy"] = f"{tenant}@1"
    notes.update(annotations or {})
    meta: dict[str, Any] = {}
    if name is not None:
        meta["name"] = name
    if generate_name is not None:
        meta["generateName"] = generate_name
    if namespace is not None:
        meta["namespace"] = namespace
    if stored:
        meta["uid"] = uid or f"uid-{namespace}-{name}"
        meta["creationTimestamp"] = STAMP
    if labels or "labels" in built_meta:
        meta["labels"] = {**built_meta.get("labels", {}), **(labels or {})}
    if notes:
        meta["annotations"] = notes
    if "ownerReferences" in built_meta:
        meta["ownerReferences"] = built_meta["ownerReferences"]
    if resource_version:
        meta["resourceVersion"] = resource_version
    if managed_fields:
        first = "trainer" if real else container
        fields = {"f:spec": {"f:containers": {f'k:{{"name":"{first}"}}': {".": {}}}}}
        meta["managedFields"] = shapes.managed_fields(POD_MANAGERS, fields)
    pod: dict[str, Any] = {
        "metadata": _merged(meta, metadata),
        "spec": _merged(built_spec, spec),
    }
    if stored:
        status: dict[str, Any] = {"phase": phase}
        if nominated_node_name is not None:
            status["nominatedNodeName"] = nominated_node_name
        pod["status"] = status
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
        "tolerations": copy.deepcopy(DEFAULT_TOLERATIONS),
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        spec["affinity"] = dict(affinity)
    return {"kind": "Pod", "apiVersion": "v1", "metadata": metadata, "spec": spec, "status": {}}


def make_gated_pod(
    name: str,
    *,
    namespace: str = "team-a",
    created: str = STAMP,
    resource_version: str = "7",
    gates: Sequence[str] = ("migslice.io/admission",),
    scheduler_name: str = "migslice-scheduler",
    **created_pod: Any,
) -> dict[str, Any]:
    """A Pod as kube-apiserver stores it when it was created in a fail-open namespace while
    the webhook could not be called: :func:`make_created_pod` (``created_pod`` are its
    options) with a name, uid, resourceVersion and creation time, no ``managedFields`` (as the
    webhook's pod cache keeps it), ``gates`` in ``spec.schedulingGates`` and the scheduler the
    MutatingAdmissionPolicy sets."""
    pod = make_created_pod(namespace=namespace, **created_pod)
    metadata = pod["metadata"]
    metadata.pop("managedFields", None)
    metadata.pop("generateName", None)
    metadata.update(
        name=name,
        uid=f"uid-{namespace}-{name}",
        resourceVersion=resource_version,
        creationTimestamp=created,
    )
    pod["spec"]["schedulerName"] = scheduler_name
    if gates:
        pod["spec"]["schedulingGates"] = [{"name": gate} for gate in gates]
    pod["status"] = {"phase": "Pending"}
    return pod


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
