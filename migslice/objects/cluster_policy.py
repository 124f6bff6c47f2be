"""The NVIDIA GPU Operator's ClusterPolicy (``clusterpolicies.nvidia.com/v1``), as migslice
reads it: the MIG strategy of the device plugin and GFD, and the mig-parted ConfigMap that
MIG Manager applies.

The GPU Operator acts on one ClusterPolicy: the oldest by ``creationTimestamp`` (the name
breaks a tie); any other is set to the state ``ignored`` (``getSingletonClusterPolicy`` in
NVIDIA/gpu-operator's ``controllers/clusterpolicy_controller.go``). Fields left out take the
operator's defaults: MIG Manager enabled, its config the generated
``default-mig-parted-config``, and no MIG strategy (the device plugin's own default, none).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from migslice import names
from migslice.objects.json import JsonObject, mapping, text
from migslice.whynot import WhyNot

FOREIGN_MIG_CONFIG = "mig-manager-config"
"""Reason code: MIG Manager does not read the ConfigMap the repartition controller writes."""
FOREIGN_NAMESPACE = "mig-manager-namespace"
"""Reason code: MIG Manager reads a ConfigMap of that name, in the GPU Operator's namespace,
not the controller's."""
MIG_MANAGER_DISABLED = "mig-manager-disabled"
"""Reason code: the GPU Operator runs no MIG Manager (``spec.migManager.enabled`` false)."""


@dataclass(frozen=True, slots=True)
class ClusterPolicyFacts:
    """``mig_strategy``: ``spec.mig.strategy`` ("" when unset). ``mig_manager_config``:
    ``spec.migManager.config.name`` ("" when unset: MIG Manager's generated default).
    ``namespace``: ``status.namespace``, where the GPU Operator runs its operands, MIG
    Manager's pods (and the ConfigMap they mount) included ("" until the operator says)."""

    name: str
    uid: str = ""
    created_at: str = ""
    mig_strategy: str = ""
    mig_manager_enabled: bool = True
    mig_manager_config: str = ""
    namespace: str = ""


def cluster_policy_facts(raw_policy: JsonObject) -> ClusterPolicyFacts:
    metadata = mapping(raw_policy.get("metadata"))
    spec = mapping(raw_policy.get("spec"))
    mig_manager = mapping(spec.get("migManager"))
    enabled = mig_manager.get("enabled")
    return ClusterPolicyFacts(
        name=text(metadata.get("name")) or "",
        uid=text(metadata.get("uid")) or "",
        created_at=text(metadata.get("creationTimestamp")) or "",
        mig_strategy=text(mapping(spec.get("mig")).get("strategy")) or "",
        mig_manager_enabled=enabled if isinstance(enabled, bool) else True,
        mig_manager_config=text(mapping(mig_manager.get("config")).get("name")) or "",
        namespace=text(mapping(raw_policy.get("status")).get("namespace")) or "",
    )


def active_cluster_policy(raw_policies: Iterable[JsonObject]) -> ClusterPolicyFacts | None:
    """The ClusterPolicy the GPU Operator acts on (oldest, then by name); None if none."""
    policies = [cluster_policy_facts(raw) for raw in raw_policies]
    if not policies:
        return None
    # RFC 3339 stamps in UTC with second precision sort as text.
    return min(policies, key=lambda p: (p.created_at, p.name))


def foreign_mig_config(
    policy: ClusterPolicyFacts, config_map: str, namespace: str = ""
) -> WhyNot | None:
    """Why MIG Manager would not apply what the repartition controller writes into
    ``config_map`` (the ConfigMap's name) of ``namespace``; None when it reads that ConfigMap.
    MIG Manager's pods mount the ConfigMap of that name from their own namespace, the GPU
    Operator's (checked when both namespaces are known)."""
    if policy.mig_manager_config == config_map:
        if not namespace or not policy.namespace or policy.namespace == namespace:
            return None
        return WhyNot(
            FOREIGN_NAMESPACE,
            f"MIG Manager reads {config_map} of namespace {policy.namespace}, where the GPU "
            f"Operator runs (ClusterPolicy {policy.name} status.namespace), not of "
            f"{namespace}, where migslice writes its configs",
        )
    reads = (
        f'"{policy.mig_manager_config}"'
        if policy.mig_manager_config
        else f"its generated {names.DEFAULT_MIG_PARTED_CONFIG_MAP} (the field is empty)"
    )
    return WhyNot(
        FOREIGN_MIG_CONFIG,
        f"MIG Manager reads {reads}, not {config_map}, where migslice writes its configs "
        f"(ClusterPolicy {policy.name} spec.migManager.config.name)",
    )


def disabled_mig_manager(policy: ClusterPolicyFacts) -> WhyNot | None:
    """Why no MIG Manager runs to apply a config (``spec.migManager.enabled`` false); None
    when it is enabled."""
    if policy.mig_manager_enabled:
        return None
    return WhyNot(
        MIG_MANAGER_DISABLED,
        f"MIG Manager is disabled (ClusterPolicy {policy.name} spec.migManager.enabled "
        "false): no re-partition is ever applied",
    )


def mig_manager_enable_fix(policy_name: str) -> str:
    return patch_command(policy_name, '{"migManager":{"enabled":true}}')


def patch_command(policy_name: str, spec: str) -> str:
    """The ``kubectl patch`` of the ClusterPolicy that sets ``spec`` (JSON of the spec's
    fields), as the README spells it."""
    return (
        f"kubectl patch {names.CLUSTER_POLICY_CRD}/{policy_name} --type=merge "
        f"-p '{{\"spec\":{spec}}}'"
    )


def mig_config_fix(policy_name: str, config_map: str) -> str:
    return patch_command(policy_name, f'{{"migManager":{{"config":{{"name":"{config_map}"}}}}}}')


def foreign_mig_config_fix(why: WhyNot, policy: ClusterPolicyFacts, config_map: str) -> str:
    """What fixes ``why`` (:func:`foreign_mig_config`'s answer): the ClusterPolicy's config
    name patched, or migslice's ConfigMap put in the operator's namespace."""
    if why.reason == FOREIGN_NAMESPACE:
        return (
            f"install migslice with --set gpuOperator.namespace={policy.namespace} (the "
            f"extender's --mig-config-map={policy.namespace}/{config_map})"
        )
    return mig_config_fix(policy.name, config_map)


def mig_strategy_fix(policy_name: str) -> str:
    return patch_command(policy_name, f'{{"mig":{{"strategy":"{names.MIG_STRATEGY_MIXED}"}}}}')
