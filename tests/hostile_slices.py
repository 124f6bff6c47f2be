"""ResourceSlices of shapes NVIDIA's driver never writes, for property tests: a fixture's
slices with one or two of these done to them: a GPU's devices consuming another GPU's counter
set or one not published, a device published twice, a static instance published again at
another memory slice, a counter or capacity of any value, a
section the reader needs removed, a field of a later API (or one that changes what a device
is), pool numbers of any type, a slice dropped, an attribute of any kind, any field of a slice
or device replaced by any JSON value."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from tests.dra_objects import SLICE_FIXTURES, fixture_slices
from tests.hostile import json_values

Slices = list[dict[str, Any]]
Draw = Callable[..., Any]

HOSTILE_VALUES = st.sampled_from(
    ["-1", "0", "2", "1.5", "500m", "1e18", "999Ei", "lots", "", 2**63, -1, 0, 1.5, True, None]
)
UNKNOWN_FIELDS = {
    "bindingConditions": ["ready"],
    "bindsToNode": True,
    "nodeSelector": {"nodeSelectorTerms": []},
    "allNodes": True,
    "perDeviceNodeSelection": True,
    "allowMultipleAllocations": True,
    "taints": [{"key": "gpu.nvidia.com/xid", "effect": "NoSchedule"}],
    "aFieldOfALaterRelease": {"count": 2**63},
}


def listed(value: object) -> list[Any]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def section(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def devices_of(raw: Slices) -> list[dict[str, Any]]:
    """Every device of the slices that has a name (a mutation may have replaced any)."""
    found = (d for s in raw for d in listed(s["spec"].get("devices")))
    return [d for d in found if isinstance(d.get("name"), str)]


def gpu_of(device_name: str) -> str:
    return device_name.split("-mig-")[0]


def _consume_another_set(raw: Slices, draw: Draw) -> None:
    """Every device of one GPU consumes another GPU's counter set, or one not published."""
    devices = [d for d in devices_of(raw) if listed(d.get("consumesCounters"))]
    if not devices:
        return
    gpu = gpu_of(draw(st.sampled_from([d["name"] for d in devices])))
    published = {c.get("name") for s in raw for c in listed(s["spec"].get("sharedCounters"))}
    others = sorted(n for n in published if isinstance(n, str) and n != f"{gpu}-counter-set")
    target = draw(st.sampled_from([*others, "gpu-9-counter-set"]))
    for device in devices:
        if gpu_of(device["name"]) == gpu:
            listed(device["consumesCounters"])[0]["counterSet"] = target


def _duplicate_device(raw: Slices, draw: Draw) -> None:
    devices = devices_of(raw)
    if not devices:
        return
    copied = copy.deepcopy(draw(st.sampled_from(devices)))
    into = draw(st.sampled_from(raw))["spec"].get("devices")
    if not isinstance(into, list):
        return
    into.insert(draw(st.integers(0, len(into))), copied)


def _quantity(raw: Slices, draw: Draw) -> None:
    """A counter of a set or a device, or a capacity, set to anything."""
    sets = (c for s in raw for c in listed(s["spec"].get("sharedCounters")))
    consumed = (c for d in devices_of(raw) for c in listed(d.get("consumesCounters")))
    holders = [
        counters
        for counters in [
            *(section(c.get("counters")) for c in sets),
            *(section(d.get("capacity")) for d in devices_of(raw)),
            *(section(c.get("counters")) for c in consumed),
        ]
        if counters
    ]
    if not holders:
        return
    holder = draw(st.sampled_from(holders))
    key = draw(st.sampled_from(sorted(holder)))
    holder[key] = draw(st.sampled_from([{"value": draw(HOSTILE_VALUES)}, draw(json_values)]))


def _drop(raw: Slices, draw: Draw) -> None:
    """A section the reader needs, removed."""
    chosen = draw(st.sampled_from(raw))
    spec = chosen["spec"]
    places: list[tuple[dict[str, Any], str]] = [
        (spec, key) for key in ("sharedCounters", "devices", "pool", "nodeName") if key in spec
    ]
    pool = section(spec.get("pool"))
    places += [(pool, k) for k in ("generation", "resourceSliceCount") if k in pool]
    for device in listed(spec.get("devices")):
        places += [(device, k) for k in ("capacity", "consumesCounters", "attributes")]
    holder, key = draw(st.sampled_from(places))
    holder.pop(key, None)


