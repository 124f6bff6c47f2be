"""B9: MIG through Kubernetes DRA as it ships, NVIDIA's driver in DynamicMIG mode and
kube-scheduler v1.37 alone (no extender, no steer).

* **Devices**: the driver publishes every profile at every legal placement of every GPU and
  carves the instance when a claim is prepared, destroying it when the claim is released
  (``dra-driver-nvidia-gpu`` ``cmd/gpu-kubelet-plugin``, ``partitions.go``; facts and commit in
  ``shared/reference/dra.md``). So GPUs start MIG-enabled with no instances, and a pod's
  instances are created for it and destroyed when it ends.
* **Inside a node**, first fit (:mod:`migslice.inventory.first_fit`, the product's own model of
  the allocator, checked against the real one): slices in name order (GPUs in PCI bus id
  order, the simulator's GPU index), a GPU's devices sorted by name
  (``gpu-<minor>-mig-<profile>-<profileId>-<start>``: for one profile, its starts in
  ascending order); the first device whose memory slices are free wins. A claim for ``k``
  devices takes the first ``k`` that fit, one after the other.
* **The node**: kube-scheduler v1.37.2's default plugins score nothing a DRA device changes
  (``DynamicResources`` scores only the subrequest chosen from a ``firstAvailable`` list,
  ``dynamicresources.go`` ``computeScore``; NodeResourcesFit and BalancedAllocation read CPU
  and memory, which the simulator does not model), so every feasible node scores the same.
  ``findNodesThatPassFilters`` (``schedule_one.go`` 779-849) checks nodes from
  ``nextStartNodeIndex`` round the list until ``numFeasibleNodesToFind`` passed;
  ``NewSortedScoredNodes(...).Pop()`` (``schedule_one.go`` 613-614; ``sorted_nodes.go`` 62-63:
  ties on ``Randomizer``, which only extender runs set) then returns the first node found.
  Modelled sequentially (:mod:`migslice.sim.sampling`): the first feasible node from the
  rotating start, the start advancing by the nodes processed. ``node="random"`` draws a
  feasible node at random instead, as v1.34's ``selectHost`` broke ties (a sensitivity
  variant). ``node="least-allocated"`` takes, of the nodes found, the one holding the fewest
  pods (the first found on ties): NodeResourcesFit's default LeastAllocated score where pods
  ask no CPU or memory, each then counted at the scheduler's non-zero defaults (the DRA
  suite's pods on a real kube-scheduler; a sensitivity variant).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from migslice.mig import GpuModel, Layout, Placed, free_placements
from migslice.sim.cluster import Assignment, SimCluster, SimGpu, SimNode
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import CarvingPlacer, Placer
from migslice.sim.sampling import Positions, first_found, num_feasible_nodes_to_find, search
from migslice.sim.trace import SimPod

NODE_CHOICES = ("rotating", "random", "least-allocated")


FreeOf = Callable[[SimGpu, str], tuple[Placed, ...]]
"""``free_placements`` of a GPU's instances as they are, for a profile (a caller's cache)."""


def first_fit_devices(
    model: GpuModel, gpus: Sequence[SimGpu], kind: Kind, free_of: FreeOf | None = None
) -> list[tuple[int, Placed]]:
    """The devices the allocator gives a claim for ``kind`` (profile, count) on a DynamicMIG
    node whose GPUs hold ``gpus``' instances: (GPU index, placement) each; empty when they do
    not all fit. ``free_of``: what a GPU offers before anything is added to it, where the
    caller keeps it."""
    profile, count = kind
    chosen: list[tuple[int, Placed]] = []
    for gpu in gpus:
        if not gpu.mig_enabled or gpu.whole_holder is not None:
            continue
        layout = gpu.instances
        added = False
        while len(chosen) < count:
            if not added and free_of is not None:
                free = free_of(gpu, profile)
            else:
                free = free_placements(model, layout, profile)
            if not free:
                break
            placed = min(free, key=lambda p: p.start)
            layout = [*layout, placed]
            added = True
            chosen.append((gpu.index, placed))
        if len(chosen) == count:
            return chosen
    return []


def pods_on(node: SimNode) -> int:
    """The pods a node holds: what NodeResourcesFit's LeastAllocated score ranks when pods
    ask no CPU or memory (each counts kube-scheduler's non-zero defaults, 100m and 200 MB)."""
    return len({h for gpu in node.gpus for h in (*gpu.holders, gpu.whole_holder) if h})


class DraFirstFitPlacer(CarvingPlacer):
    def __init__(self, cluster: SimCluster, node_choice: str, seed: int) -> None:
        super().__init__(cluster)
        self.node_choice = node_choice
        self.rng = random.Random(seed)
        self.to_find = num_feasible_nodes_to_find(0, len(cluster.nodes))
        self.start_index = 0
        self.feasible = RankIndex(cluster, self.rank)
        self._free: dict[tuple[int, str], tuple[int, tuple[Placed, ...]]] = {}
        self._pods = [pods_on(node) for node in cluster.nodes]
        self._changed: set[int] = set()
        cluster.listeners.append(lambda node: self._changed.add(node.position))

    def free_of(self, gpu: SimGpu, profile: str) -> tuple[Placed, ...]:
        """:data:`FreeOf`, kept per GPU and profile until the GPU changes (its ``version``):
        a change to a node ranks it again for every kind, most of its GPUs unchanged."""
        key = (id(gpu), profile)  # a GPU lives as long as its cluster, this cache one run
        kept = self._free.get(key)
        if kept is None or kept[0] != gpu.version:
            kept = (gpu.version, free_placements(self.cluster.model, gpu.instances, profile))
            self._free[key] = kept
        return kept[1]

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        if node.is_blocked:
            return None
        if kind[1] == 1:  # first_fit_devices finds one where a GPU it reads has a placement
            for gpu in node.gpus:
                if gpu.mig_enabled and gpu.whole_holder is None and self.free_of(gpu, kind[0]):
                    return (node.position,)
            return None
        if not first_fit_devices(self.cluster.model, node.gpus, kind, self.free_of):
            return None
        return (node.position,)

    def choose(self, kind: Kind) -> SimNode | None:
        entries = self.feasible.entries(kind)
        if not entries:
            return None
        nodes = self.cluster.nodes
        if self.node_choice == "random":
            return nodes[int(entries[self.rng.randrange(len(entries))][0])]
        if self.node_choice == "rotating":  # the first node found: no sample to build
            position, self.start_index = first_found(
                Positions(entries), self.start_index, len(nodes), self.to_find
            )
            return nodes[position]
        # least-allocated: of the nodes found, the one holding the fewest pods
        window = search(Positions(entries), self.start_index, len(nodes), self.to_find)
        self.start_index = window.next_start
        for position in self._changed:
            self._pods[position] = pods_on(nodes[position])
        self._changed.clear()
        return nodes[min(window.sample, key=self._pods.__getitem__)]

    def place(self, pod: SimPod) -> Assignment | None:
        kind = (pod.profile, pod.count)
        node = self.choose(kind)
        if node is None:
            return None
        devices = first_fit_devices(self.cluster.model, node.gpus, kind, self.free_of)
        return self.carve(node, devices, pod)


@dataclass(frozen=True, slots=True)
class DraFirstFit:
    """B9 (see the module docstring)."""

    name: str = "B9 DRA DynamicMIG first-fit"
    node: str = "rotating"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return ((),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        if self.node not in NODE_CHOICES:
            raise ValueError(f"node choice {self.node!r}; known: {', '.join(NODE_CHOICES)}")
        return DraFirstFitPlacer(cluster, self.node, seed)
