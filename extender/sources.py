"""The live cluster view: informers on Nodes, GPU Pods and the mig-parted ConfigMap and, where
the API server serves ``resource.k8s.io/v1``, on ResourceSlices, ResourceClaims and
DeviceClasses (DRA nodes; see docs/dra.md)."""

from __future__ import annotations

import logging
from typing import Any

from extender.settings import ExtenderSettings
from extender.state import (
    ClaimSink,
    DeviceClassSink,
    MigConfigSink,
    NodeSink,
    PodSink,
    SliceSink,
    TaintRuleSink,
    Warmup,
    mig_configs_from,
)
from migslice.inventory import ClusterIndex, MigConfigs
from migslice.kube import Informer, ResourceRef, Transport
from migslice.kube.discovery import DraDiscovery, dra_resources, follow_discovery
from migslice.kube.informer import SLICE_PAGE_SIZE
from migslice.names import DRA_API
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.device_taint_rules import taint_rule_facts_from_raw
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.objects.resource_slices import slice_facts_from_raw
from migslice.scheduling import PreparedNode
from migslice.serving.apps import restart_worker

log = logging.getLogger(__name__)

# Terminal pods hold nothing; the API server leaves them out of the list and the watch.
NON_TERMINAL_PODS = "status.phase!=Succeeded,status.phase!=Failed"
DRA_LISTS = ("resourceslices", "resourceclaims", "deviceclasses")
TAINT_RULES = "devicetaintrules"


def start_caches(
    transport: Transport, settings: ExtenderSettings, index: ClusterIndex[PreparedNode]
) -> tuple[Informer[Any], ...]:
    """Start the informers (daemon threads) that keep ``index`` current."""
    key = settings.mig_config_key

    def project_config_map(raw: dict[str, Any]) -> MigConfigs:
        return mig_configs_from(raw, key)

    namespace = settings.mig_config_namespace or "default"
    discovery = dra_resources(transport)
    served = discovery.resources
    dra = served is not None
    rules = served is not None and TAINT_RULES in served

    def builds(answer: DraDiscovery) -> tuple[bool, bool]:
        """What the caches are built for: DRA's, and the DeviceTaintRules' (the steer's)."""
        found = answer.resources
        return (found is not None, found is not None and TAINT_RULES in found)

    follow_discovery(
        transport,
        discovery,
        lambda answer: restart_worker(
            f"resource.k8s.io/v1 answered at last (DRA, DeviceTaintRules served: "
            f"{builds(answer)}); the caches were built without knowing it"
        ),
        wanted=builds,
    )
    lists = (*(DRA_LISTS if dra else ()), *((TAINT_RULES,) if rules else ()))
    warmup = Warmup(index, ("mig-config", "nodes", "pods", *lists))
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
    if dra:
        informers += [
            Informer(
                name="resourceslices",
                transport=transport,
                resource=ResourceRef(f"{DRA_API}/resourceslices"),
                project=slice_facts_from_raw,
                sink=SliceSink(index, warmup),
                page_size=SLICE_PAGE_SIZE,
            ),
            Informer(
                name="resourceclaims",
                transport=transport,
                resource=ResourceRef(f"{DRA_API}/resourceclaims"),
                project=claim_facts_from_raw,
                sink=ClaimSink(index, warmup),
            ),
            Informer(
                name="deviceclasses",
                transport=transport,
                resource=ResourceRef(f"{DRA_API}/deviceclasses"),
                project=device_class_facts_from_raw,
                sink=DeviceClassSink(index, warmup),
            ),
        ]
    if rules:
        informers.append(
            Informer(
                name=TAINT_RULES,
                transport=transport,
                resource=ResourceRef(f"{DRA_API}/{TAINT_RULES}"),
                project=taint_rule_facts_from_raw,
                sink=TaintRuleSink(index, warmup),
            )
        )
    for informer in informers:
        informer.start()
    return tuple(informers)
