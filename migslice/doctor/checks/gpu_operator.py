"""Checks of what migslice needs from the NVIDIA GPU Operator: its ClusterPolicy, the MIG
strategy ``mixed`` (ClusterPolicy and the nodes' GFD label), and MIG Manager reading the
mig-parted ConfigMap migslice writes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.nodes import mig_nodes
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding
from migslice.objects.cluster_policy import (
    ClusterPolicyFacts,
    active_cluster_policy,
    disabled_mig_manager,
    foreign_mig_config,
    foreign_mig_config_fix,
    mig_manager_enable_fix,
    mig_strategy_fix,
)
from migslice.objects.json import JsonObject, mapping, text

GPU_OPERATOR_CHECK = "gpu-operator"
MIG_STRATEGY_CHECK = "mig-strategy"
MIG_MANAGER_CHECK = "mig-manager-config"


@dataclass(frozen=True, slots=True)
class GpuOperatorFacts:
    """``policy_crd``: the ClusterPolicy CRD (None: not installed). ``policies``: every
    ClusterPolicy. ``mig_config_map``: ``namespace/name`` of the ConfigMap the extender
    writes (its Deployment's ``--mig-config-map``), ``config_map`` that ConfigMap."""

    policy_crd: JsonObject | None
    policies: Sequence[JsonObject]
    nodes: Sequence[JsonObject]
    mig_config_map: str
    config_map: JsonObject | None


def _active(facts: GpuOperatorFacts) -> ClusterPolicyFacts | None:
    return active_cluster_policy(facts.policies) if facts.policy_crd is not None else None


def judge_gpu_operator(facts: GpuOperatorFacts, settings: Settings) -> Finding:
    if facts.policy_crd is None:
        return finding(
            GPU_OPERATOR_CHECK,
            [
                Problem(
                    Verdict.WARNING,
                    f"no CRD {names.CLUSTER_POLICY_CRD}: the GPU Operator is not installed; "
                    "GFD, the device plugin and MIG Manager installed on their own are not "
                    "checked",
                    f"install the NVIDIA GPU Operator, or make sure by hand that the device "
                    f"plugin runs the mixed strategy and MIG Manager reads {facts.mig_config_map}",
                )
            ],
            "",
        )
    policy = _active(facts)
    if policy is None:
        return finding(
            GPU_OPERATOR_CHECK,
            [
                Problem(
                    Verdict.WARNING,
                    "no ClusterPolicy: the GPU Operator deploys no device plugin, GFD or MIG "
                    "Manager",
                    "create the ClusterPolicy (the GPU Operator's Helm chart makes "
                    f"{names.CLUSTER_POLICY_NAME})",
                )
            ],
            "",
        )
    raw = next(
        p for p in facts.policies if text(mapping(p.get("metadata")).get("name")) == policy.name
    )
    state = text(mapping(raw.get("status")).get("state")) or ""
    also = (
        f"; {len(facts.policies) - 1} more ignored (the oldest is used)"
        if len(facts.policies) > 1
        else ""
    )
    said = f"ClusterPolicy {policy.name}, state {state or 'not reported yet'}{also}"
    problems = []
    if state == "notReady":
        problems.append(
            Problem(
                Verdict.WARNING,
                f"ClusterPolicy {policy.name} is notReady",
                f"kubectl describe {names.CLUSTER_POLICY_CRD}/{policy.name}",
            )
        )
    return finding(GPU_OPERATOR_CHECK, problems, said)


def judge_mig_strategy(facts: GpuOperatorFacts, settings: Settings) -> Finding:
    problems: list[Problem] = []
    policy = _active(facts)
    mixed = names.MIG_STRATEGY_MIXED
    if policy is not None and policy.mig_strategy != mixed:
        value = policy.mig_strategy or "not set (the device plugin's default, none)"
        problems.append(
            Problem(
                Verdict.FAILED,
                f"ClusterPolicy {policy.name} spec.mig.strategy is {value}, not {mixed}",
                mig_strategy_fix(policy.name),
            )
        )
    nodes = mig_nodes(facts.nodes)
    wrong = [(n.name, n.mig_strategy) for n in nodes if n.mig_strategy not in (None, mixed)]
    unlabelled = [n.name for n in nodes if n.mig_strategy is None]
    if wrong:
        listed = ", ".join(f"{name} ({strategy})" for name, strategy in wrong)
        fix = (
            mig_strategy_fix(policy.name)
            if policy is not None and policy.mig_strategy != mixed
            else "the device plugin and GFD there run another strategy: check the node's "
            "nvidia.com/device-plugin.config label and restart their pods on it"
        )
        problems.append(
            Problem(
                Verdict.FAILED,
                f"{names.MIG_STRATEGY_LABEL} is not {mixed} on MIG node(s) {listed}",
                fix,
            )
        )
    if unlabelled:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"no {names.MIG_STRATEGY_LABEL} label on MIG node(s) {', '.join(unlabelled)} "
                "(GFD not running there?)",
                "kubectl -n gpu-operator get pods -l app=gpu-feature-discovery -o wide",
            )
        )
    where = [f"ClusterPolicy {policy.name}"] if policy is not None else []
    if nodes:
        where.append(f"{len(nodes)} MIG node(s)")
    return finding(
        MIG_STRATEGY_CHECK,
        problems,
        f"{' and '.join(where)}: {mixed}" if where else "no ClusterPolicy and no MIG node to check",
    )


def judge_mig_manager_config(facts: GpuOperatorFacts, settings: Settings) -> Finding:
    namespace, _, name = facts.mig_config_map.rpartition("/")
    problems: list[Problem] = []
    if facts.config_map is None:
        problems.append(
            Problem(
                Verdict.FAILED,
                f"ConfigMap {facts.mig_config_map} not found: MIG Manager has no migslice "
                "configs to apply",
                f"helm upgrade migslice charts/migslice -n {settings.namespace} "
                "--reset-then-reuse-values --set gpuOperator.migConfig.create=true",
            )
        )
    elif not isinstance(mapping(facts.config_map.get("data")).get(names.MIG_CONFIG_KEY), str):
        problems.append(
            Problem(
                Verdict.FAILED,
                f"ConfigMap {facts.mig_config_map} has no key {names.MIG_CONFIG_KEY}",
                f"kubectl -n {namespace} edit configmap {name}",
            )
        )
    policy = _active(facts)
    if policy is None:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"no ClusterPolicy: not checked that MIG Manager reads {facts.mig_config_map}",
                f"point MIG Manager's --config-file at {names.MIG_CONFIG_KEY} of "
                f"{facts.mig_config_map}",
            )
        )
        return finding(MIG_MANAGER_CHECK, problems, "")
    disabled = disabled_mig_manager(policy)
    if disabled is not None:
        problems.append(
            Problem(Verdict.FAILED, disabled.message, mig_manager_enable_fix(policy.name))
        )
    why = foreign_mig_config(policy, name, namespace)
    if why is not None:
        fix = foreign_mig_config_fix(why, policy, name)
        problems.append(Problem(Verdict.FAILED, why.message, fix))
    return finding(
        MIG_MANAGER_CHECK,
        problems,
        f"ClusterPolicy {policy.name}: MIG Manager reads {facts.mig_config_map}",
    )
