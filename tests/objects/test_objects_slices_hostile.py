"""ResourceSlices of shapes NVIDIA's driver never writes (:mod:`tests.hostile_slices`): whatever
it is sent, the reader never raises, a pool not ready says why in one line, and a pool it reads
as ready is of a shape the driver writes, which the allocator reads as migslice does (checked
on the raw slices, not through the reader)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings

from migslice.objects.dra_pool import PoolState, read_pool
from migslice.objects.resource_slices import slice_facts_from_raw
from migslice.quantity import QuantityError, parse_quantity
from tests.hostile_slices import (
    Mutated,
    Slices,
    devices_of,
    gpu_of,
    listed,
    mutated_slices,
    section,
)


def _count(value: object) -> int | None:
    try:
        number = parse_quantity(value)
    except QuantityError:
        return None
    return int(number) if number.denominator == 1 and number >= 0 else None


def misread(raw: Slices) -> str:
    """What in a pool's raw slices is not what the driver publishes, so that migslice would
    misread the pool as ready: devices named once, static instances of one GPU that share no
    memory slice (NVML has no others), a GPU's own counter set (the allocator counts a set
    once for all that consume it), published, holding every counter its devices consume, in
    counts that are whole and not negative; "" for none."""
    names = [d.get("name") for d in devices_of(raw)]
    if len(names) != len(set(names)):
        return "a device name published twice"
    covered: dict[str, str] = {}
    for device in devices_of(raw):
        for key in section(device.get("capacity")):
            if key.startswith("memorySlice"):
                where = f"{gpu_of(device['name'])} {key}"
                if where in covered:
                    return f"{device['name']} and {covered[where]} both cover {where}"
                covered[where] = device["name"]
    sets: dict[object, dict[str, Any]] = {}
    for s in raw:
        for counter_set in listed(s["spec"].get("sharedCounters")):
            sets[counter_set.get("name")] = section(counter_set.get("counters"))
    consumers: dict[object, set[str]] = {}
    for device in devices_of(raw):
        for consumed in listed(device.get("consumesCounters")):
            name = consumed.get("counterSet")
            consumers.setdefault(name, set()).add(gpu_of(device["name"]))
            if name not in sets:
                return f"{device['name']} consumes counter set {name}, not published"
            for key, entry in section(consumed.get("counters")).items():
                if key not in sets[name] or _count(section(entry).get("value")) is None:
                    return f"{device['name']} consumes counter {key} of {name} as {entry!r}"
    shared = sorted(name for name, gpus in consumers.items() if len(gpus) > 1)
    if shared:
        return f"counter set {shared[0]} consumed by GPUs {sorted(consumers[shared[0]])}"
    return ""


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(mutated=mutated_slices())
def test_slices_of_shapes_the_driver_never_writes_are_never_read_as_a_ready_pool(
    mutated: Mutated,
) -> None:
    raw = mutated.raw
    facts = [slice_facts_from_raw(s) for s in raw]
    kept = [f for f in facts if f is not None]
    for node in {f.node_name for f in kept}:
        pool = read_pool(node, [f for f in kept if f.node_name == node])
        if pool.state is not PoolState.READY:
            assert pool.reason and "\n" not in pool.reason, pool
            continue
        mine = [s for s, f in zip(raw, facts, strict=True) if f is not None and f.node_name == node]
        assert misread(mine) == "", pool.reason
