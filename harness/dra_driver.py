"""A test actor that plays NVIDIA's DRA kubelet plugin (``gpu.nvidia.com``) of fake GPU nodes.

The real plugin (kubernetes-sigs/dra-driver-nvidia-gpu at 95932046) publishes each node's
devices as ResourceSlices when it starts: in DynamicMIG mode every profile at every legal
placement with one counter per memory slice, split into a counter slice and one slice per GPU
(Kubernetes >= 1.35); in static mode the MIG devices that exist, in one slice. It never
republishes for allocations: kube-scheduler allocates first-fit from the slices and the claims'
counters, and the plugin carves the instance when the claim is prepared. This actor writes
exactly those objects (:mod:`harness.dra_slices`, checked against the driver's fixtures) into
a real kube-apiserver, owned by their Node as the driver's are, and can take them away or
publish them again (a plugin restart). It prepares nothing: no kubelet runs here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from harness import dra_slices
from harness.api import wait_for
from migslice.inventory import ClusterIndex
from migslice.names import STEER_TAINT_KEY
from migslice.objects.clusterfile import ClusterObjects
from migslice.scheduling import PreparedNode, prepare_node
from migslice.scheduling.dra_steer import steer_of

GROUP, VERSION, PLURAL = "resource.k8s.io", "v1", "resourceslices"


@dataclass
class FakeDraDriver:
    """The plugin of one node: ``gpus`` (``dra_slices.a100(i)``/``h100(i)``), DynamicMIG or
    static with ``layouts`` (per GPU, ``(profile, start)`` instances)."""

    api: k8s.ApiClient
    node: str
    gpus: Sequence[dra_slices.Gpu]
    dynamic: bool = True
    layouts: Sequence[Sequence[tuple[str, int]]] = ()
    published: list[str] = field(default_factory=list)

    def publish(self) -> list[dict[str, Any]]:
        """Create the node's slices as the plugin does when it starts; the stored objects."""
        core = k8s.CoreV1Api(self.api)
        uid = core.read_node(self.node).metadata.uid
        stored = []
        for raw in dra_slices.node_slices(
            self.node, uid, self.gpus, dynamic=self.dynamic, layouts=self.layouts
        ):
            created = self._objects.create_cluster_custom_object(
                GROUP, VERSION, PLURAL, dra_slices.for_create(raw)
            )
            self.published.append(created["metadata"]["name"])
            stored.append(created)
        return stored

    def withdraw(self) -> None:
        """Delete the slices this actor published (the plugin gone, its node drained)."""
        for name in self.published:
            self._objects.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        self.published.clear()

    def restart(self) -> list[dict[str, Any]]:
        """Publish again from scratch, as a restarted plugin does."""
        self.withdraw()
        return self.publish()

    @property
    def _objects(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)


MIG_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "mig.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'mig'"
                }
            }
        ]
    },
}
"""NVIDIA's DeviceClass of MIG devices, as its chart ships it."""


def claim_objects(
    name: str, namespace: str, profile: str, *, scheduler: str | None = None, count: int = 1
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ResourceClaim of ``count`` devices of ``profile`` from mig.nvidia.com, and a pod that
    uses it (of ``scheduler``; None: the default scheduler)."""
    selector = f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"
    exactly: dict[str, Any] = {
        "deviceClassName": "mig.nvidia.com",
        "selectors": [{"cel": {"expression": selector}}],
    }
    if count != 1:
        exactly["count"] = count
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "mig", "exactly": exactly}]}},
    }
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        "containers": [
            {"name": "main", "image": "cuda:12", "resources": {"claims": [{"name": "gpu"}]}}
        ],
    }
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return claim, pod


def ensure_mig_class(objects: k8s.CustomObjectsApi) -> None:
    """NVIDIA's ``mig.nvidia.com`` DeviceClass, created unless it exists."""
    try:
        objects.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", MIG_CLASS)
    except k8s.ApiException as error:
        if error.status != 409:
            raise


def release(core: k8s.CoreV1Api, objects: k8s.CustomObjectsApi, namespace: str, name: str) -> None:
    """A claim pod of :func:`claim_objects` leaves: the pod and its claim are deleted and the
    claim's finalizer removed (what kube-controller-manager's claim controller does once no pod
    holds it; this control plane runs none), so its devices are free again."""
    core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)
    try:
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "resourceclaims", name, {"metadata": {"finalizers": None}}
        )
    except k8s.ApiException as error:
        if error.status != 404:
            raise

    def gone() -> bool:
        try:
            objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    wait_for(f"claim {name} gone", gone, 30)


def allocated_devices(objects: k8s.CustomObjectsApi, namespace: str, name: str) -> list[str]:
    """The devices a claim's allocation names (none while it is not allocated)."""
    claim = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "resourceclaims", name)
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [str(r["device"]) for r in (allocation.get("devices") or {}).get("results") or ()]


def steer_rules(objects: k8s.CustomObjectsApi, nodes: list[str]) -> dict[str, set[str]]:
    """Per node, the devices migslice's rules taint (as the API server holds them)."""
    found: dict[str, set[str]] = {node: set() for node in nodes}
    for rule in objects.list_cluster_custom_object(GROUP, VERSION, "devicetaintrules")["items"]:
        selector = rule["spec"].get("deviceSelector") or {}
        if rule["spec"]["taint"]["key"] == STEER_TAINT_KEY and selector.get("pool") in found:
            found[selector["pool"]].add(selector["device"])
    return found


def read_cluster(
    core_v1: k8s.CoreV1Api, objects: k8s.CustomObjectsApi, nodes: list[str]
) -> ClusterIndex[PreparedNode]:
    """migslice's own view of the nodes, from what the API server holds now."""
    client = core_v1.api_client
    raw_nodes = tuple(client.sanitize_for_serialization(core_v1.read_node(n)) for n in nodes)
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.load_objects(
        ClusterObjects(
            nodes=raw_nodes,
            resource_slices=tuple(
                objects.list_cluster_custom_object(GROUP, VERSION, "resourceslices")["items"]
            ),
            resource_claims=tuple(
                objects.list_cluster_custom_object(GROUP, VERSION, "resourceclaims")["items"]
            ),
            device_classes=(MIG_CLASS,),
        )
    )
    return index


def wanted_steer(
    index: ClusterIndex[PreparedNode],
    nodes: list[str],
    *,
    strand_guard: bool = False,
    complete: bool = False,
) -> dict[str, set[str]]:
    """Per node, the devices migslice's steer of those objects taints (``strand_guard``: with
    the cluster's stranding rule on; ``complete``: with its full-compute rule on)."""
    found = {}
    for node in nodes:
        state = index.state_of(node)
        assert state is not None and state.dra is not None and state.dra.use is not None
        steer = steer_of(
            state.dra.pool, state.dra.use, strand_guard=strand_guard, complete=complete
        )
        found[node] = set(steer.taints)
    return found


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or ())


def settled(core_v1: k8s.CoreV1Api, objects: k8s.CustomObjectsApi, nodes: list[str]) -> bool:
    """Whether the steer rules on ``nodes`` are those of the objects now, with the cluster's
    stranding and full-compute rules on or off (which the extender holds depends on the held
    mix it has seen, with hysteresis: ``migslice_dra_strand_guard`` and
    ``migslice_dra_complete_rule`` on its /metrics)."""
    index = read_cluster(core_v1, objects, nodes)
    rules = steer_rules(objects, nodes)
    return any(
        rules == wanted_steer(index, nodes, strand_guard=on, complete=complete)
        for on in (False, True)
        for complete in (False, True)
    )
