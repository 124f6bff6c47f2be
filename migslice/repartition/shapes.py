"""Which maximal layout a re-planned GPU gets: the one whose instances beyond the planned ones
serve the expected demand best (rule 5 of :mod:`migslice.repartition.migmanager.planner`)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence

from migslice.inventory import NodeState, mig_resource
from migslice.mig import GpuModel, Layout, enumerate_maximal_layouts, profile_from_resource
from migslice.mig.stranding import NO_MIX, FillerMix, filler_mix, strands_with
from migslice.repartition.pending import PendingPod

LayoutCache = MutableMapping[tuple[str, frozenset[str]], list[Layout]]
"""Maximal layouts per (model key, profile names): a caller that plans often (a simulation)
passes one to :func:`plan` to keep them between calls."""


class Layouts:
    """Maximal layouts per (model, profile set), computed once per planning run, each scored
    once for the run's mix and stranding rule; and each answer of :meth:`containing` kept for
    the run (many idle GPUs ask the same question)."""

    def __init__(
        self,
        mix: Mapping[str, float],
        cache: LayoutCache | None = None,
        *,
        strand_guard: bool = False,
    ) -> None:
        self._mix = mix
        self._cache: LayoutCache = cache if cache is not None else {}
        self._guard = strand_guard
        self._scored: dict[tuple[str, frozenset[str]], list[_Scored]] = {}
        self._answers: dict[tuple[object, ...], Layout | None] = {}

    def containing(self, model: GpuModel, wanted: Mapping[str, int], old: Layout) -> Layout | None:
        """The best maximal layout whose instances include ``wanted``; None if none does."""
        asked = tuple(sorted(wanted.items()))
        question = (model.key, asked, old)
        if question in self._answers:
            return self._answers[question]
        names = model.plain_profiles
        if not wanted.keys() <= names:
            names = names | set(wanted)
        had: dict[str, int] = {}
        for placed in old:
            had[placed.profile] = had.get(placed.profile, 0) + 1
        best: tuple[tuple[bool, float, int, int], Layout] | None = None
        for layout, counts, whole, value in self._score(model, names):
            for name, n in asked:
                if counts.get(name, 0) < n:
                    break
            else:
                kept = 0
                for name, n in had.items():
                    kept += min(n, counts.get(name, 0))
                rank = (whole, value, kept, len(layout))
                if best is None or rank > best[0]:
                    best = (rank, layout)
        answer = best[1] if best else None
        self._answers[question] = answer
        return answer

    def _score(self, model: GpuModel, names: frozenset[str]) -> list[_Scored]:
        """The maximal layouts of ``names`` on ``model``, each with its instance counts,
        whether it leaves no compute stranded (under the rule) and its worth to the mix."""
        key = (model.key, names)
        scored = self._scored.get(key)
        if scored is None:
            if key not in self._cache:
                self._cache[key] = enumerate_maximal_layouts(model, sorted(names))
            worth = {
                p.name: p.compute_slices * self._mix.get(p.resource_name, 0.0)
                for p in model.profiles
            }
            scored = []
            for layout in self._cache[key]:
                counts: dict[str, int] = {}
                for placed in layout:
                    counts[placed.profile] = counts.get(placed.profile, 0) + 1
                whole = not (self._guard and strands_with(model, (p.profile for p in layout)))
                value = round(sum(worth[name] * n for name, n in counts.items()), 9)
                scored.append((layout, counts, whole, value))
            self._scored[key] = scored
        return scored


_Scored = tuple[Layout, dict[str, int], bool, float]
"""A maximal layout, its instance counts, whether it strands no compute, its worth."""


def demand_mix(
    nodes: Sequence[NodeState],
    pending: Sequence[PendingPod],
    expected_mix: tuple[tuple[str, float], ...] = (),
) -> dict[str, float]:
    """Weight of each MIG resource for the layout choice (see rule 5 of the module doc)."""
    if expected_mix:
        weights = dict(expected_mix)
    else:
        weights = {}
        held = ((r, n) for node in nodes for r, n in node.allocated)
        waiting = ((u.resource, u.count) for i in pending for u in i.demand.units)
        for resource, count in (*held, *waiting):
            profile = profile_from_resource(resource)
            if profile is not None:  # demand in compute slices, as the pods hold it
                slices = count * profile.compute_slices
                weights[resource] = weights.get(resource, 0.0) + slices
    total = sum(weights.values())
    demand = {k: v / total for k, v in weights.items()} if total else {}
    if expected_mix:
        return demand
    free: dict[str, float] = {}  # free instances that stay: on GPUs a pod already uses
    for node in nodes:
        for gpu in node.gpus:
            if gpu.is_idle:
                continue
            for placed, is_held in zip(gpu.instances, gpu.held, strict=True):
                profile = profile_from_resource(mig_resource(placed.profile))
                if profile is not None and not is_held:
                    resource = mig_resource(placed.profile)
                    free[resource] = free.get(resource, 0.0) + profile.compute_slices
    supply = sum(free.values())
    if not supply:
        return demand
    return {k: max(0.0, v - free.get(k, 0.0) / supply) + 0.1 * v for k, v in demand.items()}


def held_mix(nodes: Sequence[NodeState]) -> FillerMix:
    """What the pods on the device-plugin MIG nodes hold towards the stranding rule
    (:func:`migslice.mig.stranding.filler_mix`): their ``nvidia.com/mig-<profile>`` requests,
    one held instance each. DRA nodes count in the extender's mix, not here."""
    mix = NO_MIX
    for node in nodes:
        model = node.model
        if model is None or node.dra is not None:
            continue
        held = (
            profile.name
            for resource, count in node.allocated
            if (profile := model.profile_by_resource(resource)) is not None
            for _ in range(count)
        )
        mix = mix + filler_mix(model, held)
    return mix
