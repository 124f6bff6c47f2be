"""``migslice status`` as text (the default 80-column table and ``wide``) and as a document
(``json``, ``yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from migslice import names
from migslice.mig.stranding import NO_MIX, FillerMix, describe_complete, describe_mix, mix_json
from migslice.objects.times import format_time
from migslice.repartition import ControllerSettings, held_mix
from migslice.status.cluster import Cluster
from migslice.status.pools import Holding, NodeView, PoolView, SlotView, pool_views
from migslice.status.record import RecordView, record_view
from migslice.status.tenants import TenantView, tenant_views
from migslice.status.text import (
    WIDTH,
    bar_cells,
    columns,
    duration,
    gpu_bar,
    wrapped,
)
from migslice.status.waiting import WaitingPod, resources_text, waiting_views


@dataclass(frozen=True, slots=True)
class StatusReport:
    at_s: float
    pool_label: str
    pool_by: str
    tenants: tuple[TenantView, ...]
    pools: tuple[PoolView, ...]
    waiting: tuple[WaitingPod, ...]
    record: RecordView
    stranding: FillerMix = NO_MIX
    """What the pods on device-plugin nodes hold towards the planners' stranding rule."""

    @property
    def node_count(self) -> int:
        return sum(len(p.nodes) for p in self.pools)


def build_status(cluster: Cluster, *, settings: ControllerSettings) -> StatusReport:
    """``settings``: the controller's, for the cooldown each node of the record is in."""
    by = (
        f"label {cluster.settings.pool_label}"
        if cluster.settings.pool_label
        else f"GPU product ({names.PRODUCT_LABEL})"
    )
    return StatusReport(
        at_s=cluster.settings.now_s,
        pool_label=cluster.settings.pool_key,
        pool_by=by,
        tenants=tuple(tenant_views(cluster)),
        pools=tuple(pool_views(cluster)),
        waiting=tuple(waiting_views(cluster)),
        record=record_view(cluster, settings),
        stranding=held_mix(cluster.states()),
    )


def scoped(report: StatusReport, cluster: Cluster, namespace: str) -> StatusReport:
    """The report of one namespace: its tenant and its waiting pods (pools stay whole)."""
    tenant = cluster.tenant_of(namespace)
    return replace(
        report,
        tenants=tuple(t for t in report.tenants if t.name == tenant),
        waiting=tuple(w for w in report.waiting if w.key.partition("/")[0] == namespace),
    )


# -- text --------------------------------------------------------------------------------------


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def render_text(report: StatusReport, *, wide: bool = False) -> str:
    width = None if wide else WIDTH
    gpus = sum(p.gpu_count for p in report.pools)
    lines = [
        f"{_count(report.node_count, 'GPU node')}, {_count(gpus, 'GPU')} in "
        f"{_count(len(report.pools), 'pool')}; {_count(len(report.tenants), 'tenant')}; "
        f"{_count(len(report.waiting), 'GPU pod')} waiting",
        "",
    ]
    lines += _tenants(report.tenants, width)
    lines += ["", *_pool_table(report, width)]
    for pool in report.pools:
        lines += ["", *_pool_map(pool, width, wide=wide)]
    lines += ["", *_waiting(report.waiting, width)]
    lines += ["", *_record(report.record, report.at_s, width)]
    said = describe_mix(report.stranding)
    if said is not None:
        lines += wrapped(f"{said} (docs/repartition.md)", "  ", width)
    said = describe_complete(report.stranding)
    if said is not None:
        lines += wrapped(said, "  ", width)
    return "\n".join(lines)


