"""What the carving agent checks before and after it changes a GPU (values only: readings,
pods and the request in, verdicts out).

* :func:`why_not_destroy`, right before every destroy: the instance has no processes, and no
  pod on the node may hold it. The device plugin, not the scheduler, picks a pod's device, so
  the agent knows per profile how many instances pods hold and which ones are busy; while
  pods hold more instances of a profile than NVML sees busy, an idle one of that profile may
  be held by a pod whose container has not started, and is not destroyed.
* :func:`mismatch`, before success: NVML's layout of every carved GPU is the request's.
* :func:`unadvertised`, before success: the node's allocatable (what the device plugin
  advertises) counts the MIG devices NVML has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from agent.readings import GpuReading, InstanceReading
from migslice.console import CommandError
from migslice.inventory import mig_resource
from migslice.mig import MIG_RESOURCE_PREFIX
from migslice.objects.carve_handshake import CarveGpu, Slot
from migslice.objects.json import JsonObject
from migslice.objects.nodes import NodeFacts
from migslice.objects.pods import pod_facts_from_raw


class MigWriteError(CommandError):
    """NVML refused a change; the message names the call, the instance and NVML's error."""


class MigReadError(CommandError):
    """NVML cannot be read now (a GPU lost, the driver gone): a carve cannot go on, nor a roll
    back; the message names NVML's error."""


class CarveAbortError(CommandError):
    """The carve cannot go on as asked (an instance in use, a layout that is not the plan's);
    the agent rolls back and reports the message."""


def instances(gpu: GpuReading) -> dict[Slot, InstanceReading]:
    """The GPU's instances by profile and start (names from NVML's own profile table)."""
    names = {p.gi_profile_id: p.profile_name for p in gpu.profiles}
    return {
        Slot(i.start, names[i.gi_profile_id]): i for i in gpu.instances if i.gi_profile_id in names
    }


def held_counts(raw_pods: Iterable[JsonObject]) -> Counter[str]:
    """MIG instances per resource that the node's pods hold (bound, not finished)."""
    held: Counter[str] = Counter()
    for raw in raw_pods:
        pod = pod_facts_from_raw(raw)
        if pod is None:
            continue
        for resource, count in pod.requests:
            if resource.startswith(MIG_RESOURCE_PREFIX):
                held[resource] += count
    return held


def why_not_destroy(
    gpu_index: int, slot: Slot, readings: Sequence[GpuReading], *, held: Mapping[str, int]
) -> str:
    """Why the instance must not be destroyed now ("" when it may); ``readings``: NVML now."""
    where = f"GPU {gpu_index}: {slot.profile}@{slot.start}"
    gpu = next((g for g in readings if g.index == gpu_index), None)
    found = instances(gpu).get(slot) if gpu is not None else None
    if found is None or not found.uuid:
        return ""  # gone, or a GPU instance without compute instance: nothing can run there
    if found.busy:
        return f"{where} has processes running (a container started on it)"
    busy = sum(
        1
        for g in readings
        for s, i in instances(g).items()
        if s.profile == slot.profile and i.busy and i.uuid
    )
    pods = held.get(mig_resource(slot.profile), 0)
    if pods > busy:
        return (
            f"{where} may be held: pods on the node hold {pods} x {slot.profile} and "
            f"{busy} of them show processes"
        )
    return ""


def mismatch(plan: Sequence[CarveGpu], readings: Sequence[GpuReading]) -> str:
    """How NVML's layout differs from the plan's (""): per GPU, profile@start of every
    instance with its compute instance."""
    by_index = {gpu.index: gpu for gpu in readings}
    for step in plan:
        gpu = by_index.get(step.index)
        if gpu is None:
            return f"GPU {step.index} is gone"
        have = sorted(s for s, i in instances(gpu).items() if i.uuid)
        if have != sorted(step.layout):
            shown = ", ".join(f"{s.profile}@{s.start}" for s in have) or "nothing"
            want = ", ".join(f"{s.profile}@{s.start}" for s in step.layout) or "nothing"
            return f"GPU {step.index} has {shown}; the plan says {want}"
    return ""


def unadvertised(facts: NodeFacts, readings: Sequence[GpuReading]) -> str:
    """How the node's allocatable MIG devices differ from NVML's ("" when they agree)."""
    expected: Counter[str] = Counter()
    for gpu in readings:
        for slot, instance in instances(gpu).items():
            if instance.uuid:
                expected[mig_resource(slot.profile)] += 1
    actual = Counter(
        {r: c for r, c in facts.allocatable if r.startswith(MIG_RESOURCE_PREFIX) and c}
    )
    if actual == expected:
        return ""
    return f"allocatable shows {_counts(actual)}; NVML has {_counts(expected)}"


def _counts(counts: Counter[str]) -> str:
    if not counts:
        return "no MIG devices"
    parts = (f"{n} x {r.removeprefix(MIG_RESOURCE_PREFIX)}" for r, n in sorted(counts.items()))
    return ", ".join(parts)
