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
