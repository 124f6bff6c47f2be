"""GPU pods that wait for a node, and the extender's reasons for every node.

Each waiting pod is judged as the extender judges it (:func:`migslice.scheduling.filter_nodes`
on the inventory's prepared nodes, so the reasons are the filter's own words), over the nodes
kube-scheduler's own filters would send it (:mod:`migslice.scheduling.selection`); the nodes are
then grouped by reason, largest group first, as kube-scheduler's ``FailedScheduling`` event
counts them. Pods that ask for the same thing from the same nodes share one judgement, so a
cluster of thousands of waiting pods of a few workloads costs a few filter passes.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migslice import names
from migslice.admission.gate import DENIED_REASON, WAITING_REASON
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.pod_selection import PodSelection, pod_selection_of
from migslice.objects.pods import (
    pod_priority,
    scheduler_name_of,
    scheduling_gates,
    unschedulable_since,
)
from migslice.objects.resource_claims import gpu_asks
from migslice.objects.resource_slices import DeviceKind
from migslice.objects.times import parse_time
from migslice.scheduling import PodDemand, PreparedNode, demand_of, filter_nodes
from migslice.scheduling.decisions import DemandKey, demand_key
from migslice.scheduling.demand import with_claims
from migslice.scheduling.selection import dra_unserved, scheduler_verdict
from migslice.status.cluster import Cluster, GpuPod, waiting_pods
from migslice.status.text import duration

GATED_LONG_S = 120.0
"""A pod behind the admission gate this long with no word from the gate reconciler (it decides
every gated pod every 2 s) is decided by none: no leader runs."""
FAILED = "failed"
UNRESOLVABLE = "unresolvable"
SCHEDULER = "kube-scheduler"


@dataclass(frozen=True, slots=True)
class NodeClass:
    """Nodes that fail a pod for one reason: ``outcome`` is the extender's (``failed``: full
    for now, ``unresolvable``: never, whatever is evicted) or ``kube-scheduler`` (dropped by
    its own filters before the extender is asked)."""

    reason: str
    outcome: str
    nodes: tuple[str, ...]


Judgement = tuple[tuple[str, ...], tuple[NodeClass, ...]]
"""The nodes that fit a pod now, and the others by reason (:func:`judge`)."""


@dataclass(frozen=True, slots=True)
class WaitingPod:
    """A GPU pod without a node. ``waiting_s``: since kube-scheduler marked it
    ``Unschedulable`` (None: not marked, not tried yet or not by migslice-scheduler);
    ``fits``: nodes that could take it now; ``classes``: the other nodes by reason."""

    key: str
    tenant: str | None
    resources: tuple[tuple[str, int], ...]
    scheduler: str
    waiting_s: float | None
    fits: tuple[str, ...]
    classes: tuple[NodeClass, ...]
    error: str = ""

    @property
    def node_count(self) -> int:
        return len(self.fits) + sum(len(c.nodes) for c in self.classes)

    @property
    def summary(self) -> str:
        """``0/40 nodes: 12 all 1g.10gb MIG instances in use, 28 MIG disabled on node``."""
        if self.error:
            return self.error
        head = f"{len(self.fits)}/{self.node_count} nodes"
        if self.waiting_s is None:
            head = f"not marked Unschedulable by kube-scheduler yet; {head}"
        if not self.classes:
            return head + (" fit" if self.fits else "")
        parts = ", ".join(f"{len(c.nodes)} {c.reason}" for c in self.classes)
        return f"{head}: {parts}"


def waiting_views(cluster: Cluster) -> list[WaitingPod]:
    """Every waiting GPU pod (by key) with its reasons."""
    now = datetime.datetime.fromtimestamp(cluster.settings.now_s, datetime.UTC)
    judged: dict[JudgedKey, Judgement] = {}
    views = []
    for pod in waiting_pods(cluster):
        views.append(waiting_view(cluster, pod, now, judged))
    return views


def waiting_view(
    cluster: Cluster,
    pod: GpuPod,
    now: datetime.datetime,
    judged: dict[JudgedKey, Judgement] | None = None,
) -> WaitingPod:
    """One waiting pod's reasons (``judged``: judgements shared between pods)."""
    raw = pod.raw
    scheduler = scheduler_name_of(raw) or "default-scheduler"
    since = unschedulable_since(raw)
    waited = None if since is None else max(0.0, (now - since).total_seconds())
    demand = with_claims(demand_of(raw), raw, cluster.claims.get, cluster.classes)
    tenant = cluster.tenant_of(pod.namespace)
    # What it asks: its extended resources, else what its ResourceClaims ask (by the same
    # resource names, nvidia.com/mig-<profile> and nvidia.com/gpu).
    asks = pod.requests or tuple((u.resource, u.count) for u in demand.units if u.claim)
    allocated = _allocated_on(cluster, pod)
    if not asks and allocated:
        asks = _allocated_asks(cluster, pod)
    if pod.gated:
        error = gated_error(pod, tenant, now)
        return WaitingPod(pod.key, tenant, asks, scheduler, waited, (), (), error)
    gates = scheduling_gates(raw)
    if gates:
        error = (
            f"held by scheduling gate(s) {', '.join(gates)}: kube-scheduler does not try it "
            "until their controller removes them"
        )
        return WaitingPod(pod.key, tenant, asks, scheduler, waited, (), (), error)
    if scheduler != cluster.settings.scheduler_name:
        error = f"scheduled by {scheduler}, not {cluster.settings.scheduler_name}: not migslice's"
        return WaitingPod(pod.key, tenant, asks, scheduler, waited, (), (), error)
    if pod.unmade:
        return WaitingPod(pod.key, tenant, asks, scheduler, waited, (), (), unmade_error(pod))
    missing = tuple(key for key in pod.claims if key not in cluster.claims)
    if missing:
        error = missing_error(pod, missing)
        return WaitingPod(pod.key, tenant, asks, scheduler, waited, (), (), error)
    selection = pod_selection_of(raw)
    # A node holding a nominated pod kube-scheduler does not count for this one: judged for
    # it alone, not shared.
    view = cluster.for_pod(pod.key, pod_priority(raw))
    key = (selection, demand_key(demand), allocated)
    found = judged.get(key) if judged is not None and view is None else None
    if found is None:
        found = judge(cluster, selection, demand, view, allocated)
        if judged is not None and view is None:
            judged[key] = found
    fits, classes = found
    return WaitingPod(pod.key, tenant, asks, scheduler, waited, fits, classes)


