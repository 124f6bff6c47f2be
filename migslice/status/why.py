"""Why one pod waits, every reason in the order the pod meets them (pure).

1. **Admission**: the TenantPolicy that selects its namespace, the size it asked for and the
   profile the webhook resolved it to (its output annotations), and the tenant's quota in
   every dimension, used/limit with the field (from pods and ResourceClaims, as the webhook
   counts them).
2. **Placement**: the extender's filter over every node kube-scheduler would send it, nodes
   grouped by reason (:mod:`migslice.status.waiting`).
3. **Re-partition**: what the repartition controller would do for it: the same
   :func:`migslice.repartition.decide` on the same inventory (as ``migslice plan``), and the
   state of any plan in the durable record that serves it (planned, applying, ...).
4. **Nodes held back**: quarantine, cooldowns and backoffs of the nodes that could serve it.

A pod that does not wait says where it is: its node and the instances it holds there. A pod
that is not there (the webhook refused it, so it never existed) gets the webhook's answer for
the pod its manifest or its workload would create (:mod:`migslice.status.absent`).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass

from migslice import names
from migslice.admission.status import QuotaDimension, quota_dimensions
from migslice.inventory import mig_resource
from migslice.inventory.beside import WHOLE_GPU
from migslice.mig import GpuModel, Layout
from migslice.objects.json import JsonObject
from migslice.objects.pods import (
    annotations_of,
    bound_node_of,
    has_resource_claims,
    phase_of,
    scheduler_name_of,
    unschedulable_since,
)
from migslice.repartition import ControllerSettings, pending_pods, preview_round
from migslice.repartition.modes import dra_exclusion
from migslice.scheduling import demand_of
from migslice.scheduling.demand import UnitKind
from migslice.status.absent import AbsentPod, CreateEvent
from migslice.status.carving import carve_unknown
from migslice.status.cluster import Cluster, GpuPod
from migslice.status.pools import SlotView, node_view
from migslice.status.record import HeldNode, RecordView, StepView, record_view
from migslice.status.waiting import (
    SCHEDULER,
    UNRESOLVABLE,
    WaitingPod,
    resources_text,
    waiting_view,
)
from migslice.whynot import WhyNot


@dataclass(frozen=True, slots=True)
class Admission:
    """``tenant`` None: no policy selects the namespace (``problem`` says so, or names two);
    ``asked``: the migslice annotations the pod set; ``profile``, ``policy``: what the
    webhook wrote; ``dimensions``: the tenant's usage against its quota."""

    tenant: str | None
    problem: str
    asked: tuple[tuple[str, str], ...]
    profile: str | None
    policy_ref: str | None
    dimensions: tuple[QuotaDimension, ...]


@dataclass(frozen=True, slots=True)
class GpuPlanView:
    """One GPU a plan would re-shape (before and after)."""

    node: str
    index: int
    model_key: str
    before: Layout
    after: Layout


@dataclass(frozen=True, slots=True)
class Repartition:
    """What the controller would do now (``decision``: its step and reason; ``serving``:
    the GPUs a new plan would re-shape for this pod, ``mode`` which path), why it would not
    (``unserved``), and the steps of the record that already serve the pod."""

    decision: str
    mode: str
    serving: tuple[GpuPlanView, ...]
    unserved: str
    in_record: tuple[StepView, ...]
    problem: str = ""
    left_alone: tuple[tuple[str, WhyNot], ...] = ()
    """The nodes the pod's placement weighed that neither path re-shapes because NVIDIA's DRA
    driver publishes their GPUs (:func:`~migslice.repartition.modes.dra_exclusion`), with
    why."""
    carve_unknown: tuple[tuple[str, str], ...] = ()
    """The nodes the pod's placement weighed whose carve state is unknown (their carve
    request or journal cannot be read), with why and what to do
    (:func:`~migslice.status.carving.carve_unknown`)."""