def _tenants(tenants: tuple[TenantView, ...], width: int | None) -> list[str]:
    if not tenants:
        return ["TENANTS: no TenantPolicy"]
    rows = []
    for tenant in tenants:
        cells = [tenant.name, str(tenant.bound_pods), str(tenant.waiting_pods)]
        for dimension in ("instances", "computeSlices", "memorySlices"):
            found = tenant.dimension(dimension)
            cells.append("-" if found is None else _used(found.used, found.limit))
        rows.append(cells)
    table = columns(("tenant", "pods", "waiting", "instances", "compute", "memory"), rows)
    lines = [
        "TENANTS (slices in use by pods and claims, as the webhook counts them; used/limit where "
        "spec.quota limits)"
    ]
    lines = [line for text in lines for line in wrapped(text, "", width)]
    lines.append(table[0])
    for tenant, row in zip(tenants, table[1:], strict=True):
        lines.append(row)
        profiles = [
            f"{d.dimension.removeprefix('profiles.')} {_used(d.used, d.limit)}"
            for d in tenant.dimensions
            if d.dimension.startswith("profiles.")
        ]
        if profiles:
            lines += wrapped("profiles: " + ", ".join(profiles), "  ", width)
        if tenant.at_limit:
            reached = ", ".join(f"{d.label} ({d.field})" for d in tenant.at_limit)
            lines += wrapped(f"at quota: {reached}; pods that need more are denied", "  ", width)
        if tenant.status_used is not None:
            lines += wrapped(f"TenantPolicy status.used says: {_used_text(tenant)}", "  ", width)
        if tenant.problem:
            lines += wrapped(f"problem: {tenant.problem}", "  ", width)
    return lines


def _used(used: int, limit: int | None) -> str:
    return str(used) if limit is None else f"{used}/{limit}"


def _used_text(tenant: TenantView) -> str:
    used = tenant.status_used or {}
    parts = [f"{k} {used.get(k)}" for k in ("instances", "computeSlices", "memorySlices")]
    profiles = used.get("profiles")
    if isinstance(profiles, dict) and profiles:
        parts.append(", ".join(f"{p} {c}" for p, c in sorted(profiles.items())))
    return ", ".join(parts) + " (it may lag behind the pods)"


def _pool_table(report: StatusReport, width: int | None) -> list[str]:
    head = wrapped(
        f"POOLS by {report.pool_by}; --pool-label groups by another node label. "
        "Fragmentation: 1 - largest free region / free memory slices (docs/status.md)",
        "",
        width,
    )
    if not report.pools:
        return [*head, "no GPU nodes"]
    rows = [
        [
            pool.name,
            str(len(pool.nodes)),
            str(pool.gpu_count),
            str(pool.free.idle_gpus),
            f"{pool.free.free_slices}/{pool.free.total_slices}",
            f"{pool.free.index:.2f}",
        ]
        for pool in report.pools
    ]
    return [*head, *columns(("pool", "nodes", "gpus", "idle", "free", "frag"), rows)]


def _pool_map(pool: PoolView, width: int | None, *, wide: bool) -> list[str]:
    n = len(pool.nodes)
    lines = [
        f"{pool.name}: {n} node{'' if n == 1 else 's'} (* held by a pod, . not in an instance)"
    ]
    gpus = [gpu for node in pool.nodes for gpu in node.gpus]
    budget = (width or 10_000) - 7
    cell, short = bar_cells(gpus, budget) if gpus else (3, False)
    drawn: dict[tuple[object, ...], str] = {}
    for node in pool.nodes:
        head = f"{node.name}  {node.model or '?'}  layout from {node.source}"
        if node.source == "dra-dynamic":
            head += " (free slices carved on demand)"
        if node.condition != "ready" or wide:
            head += f"  {node.condition}"
        lines += wrapped(head, "  ", width)
        if node.carve_unknown:
            lines += wrapped(f"carve state unknown: {node.carve_unknown}", "    ", width)
        for gpu in node.gpus:
            lines.append(f"    {gpu.index:<2} {gpu_bar(gpu, cell, short=short, drawn=drawn)}")
            held = [_holder(s, wide=wide) for s in gpu.slots if s.is_used]
            if held:
                lines += wrapped(", ".join(held), "       ", width)
        if node.placements:
            free = ", ".join(
                f"{r.removeprefix('nvidia.com/mig-').removeprefix('nvidia.com/')} {f}/{t}"
                for r, f, t in node.placements
            )
            lines += wrapped(f"DRA placements free now: {free}", "    ", width)
        if node.tainted:
            lines += wrapped(
                f"{node.tainted} device(s) tainted (DeviceTaintRules or the driver's taints): "
                "claims that do not tolerate them are kept off",
                "    ",
                width,
            )
        if node.steered and wide:
            lines += wrapped(
                f"{node.steered} device(s) held back by migslice's steer", "    ", width
            )
        if node.unknown:
            lines += wrapped(f"GPUs unknown: {node.unknown}", "    ", width)
            for holding in node.holdings:
                lines += wrapped(_holding(holding), "      ", width)
        elif not node.gpus:
            counts = ", ".join(
                f"{r.removeprefix('nvidia.com/')} {h}/{t} held" for r, h, t in node.counts
            )
            lines += wrapped(f"no per-GPU layout; {counts or 'no GPU resources'}", "    ", width)
            for holding in node.holdings:
                lines += wrapped(_holding(holding), "      ", width)
        if node.claims_beside:
            where = (
                "that its map cannot place (its GPU or instance not known to the map)"
                if node.gpus
                else "not in its counts above"
            )
            lines += wrapped(
                "served by NVIDIA's device plugin and its DRA driver both: these ResourceClaims "
                f"hold GPUs of its DRA slices {where} (docs/dra.md)",
                "    ",
                width,
            )
            for holding in node.claims_beside:
                lines += wrapped(_holding(holding), "      ", width)
        if wide:
            for note in node.notes:
                lines += wrapped(f"note: {note}", "    ", width)
    return lines


