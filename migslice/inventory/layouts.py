"""Per-GPU layouts of a node, from the most precise source available.

Three sources, tried in order; :attr:`NodeState.source` says which one answered and
:attr:`NodeState.notes` why a better one was not used:

``agent``
    The node agent's ``migslice.io/gpu-layout`` annotation: every GPU's instances with their
    real placements and NVML busy flags. Exact, as of the agent's last report; used when it
    parses, is legal for the GPU model and agrees with the node's allocatable counts.
``mig-parted``
    The mig-parted config that ``nvidia.com/mig.config`` names (from the configured ConfigMap,
    else MIG Manager's built-in names ``all-disabled``, ``all-enabled``, ``all-balanced``,
    ``all-<profile>``), applied to ``nvidia.com/gpu.count`` GPUs. Exact per-GPU instance
    counts when MIG Manager reports ``success`` and the counts agree with allocatable;
    placements are the engine's legal arrangement (mig-parted does not choose starts, so
    they may differ from the hardware's, which does not change what fits).
``counts``
    Only the node's allocatable ``nvidia.com/mig-*`` counts: which profiles exist and how
    many are free, not on which GPU. Filtering stays exact; scoring falls back to node-level
    occupancy.

Which instances pods hold: the device plugin, not the scheduler, picks the device, so the
inventory knows per node and profile how many instances are held (bound and assumed pods)
but not which. Instances the agent reports busy count first; the rest are assigned one by one
to the instance the extender's own ranking picks (:mod:`migslice.inventory.picking`), so the
inventory assumes what the extender steers pods towards.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from migslice.inventory.dra import DraInputs, resolve_dra
from migslice.inventory.picking import Occupancy, best_free_instance, held_slices
from migslice.inventory.state import GpuState, LayoutSource, NodeState, mig_resource
from migslice.mig import (
    CATALOG,
    MIG_RESOURCE_PREFIX,
    WHOLE_GPU_RESOURCE,
    Catalog,
    FitResult,
    GpuModel,
    Placed,
    fit,
    model_from_nvml,
    violations,
)
from migslice.mig.migparted import MigPartedEntry, gpu_pci_ids, per_gpu_counts
from migslice.objects.dra_pool import DraMode
from migslice.objects.nodes import NodeFacts
from migslice.objects.pod_gpus import is_gpu_resource
from migslice.objects.pods import PodFacts
from migslice.whynot import WhyNot

__all__ = ["GpuState", "LayoutSource", "NodeState", "mig_resource"]

MIG_OK_STATES = frozenset({"success"})
MAX_HELD_KEPT = 256
"""Counts of held resources whose pick a layout remembers (a bound: more are picked again)."""


def resource_names(model: GpuModel) -> dict[str, str]:
    """Profile name -> mixed-strategy resource name for ``model``."""
    return {p.name: mig_resource(p.name) for p in model.profiles}


def model_of(facts: NodeFacts, catalog: Catalog = CATALOG) -> GpuModel | None:
    """The node's GPU model: by product label, else the agent's product, else NVML's table."""
    if facts.product:
        model = catalog.by_product(facts.product)
        if model is not None:
            return model
    report = facts.agent
    if report is None:
        return None
    if report.product:
        model = catalog.by_product(report.product)
        if model is not None:
            return model
    if report.profiles:
        try:
            return model_from_nvml(
                report.product or "unknown", report.pci_device_id or 0, report.profiles
            )
        except ValueError:
            return None
    return None


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """What a node's facts (and the mig-parted configs) say of its GPUs, before any pod: the
    model, each GPU's instances and agent-reported busy flags, and which source answered.
    ``gpus`` is None when no source gave a layout (``source`` is then ``counts``).

    ``held`` remembers, per count of resources held, which instances they hold
    (:func:`resolve_node`'s pick depends on the layout and those counts alone): nodes sharing
    a layout (:func:`layout_key`) with the same counts share the pick. Not part of the
    value."""

    model: GpuModel | None
    source: LayoutSource
    gpus: tuple[GpuState, ...] | None
    busy: tuple[tuple[bool, ...], ...]
    notes: tuple[str, ...]
    held: dict[tuple[tuple[str, int], ...], tuple[GpuState, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )


def node_layout(
    facts: NodeFacts,
    mig_configs: Mapping[str, tuple[MigPartedEntry, ...]] | None = None,
    *,
    catalog: Catalog = CATALOG,
) -> NodeLayout:
    """The node's :class:`NodeLayout`: a pure function of its facts and the configs, so a
    caller may keep it while only the node's pods change."""
    model = model_of(facts, catalog)
    notes: list[str] = list(facts.problems)
    gpus: tuple[GpuState, ...] | None = None
    source = LayoutSource.COUNTS
    busy: tuple[tuple[bool, ...], ...] = ()
    if model is not None and facts.agent is not None:
        found = _from_agent(facts, model, notes)
        if found is not None:
            gpus, busy, source = found[0], found[1], LayoutSource.AGENT
    elif facts.agent_error:
        notes.append(facts.agent_error)
    if gpus is None and model is not None and facts.mig_config:
        gpus = _from_mig_parted(facts, model, mig_configs or {}, notes)
        if gpus is not None:
            source = LayoutSource.MIG_PARTED
            busy = tuple(tuple(False for _ in gpu.instances) for gpu in gpus)
    if gpus is None or model is None:
        return NodeLayout(model, LayoutSource.COUNTS, None, (), tuple(notes))
    return NodeLayout(model, source, gpus, busy, tuple(notes))


def layout_key(facts: NodeFacts) -> tuple[object, ...] | None:
    """Everything of ``facts`` that :func:`node_layout` reads, for nodes to share one
    derivation: with the same configs and catalog, nodes of equal keys have equal layouts (a
    cluster's thousands of nodes come in a few shapes). None for a node with an agent report,
    which is its own."""
    if facts.agent is not None:
        return None
    return (
        facts.product,
        facts.gpu_count,
        facts.mig_config,
        facts.mig_config_state,
        facts.allocatable,
        facts.problems,
        facts.agent_error,
    )


def resolve_node(
    facts: NodeFacts,
    pods: Iterable[PodFacts],
    mig_configs: Mapping[str, tuple[MigPartedEntry, ...]] | None = None,
    *,
    catalog: Catalog = CATALOG,
    layout: NodeLayout | None = None,
    dra: DraInputs | None = None,
) -> NodeState:
    """Build a node's :class:`NodeState` from its facts and the pods that hold resources on it
    (``layout``: the node's :func:`node_layout` of the same facts and configs, if kept;
    ``dra``: its ``gpu.nvidia.com`` pool and claims when NVIDIA's DRA driver publishes it)."""
    if dra is not None and not serves_through_device_plugin(facts):
        return _dra_state(facts, pods, dra)
    if layout is None:
        layout = node_layout(facts, mig_configs, catalog=catalog)
    if dra is not None:
        layout = _with_note(layout, DEVICE_PLUGIN_WINS)
    allocated_counter: Counter[str] = Counter()
    for pod in pods:
        for resource, count in pod.requests:
            allocated_counter[resource] += count
    allocated = tuple(sorted(allocated_counter.items()))
    free = tuple(
        (name, max(0, count - allocated_counter.get(name, 0))) for name, count in facts.allocatable
    )
    model, gpus = layout.model, layout.gpus
    beside = dra is not None
    if gpus is None or model is None:
        return NodeState(
            facts, model, LayoutSource.COUNTS, (), allocated, free, layout.notes, None, beside
        )
    held = layout.held.get(allocated)
    if held is None:
        held = _assign_held(model, gpus, layout.busy, allocated_counter)
        if len(layout.held) >= MAX_HELD_KEPT:
            layout.held.clear()
        layout.held[allocated] = held
    return NodeState(facts, model, layout.source, held, allocated, free, layout.notes, None, beside)


DEVICE_PLUGIN_WINS = (
    "DRA ResourceSlices of gpu.nvidia.com not used: the node's allocatable has NVIDIA "
    "device-plugin GPU resources, which kube-scheduler serves from the device plugin (KEP-5004), "
    "and both on one node would hand out the same GPUs; migslice does not re-partition it"
)


def serves_through_device_plugin(facts: NodeFacts) -> bool:
    """Whether the node's allocatable has NVIDIA device-plugin GPU resources (whole, shared or
    MIG). kube-scheduler serves an extended resource from the device plugin on a node whose
    allocatable has it, and from DRA only where it does not (KEP-5004,
    ``extendeddynamicresources.go``); migslice reads such a node as a device-plugin node even
    when the DRA driver publishes slices for it too."""
    return any(count > 0 and is_gpu_resource(resource) for resource, count in facts.allocatable)


def _dra_state(facts: NodeFacts, pods: Iterable[PodFacts], dra: DraInputs) -> NodeState:
    resolved = resolve_dra(pods, dra)
    pool = dra.pool
    source = LayoutSource.DRA_DYNAMIC if pool.mode is DraMode.DYNAMIC else LayoutSource.DRA_STATIC
    notes = (*facts.problems, *resolved.notes)
    return NodeState(
        facts,
        pool.model,
        source,
        resolved.gpus,
        resolved.allocated,
        resolved.free,
        notes,
        resolved.view,
    )


def _with_note(layout: NodeLayout, note: str) -> NodeLayout:
    notes = (*layout.notes, note)
    return NodeLayout(layout.model, layout.source, layout.gpus, layout.busy, notes)


def _mig_counts_from_allocatable(facts: NodeFacts, model: GpuModel) -> Counter[str]:
    by_resource = {resource: name for name, resource in resource_names(model).items()}
    counts: Counter[str] = Counter()
    for resource, count in facts.allocatable:
        if resource.startswith(MIG_RESOURCE_PREFIX) and count:
            counts[by_resource.get(resource, resource)] += count
    return counts


def _from_agent(
    facts: NodeFacts, model: GpuModel, notes: list[str]
) -> tuple[tuple[GpuState, ...], tuple[tuple[bool, ...], ...], LayoutSource] | None:
    report = facts.agent
    assert report is not None
    gpus: list[GpuState] = []
    busy: list[tuple[bool, ...]] = []
    seen: Counter[str] = Counter()
    for gpu in report.gpus:
        if gpu.error:
            notes.append(
                f"the agent could not read GPU {gpu.index} ({gpu.error}); its annotation "
                "is not used"
            )
            return None
        instances = tuple(Placed(i.start, i.profile, i.size) for i in gpu.instances)
        problems = violations(model, instances)
        if problems:
            notes.append(
                f"agent layout of GPU {gpu.index} is not legal on {model.key}: {problems[0]}"
            )
            return None
        order = sorted(range(len(instances)), key=lambda k: instances[k])
        gpus.append(GpuState(gpu.index, gpu.mig_enabled, tuple(instances[k] for k in order)))
        busy.append(tuple(gpu.instances[k].busy for k in order))
        seen.update(i.profile for i in instances)
    expected = _mig_counts_from_allocatable(facts, model)
    if seen != expected:
        notes.append(
            f"agent annotation shows {_describe(seen)}; allocatable shows {_describe(expected)}"
        )
        return None
    return tuple(gpus), tuple(busy), LayoutSource.AGENT


def _from_mig_parted(
    facts: NodeFacts,
    model: GpuModel,
    configs: Mapping[str, tuple[MigPartedEntry, ...]],
    notes: list[str],
) -> tuple[GpuState, ...] | None:
    name = facts.mig_config or ""
    if facts.mig_config_state is not None and facts.mig_config_state not in MIG_OK_STATES:
        notes.append(f"mig-parted config {name!r} not applied (state {facts.mig_config_state})")
        return None
    if not facts.gpu_count:
        notes.append(f"mig-parted config {name!r} needs the nvidia.com/gpu.count label")
        return None
    report = facts.agent
    reported = report.pci_device_id if report is not None else None
    pci = gpu_pci_ids(model, facts.product, reported)
    own = report.gpu_pci_ids() if report is not None else None  # each GPU's, where published
    per_gpu = per_gpu_counts(
        name, model, facts.gpu_count, configs=configs, pci_device_ids=pci, gpu_pci_ids=own
    )
    if isinstance(per_gpu, WhyNot):
        notes.append(per_gpu.message)
        return None
    gpus: list[GpuState] = []
    total: Counter[str] = Counter()
    fits: dict[tuple[str, ...], FitResult] = {}  # GPUs of a node mostly share one layout
    for index, (enabled, counts) in enumerate(per_gpu):
        wanted = tuple(profile for profile, count in sorted(counts.items()) for _ in range(count))
        if not all(model.has_profile(p) for p in wanted):
            notes.append(f"mig-parted config {name!r} names a profile {model.key} lacks")
            return None
        result = fits.get(wanted)
        if result is None:
            result = fits[wanted] = _fit_empty(model, wanted)
        if not result.feasible:
            notes.append(f"mig-parted config {name!r} GPU {index}: {result.reason}")
            return None
        gpus.append(GpuState(index, enabled, result.layout))
        total.update(wanted)
    expected = _mig_counts_from_allocatable(facts, model)
    if total != expected:
        notes.append(
            f"mig-parted config {name!r} gives {_describe(total)}; allocatable shows "
            f"{_describe(expected)}"
        )
        return None
    return tuple(gpus)


@functools.lru_cache(maxsize=256)
def _fit_empty(model: GpuModel, wanted: tuple[str, ...]) -> FitResult:
    """The layout of ``wanted`` on an empty GPU of ``model``: the same for every GPU a config
    names (a pure function of its inputs, remembered for the few configs a cluster uses)."""
    return fit(model, wanted)


def _assign_held(
    model: GpuModel,
    gpus: tuple[GpuState, ...],
    busy: tuple[tuple[bool, ...], ...],
    allocated: Mapping[str, int],
) -> tuple[GpuState, ...]:
    held = [list(flags) for flags in busy]
    already = Counter(
        placed.profile
        for g, gpu in enumerate(gpus)
        for k, placed in enumerate(gpu.instances)
        if held[g][k]
    )
    occupancy = [Occupancy(gpu.index, gpu.instances, held[g]) for g, gpu in enumerate(gpus)]
    used = held_slices(occupancy, model.memory_slices)  # kept up to date pick by pick
    for profile_name, resource in sorted(resource_names(model).items()):
        need = allocated.get(resource, 0) - already[profile_name]
        while need > 0:
            pick = best_free_instance(occupancy, profile_name, model.memory_slices, used)
            if pick is None:
                break
            held[pick.gpu][pick.instance] = True
            used[pick.gpu] += gpus[pick.gpu].instances[pick.instance].size
            need -= 1
    whole_need = allocated.get(WHOLE_GPU_RESOURCE, 0)
    result: list[GpuState] = []
    for g, gpu in enumerate(gpus):
        whole = False
        if not gpu.mig_enabled and whole_need > 0:
            whole, whole_need = True, whole_need - 1
        result.append(GpuState(gpu.index, gpu.mig_enabled, gpu.instances, tuple(held[g]), whole))
    return tuple(result)


def _describe(counts: Counter[str]) -> str:
    if not counts:
        return "no MIG instances"
    return ", ".join(f"{n} x {name}" for name, n in sorted(counts.items()))