@dataclass(frozen=True, slots=True)
class WhyReport:
    pod: str
    phase: str
    node: str | None
    holds: tuple[tuple[int, SlotView], ...]
    admission: Admission | None
    waiting: WaitingPod | None
    repartition: Repartition | None
    held: tuple[HeldNode, ...]
    record_where: str
    note: str = ""
    absent: AbsentPod | None = None
    """For a pod that is not there: what the webhook would answer for it."""
    scheduler_said: tuple[CreateEvent, ...] = ()
    """A waiting pod's ``FailedScheduling`` Events, latest first: kube-scheduler's own words
    (the extender's reasons as it last gave them, the large-job reserve's among them)."""
    retried: str = ""
    """A waiting pod's ``migslice.io/retry``: why and when the extender last asked
    kube-scheduler to try it again (the large-job reserve's hold ended, its caches were ready
    again)."""
    claims_unseen: tuple[tuple[str, str], ...] = ()
    """The nodes that fit a waiting pod by their device plugin's counts where ResourceClaims of
    NVIDIA's DRA driver hold devices of what it asks, which those counts do not see (both
    device APIs on one node), each with what they hold (:func:`_claims_unseen`)."""


NOT_FOUND = "not found"


def explain_missing(cluster: Cluster, key: str, absent: AbsentPod) -> WhyReport:
    """The report of a pod that is not among the live pods (:mod:`migslice.status.absent`)."""
    where = record_view(cluster, ControllerSettings()).where
    note = f"not among the live pods; its spec from {absent.source}"
    return WhyReport(key, NOT_FOUND, None, (), None, None, None, (), where, note, absent)


def explain(
    cluster: Cluster,
    raw_pod: JsonObject,
    *,
    settings: ControllerSettings,
) -> WhyReport:
    """Why ``raw_pod`` waits (see the module docstring)."""
    demand = demand_of(raw_pod)
    key = demand.key
    phase = phase_of(raw_pod) or "Pending"
    record = record_view(cluster, settings)
    gpu = cluster.gpu_pods.get(key)
    node = bound_node_of(raw_pod)
    if gpu is None:
        annotations = annotations_of(raw_pod)
        asked = ", ".join(
            f"{k}={annotations[k]}" for k in names.INPUT_ANNOTATIONS if k in annotations
        )
        note = (
            f"pod {key} is {phase}"
            if phase in names.TERMINAL_PHASES
            else f"pod {key}: its GPU request cannot be read: {demand.error}"
            if demand.error
            else f"pod {key} asks for a GPU by annotation ({asked}) but requests none: "
            "migslice's webhook did not size it (it was not installed or not called when the "
            "pod was made, its namespace is excluded from it, or no TenantPolicy selects the "
            "namespace and the webhook lets such pods pass), so it has no GPU; create it again "
            "in a namespace that a TenantPolicy selects, once `migslice doctor` finds the "
            "webhook ok"
            if asked
            else f"pod {key} asks for no GPU (no nvidia.com/* request): migslice does not place it"
        )
        return WhyReport(key, phase, node, (), None, None, None, (), record.where, note)
    admission = _admission(cluster, gpu, raw_pod)
    if node is not None:
        holds = _holds(cluster, node, key)
        note = f"not waiting: bound to {node}"
        return WhyReport(key, phase, node, holds, admission, None, None, (), record.where, note)
    now = datetime.datetime.fromtimestamp(cluster.settings.now_s, datetime.UTC)
    waiting = waiting_view(cluster, gpu, now)
    repartition = _repartition(cluster, key, record, settings)
    repartition = dataclasses.replace(
        repartition,
        left_alone=_left_alone(cluster, waiting),
        carve_unknown=_carve_unknown(cluster, waiting),
    )
    held = _held_candidates(cluster, waiting, record)
    retried = str(annotations_of(raw_pod).get(names.RETRY_ANNOTATION) or "")
    return WhyReport(
        key,
        phase,
        None,
        (),
        admission,
        waiting,
        repartition,
        held,
        record.where,
        retried=retried,
        claims_unseen=_claims_unseen(cluster, waiting),
    )


