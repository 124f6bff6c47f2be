"""Re-partition planning: pending MIG demand + the cluster's layouts -> a RepartitionPlan.

Pure data in, pure data out; the controller applies a plan through MIG Manager (a mig-parted
config per node, selected by the node label ``nvidia.com/mig.config``), and ``migslice plan``
shows one without applying it.

Rules, in the order they are applied:

1. Only pods whose demand has waited ``min_pending_s`` count (no thrashing on a burst), only
   their MIG units (a whole-GPU request needs MIG disabled: a mode change is out of scope), and
   only pods that no free instance in the cluster could serve already
   (:func:`migslice.repartition.pending.eligible_demand`, which the carve planner shares).
2. Only **idle** GPUs change: MIG enabled, no instance held by a pod, none busy per the node
   agent. mig-parted wipes every instance of a GPU whose config changes and fails on busy ones.
   A node whose layout is known only by counts is used only when nothing on it is held.
3. Nodes MIG Manager is working on (``pending``/``rebooting``), nodes changed less than
   ``cooldown_s`` ago, nodes the caller holds back (``held``: e.g. backed off after a failed
   re-partition) and nodes whose model lacks a profile are left alone.
4. Pods are served largest profile first. A pod's instances go onto a GPU already chosen for
   this plan when they fit there, else onto a fresh idle GPU, preferring nodes already in the
   plan (MIG Manager pauses a node's device plugin while it works: fewer nodes, less
   disruption), then nodes with the fewest idle GPUs that suffice (best fit: nodes with many
   idle GPUs stay whole for pods that need several), then by name.
5. A changed GPU gets a maximal layout (nothing more fits) that holds the planned instances;
   among those, the one whose other instances serve the expected demand best, then the one
   closest to what the GPU had (hysteresis), then the one with the most instances. Expected
   demand is ``expected_mix`` if given; else each resource's share of the compute slices pods
   hold across the cluster plus those waiting, less its share of the free slices that GPUs in
   use already offer (what is lacking), plus a tenth of its demand share to break ties.
   Without this a GPU carved for one 3g pod fills up with 1g slices nobody asks for (the
   packing benchmark measured it). While the stranding rule is on
   (:func:`migslice.mig.stranding.strand_guard` over what the pods on device-plugin nodes
   hold, :func:`migslice.repartition.shapes.held_mix`, or ``strand_guard`` when the caller
   knows it), a layout that fills the GPU's memory with compute slices left unused
   (``3g.40gb`` + ``3g.40gb``) ranks after every other: ``3g`` + ``2g`` + ``2g`` wins.
6. A node's config lists every GPU whose layout is known (mig-parted leaves a GPU whose layout
   already matches untouched), so the config the node label names describes the whole node.
   Each entry's ``device-filter`` lists its GPUs' own PCI device ids where the node agent
   publishes them (else every id of the node's model), so each GPU gets its layout whatever
   its id; a GPU whose id is another model's (an A100-40GB among A100-80GBs, a display GPU)
   is neither planned nor listed, and no entry selects it.
7. At most ``max_nodes_in_flight`` nodes are re-partitioning at once in each node pool (the
   GPU product; with ``budget_per_pool`` off, in the whole cluster), counting those MIG Manager
   is already working on except quarantined ones
   (``migslice.repartition.migmanager.quarantine``: MIG Manager left them ``pending`` past
   the deadline); the rest of the demand waits for the next round. A stuck node thus holds
   back only its own pool, and only until its deadline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from migslice.inventory import LayoutSource, NodeState
from migslice.mig import (
    GpuModel,
    Layout,
    make_layout,
)
from migslice.mig.migparted import mig_parted_entries, profile_counts
from migslice.mig.stranding import strand_guard
from migslice.names import MIG_TRANSITION_STATES, OWN_CONFIG_PREFIX, WHOLE_GPU_RESOURCE
from migslice.objects.pod_selection import PodSelection
from migslice.repartition.modes import mig_manager_absence
from migslice.repartition.pending import PendingPod, can_place, eligible_demand, serving_order
from migslice.repartition.plans import GpuChange, NodeChange, RepartitionPlan
from migslice.repartition.settings import PlanSettings
from migslice.repartition.shapes import LayoutCache, Layouts, demand_mix, held_mix
from migslice.scheduling.demand import PodDemand
from migslice.whynot import WhyNot

DEFAULT_PLAN_SETTINGS = PlanSettings()
MAX_LABEL_VALUE = 63
"""The longest label value the API server accepts (a config name is one)."""


@dataclass(slots=True)
class _Gpu:
    node: NodeState
    model: GpuModel
    index: int
    old: Layout
    new: Layout = ()
    planned: tuple[str, ...] = ()
    chosen: bool = False


def config_name(
    node: str,
    gpus: Sequence[GpuChange],
    counts: Mapping[int, tuple[tuple[str, int], ...]] | None = None,
    *,
    anew: bool = False,
) -> str:
    """``migslice-<node>-<8 hex>``: the hash covers the new layouts, so a name is a content.
    ``counts``: each GPU's :func:`profile_counts` of its new layout, where known. ``anew``:
    another name for the same content (the first one is the node's label already, and MIG
    Manager applies a config only when the label changes value).

    The name is the value of the node's ``nvidia.com/mig.config`` label, which the API server
    holds to 63 characters (it refused the label of a node named over 45, e.g. a GKE node
    ``gke-<cluster>-<pool>-<hash>-<id>``, with a 422 every round until the deadline
    quarantined the node, which was released and planned again). A longer name keeps the
    node name's first characters and hashes the whole node name in with the layouts, so two
    nodes alike in those characters never share a config."""
    digest = hashlib.sha256()
    for change in sorted(gpus, key=lambda c: c.index):
        new = counts[change.index] if counts is not None else profile_counts(change.new)
        digest.update(f"{change.index}:{new};".encode())
    if anew:
        digest.update(b"anew;")
    name = f"{OWN_CONFIG_PREFIX}{node}-{digest.hexdigest()[:8]}"
    if len(name) <= MAX_LABEL_VALUE:
        return name
    digest.update(f"node:{node}".encode())
    room = MAX_LABEL_VALUE - len(OWN_CONFIG_PREFIX) - len("-") - 8
    return f"{OWN_CONFIG_PREFIX}{node[:room]}-{digest.hexdigest()[:8]}"


def _has_no_gpu(node: NodeState) -> bool:
    """No NVIDIA GPU at all: no GPU product label, no ``nvidia.com/*`` allocatable, no DRA
    pool, no model (the extender's "node has no NVIDIA GPU")."""
    facts = node.facts
    return node.model is None and node.dra is None and not facts.product and not facts.allocatable


def _idle_gpus(
    node: NodeState,
    cooldowns: Mapping[str, float],
    settings: PlanSettings,
    held: Mapping[str, str],
) -> list[_Gpu] | WhyNot:
    """The node's GPUs that may change, or why none may (a node held back says why first: a
    DRA node whose pool is incomplete or of an unknown shape has no model either)."""
    if node.name in held:
        return WhyNot("held", held[node.name])
    model = node.model
    if model is None:
        return WhyNot("unknown-model", "GPU model unknown")
    state = node.facts.mig_config_state
    if state in MIG_TRANSITION_STATES:
        return WhyNot("mig-manager-busy", f"MIG Manager is applying a config (state {state})")
    if node.facts.is_carving:
        return WhyNot("carving", "the node agent is carving its GPUs (migslice.io/carve-state)")
    absent = mig_manager_absence(node.facts)
    if absent is not None:
        return absent
    since = cooldowns.get(node.name)
    if since is not None and since < settings.cooldown_s:
        return WhyNot("cooldown", f"changed {since:.0f}s ago (cooldown {settings.cooldown_s:.0f}s)")
    foreign = node.other_model_gpus()
    if node.source == LayoutSource.COUNTS:
        if any(count for _, count in node.allocated):
            return WhyNot("counts-held", "layout known only by counts and some of it is held")
        agent = node.facts.agent
        if node.allocatable_of(WHOLE_GPU_RESOURCE) or (
            agent is not None and any(not g.mig_enabled and not g.error for g in agent.gpus)
        ):
            # which GPU has MIG off is not known to the counts (nor is the agent's report,
            # which says so, used: it disagrees with allocatable, as while the device plugin
            # restarts): a config for it would change its MIG mode, and mig-parted resets
            # every GPU of the node to do that
            return WhyNot(
                "counts-mig-off",
                "layout known only by counts and some GPU has MIG off (nvidia.com/gpu, or the "
                "node agent's report): which one is not known",
            )
        count = node.facts.gpu_count or 0
        return [_Gpu(node, model, i, ()) for i in range(count) if i not in foreign]
    unidentified = node.unidentified_holds()
    idle = [
        _Gpu(node, model, gpu.index, gpu.instances)
        for gpu in node.gpus
        if gpu.mig_enabled
        and gpu.is_idle
        and gpu.index not in foreign
        and not (unidentified and any(i.profile in unidentified for i in gpu.instances))
    ]
    if idle:
        return idle
    if unidentified and any(g.mig_enabled and g.is_idle for g in node.gpus):
        return WhyNot(
            "held-unidentified",
            f"pods hold {', '.join(sorted(unidentified))} instances the agent does not see in "
            "use: any GPU with one may hold theirs",
        )
    return WhyNot("no-idle-gpu", "no idle MIG GPU")


def _profiles_for(unit_resource: str, model: GpuModel) -> str | None:
    profile = model.profile_by_resource(unit_resource)
    return profile.name if profile is not None else None


def plan(
    nodes: Sequence[NodeState],
    pending: Iterable[PendingPod],
    *,
    cooldowns: Mapping[str, float] | None = None,
    settings: PlanSettings = DEFAULT_PLAN_SETTINGS,
    held: Mapping[str, str] | None = None,
    quarantined: Mapping[str, str] | None = None,
    layout_cache: LayoutCache | None = None,
) -> RepartitionPlan:
    """Plan new layouts for idle GPUs so that waiting pods can be placed (see module doc).

    ``held`` maps nodes to leave alone to the reason (reported in ``skipped_nodes``);
    ``quarantined`` nodes are left alone too, and do not count as in flight (rule 7).
    """
    cooldowns = cooldowns or {}
    quarantined = quarantined or {}
    held = {**(held or {}), **quarantined}
    pending_pods = list(pending)
    selections = {p.demand.key: p.selection for p in pending_pods}
    waiting, unserved = eligible_demand(pending_pods, nodes, settings.min_pending_s)

    by_node: dict[str, list[_Gpu]] = {}
    skipped: list[tuple[str, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        if _has_no_gpu(node):
            continue  # a CPU node is no node left alone (it said "GPU model unknown")
        idle = _idle_gpus(node, cooldowns, settings, held)
        if isinstance(idle, WhyNot):
            skipped.append((node.name, idle.message))
        elif idle:
            by_node[node.name] = idle

    in_flight: dict[str, int] = {}
    for n in nodes:
        if n.facts.mig_config_state in MIG_TRANSITION_STATES and n.name not in quarantined:
            pool = settings.pool_of(n)
            in_flight[pool] = in_flight.get(pool, 0) + 1
    budget = _Budget(settings, in_flight, (gpus[0].node for gpus in by_node.values()))
    order = _NodeOrder(by_node)
    served: dict[str, list[str]] = {}

    guard = settings.strand_guard
    if guard is None:
        guard = strand_guard(held_mix(nodes))
    mix = demand_mix(nodes, pending_pods, settings.expected_mix)
    layouts = Layouts(mix, layout_cache, strand_guard=guard)
    if len(waiting) > 1:
        waiting.sort(key=serving_order)
    for pod in waiting:
        placed, held_back = _place(pod, selections[pod.key], order, budget, layouts)
        if placed is None:
            reason = "re-partition budget in use" if held_back else "no idle GPU can take it"
            unserved.append((pod.key, reason))
        else:
            served.setdefault(placed, []).append(pod.key)

    changes = [
        change
        for name in sorted(served)
        if (change := _node_change(by_node[name], tuple(served[name]))) is not None
    ]
    return RepartitionPlan(tuple(changes), tuple(unserved), tuple(skipped))


def _node_change(node_gpus: Sequence[_Gpu], serves: tuple[str, ...]) -> NodeChange | None:
    """The named mig-parted config for the GPUs of one node the plan chose (rule 6)."""
    chosen = sorted((g for g in node_gpus if g.chosen), key=lambda g: g.index)
    counts: dict[int, tuple[tuple[str, int], ...]] = {}
    changed: list[GpuChange] = []
    for g in chosen:
        counts[g.index] = new = profile_counts(g.new)
        if new != profile_counts(g.old):
            changed.append(GpuChange(g.index, g.old, make_layout(g.new)))
    if not changed:
        return None
    gpu_changes = tuple(changed)
    node = chosen[0].node
    model = chosen[0].model
    # Each GPU is selected by its own PCI device id where the agent publishes it (rule 6):
    # GPU 0's id alone left a GPU of another id unselected, its planned layout never applied.
    report = node.facts.agent
    pci_ids = report.gpu_pci_ids() if report is not None else {}
    foreign = node.other_model_gpus()
    # The config describes every GPU of the model whose layout is known, so that the config
    # the node label names stays a full description; mig-parted leaves GPUs whose layout
    # already matches untouched.
    described: dict[int, Layout] = {
        gpu.index: gpu.instances
        for gpu in node.gpus
        if gpu.mig_enabled and gpu.index not in foreign
    }
    described.update({c.index: c.new for c in gpu_changes})
    entries = mig_parted_entries(model, described, pci_ids=pci_ids)
    name = config_name(node.name, gpu_changes, counts)
    if name == node.facts.mig_config:
        # the node's layout left the config its label names (carved meanwhile, say): labelled
        # with the same value, MIG Manager would never apply it (it acts on a label change)
        name = config_name(node.name, gpu_changes, counts, anew=True)
    return NodeChange(
        node=node.name,
        model_key=model.key,
        config_name=name,
        previous_config=node.facts.mig_config,
        gpus=gpu_changes,
        serves=serves,
        entries=entries,
    )


class _Budget:
    """How many more nodes each pool may start (rule 7), given the plan's nodes so far."""

    def __init__(
        self, settings: PlanSettings, in_flight: Mapping[str, int], nodes: Iterable[NodeState]
    ) -> None:
        self._settings = settings
        self._in_flight = in_flight
        self._pools = {settings.pool_of(n) for n in nodes}
        """The pools of ``nodes``, those the plan may change."""

    def exceeded_by(self, node: NodeState, nodes_in_plan: Mapping[str, NodeState]) -> bool:
        """Whether adding ``node`` to the plan would start one node too many in its pool."""
        if node.name in nodes_in_plan:
            return False
        return self._full(self._settings.pool_of(node), nodes_in_plan)

    def spent(self, nodes_in_plan: Mapping[str, NodeState]) -> bool:
        """Whether no node outside the plan may join it (every pool is full)."""
        return all(self._full(pool, nodes_in_plan) for pool in self._pools)

    def _full(self, pool: str, nodes_in_plan: Mapping[str, NodeState]) -> bool:
        planned = sum(1 for n in nodes_in_plan.values() if self._settings.pool_of(n) == pool)
        return planned + self._in_flight.get(pool, 0) >= self._settings.max_nodes_in_flight


class _NodeOrder:
    """The nodes a pod's instances may go to, in rule 4's order: nodes already in the plan,
    then the fewest idle GPUs, then the name. The idle counts are the plan's start (a node's
    GPUs chosen for this plan stay in its count), so the order of the nodes not in the plan
    is fixed: sorted once, not once per pod (with thousands of nodes and hundreds of pending
    pods, per pod was minutes)."""

    def __init__(self, by_node: Mapping[str, list[_Gpu]]) -> None:
        self.by_node = by_node
        self._ranked = sorted(by_node, key=lambda name: (len(by_node[name]), name))
        self._rank = {name: n for n, name in enumerate(self._ranked)}
        self.in_plan: dict[str, NodeState] = {}

    def choose(self, name: str) -> None:
        self.in_plan.setdefault(name, self.by_node[name][0].node)

    def __iter__(self) -> Iterator[str]:
        planned = sorted(self.in_plan, key=self._rank.__getitem__)
        yield from planned
        yield from (name for name in self._ranked if name not in self.in_plan)


def _place(
    pod: PodDemand, selection: PodSelection, order: _NodeOrder, budget: _Budget, layouts: Layouts
) -> tuple[str | None, bool]:
    """Put all of the pod's instances on one node's GPUs, of a node kube-scheduler would put
    it on (:func:`can_place`, ``selection``: the pod's node selection): the node's name (or
    None), and whether a node that could have taken the pod was held back by the budget."""
    held_back = False
    for name in order:
        node_gpus = order.by_node[name]
        node = node_gpus[0].node
        over_budget = budget.exceeded_by(node, order.in_plan)
        if over_budget and held_back:
            if budget.spent(order.in_plan):
                break  # the budget holds back every node left
            continue  # nothing more to learn from a node the budget holds back
        if not can_place(pod, selection, node):
            continue
        wanted: list[str] = []
        for unit in pod.units:
            profile = _profiles_for(unit.resource, node_gpus[0].model)
            if profile is None:
                break
            wanted.extend([profile] * unit.count)
        else:
            if over_budget:
                held_back = _try(wanted, node_gpus, layouts, dry_run=True) is not None
                continue
            trial = _try(wanted, node_gpus, layouts)
            if trial is not None:
                for gpu, layout in trial:
                    gpu.new = layout
                    gpu.chosen = True
                order.choose(name)
                return name, False
    return None, held_back


def _try(
    wanted: list[str], node_gpus: list[_Gpu], layouts: Layouts, dry_run: bool = False
) -> list[tuple[_Gpu, Layout]] | None:
    """Give each instance a GPU of the node: GPUs already chosen first, then fresh ones.

    A chosen GPU's planned instances are still only a plan, so its layout is chosen anew
    around the grown demand.
    """
    ordered = sorted(node_gpus, key=lambda g: (not g.chosen, g.index))
    demand: dict[int, dict[str, int]] = {}  # what each GPU asked so far would hold
    chosen: dict[int, tuple[_Gpu, Layout]] = {}
    for profile in wanted if len(wanted) == 1 else sorted(wanted, key=_larger_first):
        for gpu in ordered:
            asked = demand.get(id(gpu))
            grown = dict(asked) if asked is not None else _counted(gpu.planned)
            grown[profile] = grown.get(profile, 0) + 1
            layout = layouts.containing(gpu.model, grown, gpu.old)
            if layout is not None:
                demand[id(gpu)] = grown
                chosen[id(gpu)] = (gpu, layout)
                break
        else:
            return None
    if dry_run:
        return list(chosen.values())
    for gpu, _ in chosen.values():
        gpu.planned = tuple(name for name, n in demand[id(gpu)].items() for _ in range(n))
    return list(chosen.values())


def _larger_first(profile: str) -> int:
    return -int(profile.split("g.")[0])


def _counted(names: Sequence[str]) -> dict[str, int]:
    """Instances per profile, in the order first named."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts
