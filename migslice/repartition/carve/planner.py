"""Carve planning: pending MIG demand + node states -> per GPU the instances to destroy and to
create, on GPUs in use too, never touching an instance a pod may hold. Pure: the controller,
``migslice plan`` and the simulator call the same :func:`plan_carve`.

Rules, in the order they are applied:

1. Demand is what the MIG Manager planner serves
   (:func:`migslice.repartition.pending.eligible_demand`): pods unschedulable for
   ``min_pending_s``, only MIG units, only pods no free instance could serve now.
2. Only nodes in carve mode (label ``migslice.io/repartition-mode=carve``, or the default),
   not DRA nodes (:func:`migslice.repartition.modes.dra_exclusion`),
   with the node agent's exact layout (``migslice.io/gpu-layout`` agreeing with allocatable),
   not carving now, not held back (backoff, another plan), not changed less than
   ``cooldown_s`` ago, and not being worked on by MIG Manager.
3. Pinned instances (busy, or maybe held: :mod:`migslice.repartition.carve.gpu`) are never
   destroyed; idle ones are destroyed only where a new instance needs them gone.
4. Pods are served largest profile first. Each instance a pod needs goes where it costs the
   cluster the least room (:mod:`migslice.mig.room`): reusing an idle instance or creating one
   at an exact start; ties go to fewer destroyed instances, then reuse, then GPU and start
   order. A pod's instances stay on one node; among the nodes that can take them all, the
   one with the least room lost wins, then fewer destroyed, then a node already in the plan
   (one device plugin restart serves several pods), then the name. While the cluster's
   stranding rule is on (:func:`migslice.mig.stranding.strand_guard` over the instances the
   pods on device-plugin nodes hold, :func:`held_mix`), an instance that would fill a GPU's
   memory with compute slices left (``3g.40gb`` next to a ``3g.40gb``) goes anywhere else
   first: the node with the fewest such instances wins before room lost is compared. While
   the full-compute rule is on (:func:`migslice.mig.stranding.complete_rule` over the same
   mix: the room beside the ``3g`` instances held is at least twice the memory the ``4g``
   held take), each GPU's pick is an instance after which ``2g``-and-larger instances can
   still use every compute slice, where one is possible (``2g`` at 0 rather than 4).
5. At most ``max_nodes_in_flight`` nodes carve at once, counting those carving now.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from migslice.inventory import LayoutSource, NodeState
from migslice.mig.room import RoomLoss, add_losses
from migslice.mig.stranding import complete_rule, strand_guard
from migslice.names import MIG_TRANSITION_STATES, MODE_CARVE, MODE_MIG_MANAGER
from migslice.objects.pod_selection import ANY_NODE, PodSelection
from migslice.repartition.carve.gpu import CarvedGpu, best_option, carved_gpus
from migslice.repartition.modes import dra_exclusion, mode_of
from migslice.repartition.pending import PendingPod, can_place, eligible_demand, serving_order
from migslice.repartition.plans import CarvePlan, GpuCarve, NodeCarve
from migslice.repartition.settings import CarveSettings
from migslice.repartition.shapes import held_mix
from migslice.scheduling.decisions import DemandKey, demand_key
from migslice.scheduling.demand import PodDemand
from migslice.whynot import WhyNot

DEFAULT_CARVE_SETTINGS = CarveSettings()


@dataclass(frozen=True, slots=True)
class CarveTrial:
    """A pod's instances on one node, each where it costs least: the room lost, the instances
    destroyed, and the node's GPUs as it leaves them (those it changes are copies)."""

    loss: RoomLoss
    destroyed: int
    gpus: list[CarvedGpu]
    strands: int = 0
    """How many of the pod's instances strand compute (while the stranding rule is on)."""

    @property
    def cost(self) -> tuple[int, RoomLoss, int]:
        """What rule 4 compares: instances stranding compute, room lost, instances destroyed."""
        return (self.strands, self.loss, self.destroyed)

    def changed(self) -> list[CarvedGpu]:
        """The GPUs the trial carves (a pod served by an idle instance changes none)."""
        return [g for g in self.gpus if g.changed]


_Cost = tuple[int, RoomLoss, int]
"""What rule 4 compares of a pod's trial on a node: instances stranding compute, room lost,
instances destroyed."""


