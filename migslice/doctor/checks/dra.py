"""Checks of Kubernetes DRA (docs/dra.md): the ``resource.k8s.io/v1`` API and KEP-5004's
extended resources, the DRA nodes (NVIDIA's DRA driver, static or DynamicMIG, and those
migslice does not understand), the DeviceClasses (NVIDIA's ``mig.nvidia.com`` and
migslice's ``migslice-mig-<profile>``), and the steer's DeviceTaintRules left without an
extender to keep them current."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.checks.nodes import listing
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding
from migslice.doctor.podspec import command_line, containers, pod_spec
from migslice.mig import CATALOG
from migslice.objects import node_facts_from_raw
from migslice.objects.device_classes import device_class_facts_from_raw, mig_profiles
from migslice.objects.device_taint_rules import STEER_RULE_SELECTOR, is_steer_rule
from migslice.objects.dra_pool import DraMode, DraPool, PoolState, read_pool
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.pod_gpus import is_gpu_resource
from migslice.objects.resource_slices import SliceFacts, slice_facts_from_raw
from migslice.policy import DeviceApi, PolicyError, TenantPolicy, parse_tenant_policy

DRA_API_CHECK = "dra-api"
DRA_NODES_CHECK = "dra-nodes"
DRA_CLASSES_CHECK = "dra-device-classes"
DRA_STEER_CHECK = "dra-steer"
DELETE_STEER_RULES = (
    f"kubectl get devicetaintrules -l {STEER_RULE_SELECTOR} -o name | "
    f"grep /{names.STEER_RULE_PREFIX} | xargs -r kubectl delete"
)
"""The command that deletes the steer's rules and no other (docs/dra.md, "The steer")."""
DRA_RESOURCES = ("deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices")
_VERSION = re.compile(r"v?(\d+)\.(\d+)")


@dataclass(frozen=True, slots=True)
class DraApiFacts:
    """What ``dra-api`` reads, and nothing more (a read it may not do fails only the check
    that makes it): ``discovery``: ``GET /apis/resource.k8s.io/v1`` (None: not served);
    ``version``: ``GET /version``."""

    discovery: JsonObject | None
    version: JsonObject | None


@dataclass(frozen=True, slots=True)
class DraFacts(DraApiFacts):
    """The API's facts and what the other DRA checks read: ``slices``, ``classes``: every
    ResourceSlice and DeviceClass (None: not served); ``nodes``: every Node; ``policies``:
    every TenantPolicy (those that give sized pods ResourceClaims need migslice's
    DeviceClasses and DRA nodes)."""

    slices: Sequence[JsonObject] | None
    classes: Sequence[JsonObject] | None
    nodes: Sequence[JsonObject]
    policies: Sequence[JsonObject] = ()


def _emulated(version: JsonObject | None) -> str | None:
    """The version kube-apiserver emulates (``--emulated-version``, KEP-4330: it serves the
    APIs and feature gates of that version), where ``/version`` says one."""
    found = mapping(version)
    major, minor = text(found.get("emulationMajor")), text(found.get("emulationMinor"))
    return f"{major}.{minor}" if major and minor else None


def server_minor(version: JsonObject | None) -> tuple[int, int] | None:
    """The version whose APIs and feature gates kube-apiserver serves: the one it emulates,
    else its own."""
    match = _VERSION.match(_emulated(version) or text(mapping(version).get("gitVersion")) or "")
    return (int(match[1]), int(match[2])) if match else None


