"""B6: FGD (Weng et al., ATC'23) adapted to MIG: place each pod where the fragmentation of
the node, measured against the workload's typical pods, grows least.

FGD (``hkust-adsl/kubernetes-scheduler-simulator``, ``pkg/utils/frag.go`` and
``pkg/simulator/plugin/fgd_score.go``; read, not copied): the *typical pods* are the pod
shapes that make up 95 % of the workload by count, each with its popularity ``p_m``. A node's
fragmentation is ``F = sum_m p_m * frag_m``, where ``frag_m`` is all of the node's free GPU
capacity when the node cannot host a pod of shape ``m``, and otherwise the free capacity of
the GPUs that cannot host it. A pod goes where ``F_after - F_before`` is smallest.

On MIG (benchmarks.md §5.4 4a; the fragmentation-aware MIG schedulers of Zambianco et al.,
arXiv 2511.18906, choose a GPU and a slice the same way): capacity is counted in compute
slices; a GPU can host shape ``m`` when an instance of ``m``'s profile can be created in its
free memory slices at a legal start (the placement rules of the catalog); a ``k`` x 7g pod
needs ``k`` such GPUs on one node. Instances are created for the pod at the chosen start and
destroyed when it ends (dynamic MIG, never touching another pod's instance), so GPUs start
MIG-enabled with no instances. Ties (equal growth) go to the placement that leaves the node
with the fewest free slices, then the lowest GPU index and start, then the lowest node index
(FGD's integer scores leave kube-scheduler to break ties at random).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migslice.mig import GpuModel, Layout, Placed, free_placements, make_layout
from migslice.sim.cluster import Assignment, SimCluster, SimNode
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import CarvingPlacer, Placer
from migslice.sim.trace import SimPod

POPULARITY = 0.95
Shape = tuple[str, int]


def typical_shapes(pods: Sequence[SimPod]) -> tuple[tuple[Shape, float], ...]:
    """The most popular pod shapes covering 95 % of the pods, popularity renormalised."""
    counts = Counter((p.profile, p.count) for p in pods)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    chosen: list[tuple[Shape, int]] = []
    covered = 0
    for shape, n in ranked:
        if covered >= POPULARITY * len(pods):
            break
        chosen.append((shape, n))
        covered += n
    return tuple((shape, n / covered) for shape, n in chosen)


@dataclass(frozen=True, slots=True)
class GpuView:
    """What FGD reads of one GPU layout: its free compute slices, and which typical shapes'
    profiles it can still host."""

    free: int
    hosts: tuple[bool, ...]


@functools.cache
def gpu_view(model: GpuModel, profiles: tuple[str, ...], layout: Layout) -> GpuView:
    used = sum(model.profile(p.profile).compute_slices for p in layout)
    hosts = tuple(bool(free_placements(model, layout, profile)) for profile in profiles)
    return GpuView(model.compute_slices - used, hosts)


def options(model: GpuModel, layout: Layout, profile: str) -> tuple[tuple[Placed, Layout], ...]:
    """Every instance of ``profile`` that can be created on ``layout``, and the result."""
    return tuple(
        (placed, make_layout([*layout, placed]))
        for placed in free_placements(model, layout, profile)
    )


@dataclass(slots=True)
class NodeFrag:
    """One node as FGD reads it: each GPU's layout id and view, and the sums ``F`` is made
    of (free slices; per typical shape, GPUs that can host it and free slices of those that
    cannot)."""

    version: int
    ids: list[int]
    views: list[GpuView]
    free: int
    hosting: list[int]
    stranded: list[int]


class FgdPlacer(CarvingPlacer):
    def __init__(self, cluster: SimCluster, shapes: tuple[tuple[Shape, float], ...]) -> None:
        super().__init__(cluster)
        self.model = cluster.model
        self.shapes = shapes
        self.profiles = tuple(shape[0] for shape, _ in shapes)
        self.ids: dict[Layout, int] = {}
        self.layouts: list[Layout] = []
        self.views: list[GpuView] = []
        self.moves: dict[tuple[int, str], tuple[tuple[Placed, int], ...]] = {}
        self.nodes: dict[int, NodeFrag] = {}
        self.index = RankIndex(cluster, self.rank)

    def layout_id(self, layout: Layout) -> int:
        found = self.ids.get(layout)
        if found is None:
            found = self.ids[layout] = len(self.layouts)
            self.layouts.append(layout)
            self.views.append(gpu_view(self.model, self.profiles, layout))
        return found

    def options(self, layout_id: int, profile: str) -> tuple[tuple[Placed, int], ...]:
        key = (layout_id, profile)
        found = self.moves.get(key)
        if found is None:
            found = tuple(
                (placed, self.layout_id(new))
                for placed, new in options(self.model, self.layouts[layout_id], profile)
            )
            self.moves[key] = found
        return found

    def summary(self, node: SimNode) -> NodeFrag | None:
        """The node's sums, once per node version (None when a GPU has MIG off)."""
        cached = self.nodes.get(node.position)
        if cached is not None and cached.version == node.version:
            return cached
        if not all(g.mig_enabled for g in node.gpus):
            return None
        ids = [self.layout_id(tuple(g.instances)) for g in node.gpus]
        views = [self.views[i] for i in ids]
        hosting = [sum(1 for v in views if v.hosts[m]) for m in range(len(self.shapes))]
        stranded = [sum(v.free for v in views if not v.hosts[m]) for m in range(len(self.shapes))]
        summary = NodeFrag(node.version, ids, views, sum(v.free for v in views), hosting, stranded)
        self.nodes[node.position] = summary
        return summary

    def growth(self, node: NodeFrag, changes: Sequence[tuple[GpuView, GpuView]]) -> float:
        """``F_after - F_before`` when each (old, new) GPU view of ``changes`` is replaced."""
        before = after = 0.0
        for m, ((_, count), weight) in enumerate(self.shapes):
            hosting, stranded, free = node.hosting[m], node.stranded[m], node.free
            before += weight * (stranded if hosting >= count else free)
            for old, new in changes:
                hosting += new.hosts[m] - old.hosts[m]
                stranded += (0 if new.hosts[m] else new.free) - (0 if old.hosts[m] else old.free)
                free += new.free - old.free
            after += weight * (stranded if hosting >= count else free)
        return after - before

    def choice(self, node: SimNode, kind: Kind) -> tuple[Rank, list[tuple[int, Placed]]] | None:
        """The placement with the least growth of F on ``node``: its rank and instances."""
        profile, count = kind
        summary = self.summary(node)
        if summary is None:
            return None
        if count > 1:
            empty = [i for i, layout_id in enumerate(summary.ids) if not self.layouts[layout_id]]
            if len(empty) < count:
                return None
            placed, new_id = self.options(self.layout_id(()), profile)[0]
            old, new = self.views[self.layout_id(())], self.views[new_id]
            grown = self.growth(summary, [(old, new)] * count)
            left = summary.free + count * (new.free - old.free)
            return (grown, left, node.position), [(i, placed) for i in empty[:count]]
        best: tuple[tuple[float, int, int, int], list[tuple[int, Placed]]] | None = None
        seen: set[int] = set()
        for i, layout_id in enumerate(summary.ids):
            if layout_id in seen:
                continue
            seen.add(layout_id)
            old = self.views[layout_id]
            for placed, new_id in self.options(layout_id, profile):
                new = self.views[new_id]
                left = summary.free + new.free - old.free
                key = (self.growth(summary, [(old, new)]), left, i, placed.start)
                if best is None or key < best[0]:
                    best = (key, [(i, placed)])
        if best is None:
            return None
        return (best[0][0], best[0][1], node.position), best[1]

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        if node.is_blocked:
            return None
        found = self.choice(node, kind)
        return None if found is None else found[0]

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        node = self.index.best(kind)
        if node is None:
            return None
        found = self.choice(node, kind)
        assert found is not None
        return self.carve(node, found[1], pod)


@dataclass(frozen=True, slots=True)
class FgdForMig:
    """B6 (see the module docstring); ``shapes`` from the workload's pods."""

    shapes: tuple[tuple[Shape, float], ...]
    name: str = "B6 FGD-for-MIG"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return FgdPlacer(cluster, self.shapes)
