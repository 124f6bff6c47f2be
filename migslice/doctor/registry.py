"""Every check doctor runs, in the order it prints them: its name, what it reads, how its
facts are gathered and how they are judged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migslice import names
from migslice.doctor import gather, gather_dra
from migslice.doctor.checks import (
    dra,
    gpu_operator,
    install,
    nodes,
    outage,
    policies,
    scheduler,
    serving,
    trust,
)
from migslice.doctor.facts import Probe, Settings
from migslice.doctor.findings import Finding
from migslice.doctor.reading import ClusterReader


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    reads: str
    gather: Callable[[ClusterReader, Settings], Any]
    judge: Callable[[Any, Settings], Finding]

    def run(self, reader: ClusterReader, settings: Settings) -> Finding:
        return self.judge(self.gather(reader, settings), settings)


def _reachable(check: str, deployment: str) -> Callable[[Probe, Settings], Finding]:
    def judge(probe: Probe, settings: Settings) -> Finding:
        return serving.judge_reachable(check, probe, deployment, settings)

    return judge


CHECKS: tuple[Check, ...] = (
    Check(
        install.CRD_CHECK,
        "CustomResourceDefinition tenantpolicies.migslice.io",
        gather.gather_crd,
        install.judge_crd,
    ),
    Check(
        install.WEBHOOK_REACHABLE,
        "both webhook configurations (the Service they call); GET /healthz of that Service",
        gather.gather_webhook_probe,
        _reachable(install.WEBHOOK_REACHABLE, names.WEBHOOK_SERVICE),
    ),
    Check(
        install.WEBHOOK_CA_BUNDLE,
        "both webhook configurations' caBundle; the certificate the webhook serves (on the "
        "connection in the cluster, else the Secret of its Deployment's --tls-cert)",
        gather.gather_webhook_trust,
        install.judge_webhook_trust,
    ),
    Check(
        trust.WEBHOOK_CLIENT_AUTH,
        "the webhook Deployment's --client-ca-file (followed to its Secret) and --client-name; "
        "Secret migslice-webhook-client (kube-apiserver's certificate), if there is one",
        gather.gather_webhook_client_auth,
        trust.judge_webhook_client_auth,
    ),
    Check(
        scheduler.SCHEDULER_CHECK,
        "Deployment migslice-scheduler; its KubeSchedulerConfiguration (--config); its "
        "leader-election Lease",
        gather.gather_scheduler,
        scheduler.judge_scheduler,
    ),
    Check(
        scheduler.EXTENDER_REACHABLE,
        "the scheduler's extenders[].urlPrefix; GET /healthz of the extender",
        gather.gather_extender_probe,
        _reachable(scheduler.EXTENDER_REACHABLE, names.EXTENDER_SERVICE),
    ),
    Check(
        scheduler.EXTENDER_TRUSTED,
        "the extender entry's tlsConfig (caData, or the caFile's Secret/ConfigMap); the "
        "certificate the extender serves",
        gather.gather_extender_trust,
        scheduler.judge_extender_trust,
    ),
    Check(
        trust.EXTENDER_CLIENT_AUTH,
        "the extender Deployment's --client-ca-file and --client-name; the client certificate "
        "migslice-scheduler presents (tlsConfig certData, or certFile's Secret)",
        gather.gather_extender_client_auth,
        trust.judge_extender_client_auth,
    ),
    Check(
        trust.NETWORK_POLICIES,
        "the NetworkPolicies of the release namespace; the pod labels of the webhook and "
        "extender Deployments",
        gather.gather_network_policies,
        trust.judge_network_policies,
    ),
    Check(
        gpu_operator.GPU_OPERATOR_CHECK,
        "CRD clusterpolicies.nvidia.com; the ClusterPolicies",
        gather.gather_gpu_operator,
        gpu_operator.judge_gpu_operator,
    ),
    Check(
        gpu_operator.MIG_STRATEGY_CHECK,
        "the ClusterPolicy's spec.mig.strategy; each MIG node's nvidia.com/mig.strategy",
        gather.gather_gpu_operator,
        gpu_operator.judge_mig_strategy,
    ),
    Check(
        gpu_operator.MIG_MANAGER_CHECK,
        "the ClusterPolicy's spec.migManager; the extender's --mig-config-map and that ConfigMap",
        gather.gather_gpu_operator,
        gpu_operator.judge_mig_manager_config,
    ),
    Check(
        nodes.GPU_PRODUCTS_CHECK,
        "each MIG node's nvidia.com/gpu.product, against the catalog",
        gather.gather_nodes,
        nodes.judge_gpu_products,
    ),
    Check(
        nodes.AGENT_CHECK,
        "DaemonSet migslice-agent (its nodeSelector, --heartbeat-s, --interval-s); each MIG "
        "node's migslice.io/gpu-layout",
        gather.gather_agent,
        nodes.judge_agent_layouts,
    ),
    Check(
        policies.POLICIES_CHECK,
        "every TenantPolicy; every Namespace (for namespaceSelector)",
        gather.gather_policies,
        policies.judge_tenant_policies,
    ),
    Check(
        outage.OUTAGE_CHECK,
        "the MutatingWebhookConfiguration's pod webhooks; the fail-open admission policies "
        "and bindings; every TenantPolicy and Namespace (label migslice.io/outage); the "
        "scheduler's extender entry (ignorable)",
        gather.gather_outage,
        outage.judge_outage_modes,
    ),
    Check(
        nodes.TROUBLE_CHECK,
        "every Node's nvidia.com/mig.config.state, and since when (managedFields)",
        gather.gather_nodes,
        nodes.judge_nodes_in_trouble,
    ),
    Check(
        dra.DRA_API_CHECK,
        "discovery of resource.k8s.io/v1; kube-apiserver's /version",
        gather_dra.gather_dra_api,
        dra.judge_dra_api,
    ),
    Check(
        dra.DRA_NODES_CHECK,
        "every gpu.nvidia.com ResourceSlice, read as migslice reads it; every Node",
        gather_dra.gather_dra_nodes,
        dra.judge_dra_nodes,
    ),
    Check(
        dra.DRA_CLASSES_CHECK,
        "every DeviceClass: mig.nvidia.com and migslice-mig-<profile> of each catalog profile; "
        "the TenantPolicies that give sized pods ResourceClaims; every ResourceSlice and Node "
        "(where the DRA nodes are)",
        gather_dra.gather_dra,
        dra.judge_dra_classes,
    ),
    Check(
        dra.DRA_STEER_CHECK,
        "every DeviceTaintRule (the steer's: named migslice-steer-*, labelled "
        "app.kubernetes.io/managed-by=migslice); Deployment migslice-extender",
        gather_dra.gather_dra_steer,
        dra.judge_dra_steer,
    ),
)