class CarveMemo:
    """What :func:`plan_carve` learned about each node, kept for its next call while the node's
    state is the same object (a caller whose cache keeps a node's state until the node
    changes, as the extender's index does): per kind of pod (and node selection) and rules, the
    cost of that pod on
    the node as it was before a plan changed it. Costs only (a few hundred bytes a node): the
    trial of the node a plan chooses is made again then. A node whose state is another object
    (it changed, or went) is forgotten at the next call."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Known] = {}

    def cost(
        self,
        pod: PodDemand,
        selection: PodSelection,
        node: NodeState,
        rules: tuple[bool, bool],
        gpus: Callable[[str], list[CarvedGpu]],
    ) -> _Cost | None:
        """The cost of ``pod`` on ``node`` as it is (None: it does not fit, or may not go
        there), once per kind of pod, node selection and rules; ``gpus``: the node's carved
        GPUs by name, asked on a miss."""
        known = self._nodes.get(node.name)
        if known is None or known.state is not node:
            known = self._nodes[node.name] = _Known(node)
        key = (demand_key(pod), selection, *rules)
        if key not in known.costs:
            known.costs[key] = _cost_of(_try(pod, selection, node, gpus(node.name), rules))
        return known.costs[key]

    def keep_current(self, states: Mapping[str, NodeState]) -> None:
        """Forget every node whose state is not (any longer) the one in ``states``."""
        self._nodes = {
            name: known for name, known in self._nodes.items() if states.get(name) is known.state
        }


@dataclass(slots=True)
class _Known:
    state: NodeState
    costs: dict[tuple[DemandKey, PodSelection, bool, bool], _Cost | None] = field(
        default_factory=dict
    )


def _cost_of(trial: CarveTrial | None) -> _Cost | None:
    return None if trial is None else trial.cost


def carve_mode_nodes(nodes: Iterable[NodeState], default_mode: str) -> dict[str, str]:
    """Nodes the MIG Manager path must leave alone, with the reason: a DRA node, carve mode,
    a bad mode label, or a carve under way."""
    found: dict[str, str] = {}
    for node in nodes:
        mode = mode_of(node.facts, default_mode)
        dra = dra_exclusion(node)
        if dra is not None:
            found[node.name] = dra.message
        elif isinstance(mode, WhyNot):
            found[node.name] = mode.message
        elif mode == MODE_CARVE:
            found[node.name] = "in carve mode"
        elif node.facts.is_carving:
            found[node.name] = "the node agent is carving its GPUs"
    return found


def plan_carve(
    nodes: Sequence[NodeState],
    pending: Iterable[PendingPod],
    *,
    cooldowns: Mapping[str, float] | None = None,
    settings: CarveSettings = DEFAULT_CARVE_SETTINGS,
    held: Mapping[str, str] | None = None,
    carved: Mapping[str, Sequence[CarvedGpu]] | None = None,
    guard: bool | None = None,
    complete: bool | None = None,
    memo: CarveMemo | None = None,
) -> CarvePlan:
    """Plan carves for waiting pods (see the module docstring). ``cooldowns``: node -> seconds
    since its last change; ``held``: nodes to leave alone, with the reason; ``carved``: the
    :func:`carved_gpus` of nodes the caller already holds them for (they are not changed);
    ``guard``, ``complete``: the stranding and full-compute rules, when the caller knows them
    (else read from ``nodes``, :func:`held_mix`); ``memo``: what an earlier call learned about
    nodes unchanged since (the same plan, less the work)."""
    if guard is None or complete is None:
        mix = held_mix(nodes)
        guard = strand_guard(mix) if guard is None else guard
        complete = complete_rule(mix) if complete is None else complete
    pods = list(pending)
    selections = {p.demand.key: p.selection for p in pods}
    waiting, unserved = eligible_demand(pods, nodes, settings.min_pending_s)
    states = {node.name: node for node in nodes}
    if memo is not None:
        memo.keep_current(states)
    # each candidate's GPUs as the plan leaves them so far; None: not carved yet (with a
    # memo, a node the memo knows may never need it)
    candidates: dict[str, list[CarvedGpu] | None] = {}
    skipped: list[tuple[str, str]] = []
    for node in sorted(nodes, key=lambda n: n.name):
        problem = _why_not(node, cooldowns=cooldowns or {}, settings=settings, held=held or {})
        if isinstance(problem, WhyNot):
            skipped.append((node.name, problem.message))
        elif problem:
            kept = (carved or {}).get(node.name)
            if kept is not None:
                candidates[node.name] = list(kept)
            else:
                candidates[node.name] = carved_gpus(node) if memo is None else None

    def gpus_of(name: str) -> list[CarvedGpu]:
        gpus = candidates[name]
        if gpus is None:
            gpus = candidates[name] = carved_gpus(states[name])
        return gpus

    # In flight: the nodes asked to carve. One whose request was withdrawn (past the deadline)
    # while its agent's journal stays open is left off-limits for pods, not counted: an agent
    # that never answers again would otherwise hold the budget for good.
    carving = sum(
        1 for node in nodes if node.facts.is_carving and node.facts.carve_request is not None
    )
    budget = max(0, settings.max_nodes_in_flight - carving)
    served: dict[str, list[str]] = {}
    losses: dict[str, list[RoomLoss]] = {}
    tried: dict[tuple[DemandKey, PodSelection], dict[str, CarveTrial | None]] = {}
    waiting.sort(key=serving_order)
    for pod in waiting:
        chosen = _choose(
            pod,
            selections[pod.key],
            candidates,
            states,
            served=served,
            budget=budget,
            tried=tried,
            rules=(guard, complete),
            gpus_of=gpus_of,
            memo=memo if carved is None else None,
        )
        if isinstance(chosen, str):
            unserved.append((pod.key, chosen))
            continue
        name, trial = chosen
        candidates[name] = trial.gpus
        for known in tried.values():
            known.pop(name, None)
        served.setdefault(name, []).append(pod.key)
        losses.setdefault(name, []).append(trial.loss)
    changes = tuple(
        NodeCarve(
            node=name,
            gpus=tuple(
                GpuCarve(g.index, g.old, g.new_layout(), g.step())
                for g in gpus_of(name)
                if g.changed
            ),
            serves=tuple(served[name]),
            loss=add_losses(losses[name]),
        )
        for name in sorted(served)
        if any(g.changed for g in gpus_of(name))
    )
    return CarvePlan(changes, tuple(unserved), tuple(skipped))


def carve_trial(
    pod: PodDemand,
    node: NodeState,
    *,
    settings: CarveSettings = DEFAULT_CARVE_SETTINGS,
    gpus: Sequence[CarvedGpu] | None = None,
    guard: bool = False,
    complete: bool = False,
    selection: PodSelection = ANY_NODE,
) -> CarveTrial | None:
    """How serving ``pod`` alone on ``node`` would carve it, or None when rule 2 or the fit
    rules out the node. :func:`plan_carve` for one pod picks the node with the least
    ``(trial.cost, name)`` among those that are not None, so a caller that keeps trials per node
    (the simulator, node by node as nodes change) picks the same node without asking about all
    of them for every pod; for a pod that no free instance of the node serves
    (:func:`eligible_demand`), on a node not carving, :func:`plan_carve` given this node alone
    carves the trial's :meth:`CarveTrial.changed` GPUs to their new layouts. ``gpus``: the
    node's :func:`carved_gpus`, for a caller asking about several pods on one unchanged node
    (they are not changed: GPUs the trial changes are copies); ``guard``, ``complete``: the
    stranding and full-compute rules; ``selection``: the pod's node selection."""
    if _why_not(node, cooldowns={}, settings=settings, held={}) is not True:
        return None
    chosen = carved_gpus(node) if gpus is None else gpus
    return _try(pod, selection, node, chosen, (guard, complete))