def judge_dra_api(facts: DraApiFacts, settings: Settings) -> Finding:
    version = server_minor(facts.version)
    shown = text(mapping(facts.version).get("gitVersion")) or "unknown"
    emulated = _emulated(facts.version)
    if emulated is not None and not shown.lstrip("v").startswith(f"{emulated}."):
        shown = f"{shown} (emulating {emulated})"
    if facts.discovery is None:
        return finding(
            DRA_API_CHECK,
            [],
            f"kube-apiserver {shown} serves no resource.k8s.io/v1 (DRA needs Kubernetes 1.34): "
            "GPUs come from NVIDIA's device plugin only",
        )
    served = {text(mapping(r).get("name")) for r in items(facts.discovery.get("resources"))}
    missing = [r for r in DRA_RESOURCES if r not in served]
    problems = []
    if missing:
        problems.append(
            Problem(
                Verdict.FAILED,
                f"resource.k8s.io/v1 does not serve {', '.join(missing)}",
                "check kube-apiserver's --runtime-config",
            )
        )
    if version is not None and version < (1, 36):
        problems.append(
            Problem(
                Verdict.WARNING,
                f"kube-apiserver {shown}: DRAExtendedResource is alpha and off, so pods asking "
                "for nvidia.com/mig-<profile> do not run on DRA nodes",
                "turn on the feature gate DRAExtendedResource on kube-apiserver, kube-scheduler "
                "and the kubelets (beta and on from 1.36, GA in 1.37)",
            )
        )
    stage = (
        "GA"
        if version is not None and version >= (1, 37)
        else "beta, on by default"
        if version is not None and version >= (1, 36)
        else "alpha"
    )
    return finding(
        DRA_API_CHECK,
        problems,
        f"kube-apiserver {shown} serves resource.k8s.io/v1 ({', '.join(DRA_RESOURCES)}); "
        f"DRAExtendedResource {stage}",
    )


BOTH_FIX = (
    "run one of the two on each such node, as NVIDIA's DRA driver asks (its chart refuses "
    "resources.gpus.enabled beside the device plugin on a node): to keep the DRA driver, "
    "turn the device plugin off there (GPU Operator: kubectl label node NODE "
    "nvidia.com/gpu.deploy.device-plugin=false --overwrite); to keep the device plugin, keep "
    "the DRA driver's kubelet plugin off the node (its DaemonSet's node affinity)"
)


def dra_pools(facts: DraFacts) -> tuple[list[DraPool], list[str]]:
    """The pools of nodes NVIDIA's DRA driver publishes on, and the nodes that also have
    device-plugin GPU allocatable (read as device-plugin nodes)."""
    by_node: dict[str, list[SliceFacts]] = {}
    for raw in facts.slices or ():
        read = slice_facts_from_raw(raw)
        node = text(mapping(raw.get("spec")).get("nodeName"))
        if read is not None and node:
            by_node.setdefault(node, []).append(read)
    plugin = {
        n.name
        for n in (node_facts_from_raw(raw) for raw in facts.nodes)
        if n is not None and any(is_gpu_resource(r) and c > 0 for r, c in n.allocatable)
    }
    pools = [
        read_pool(node, slices) for node, slices in sorted(by_node.items()) if node not in plugin
    ]
    return pools, sorted(plugin & set(by_node))


def describe_pool(pool: DraPool) -> str:
    mode = "DynamicMIG" if pool.mode is DraMode.DYNAMIC else "static MIG"
    model = pool.model.key if pool.model is not None else "?"
    return f"{pool.node} ({mode}, {len(pool.gpus)} x {model})"


def judge_dra_nodes(facts: DraFacts, settings: Settings) -> Finding:
    if facts.slices is None:
        return finding(DRA_NODES_CHECK, [], "no DRA (resource.k8s.io/v1 not served)")
    pools, both = dra_pools(facts)
    problems = []
    unknown = [p for p in pools if p.state is PoolState.UNKNOWN]
    incomplete = [p for p in pools if p.state is PoolState.INCOMPLETE]
    for pool in unknown:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"DRA node {pool.node} not understood by migslice ({pool.reason}): no GPU pod "
                "is placed there by migslice",
                'docs/dra.md, "How slices are read"',
            )
        )
    if incomplete:
        problems.append(
            Problem(
                Verdict.WARNING,
                "DRA nodes mid-publish (not used yet): "
                + listing([f"{p.node} ({p.reason})" for p in incomplete]),
            )
        )
    dynamic = [p.node for p in pools if p.state is PoolState.READY and p.mode is DraMode.DYNAMIC]
    served = {
        text(mapping(r).get("name")) for r in items(mapping(facts.discovery).get("resources"))
    }
    if dynamic and "devicetaintrules" not in served:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"DynamicMIG nodes {listing(dynamic)} are left to kube-scheduler's first fit: "
                "resource.k8s.io/v1 serves no devicetaintrules, so migslice cannot steer their "
                "claims off placements that strand larger profiles",
                "Kubernetes 1.37 serves DeviceTaintRules (gates DRADeviceTaints and "
                'DRADeviceTaintRules, on by default there); docs/dra.md, "The steer"',
            )
        )
    if both:
        problems.append(
            Problem(
                Verdict.WARNING,
                "nodes with both device-plugin GPUs and DRA slices, read as device-plugin "
                "nodes for scheduling and never re-partitioned by migslice (claims NVIDIA's "
                f"DRA driver allocates there are not seen): {listing(both)}",
                BOTH_FIX,
            )
        )
    ready = [describe_pool(p) for p in pools if p.state is PoolState.READY]
    detail = (
        f"{len(ready)} DRA node(s): {listing(ready)}; left to NVIDIA's DRA driver (never "
        "re-partitioned)"
        if ready
        else "no DRA node ready"
        if pools or both
        else "no DRA nodes (no gpu.nvidia.com ResourceSlices)"
    )
    return finding(DRA_NODES_CHECK, problems, detail)


def claim_tenants(policies: Sequence[JsonObject]) -> list[TenantPolicy]:
    """The valid TenantPolicies that give sized pods a ResourceClaim (``spec.deviceAPI``;
    the invalid ones are the tenant-policies check's)."""
    found = []
    for raw in policies:
        try:
            policy = parse_tenant_policy(raw)
        except PolicyError:
            continue
        if policy.device_api is DeviceApi.RESOURCE_CLAIM:
            found.append(policy)
    return found


def _claim_tenant_problems(
    tenants: Sequence[TenantPolicy], missing: Sequence[str], pools: bool, fix: str
) -> list[Problem]:
    """What a ResourceClaim tenant meets: refused pods where the DeviceClasses of profiles it
    may be given are missing (the webhook cannot make its claim template), pending pods where
    no DRA node serves them."""
    problems = []
    for tenant in tenants:
        edit = f"kubectl edit tenantpolicy {tenant.name} (spec.deviceAPI: ExtendedResource)"
        lacking = [
            names.mig_device_class(p)
            for p in mig_profiles(CATALOG)
            if tenant.allows_profile(p) and names.mig_device_class(p) in missing
        ]
        if lacking:
            problems.append(
                Problem(
                    Verdict.FAILED,
                    f'TenantPolicy "{tenant.name}" gives sized pods ResourceClaims '
                    f"(spec.deviceAPI: ResourceClaim), but the DeviceClasses of profiles it "
                    f"allows are missing ({listing(lacking)}): the webhook refuses those pods",
                    f"{fix}, or {edit}" if fix else edit,
                )
            )
        if not pools:
            problems.append(
                Problem(
                    Verdict.WARNING,
                    f'TenantPolicy "{tenant.name}" gives sized pods ResourceClaims '
                    "(spec.deviceAPI: ResourceClaim), but no node publishes gpu.nvidia.com "
                    "ResourceSlices: its GPU pods stay pending",
                    "install NVIDIA's dra-driver-nvidia-gpu on the GPU nodes (docs/dra.md), or "
                    + edit,
                )
            )
    return problems