def _claims_unseen(cluster: Cluster, waiting: WaitingPod) -> tuple[tuple[str, str], ...]:
    """Of the nodes that fit the pod, those both NVIDIA's device plugin and its DRA driver
    serve where claims of the driver hold instances of a profile the pod asks (or devices the
    map cannot place): the device plugin counts them free, and may give the pod one."""
    asked = {resource for resource, _ in waiting.resources}
    found = []
    for name in waiting.fits:
        prepared = cluster.nodes.get(name)
        if prepared is None or not prepared.state.dra_beside:
            continue
        view = node_view(cluster, prepared)
        held: dict[str, int] = {}
        claims: set[str] = set()
        for gpu in view.gpus:
            for slot in gpu.slots:
                resource = (
                    names.WHOLE_GPU_RESOURCE
                    if slot.profile == WHOLE_GPU
                    else mig_resource(slot.profile)
                )
                if slot.claim is not None and resource in asked:
                    held[resource] = held.get(resource, 0) + 1
                    claims.add(slot.claim)
        parts = [f"{n} x {resources_text(((r, 1),))}" for r, n in sorted(held.items())]
        unplaced = {h.claim: h.devices for h in view.claims_beside if h.claim and h.devices}
        if unplaced:
            parts.append(f"{sum(len(d) for d in unplaced.values())} device(s) not on its map")
            claims.update(unplaced)
        if parts:
            found.append(
                (
                    name,
                    f"it fits by the device plugin's counts, which do not see the "
                    f"ResourceClaims of NVIDIA's DRA driver there ({', '.join(sorted(claims))}: "
                    f"{', '.join(parts)}); the device plugin may give the pod a device a claim "
                    "holds: serve the node through one of the two (docs/dra.md)",
                )
            )
    return tuple(found)


def _admission(cluster: Cluster, pod: GpuPod, raw_pod: JsonObject) -> Admission:
    annotations = annotations_of(raw_pod)
    asked = tuple((k, str(annotations[k])) for k in names.INPUT_ANNOTATIONS if k in annotations)
    if not asked and not pod.requests and pod.claims:
        asked = tuple(("ResourceClaim", key) for key in pod.claims)
    profile = annotations.get(names.PROFILE)
    policy_ref = annotations.get(names.POLICY)
    selecting = cluster.tenancy.selecting(pod.namespace)
    tenant = selecting[0] if len(selecting) == 1 else None
    if not selecting:
        problem = (
            f'namespace "{pod.namespace}" belongs to no TenantPolicy: the webhook denies its '
            "GPU pods (or lets them pass with --unmatched-namespaces allow)"
        )
    elif len(selecting) > 1:
        listed = " and ".join(f'"{p.name}"' for p in selecting)
        problem = f'namespace "{pod.namespace}" is selected by TenantPolicies {listed}'
    else:
        problem = ""
    dimensions = () if tenant is None else quota_dimensions(tenant, cluster.usage_of(tenant.name))
    return Admission(
        tenant=None if tenant is None else tenant.name,
        problem=problem,
        asked=asked,
        profile=profile if isinstance(profile, str) else None,
        policy_ref=policy_ref if isinstance(policy_ref, str) else None,
        dimensions=dimensions,
    )


def _holds(cluster: Cluster, node: str, key: str) -> tuple[tuple[int, SlotView], ...]:
    prepared = cluster.nodes.get(node)
    if prepared is None:
        return ()
    view = node_view(cluster, prepared)
    return tuple(
        (gpu.index, slot) for gpu in view.gpus for slot in gpu.slots if slot.is_held_by(key)
    )


def _repartition(
    cluster: Cluster, key: str, record: RecordView, settings: ControllerSettings
) -> Repartition:
    in_record = record.steps_serving(key)
    stored = cluster.mig_file.record
    if stored is None:
        problem = f"the record is unreadable ({cluster.mig_file.problem}); the controller stops"
        return Repartition("none", "", (), "", in_record, problem)
    now = datetime.datetime.fromtimestamp(cluster.settings.now_s, datetime.UTC)
    raws = [p.raw for p in cluster.gpu_pods.values() if p.is_waiting]
    pending = pending_pods(raws, now, cluster.settings.scheduler_name)
    states = cluster.states()
    steps = preview_round(  # the controller decides again in the same round
        stored,
        states,
        pending,
        file_configs=cluster.mig_file.names,
        now=cluster.settings.now_s,
        settings=settings,
    )
    step = steps[-1]
    decision = "; then ".join(f"{s.kind}: {s.reason}" for s in steps)
    models = {s.name: s.model for s in states}
    if step.carve_plan is not None:
        serving = tuple(
            GpuPlanView(c.node, g.index, _model_key(models, c.node), g.old, g.new)
            for c in step.carve_plan.changes
            if key in c.serves
            for g in c.gpus
        )
        unserved = dict(step.carve_plan.unserved).get(key, "")
        return Repartition(decision, names.MODE_CARVE, serving, unserved, in_record)
    plan = step.plan
    serving = ()
    unserved = ""
    if plan is not None:
        serving = tuple(
            GpuPlanView(c.node, g.index, c.model_key, g.old, g.new)
            for c in plan.changes
            if key in c.serves
            for g in c.gpus
        )
        unserved = dict(plan.unserved).get(key, "")
    demand = any(key == p.demand.key for p in pending)
    if not serving and not unserved and not in_record and not demand:
        unserved = _not_demand(cluster.gpu_pods[key].raw, cluster.settings.scheduler_name)
    elif not serving and not unserved and not in_record and step.kind.value != "start":
        if plan is not None:
            unserved = "no plan serves it (the planner found no idle GPU to re-shape for it)"
        else:  # the round stopped before planning
            unserved = f"no new plan this round ({step.kind.value}: {step.reason})"
    return Repartition(decision, names.MODE_MIG_MANAGER, serving, unserved, in_record)