Allocated = tuple[tuple[str, tuple[str, ...]], ...]
"""The pod's ResourceClaims already allocated (key), each with the nodes its allocation
keeps the pod on (the pools of NVIDIA's driver it names, one per node)."""
JudgedKey = tuple[PodSelection, DemandKey, Allocated]


def _allocated_on(cluster: Cluster, pod: GpuPod) -> Allocated:
    """The pod's claims allocated before it is bound (kube-scheduler allocated them and has
    not bound it yet): its DRA plugin sends the pod only to their nodes (a claim allocated on
    no node of NVIDIA's driver is left to it)."""
    found = []
    for key in pod.claims:
        claim = cluster.claims.get(key)
        if claim is not None and claim.allocated and claim.devices:
            found.append((key, tuple(sorted({pool for pool, _ in claim.devices}))))
    return tuple(found)


def _allocated_asks(cluster: Cluster, pod: GpuPod) -> tuple[tuple[str, int], ...]:
    """What the pod's claims ask, by resource name (``nvidia.com/mig-<profile>``,
    ``nvidia.com/gpu``), allocated or not."""
    asks: dict[str, int] = {}
    for key in pod.claims:
        claim = cluster.claims.get(key)
        if claim is None or claim.extended_resource:
            continue
        for ask in gpu_asks(claim, cluster.classes).asks:
            if ask.kind is DeviceKind.GPU:
                resource = names.WHOLE_GPU_RESOURCE
            elif ask.profile is not None:
                resource = names.mig_resource_name(ask.profile)
            else:
                continue
            asks[resource] = asks.get(resource, 0) + ask.count
    return tuple(sorted(asks.items()))


def not_allocatable(key: str, nodes: Sequence[str]) -> str:
    """kube-scheduler's DynamicResources filter on a node the pod's allocated claim is not
    on."""
    return (
        f"resourceclaim not available on the node (ResourceClaim {key} is allocated on "
        f"{', '.join(nodes)})"
    )


def gated_error(pod: GpuPod, tenant: str | None, now: datetime.datetime) -> str:
    """Why a pod behind the admission gate waits: how long, the gate reconciler's reason (its
    condition ``migslice.io/Admitted``) and the command that frees it; or, past
    :data:`GATED_LONG_S` with no reason, that no reconciler decides it."""
    metadata = mapping(pod.raw.get("metadata"))
    created = parse_time(metadata.get("creationTimestamp"))
    gated_s = None if created is None else max(0.0, (now - created).total_seconds())
    head = (
        f"waiting for admission: created behind the scheduling gate {names.ADMISSION_GATE} "
        "while the webhook was unavailable"
    )
    if gated_s is not None:
        head += f", gated for {duration(gated_s)}"
    said = _admitted_condition(pod.raw)
    name = text(metadata.get("name"))
    if said is not None and text(said.get("status")) == "False":
        reason, message = text(said.get("reason")), text(said.get("message"))
        if reason == WAITING_REASON and tenant:
            fix = (
                f"free the tenant's quota (delete a pod of tenant {tenant}) or raise it: "
                f"kubectl edit tenantpolicy {tenant}"
            )
        elif reason == DENIED_REASON:
            fix = f"change what the message names, or kubectl delete pod -n {pod.namespace} {name}"
        else:
            fix = f"kubectl describe pod -n {pod.namespace} {name}"
        return f"{head}: {reason}: {message}; to fix: {fix}"
    if gated_s is not None and gated_s > GATED_LONG_S:
        return (
            f"{head}, and no gate reconciler has decided it (none leads: the webhook down, or "
            "run with --gate-interval-s 0); to fix: kubectl -n "
            f"{names.SYSTEM_NAMESPACE} get lease {names.GATE_LEASE_NAME}; kubectl -n "
            f"{names.SYSTEM_NAMESPACE} logs deploy/{names.WEBHOOK_SERVICE} (docs/outages.md)"
        )
    return f"{head}; the webhook admits it, up to quota, oldest first (docs/outages.md)"