def _choose(
    pod: PodDemand,
    selection: PodSelection,
    candidates: Collection[str],
    states: Mapping[str, NodeState],
    *,
    served: Mapping[str, list[str]],
    budget: int,
    tried: dict[tuple[DemandKey, PodSelection], dict[str, CarveTrial | None]],
    rules: tuple[bool, bool],
    gpus_of: Callable[[str], list[CarvedGpu]],
    memo: CarveMemo | None = None,
) -> tuple[str, CarveTrial] | str:
    """The node that takes all of the pod's instances at the least cost (rule 4), with the
    trial that says how; else why none does. Only nodes kube-scheduler would put the pod on
    count (:func:`can_place`; ``selection``: the pod's node selection). ``tried``: per kind of
    pod (:func:`demand_key`), the trial on each node, kept until the node's GPUs change (a
    trial changes none); ``gpus_of``: a candidate's GPUs as the plan leaves them so far;
    ``memo``: the costs of nodes the plan has not changed, kept between plans."""
    known = tried.setdefault((demand_key(pod), selection), {})

    def trial_on(name: str) -> CarveTrial | None:
        if name not in known:
            known[name] = _try(pod, selection, states[name], gpus_of(name), rules)
        return known[name]

    def cost_on(name: str) -> _Cost | None:
        if memo is not None and name not in served:  # the node as it was: the memo knows it
            return memo.cost(pod, selection, states[name], rules, gpus_of)
        return _cost_of(trial_on(name))

    chosen: tuple[int, RoomLoss, int, bool, str] | None = None
    full = len(served) >= budget  # then only the nodes already in the plan may take more
    for name in served if full else candidates:
        cost = cost_on(name)
        if cost is None:
            continue
        key = (cost[0], cost[1], cost[2], name not in served, name)
        if chosen is None or key < chosen:
            chosen = key
    if chosen is None:
        held_back = full and any(cost_on(n) is not None for n in candidates if n not in served)
        return "carve budget in use" if held_back else "no carve-mode GPU can take it"
    name = chosen[4]
    trial = trial_on(name)  # the trial the cost was of (a memo keeps costs only)
    assert trial is not None
    return name, trial


