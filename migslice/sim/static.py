"""The baselines that never change a layout: B0-B4 (benchmarks.md §5.5).

* ``B0`` whole-GPU: MIG off; a pod takes ``count`` whole GPUs on one node, best fit (the
  node with the fewest free GPUs that has enough, then the lowest index).
* ``B1`` static ``all-1g.10gb`` + first fit: nodes and GPUs in index order, instances by
  start. Pods needing more than 1g never fit.
* ``B2`` static ``all-balanced`` (2 x 1g.10gb + 2g.20gb + 3g.40gb) + first fit. 4g and 7g
  pods never fit.
* ``B3`` oracle-static + best fit: the geometry mix of the configuration LP's optimum for the
  expected mix (:mod:`migslice.sim.limits`), fixed in advance; 7g GPUs grouped on nodes.
* ``B4`` best fit over a mixed geometry chosen without the workload: node by node, the stock
  single-profile configs of NVIDIA mig-parted's ``config-default.yaml`` for A100/H100-80GB
  (``all-1g.10gb``, ``all-1g.20gb``, ``all-2g.20gb``, ``all-3g.40gb``, ``all-4g.40gb``,
  ``all-7g.80gb``) and ``all-balanced``, in turn: what an admin who labels nodes with stock
  configs gets. Best fit: the free instance whose GPU keeps the fewest free compute slices,
  then the node with the fewest, then the lowest index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from migslice.mig import GpuModel, Layout
from migslice.sim.cluster import GPUS_PER_NODE, Assignment, SimCluster, SimNode
from migslice.sim.index import Kind, Rank, RankIndex
from migslice.sim.placement import BestFit, FirstFit, Placer, static_layout
from migslice.sim.trace import SimPod

ALL_1G = ("1g.10gb",) * 7
ALL_BALANCED = ("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb")
STOCK_CONFIGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("all-1g.10gb", ALL_1G),
    ("all-1g.20gb", ("1g.20gb",) * 4),
    ("all-2g.20gb", ("2g.20gb",) * 3),
    ("all-3g.40gb", ("3g.40gb",) * 2),
    ("all-4g.40gb", ("4g.40gb",)),
    ("all-7g.80gb", ("7g.80gb",)),
    ("all-balanced", ALL_BALANCED),
)
"""mig-parted ``deployments/systemd/config-default.yaml``, A100/H100-80GB entries (plain
profiles; the ``+me`` variant left out)."""


class WholeGpuPlacer:
    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.index = RankIndex(cluster, self.rank)

    def rank(self, node: SimNode, kind: Kind) -> Rank | None:
        free = sum(1 for g in node.gpus if not g.mig_enabled and g.whole_holder is None)
        return (free, node.position) if free >= kind[1] and not node.is_blocked else None

    def place(self, pod: SimPod) -> Assignment | None:
        node = self.index.best(("whole", pod.count))
        if node is None:
            return None
        chosen = [g for g in node.gpus if not g.mig_enabled and g.whole_holder is None]
        for gpu in chosen[: pod.count]:
            self.cluster.hold_whole(node, gpu, pod.name)
        units = tuple((g.index, None) for g in chosen[: pod.count])
        assignment = Assignment(pod.name, node.name, units)
        self.cluster.record(assignment)
        return assignment

    def depart(self, pod: str) -> Assignment:
        return self.cluster.release(pod)


@dataclass(frozen=True, slots=True)
class WholeGpu:
    """B0: MIG off, whole GPUs."""

    name: str = "B0 whole-GPU"

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return (None,)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return WholeGpuPlacer(cluster)


@dataclass(frozen=True, slots=True)
class StaticFirstFit:
    """B1/B2: one fixed layout on every GPU, first fit."""

    name: str
    profiles: tuple[str, ...]

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return (static_layout(model, self.profiles),)

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return FirstFit(cluster)


@dataclass(frozen=True, slots=True)
class StaticBestFit:
    """B3/B4: fixed layouts (cycled over the GPUs), best fit, never re-partitioned."""

    name: str
    layouts: tuple[Layout, ...]

    def initial_layouts(self, model: GpuModel) -> Sequence[Layout | None]:
        return self.layouts

    def start(self, cluster: SimCluster, seed: int) -> Placer:
        return BestFit(cluster)


def stock_mixed_layouts(model: GpuModel, gpus_per_node: int = GPUS_PER_NODE) -> tuple[Layout, ...]:
    """B4's geometry: node n gets stock config ``n mod 7`` on all its GPUs."""
    layouts: list[Layout] = []
    for _, profiles in STOCK_CONFIGS:
        layouts.extend([static_layout(model, profiles)] * gpus_per_node)
    return tuple(layouts)