def _holding(holding: Holding) -> str:
    """``tenant/pod: what it holds``; a claim no live pod uses: ``tenant/(no pod): ...``."""
    devices = f" ({', '.join(holding.devices)})" if holding.devices else ""
    what = (
        f"ResourceClaim {holding.claim}{devices}"
        if holding.resource is None
        else f"{holding.count} x {holding.resource.removeprefix('nvidia.com/')}"
    )
    return f"{holding.tenant or '-'}/{holding.pod or '(no pod)'}: {what}"


def _holder(slot: SlotView, *, wide: bool) -> str:
    where = f"{slot.profile}@{slot.start}" if wide else slot.profile
    tenant = slot.tenant or "-"
    if slot.pod is None and slot.claim is not None:
        return f"{where} {tenant}/ResourceClaim {slot.claim} (no pod)"
    if slot.pod is None:
        return f"{where} busy (no pod known)"
    mark = "~" if slot.assumed and wide else ""
    if slot.sharing:
        pods = ", ".join((slot.pod, *slot.sharing))
        return f"{where} {tenant}/{pods} (ResourceClaim {slot.claim})"
    return f"{where} {mark}{tenant}/{slot.pod}"


def _waiting(waiting: tuple[WaitingPod, ...], width: int | None) -> list[str]:
    if not waiting:
        return ["WAITING GPU PODS: none"]
    rows = [
        [pod.key, pod.tenant or "-", resources_text(pod.resources), duration(pod.waiting_s)]
        for pod in waiting
    ]
    table = columns(("pod", "tenant", "asks", "unschedulable"), rows)
    lines = ["WAITING GPU PODS (the extender's reasons, from the same filter)", table[0]]
    for pod, row in zip(waiting, table[1:], strict=True):
        lines.append(row)
        lines += wrapped(pod.summary, "  ", width)
    return lines


def _record(record: RecordView, now_s: float, width: int | None) -> list[str]:
    lines = wrapped(f"REPARTITION (record: {record.where})", "", width)
    if record.problem:
        lines += wrapped(f"record: {record.problem}", "  ", width)
    if not record.steps and not record.held:
        lines.append("  no plan in progress, no node held back")
    for step in record.steps:
        text = (
            f"{step.node}: {step.mode} plan {step.plan_id} {step.state} for "
            f"{duration(now_s - step.since_s)}"
        )
        if step.config:
            text += f", config {step.config}"
        if step.serves:
            text += f", serves {', '.join(step.serves)}"
        if step.detail:
            text += f" ({step.detail})"
        lines += wrapped(text, "  ", width)
    for held in record.held:
        if held.why == "quarantined":
            text = f"{held.node}: quarantined for {duration(now_s - (held.since_s or now_s))}"
            text += f" ({held.detail}); release: kubectl label node {held.node} "
            text += f"{names.QUARANTINE_LABEL}-"
        else:
            text = f"{held.node}: {held.why} for {duration((held.until_s or now_s) - now_s)} more"
        lines += wrapped(text, "  ", width)
    return lines


# -- documents ---------------------------------------------------------------------------------


def status_document(report: StatusReport) -> dict[str, Any]:
    """The report as JSON/YAML: every value of the text, unabridged."""
    return {
        "at": format_time(report.at_s),
        "poolLabel": report.pool_label,
        "tenants": [_tenant_json(t) for t in report.tenants],
        "pools": [_pool_json(p) for p in report.pools],
        "waiting": [_waiting_json(w) for w in report.waiting],
        "repartition": {
            **_record_json(report.record),
            "strandingRule": mix_json(report.stranding),
        },
    }


