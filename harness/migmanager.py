"""A test actor that plays NVIDIA MIG Manager (and the device plugin) for fake GPU nodes.

MIG Manager watches each node's ``nvidia.com/mig.config`` label; when it changes, it sets
``nvidia.com/mig.config.state=pending``, applies the named config from its mig-parted file
(a ConfigMap, key ``config.yaml``), the device plugin then advertises the new
``nvidia.com/mig-*`` resources, and the state becomes ``success`` (``failed`` when the config
does not exist or does not fit the GPUs). This actor does the same against a real API server,
with fake nodes: it rewrites capacity/allocatable instead of touching a GPU.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from harness.api import set_node_resources
from migslice.mig import CATALOG, MIG_RESOURCE_PREFIX, fit
from migslice.mig.migparted import (
    MigPartedError,
    gpu_pci_ids,
    parse_mig_parted,
    per_gpu_counts,
)
from migslice.whynot import WhyNot

log = logging.getLogger(__name__)

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"


@dataclass
class FakeMigManager:
    """Reconciles every node that carries ``nvidia.com/mig.config``, in a background thread."""

    api: k8s.ApiClient
    config_map_namespace: str = "gpu-operator"
    config_map_name: str = "migslice-mig-config"
    interval_s: float = 0.2
    nodes: frozenset[str] | None = None  # only these nodes (None: every node with the label)
    fail_prefix: str = ""  # configs whose name starts with this fail (as on a broken GPU)
    applied: dict[str, str] = field(default_factory=dict)
    history: list[tuple[str, str, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> FakeMigManager:
        self._thread = threading.Thread(target=self._loop, name="fake-mig-manager", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FakeMigManager:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.reconcile_all()
            except Exception:  # a test actor must keep running; the test asserts outcomes
                log.exception("fake MIG Manager pass failed; retrying")

    def reconcile_all(self) -> None:
        core = k8s.CoreV1Api(self.api)
        for node in core.list_node(label_selector=CONFIG_LABEL).items:
            if self.nodes is not None and node.metadata.name not in self.nodes:
                continue
            wanted = node.metadata.labels[CONFIG_LABEL]
            if self.applied.get(node.metadata.name) == wanted:
                continue
            self.reconcile(node)

    def _mig_parted_text(self) -> str | None:
        core = k8s.CoreV1Api(self.api)
        try:
            config_map = core.read_namespaced_config_map(
                self.config_map_name, self.config_map_namespace
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        data = config_map.data or {}
        return data.get("config.yaml")

    def reconcile(self, node: k8s.V1Node) -> str:
        """Apply the node's selected config; return the state it ends in."""
        name = node.metadata.name
        labels: Mapping[str, str] = node.metadata.labels
        wanted = labels[CONFIG_LABEL]
        core = k8s.CoreV1Api(self.api)
        core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: "pending"}}})
        resources, problem = self._resources_for(labels, wanted)
        if self.fail_prefix and wanted.startswith(self.fail_prefix):
            resources, problem = {}, f"configs named {self.fail_prefix}* fail in this scenario"
        if problem:
            state = "failed"
            log.warning("fake MIG Manager: node=%s config=%s failed: %s", name, wanted, problem)
        else:
            old = {
                key: None
                for key in (node.status.allocatable or {})
                if key.startswith(MIG_RESOURCE_PREFIX)
            }
            set_node_resources(self.api, name, {**old, **resources})
            state = "success"
        core.patch_node(name, {"metadata": {"labels": {STATE_LABEL: state}}})
        self.applied[name] = wanted
        self.history.append((name, wanted, state))
        return state

    def _resources_for(
        self, labels: Mapping[str, str], config_name: str
    ) -> tuple[dict[str, int], str]:
        text = self._mig_parted_text()
        if text is None:
            return {}, f"ConfigMap {self.config_map_namespace}/{self.config_map_name} not found"
        try:
            configs = parse_mig_parted(text)
        except MigPartedError as error:
            return {}, str(error)
        if config_name not in configs:
            return {}, f"config {config_name!r} is not in the mig-parted file"
        model = CATALOG.by_product(labels.get("nvidia.com/gpu.product", ""))
        if model is None:
            return {}, f"unknown GPU product {labels.get('nvidia.com/gpu.product')!r}"
        gpu_count = int(labels.get("nvidia.com/gpu.count", "1"))
        pci = gpu_pci_ids(model, labels.get("nvidia.com/gpu.product"), None)
        per_gpu = per_gpu_counts(config_name, model, gpu_count, configs=configs, pci_device_ids=pci)
        if isinstance(per_gpu, WhyNot):  # a GPU left untouched keeps a layout this actor never knew
            return {}, per_gpu
        totals: Counter[str] = Counter()
        for index, (_, counts) in enumerate(per_gpu):
            wanted = [profile for profile, n in counts.items() for _ in range(n)]
            if not all(model.has_profile(p) for p in wanted):
                return {}, f"GPU {index}: {model.key} lacks a profile of {sorted(counts)}"
            result = fit(model, wanted)
            if not result.feasible:
                return {}, f"GPU {index}: {result.reason}"
            totals.update(counts)
        return {model.profile(p).resource_name: n for p, n in totals.items() if n}, ""