def judge_dra_classes(facts: DraFacts, settings: Settings) -> Finding:
    tenants = claim_tenants(facts.policies)
    fix = (
        f"helm upgrade migslice charts/migslice -n {settings.namespace} "
        "--reset-then-reuse-values --set dra.deviceClasses.enabled=true "
        "(or kubectl apply --server-side -k manifests)"
    )
    if facts.classes is None:
        problems = [
            Problem(
                Verdict.FAILED,
                f'TenantPolicy "{t.name}" gives sized pods ResourceClaims (spec.deviceAPI: '
                "ResourceClaim), but kube-apiserver serves no resource.k8s.io/v1: the webhook "
                "refuses its GPU pods",
                f"kubectl edit tenantpolicy {t.name} (spec.deviceAPI: ExtendedResource)",
            )
            for t in tenants
        ]
        return finding(DRA_CLASSES_CHECK, problems, "no DRA (resource.k8s.io/v1 not served)")
    pools, _ = dra_pools(facts)
    found = {text(mapping(c.get("metadata")).get("name")): c for c in facts.classes}
    wanted = {names.mig_device_class(p): names.mig_resource_name(p) for p in mig_profiles(CATALOG)}
    missing = sorted(n for n in wanted if n not in found)
    if not pools:
        present = sum(1 for n in wanted if n in found)
        nvidia = "present" if names.MIG_DEVICE_CLASS in found else "absent"
        return finding(
            DRA_CLASSES_CHECK,
            _claim_tenant_problems(tenants, missing, False, fix) + _unwatched(facts.classes),
            f"no DRA nodes, nothing to serve yet ({names.MIG_DEVICE_CLASS} {nvidia}; "
            f"{present} of migslice's {len(wanted)} DeviceClasses)",
        )
    verdict = Verdict.FAILED
    problems = []
    if names.MIG_DEVICE_CLASS not in found:
        problems.append(
            Problem(
                verdict,
                f"DeviceClass {names.MIG_DEVICE_CLASS} is missing (NVIDIA's DRA driver chart "
                "ships it)",
                "helm install NVIDIA's dra-driver-nvidia-gpu with resources.gpus.enabled=true",
            )
        )
    wrong = sorted(
        n
        for n in wanted
        if n in found
        and text(mapping(found[n].get("spec")).get("extendedResourceName")) != wanted[n]
    )
    if missing:
        problems.append(
            Problem(
                verdict,
                f"{len(missing)} of migslice's {len(wanted)} DeviceClasses missing "
                f"({listing(missing)}): pods asking for those nvidia.com/mig-* resources do not "
                "run on DRA nodes, and ResourceClaim tenants' claims of those profiles wait",
                fix,
            )
        )
    named = " (extendedResourceName nvidia.com/mig-<profile>)"
    version = server_minor(facts.version)
    if version is not None and version < (1, 36):
        # kube-apiserver drops the field while DRAExtendedResource is off (alpha before 1.36)
        dropped = [n for n in wrong if "extendedResourceName" not in mapping(found[n].get("spec"))]
        wrong = [n for n in wrong if n not in dropped]
        if dropped:
            named = ""
            problems.append(
                Problem(
                    Verdict.WARNING,
                    f"{len(dropped)} of migslice's DeviceClasses have no extendedResourceName "
                    f"({listing(dropped)}): kube-apiserver drops it while the feature gate "
                    "DRAExtendedResource is off (alpha before 1.36), so pods asking for those "
                    "nvidia.com/mig-* resources do not run on DRA nodes",
                    "turn on the feature gate DRAExtendedResource on kube-apiserver, "
                    f"kube-scheduler and the kubelets, then {fix} to store them with it",
                )
            )
    if wrong:
        problems.append(
            Problem(
                Verdict.FAILED,
                "DeviceClasses with another extendedResourceName than migslice's: "
                + listing(wrong),
                fix,
            )
        )
    # the missing classes' problem gives the upgrade already: the tenants', the edit alone
    problems.extend(_claim_tenant_problems(tenants, missing, True, ""))
    problems.extend(_unwatched(facts.classes))
    return finding(
        DRA_CLASSES_CHECK,
        problems,
        f"{names.MIG_DEVICE_CLASS} and migslice's {len(wanted)} DeviceClasses{named} are there",
    )


def _unwatched(classes: Sequence[JsonObject]) -> list[Problem]:
    """Classes that serve NVIDIA's devices (or any device) as an extended resource outside
    ``nvidia.com/``: pods asking it never reach migslice's pod webhook, which kube-apiserver
    calls for pods asking ``nvidia.com/*`` resources or naming claims."""
    problems = []
    for raw in classes:
        read = device_class_facts_from_raw(raw)
        if read is None or read.extended_resource is None:
            continue
        resource = read.extended_resource
        if resource.startswith("nvidia.com/") or read.selection.driver not in (
            None,
            names.DRA_DRIVER,
        ):
            continue
        problems.append(
            Problem(
                Verdict.WARNING,
                f"DeviceClass {read.name} serves {resource} with NVIDIA's GPUs"
                + ("" if read.selection.driver else " (any driver's devices)")
                + ": pods asking it never reach migslice's pod webhook (it is called for pods "
                "asking nvidia.com/* resources or naming ResourceClaims), so they get no "
                "TenantPolicy node pool nor migslice-scheduler; the claims kube-scheduler makes "
                "for them are still checked and charged",
                f"kubectl edit deviceclass {read.name} (an extendedResourceName under "
                "nvidia.com/, or selectors of another driver), or delete it",
            )
        )
    return problems


