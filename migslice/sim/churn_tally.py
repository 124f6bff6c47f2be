"""What a mode B run counts: time averages over the measured window, waits, acceptance per
pod class (in pods and in compute slices), re-partitions and disrupted pods."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Protocol

from migslice.mig import GpuModel
from migslice.sim.churn_model import (
    Arrival,
    ChurnConfig,
    Placement,
    PodClass,
    Reconfiguration,
    Waits,
    class_of,
)
from migslice.sim.cluster import Assignment, SimCluster
from migslice.sim.metrics import intact
from migslice.sim.trace import GPU_MODEL, SimPod


class Waiting(Protocol):
    @property
    def arrival(self) -> Arrival: ...


class ChurnTally:
    def __init__(self, config: ChurnConfig, model: GpuModel = GPU_MODEL) -> None:
        self.config = config
        self.model = model
        self.now = 0.0
        self.held_slices = 0
        self.slice_area = 0.0
        self.pending_area = 0.0
        self.waits: list[float] = []
        self.served_waits: list[float] = []
        self.served_leads: list[float] = []
        self.class_waits: dict[str, list[float]] = defaultdict(list)
        self.class_slices: dict[str, int] = defaultdict(int)
        self.abandoned = 0
        self.repartitions = 0
        self.gpus_repartitioned = 0
        self.disrupted = 0
        self.placements: list[Placement] = []
        self.reconfigurations: list[Reconfiguration] = []

    def advance(self, time_s: float, waiting: Iterable[Waiting]) -> None:
        start = max(self.now, self.config.warmup_s)
        if time_s > start:
            pending = sum(1 for w in waiting if not w.arrival.patient)
            self.slice_area += self.held_slices * (time_s - start)
            self.pending_area += pending * (time_s - start)
        self.now = time_s

    def placed(
        self,
        pod: SimPod,
        slices: int,
        wait_s: float,
        *,
        measured: bool,
        planned_s: float | None = None,
        arrived_s: float = 0.0,
    ) -> None:
        """``planned_s``: when the re-partition or carve named for ``pod`` was planned, if
        one was (``arrived_s``: when the pod arrived)."""
        self.held_slices += slices
        if not measured:
            return
        self.waits.append(wait_s)
        name = class_of(pod)
        self.class_waits[name].append(wait_s)
        self.class_slices[name] += pod.compute_slices
        if planned_s is not None:
            self.served_waits.append(wait_s)
            self.served_leads.append(planned_s - arrived_s)

    def departed(self, cluster: SimCluster, assignment: Assignment, slices: int) -> None:
        if not intact(cluster, assignment):
            self.disrupted += 1
        self.held_slices -= slices

    def gave_up(self, pod: SimPod) -> None:
        self.abandoned += 1

    def reconfiguration_started(self, now: float, gpus: int) -> None:
        if now >= self.config.warmup_s:
            self.repartitions += 1
            self.gpus_repartitioned += gpus

    def classes(self, measured: Sequence[Arrival]) -> tuple[PodClass, ...]:
        arrived: dict[str, int] = defaultdict(int)
        arrived_slices: dict[str, int] = defaultdict(int)
        for arrival in measured:
            name = class_of(arrival.pod)
            arrived[name] += 1
            arrived_slices[name] += arrival.pod.compute_slices
        order = {name: i for i, name in enumerate(self.model.profile_names)}
        names = sorted(arrived, key=lambda n: (n not in order, order.get(n, 0), n))
        return tuple(
            PodClass(
                name=name,
                arrived=arrived[name],
                placed=len(self.class_waits.get(name, ())),
                arrived_slices=arrived_slices[name],
                placed_slices=self.class_slices.get(name, 0),
                waits=Waits.of(self.class_waits.get(name, ())),
            )
            for name in names
        )
