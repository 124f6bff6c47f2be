"""``migslice why`` as text (80 columns, or ``wide``: one line per item) and as a document."""

from __future__ import annotations

from typing import Any

from migslice.mig import CATALOG
from migslice.mig.render import render_slots, slots_cell
from migslice.objects.times import format_time
from migslice.status.text import WIDTH, duration, wrapped
from migslice.status.waiting import resources_text
from migslice.status.why import WhyReport

EXAMPLES = 3
"""Node names shown per reason in text (JSON has them all)."""


def render_why(report: WhyReport, now_s: float, *, wide: bool = False) -> str:
    width = None if wide else WIDTH
    lines: list[str] = []

    def say(text: str, indent: str = "") -> None:
        lines.extend(wrapped(text, indent, width))

    say(f"pod {report.pod} ({report.phase})")
    if report.note:
        say(report.note, "  ")
    if report.holds:
        for index, slot in report.holds:
            say(f"holds {slot.profile} at memory slice {slot.start} of GPU {index}", "  ")
        if any(slot.assumed for _, slot in report.holds):
            say(
                "(which instance of a profile a pod holds is the device plugin's pick; the "
                "one shown is the inventory's assumption)",
                "  ",
            )
    absent = report.absent
    if absent is not None:
        lines.append("1. admission (the webhook's decision, made now on this cluster)")
        if absent.tenant is not None:
            say(f"tenant {absent.tenant}", "   ")
        if absent.allowed:
            profile = f" as {absent.profile}" if absent.profile else ""
            say(f"the webhook would admit it{profile} ({absent.reason})", "   ")
        else:
            say(f"the webhook would deny it ({absent.reason}): {absent.message}", "   ")
        for warning in absent.warnings:
            say(f"warning: {warning}", "   ")
        for d in absent.dimensions:
            if d.limit is None:
                continue
            mark = "  <- at quota" if d.is_reached else ""
            say(f"quota {d.label}: {d.used}/{d.limit} ({d.field}){mark}", "   ")
        for event in absent.events[:EXAMPLES]:
            times = f"{event.count}x, last {event.last}" if event.count > 1 else event.last
            say(f"FailedCreate ({times}): {event.message}", "   ")
    admission = report.admission
    if admission is not None:
        lines.append("1. admission")
        if admission.tenant is None:
            say(admission.problem, "   ")
        else:
            say(
                f"tenant {admission.tenant} "
                f"(TenantPolicy {admission.policy_ref or admission.tenant})",
                "   ",
            )
        asked = ", ".join(f"{k}={v}" for k, v in admission.asked) or "a GPU resource directly"
        say(f"asked: {asked}; resolved to {admission.profile or '(no profile annotation)'}", "   ")
        for d in admission.dimensions:
            if d.limit is None:
                continue
            mark = "  <- at quota: pods that need more are denied" if d.is_reached else ""
            say(f"quota {d.label}: {d.used}/{d.limit} ({d.field}){mark}", "   ")
    waiting = report.waiting
    if waiting is not None:
        lines.append("2. placement (the extender's filter)")
        say(f"asks {resources_text(waiting.resources)}; scheduler {waiting.scheduler}", "   ")
        if waiting.waiting_s is not None:
            say(f"unschedulable for {duration(waiting.waiting_s)}", "   ")
        if waiting.error:
            say(waiting.error, "   ")
        if waiting.fits:
            shown = ", ".join(waiting.fits[:EXAMPLES])
            say(
                f"{_nodes(len(waiting.fits))} fit now ({shown}): kube-scheduler places it on "
                "its next try",
                "   ",
            )
        for node, said in report.claims_unseen:
            say(f"{node}: {said}", "   ")
        if report.scheduler_said:
            last = report.scheduler_said[0]
            times = f"{last.count}x, last {last.last}" if last.count > 1 else last.last
            say(f"kube-scheduler said ({times}): {last.message}", "   ")
        if report.retried:
            reason, _, at = report.retried.partition(" ")
            say(f"the extender asked kube-scheduler to try it again ({reason}, {at})", "   ")
        for node_class in waiting.classes:
            shown = ", ".join(node_class.nodes[:EXAMPLES])
            more = ", ..." if len(node_class.nodes) > EXAMPLES else ""
            say(
                f"{_nodes(len(node_class.nodes))}: {node_class.reason} [{node_class.outcome}] "
                f"({shown}{more})",
                "   ",
            )
    repartition = report.repartition
    if repartition is not None:
        lines.append("3. re-partition (the controller's decide(), as migslice plan)")
        if repartition.problem:
            say(repartition.problem, "   ")
        for step in repartition.in_record:
            say(
                f"in the record: {step.mode} plan {step.plan_id} on {step.node} is "
                f"{step.state} for {duration(now_s - step.since_s)}"
                + (f" ({step.detail})" if step.detail else ""),
                "   ",
            )
        if repartition.serving:
            say(f"a new {repartition.mode} plan would serve it:", "   ")
            for gpu in repartition.serving:
                slices = CATALOG.get(gpu.model_key).memory_slices
                before = [(p.start, p.size, p.profile) for p in gpu.before]
                after = [(p.start, p.size, p.profile) for p in gpu.after]
                cell = slots_cell(before + after, 3)
                say(f"{gpu.node} GPU {gpu.index}:", "     ")
                lines.append("       before " + render_slots(slices, before, cell))
                lines.append("       after  " + render_slots(slices, after, cell))
        elif repartition.unserved:
            say(f"no plan for it: {repartition.unserved}", "   ")
        for node, why in repartition.left_alone:
            say(f"left alone: {node} ({why.reason}): {why.message}", "   ")
        for node, said in repartition.carve_unknown:
            say(f"carve state unknown: {node}: {said}", "   ")
        say(f"the controller would {repartition.decision}", "   ")
    if waiting is not None:
        lines.append("4. nodes held back")
        if not report.held:
            say(
                "none of the nodes that could serve it is quarantined, cooling down or backed off",
                "   ",
            )
        for held in report.held:
            if held.why == "quarantined":
                since = f" since {format_time(held.since_s)}" if held.since_s else ""
                say(f"{held.node}: quarantined{since} ({held.detail})", "   ")
            else:
                left = duration((held.until_s or now_s) - now_s)
                say(f"{held.node}: {held.why} for {left} more", "   ")
        say(f"(record: {report.record_where})", "   ")
    return "\n".join(lines)