@dataclass(frozen=True, slots=True)
class SteerFacts:
    """What ``dra-steer`` reads: ``rules``: every DeviceTaintRule (None: not served);
    ``extender``: Deployment ``migslice-extender`` of the release namespace (None: not
    found)."""

    rules: Sequence[JsonObject] | None
    extender: JsonObject | None


def _extender_down(extender: JsonObject | None, namespace: str) -> str | None:
    """Why no extender keeps the steer's rules current (None: one runs)."""
    name = names.EXTENDER_SERVICE
    if extender is None:
        return f"Deployment {namespace}/{name} not found"
    wanted = mapping(extender.get("spec")).get("replicas", 1)
    available = mapping(extender.get("status")).get("availableReplicas") or 0
    if wanted == 0:
        return f"Deployment {name} is scaled to 0 replicas"
    if not isinstance(available, int) or available < 1:
        return f"Deployment {name}: 0/{wanted} replicas available"
    return None


def _steer_off(extender: JsonObject) -> bool:
    """The extender runs with ``--no-dra-steer`` (it writes no rule and deletes those left)."""
    return any("--no-dra-steer" in command_line(c) for c in containers(pod_spec(extender)))


def judge_dra_steer(facts: SteerFacts, settings: Settings) -> Finding:
    """The steer's rules keep claims off the devices they name until the extender that wrote
    them deletes them: with no extender running (uninstalled, scaled to 0, crash-looping),
    they stay as they were, keeping each profile's preferred device and everything after it
    open but the devices before it shut, so a claim of several devices of one profile may
    find no room where the node has it (docs/dra.md, "The steer")."""
    if facts.rules is None:
        return finding(
            DRA_STEER_CHECK, [], "resource.k8s.io/v1 serves no devicetaintrules: no steer rule"
        )
    steer = [r for r in facts.rules if is_steer_rule(r)]
    pools = sorted(
        {
            text(mapping(mapping(r.get("spec")).get("deviceSelector")).get("pool")) or "?"
            for r in steer
        }
    )
    namespace = settings.namespace
    down = _extender_down(facts.extender, namespace)
    if not steer:
        return finding(DRA_STEER_CHECK, [], "no steer rule")
    held = f"{len(steer)} steer rule(s) on {len(pools)} node(s) ({listing(pools)})"
    if down is not None:
        problem = Problem(
            Verdict.WARNING,
            f"{held} and no extender to keep them current ({down}): they keep claims off the "
            "devices they name as the nodes were when it stopped, so a claim of several devices "
            "of one profile may wait where its node has room",
            f"start the extender (kubectl -n {namespace} scale deploy/{names.EXTENDER_SERVICE} "
            f"--replicas=2; if it crash-loops: kubectl -n {namespace} logs "
            f"deploy/{names.EXTENDER_SERVICE}), or leave DynamicMIG nodes to first fit "
            f"meanwhile: {DELETE_STEER_RULES}",
        )
        return finding(DRA_STEER_CHECK, [problem], "")
    assert facts.extender is not None
    if _steer_off(facts.extender):
        problem = Problem(
            Verdict.WARNING,
            f"{held}, though the extender runs with --no-dra-steer (it deletes them when it "
            "starts, and writes none)",
            f"kubectl -n {namespace} logs deploy/{names.EXTENDER_SERVICE} says why it could not "
            f"(its ClusterRole needs delete on devicetaintrules); or {DELETE_STEER_RULES}",
        )
        return finding(DRA_STEER_CHECK, [problem], "")
    return finding(DRA_STEER_CHECK, [], f"{held}, kept current by the extender")
