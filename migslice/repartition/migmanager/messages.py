"""What the repartition controller says about a plan: Event messages and the config names
the mig-parted file must keep."""

from __future__ import annotations

from collections.abc import Sequence

from migslice.inventory import NodeState
from migslice.mig.migparted import OWN_PREFIX
from migslice.repartition.record import ActivePlan, NodeStep, RepartitionRecord


def referenced_configs(
    nodes: Sequence[NodeState], active: ActivePlan, record: RepartitionRecord
) -> frozenset[str]:
    """Config names the file must keep: node labels, every config of the plan, and the
    configs roll backs still due set back (``record.restores``)."""
    names = {node.facts.mig_config for node in nodes if node.facts.mig_config}
    names.update(r.config_name for r in record.restores)
    for step in active.nodes:
        names.add(step.config_name)
        if step.previous_config:
            names.add(step.previous_config)
    return frozenset(n for n in names if n is not None and n.startswith(OWN_PREFIX))


def gpu_summary(step: NodeStep) -> str:
    parts = []
    for entry in step.entries:
        devices = "all" if entry.devices is None else ",".join(str(d) for d in entry.devices)
        if entry.devices is not None and not set(entry.devices) & set(step.gpus):
            continue
        counts = "+".join(f"{n}x{p}" for p, n in entry.mig_devices if n) or "none"
        parts.append(f"GPU {devices}: {counts}")
    return "; ".join(parts)


def applying_message(step: NodeStep) -> str:
    pods = ", ".join(step.serves) or "none"
    return (
        f"re-partitioning idle GPUs {list(step.gpus)} with mig-parted config "
        f"{step.config_name} ({gpu_summary(step)}) for pending pods {pods}; "
        f"previous config {step.previous_config}"
    )


def applied_message(step: NodeStep) -> str:
    return (
        f"MIG Manager applied mig-parted config {step.config_name} "
        f"({gpu_summary(step)}); pods {', '.join(step.serves) or 'none'} can now be placed"
    )