def _tenant_json(tenant: TenantView) -> dict[str, Any]:
    return {
        "name": tenant.name,
        "namespaces": list(tenant.namespaces),
        "boundPods": tenant.bound_pods,
        "waitingPods": tenant.waiting_pods,
        "usage": [
            {"dimension": d.dimension, "used": d.used, "limit": d.limit, "field": d.field}
            for d in tenant.dimensions
        ],
        "atLimit": [d.dimension for d in tenant.at_limit],
        "statusUsed": tenant.status_used,
        "problem": tenant.problem or None,
    }


def _pool_json(pool: PoolView) -> dict[str, Any]:
    return {
        "name": pool.name,
        "fragmentation": round(pool.free.index, 4),
        "freeSlices": pool.free.free_slices,
        "largestFreeSlices": pool.free.largest_slices,
        "totalSlices": pool.free.total_slices,
        "gpus": pool.gpu_count,
        "idleGpus": pool.free.idle_gpus,
        "gpusWithoutLayout": pool.free.unknown_gpus,
        "nodes": [_node_json(n) for n in pool.nodes],
    }


def _node_json(node: NodeView) -> dict[str, Any]:
    return {
        "name": node.name,
        "model": node.model,
        "layoutSource": node.source,
        "condition": node.condition,
        "gpus": [
            {
                "index": gpu.index,
                "migEnabled": gpu.mig_enabled,
                "memorySlices": gpu.memory_slices,
                "freeSlices": gpu.free.free_slices,
                "largestFreeSlices": gpu.free.largest_slices,
                "instances": [_slot_json(s) for s in gpu.slots],
            }
            for gpu in node.gpus
        ],
        "counts": [{"resource": r, "held": h, "allocatable": t} for r, h, t in node.counts],
        "holdings": [_holding_json(h) for h in node.holdings],
        "draClaimsBeside": [_holding_json(h) for h in node.claims_beside],
        "notes": list(node.notes),
        "draPlacements": [{"resource": r, "free": f, "offered": t} for r, f, t in node.placements],
        "draDevicesTainted": node.tainted,
        "draDevicesSteered": node.steered,
        "unknown": node.unknown or None,
        "carveUnknown": node.carve_unknown or None,
    }


def _holding_json(holding: Holding) -> dict[str, Any]:
    return {
        "pod": holding.pod,
        "tenant": holding.tenant,
        "resource": holding.resource,
        "count": holding.count,
        "claim": holding.claim,
        "devices": list(holding.devices),
    }


def _slot_json(slot: SlotView) -> dict[str, Any]:
    return {
        "profile": slot.profile,
        "start": slot.start,
        "size": slot.size,
        "used": slot.is_used,
        "pod": slot.pod,
        "tenant": slot.tenant,
        "busyWithoutPod": slot.busy,
        "holderAssumed": slot.assumed,
        "claim": slot.claim,
        "sharedWith": list(slot.sharing),
    }


def _waiting_json(pod: WaitingPod) -> dict[str, Any]:
    return {
        "pod": pod.key,
        "tenant": pod.tenant,
        "requests": {r: c for r, c in pod.resources},
        "scheduler": pod.scheduler,
        "unschedulableSeconds": pod.waiting_s,
        "summary": pod.summary,
        "fits": list(pod.fits),
        "nodes": [
            {
                "reason": c.reason,
                "outcome": c.outcome,
                "count": len(c.nodes),
                "names": list(c.nodes),
            }
            for c in pod.classes
        ],
    }


def _record_json(record: RecordView) -> dict[str, Any]:
    return {
        "where": record.where,
        "problem": record.problem or None,
        "steps": [
            {
                "mode": s.mode,
                "plan": s.plan_id,
                "node": s.node,
                "state": s.state,
                "since": format_time(s.since_s),
                "config": s.config or None,
                "serves": list(s.serves),
                "detail": s.detail or None,
            }
            for s in record.steps
        ],
        "held": [
            {
                "node": h.node,
                "why": h.why,
                "since": None if h.since_s is None else format_time(h.since_s),
                "until": None if h.until_s is None else format_time(h.until_s),
                "detail": h.detail or None,
            }
            for h in record.held
        ],
    }