def _unknown_field(raw: Slices, draw: Draw) -> None:
    """A field of a later API, or one that changes what a device is, on a slice or a device."""
    chosen = draw(st.sampled_from(raw))["spec"]
    where = draw(st.sampled_from([chosen, *listed(chosen.get("devices"))]))
    key = draw(st.sampled_from(sorted(UNKNOWN_FIELDS)))
    where[key] = copy.deepcopy(UNKNOWN_FIELDS[key])


def _pool_numbers(raw: Slices, draw: Draw) -> None:
    spec = draw(st.sampled_from(raw))["spec"]
    pool = spec["pool"] = section(spec.get("pool"))
    key = draw(st.sampled_from(["generation", "resourceSliceCount"]))
    pool[key] = draw(st.sampled_from([0, -1, 2, 10**6, 2**63, "1", 1.0, None]))


def _drop_slice(raw: Slices, draw: Draw) -> None:
    if len(raw) > 1:
        raw.pop(draw(st.integers(0, len(raw) - 1)))


def _attribute(raw: Slices, draw: Draw) -> None:
    devices = [d for d in devices_of(raw) if section(d.get("attributes"))]
    if not devices:
        return
    attributes = draw(st.sampled_from(devices))["attributes"]
    key = draw(st.sampled_from(sorted(attributes)))
    attributes[key] = draw(
        st.sampled_from(
            [{"string": 7}, {"ints": [1]}, {"bool": "true"}, {"int": 1, "string": "x"}, {}]
        )
        | json_values
    )


def _instance_elsewhere(raw: Slices, draw: Draw) -> None:
    """A static 1g.10gb instance published again at another memory slice, which another
    instance of its GPU may cover."""
    static = [d for d in devices_of(raw) if "-mig-1g10gb-19-" in d["name"]]
    static = [
        d for d in static if any(k.startswith("memorySlice") for k in section(d.get("capacity")))
    ]
    if not static:
        return
    copied = copy.deepcopy(draw(st.sampled_from(static)))
    start = draw(st.integers(0, 6))
    copied["name"] = f"{copied['name'].rsplit('-', 1)[0]}-{start}"
    capacity = copied["capacity"]
    for key in [k for k in capacity if k.startswith("memorySlice")]:
        del capacity[key]
    capacity[f"memorySlice{start}"] = {"value": "1"}
    into = draw(st.sampled_from(raw))["spec"].get("devices")
    if isinstance(into, list):
        into.append(copied)


def _anywhere(raw: Slices, draw: Draw) -> None:
    where = draw(st.sampled_from([*(s["spec"] for s in raw), *devices_of(raw)[:8]]))
    if where:
        where[draw(st.sampled_from(sorted(where)))] = draw(json_values)


MUTATIONS = [
    _consume_another_set,
    _duplicate_device,
    _quantity,
    _drop,
    _unknown_field,
    _pool_numbers,
    _drop_slice,
    _attribute,
    _instance_elsewhere,
    _anywhere,
]


class Mutated:
    """A fixture's slices after some mutations, shown by their names (the slices run to tens
    of kilobytes)."""

    def __init__(self, fixture: str, mutations: list[str], raw: Slices) -> None:
        self.fixture, self.mutations, self.raw = fixture, mutations, raw

    def __repr__(self) -> str:
        return f"Mutated({self.fixture}, {', '.join(self.mutations)})"


@st.composite
def mutated_slices(draw: st.DrawFn) -> Mutated:
    name = draw(st.sampled_from(SLICE_FIXTURES))
    raw = fixture_slices(name)
    applied = []
    for _ in range(draw(st.integers(1, 2))):
        mutation = draw(st.sampled_from(MUTATIONS))
        mutation(raw, draw)
        applied.append(mutation.__name__)
    return Mutated(name, applied, raw)