def _why_not(
    node: NodeState,
    *,
    cooldowns: Mapping[str, float],
    settings: CarveSettings,
    held: Mapping[str, str],
) -> WhyNot | bool:
    """Why the node may not be carved (rule 2); False for a node of the other mode."""
    mode = mode_of(node.facts, settings.default_mode)
    dra = dra_exclusion(node)
    if dra is not None:
        return dra if mode == MODE_CARVE else False
    if isinstance(mode, WhyNot):
        return mode
    if mode == MODE_MIG_MANAGER:
        return False
    if node.name in held:
        return WhyNot("held", held[node.name])
    if node.model is None:
        return WhyNot("unknown-model", "GPU model unknown")
    if node.source != LayoutSource.AGENT:
        note = "; ".join(node.notes) or "no migslice.io/gpu-layout annotation"
        return WhyNot("no-agent-layout", f"carving needs the node agent's exact layout ({note})")
    if node.facts.mig_config_state in MIG_TRANSITION_STATES:
        return WhyNot("mig-manager-busy", "MIG Manager is applying a config")
    if node.facts.is_carving:
        return WhyNot("carving", "a carve is under way")
    since = cooldowns.get(node.name)
    if since is not None and since < settings.cooldown_s:
        return WhyNot("cooldown", f"changed {since:.0f}s ago (cooldown {settings.cooldown_s:.0f}s)")
    return True


def _try(
    pod: PodDemand,
    selection: PodSelection,
    node: NodeState,
    gpus: Sequence[CarvedGpu],
    rules: tuple[bool, bool],
) -> CarveTrial | None:
    """All of the pod's instances on this node, each where it costs least (``rules``: the
    stranding and full-compute rules); None if they do not all fit, or kube-scheduler would
    not put the pod there (:func:`can_place`; ``selection``: the pod's node selection)."""
    guard, complete = rules
    model = node.model
    if model is None:
        return None
    if not can_place(pod, selection, node):
        return None
    wanted: list[str] = []
    for unit in pod.units:
        found = model.profile_by_resource(unit.resource)
        if found is None:
            return None
        wanted.extend([found.name] * unit.count)
    if len(wanted) > 1:
        wanted.sort(key=lambda name: (-model.profile(name).compute_slices, name))
    trial = list(gpus)  # a GPU is copied when the trial first changes it
    spent: list[RoomLoss] = []
    destroyed = strands = 0
    for profile in wanted:
        best = best_option(trial, profile, strand_guard=guard, complete=complete)
        if best is None:
            return None
        k, option = best
        if trial[k] is gpus[k]:
            trial[k] = gpus[k].copy()
        trial[k].take(option)
        spent.append(option.loss)
        destroyed += len(option.destroy)
        strands += option.strands
    return CarveTrial(add_losses(spent), destroyed, trial, strands)
