"""Packing metrics of a simulation run (benchmarks.md §5.4), as values.

* **slice allocation ratio**: compute slices held by pods / (7 x GPUs). A whole GPU held under
  the whole-GPU baseline counts 7 (and 8 memory slices);
* **memory-slice ratio**: memory slices held / (8 x GPUs);
* **demand ratio**: compute slices the placed pods asked for / (7 x GPUs); equal to the slice
  allocation under MIG (a pod holds exactly its profile), lower under whole GPUs;
* **unallocated GPU-equivalents**: (1 - slice allocation) x GPUs;
* **first-failure point**: arrived load (% of the cluster's compute slices) when the first pod
  could not be placed;
* **re-partitions**: GPUs whose layout changed, per 1,000 placed pods;
* **pods disrupted**: placed pods whose instance is no longer theirs at the end (must be 0);
* **acceptance per size class**: pods arrived and placed so far per class (``1g`` ... ``7g``
  by compute slices, ``multi-GPU`` for a pod of several instances), at each load point.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from migslice.mig import GpuModel
from migslice.sim.cluster import Assignment, SimCluster
from migslice.sim.sampling import SampleTally
from migslice.sim.trace import SimPod

MULTI_GPU = "multi-GPU"


def size_class(model: GpuModel, pod: SimPod) -> str:
    """``<compute slices>g`` of the pod's profile, or ``multi-GPU`` for several instances."""
    if pod.count > 1:
        return MULTI_GPU
    return f"{model.profile(pod.profile).compute_slices}g"


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """The cluster when arrived demand first reached ``arrived_pct`` % of its compute slices."""

    arrived_pct: int
    slice_allocation: float
    memory_allocation: float
    demand_allocation: float
    unallocated_gpus: float
    placed_pods: int
    failed_pods: int
    classes: tuple[tuple[str, int, int], ...] = ()
    """Per size class (:func:`size_class`), pods arrived and placed so far."""
    class_slices: tuple[tuple[str, int, int], ...] = ()
    """Per size class, the compute slices those pods asked for, arrived and placed so far (an
    ``8 x 7g`` pod weighs 56, a ``7g`` pod 7: acceptance counted by the GPUs asked for)."""
    tenants: tuple[tuple[str, int, int, int], ...] = ()
    """Per tenant (:mod:`migslice.sim.tenants`), pods arrived, placed and denied by its quota
    so far (none denied where quotas are off)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    policy: str
    workload: str
    seed: int
    nodes: int
    gpus: int
    arrived_pods: int
    placed_pods: int
    failed_pods: int
    first_failure_pct: float | None
    gpus_repartitioned: int
    repartition_operations: int
    disrupted_pods: int
    points: tuple[LoadPoint, ...]
    instances_created: int = 0
    """MIG instances created during the run (a per-pod carver creates one per instance a pod
    holds; re-partitions create every new instance of a layout)."""
    sampling: SampleTally | None = field(default=None, compare=False)
    """kube-scheduler's node sampling, for a policy that models it (migslice): a tally of
    the search, not an outcome, so runs that place the same pods compare equal."""

    def at(self, arrived_pct: int) -> LoadPoint:
        for point in self.points:
            if point.arrived_pct == arrived_pct:
                return point
        raise KeyError(f"no load point at {arrived_pct} % arrived (run stopped earlier)")

    @property
    def repartitions_per_1k_pods(self) -> float:
        if not self.placed_pods:
            return 0.0
        return 1000.0 * self.gpus_repartitioned / self.placed_pods


@dataclass(slots=True)
class Tally:
    """Running totals of one run (updated per placement, read per load point)."""

    gpus: int
    compute_slices: int = 0
    memory_slices: int = 0
    demand_slices: int = 0
    placed: int = 0
    failed: int = 0
    arrived_by_class: Counter[str] = field(default_factory=Counter)
    placed_by_class: Counter[str] = field(default_factory=Counter)
    arrived_slices_by_class: Counter[str] = field(default_factory=Counter)
    placed_slices_by_class: Counter[str] = field(default_factory=Counter)
    by_tenant: dict[str, list[int]] = field(default_factory=dict)
    """Per tenant: arrived, placed, denied by quota."""

    def arrive(
        self, size: str, placed: bool, tenant: str = "", denied: bool = False, slices: int = 0
    ) -> None:
        """A pod of size class ``size`` asking for ``slices`` compute slices arrived."""
        self.arrived_by_class[size] += 1
        self.arrived_slices_by_class[size] += slices
        if placed:
            self.placed_by_class[size] += 1
            self.placed_slices_by_class[size] += slices
        counts = self.by_tenant.setdefault(tenant, [0, 0, 0])
        counts[0] += 1
        counts[1] += placed
        counts[2] += denied

    def add(self, model: GpuModel, demand_slices: int, assignment: Assignment) -> None:
        """A pod asking for ``demand_slices`` was placed (a whole GPU counts as all of it)."""
        self.placed += 1
        self.demand_slices += demand_slices
        for _, placed in assignment.units:
            if placed is None:
                self.compute_slices += model.compute_slices
                self.memory_slices += model.memory_slices
            else:
                profile = model.profile(placed.profile)
                self.compute_slices += profile.compute_slices
                self.memory_slices += profile.memory_slices

    def point(self, arrived_pct: int, compute_per_gpu: int, memory_per_gpu: int) -> LoadPoint:
        compute_total = compute_per_gpu * self.gpus
        allocation = self.compute_slices / compute_total
        names = sorted(
            self.arrived_by_class,
            key=lambda c: (c == MULTI_GPU, int(c[:-1]) if c != MULTI_GPU else 0),
        )
        return LoadPoint(
            arrived_pct=arrived_pct,
            slice_allocation=allocation,
            memory_allocation=self.memory_slices / (memory_per_gpu * self.gpus),
            demand_allocation=self.demand_slices / compute_total,
            unallocated_gpus=(1.0 - allocation) * self.gpus,
            placed_pods=self.placed,
            failed_pods=self.failed,
            classes=tuple(
                (name, self.arrived_by_class[name], self.placed_by_class[name]) for name in names
            ),
            class_slices=tuple(
                (name, self.arrived_slices_by_class[name], self.placed_slices_by_class[name])
                for name in names
            ),
            tenants=tuple((t, a, p, d) for t, (a, p, d) in sorted(self.by_tenant.items())),
        )


def intact(cluster: SimCluster, assignment: Assignment) -> bool:
    """Whether the pod still holds every instance (or whole GPU) it was given."""
    node = cluster.by_name[assignment.node]
    for index, placed in assignment.units:
        gpu = node.gpus[index]
        if placed is None:
            if gpu.whole_holder != assignment.pod:
                return False
        elif not any(
            h == assignment.pod and p == placed  # the holder first: a string compare
            for p, h in zip(gpu.instances, gpu.holders, strict=True)
        ):
            return False
    return True


def disrupted_pods(cluster: SimCluster) -> int:
    """Placed pods whose instances (or whole GPUs) are no longer held by them."""
    return sum(1 for a in cluster.assignments.values() if not intact(cluster, a))
