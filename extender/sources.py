"""The live cluster view: informers on Nodes, GPU Pods and the mig-parted ConfigMap."""

from __future__ import annotations

from typing import Any

from extender.settings import ExtenderSettings
from extender.state import MigConfigSink, NodeSink, PodSink, Warmup, mig_configs_from
from migslice.inventory import ClusterIndex, MigConfigs
from migslice.kube import Informer, ResourceRef, Transport
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.scheduling import PreparedNode

# Terminal pods hold nothing; the API server leaves them out of the list and the watch.
NON_TERMINAL_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def start_caches(
    transport: Transport, settings: ExtenderSettings, index: ClusterIndex[PreparedNode]
) -> tuple[Informer[Any], ...]:
    """Start the informers (daemon threads) that keep ``index`` current."""
    key = settings.mig_config_key

    def project_config_map(raw: dict[str, Any]) -> MigConfigs:
        return mig_configs_from(raw, key)

    namespace = settings.mig_config_namespace or "default"
    warmup = Warmup(index, ("mig-config", "nodes", "pods"))
    informers: list[Informer[Any]] = [
        Informer(
            name="mig-config",
            transport=transport,
            resource=ResourceRef(
                f"/api/v1/namespaces/{namespace}/configmaps",
                field_selector=f"metadata.name={settings.mig_config_name}",
            ),
            project=project_config_map,
            sink=MigConfigSink(index, warmup),
        ),
        Informer(
            name="nodes",
            transport=transport,
            resource=ResourceRef("/api/v1/nodes"),
            project=node_facts_from_raw,
            sink=NodeSink(index, warmup),
        ),
        Informer(
            name="pods",
            transport=transport,
            resource=ResourceRef("/api/v1/pods", field_selector=NON_TERMINAL_PODS),
            project=pod_facts_from_raw,
            sink=PodSink(index, warmup),
        ),
    ]
    for informer in informers:
        informer.start()
    return tuple(informers)