def _left_alone(cluster: Cluster, waiting: WaitingPod) -> tuple[tuple[str, WhyNot], ...]:
    """The DRA nodes among those the extender judged for the pod (kube-scheduler's own
    filters pass them), with why neither path re-shapes them."""
    weighed = sorted({name for c in waiting.classes if c.outcome != SCHEDULER for name in c.nodes})
    found = []
    for name in weighed:
        prepared = cluster.nodes.get(name)
        why = None if prepared is None else dra_exclusion(prepared.state)
        if why is not None:
            found.append((name, why))
    return tuple(found)


def _carve_unknown(cluster: Cluster, waiting: WaitingPod) -> tuple[tuple[str, str], ...]:
    """The nodes among those the extender judged for the pod whose carve state is unknown,
    with why."""
    weighed = sorted({name for c in waiting.classes if c.outcome != SCHEDULER for name in c.nodes})
    found = []
    for name in weighed:
        prepared = cluster.nodes.get(name)
        said = "" if prepared is None else carve_unknown(prepared.state.facts)
        if said:
            found.append((name, said))
    return tuple(found)


def _not_demand(raw_pod: JsonObject, scheduler_name: str) -> str:
    """Why a waiting pod is no demand of the repartition controller's (``pending_pods``)."""
    if scheduler_name_of(raw_pod) != scheduler_name:
        return f"not demand: it names scheduler {scheduler_name_of(raw_pod)}, not {scheduler_name}"
    if unschedulable_since(raw_pod) is None:
        return "not yet demand: kube-scheduler has not marked it Unschedulable"
    units = demand_of(raw_pod).units
    if not units and has_resource_claims(raw_pod):
        return (
            "not demand: it asks its GPUs through ResourceClaims, which NVIDIA's DRA driver "
            "serves; neither path re-partitions for them (docs/dra.md, Re-partitioning)"
        )
    if not any(unit.kind is UnitKind.MIG for unit in units):
        return "whole-GPU requests need MIG disabled; not re-partitioned"
    return "not demand: it is deleted, or no longer Pending"


def _model_key(models: dict[str, GpuModel | None], node: str) -> str:
    model = models.get(node)
    return "?" if model is None else model.key


def _held_candidates(
    cluster: Cluster, waiting: WaitingPod, record: RecordView
) -> tuple[HeldNode, ...]:
    """Quarantine, cooldowns and backoffs of the nodes that could serve the pod some day:
    those the filter does not rule out for good (kube-scheduler's filters pass them, the
    model has the profile, the product is allowed) and whose GPUs are in a pool the pod
    could use."""
    ruled_out = {
        name
        for c in waiting.classes
        if c.outcome == SCHEDULER or (c.outcome == UNRESOLVABLE and _for_good(c.reason))
        for name in c.nodes
    }
    found: list[HeldNode] = []
    for name, prepared in cluster.nodes.items():
        if name in ruled_out:
            continue
        found += record.held_of(name)
        label = prepared.state.facts.quarantine_label
        if label and not any(h.why == "quarantined" for h in record.held_of(name)):
            found.append(HeldNode(name, "quarantined", None, None, f"label {label}"))
    return tuple(found)


_FOR_GOOD = (
    "has no MIG profile",
    "not allowed for pod",
    "no NVIDIA GPU",
    "not in migslice catalog",
    "does not support MIG",
    "is not a MIG profile resource",
    "request is invalid",
)
"""Parts of the extender's unresolvable reasons that no re-partition changes."""


def _for_good(reason: str) -> bool:
    return any(part in reason for part in _FOR_GOOD)