def _nodes(count: int) -> str:
    return f"{count} node" if count == 1 else f"{count} nodes"


def why_document(report: WhyReport) -> dict[str, Any]:
    admission = report.admission
    waiting = report.waiting
    repartition = report.repartition
    return {
        "pod": report.pod,
        "phase": report.phase,
        "node": report.node,
        "note": report.note or None,
        "holds": [
            {"gpu": index, "profile": s.profile, "start": s.start, "assumed": s.assumed}
            for index, s in report.holds
        ],
        "admission": None
        if admission is None
        else {
            "tenant": admission.tenant,
            "problem": admission.problem or None,
            "asked": dict(admission.asked),
            "profile": admission.profile,
            "policy": admission.policy_ref,
            "quota": [
                {"dimension": d.dimension, "used": d.used, "limit": d.limit, "field": d.field}
                for d in admission.dimensions
            ],
        },
        "placement": None
        if waiting is None
        else {
            "requests": dict(waiting.resources),
            "scheduler": waiting.scheduler,
            "unschedulableSeconds": waiting.waiting_s,
            "summary": waiting.summary,
            "fits": list(waiting.fits),
            "claimsUnseen": [
                {"node": node, "message": said} for node, said in report.claims_unseen
            ],
            "schedulerSaid": [
                {"count": e.count, "last": e.last, "message": e.message}
                for e in report.scheduler_said
            ],
            "retried": report.retried or None,
            "nodes": [
                {
                    "reason": c.reason,
                    "outcome": c.outcome,
                    "count": len(c.nodes),
                    "names": list(c.nodes),
                }
                for c in waiting.classes
            ],
        },
        "repartition": None
        if repartition is None
        else {
            "decision": repartition.decision,
            "mode": repartition.mode or None,
            "serving": [
                {
                    "node": g.node,
                    "gpu": g.index,
                    "before": [p.as_dict() for p in g.before],
                    "after": [p.as_dict() for p in g.after],
                }
                for g in repartition.serving
            ],
            "unserved": repartition.unserved or None,
            "inRecord": [
                {"mode": s.mode, "plan": s.plan_id, "node": s.node, "state": s.state}
                for s in repartition.in_record
            ],
            "problem": repartition.problem or None,
            "leftAlone": [
                {"node": node, "reason": why.reason, "message": why.message}
                for node, why in repartition.left_alone
            ],
            "carveUnknown": [
                {"node": node, "reason": said} for node, said in repartition.carve_unknown
            ],
        },
        "absent": None
        if report.absent is None
        else {
            "from": report.absent.source,
            "allowed": report.absent.allowed,
            "reason": report.absent.reason,
            "message": report.absent.message or None,
            "tenant": report.absent.tenant,
            "profile": report.absent.profile,
            "warnings": list(report.absent.warnings),
            "quota": [
                {"dimension": d.dimension, "used": d.used, "limit": d.limit, "field": d.field}
                for d in report.absent.dimensions
            ],
            "failedCreate": [
                {"count": e.count, "last": e.last or None, "message": e.message}
                for e in report.absent.events
            ],
        },
        "heldNodes": [
            {
                "node": h.node,
                "why": h.why,
                "until": None if h.until_s is None else format_time(h.until_s),
                "detail": h.detail or None,
            }
            for h in report.held
        ],
    }