def unmade_error(pod: GpuPod) -> str:
    """Why a pod whose claims from templates are not made yet waits: kube-scheduler does not
    try it until the resourceclaim controller has made them."""
    listed = ", ".join(
        f"{name} (template {template})" if template else name for name, template in pod.unmade
    )
    name = pod.key.partition("/")[2]
    return (
        f"waiting for its ResourceClaim(s) {listed}: not made yet by the resourceclaim "
        "controller, and kube-scheduler does not try the pod until they exist; a claim the "
        "webhook refused (quota, say) is retried, and the refusal is in the pod's Events: "
        f"kubectl describe pod -n {pod.namespace} {name}"
    )


def missing_error(pod: GpuPod, missing: Sequence[str]) -> str:
    """Why a pod naming ResourceClaims that are not there waits: kube-scheduler does not try
    it until they exist (the claims are read whole here: not the extender's cache lagging)."""
    return (
        f"waiting for its ResourceClaim(s) {', '.join(missing)}: not found, and kube-scheduler "
        "does not try the pod until they exist; create them, or create the pod again naming "
        f"claims that exist (kubectl get resourceclaims -n {pod.namespace})"
    )


def _admitted_condition(raw: JsonObject) -> JsonObject | None:
    for condition in items(mapping(raw.get("status")).get("conditions")):
        found = mapping(condition)
        if found.get("type") == names.ADMITTED_CONDITION:
            return found
    return None


def judge(
    cluster: Cluster,
    selection: PodSelection,
    demand: PodDemand,
    view: Mapping[str, PreparedNode] | None = None,
    allocated: Allocated = (),
) -> Judgement:
    """The nodes that fit the pod now, and the others by reason (largest group first);
    ``view``: the cluster's nodes as the extender judges this pod (:meth:`Cluster.for_pod`);
    ``allocated``: its claims allocated already, which keep it on their nodes."""
    dropped: dict[str, list[str]] = {}
    candidates = []
    for name, prepared in (cluster.nodes if view is None else view).items():
        verdict = scheduler_verdict(selection, prepared.state.facts)
        for claim, on in allocated:
            if verdict is None and name not in on:
                verdict = not_allocatable(claim, on)
        if verdict is None and (unserved := dra_unserved(demand.units, prepared.state)):
            verdict = dra_resource_verdict(unserved)
        if verdict is not None:
            dropped.setdefault(verdict, []).append(name)
        else:
            candidates.append((name, prepared))
    result = filter_nodes(demand, candidates)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, reason in result.failed.items():
        groups.setdefault((reason, FAILED), []).append(name)
    for name, reason in result.unresolvable.items():
        groups.setdefault((reason, UNRESOLVABLE), []).append(name)
    for reason, nodes in dropped.items():
        groups[(reason, SCHEDULER)] = nodes
    classes = [
        NodeClass(reason, outcome, tuple(sorted(nodes)))
        for (reason, outcome), nodes in groups.items()
    ]
    classes.sort(key=lambda c: (-len(c.nodes), c.reason))
    return result.fits, tuple(classes)


def dra_resource_verdict(resource: str) -> str:
    """kube-scheduler's NodeResourcesFit on a DRA node for an extended resource that no
    DeviceClass's ``extendedResourceName`` serves from DRA (KEP-5004): the node has none."""
    return (
        f"Insufficient {resource}: no DeviceClass with extendedResourceName {resource} "
        "serves it from DRA"
    )


def resources_text(resources: Sequence[tuple[str, int]]) -> str:
    """``3g.40gb`` / ``2 x 1g.10gb`` / ``gpu`` for a pod's GPU requests."""
    parts = []
    for resource, count in resources:
        name = resource.removeprefix("nvidia.com/mig-").removeprefix("nvidia.com/")
        parts.append(name if count == 1 else f"{count} x {name}")
    return ", ".join(parts)
