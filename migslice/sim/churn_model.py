"""Mode B (churn) values: its settings, lifetimes, sampled arrivals and results.

The run itself, and the model it follows, are in :mod:`migslice.sim.churn`; who decides
re-partitions, and when, in :mod:`migslice.sim.controller` (migslice's controller) and
:mod:`migslice.sim.batching` (nos's batching windows).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist, fmean

from migslice.repartition import ControllerSettings
from migslice.sim.cluster import GPUS_PER_NODE
from migslice.sim.trace import SimPod, Workload

Z90 = NormalDist().inv_cdf(0.9)


@dataclass(frozen=True, slots=True)
class Lifetimes:
    """A lognormal lifetime distribution given by its median and 90th percentile."""

    median_s: float = 236.0
    p90_s: float = 4012.0

    @property
    def mu(self) -> float:
        return math.log(self.median_s)

    @property
    def sigma(self) -> float:
        return math.log(self.p90_s / self.median_s) / Z90

    @property
    def mean_s(self) -> float:
        return self.median_s * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True, slots=True)
class ChurnConfig:
    nodes: int = 64
    gpus_per_node: int = GPUS_PER_NODE
    load_pct: float = 95.0
    """Offered load, % of the cluster's compute slices."""
    t_reconf_s: float = 60.0
    """How long MIG Manager (or nos's agent) takes to re-partition a node, from the label to
    ``success``; the whole node takes no new pod meanwhile."""
    t_carve_s: float = 5.0
    """How long the node agent takes to carve a node (carve mode), from the request to
    ``success``; the whole node takes no new pod meanwhile."""
    patience_s: float = 300.0
    lifetimes: Lifetimes = Lifetimes()
    duration_lifetimes: float = 20.0
    """Simulated time, in mean lifetimes (benchmarks.md: at least 20)."""
    warmup_lifetimes: float = 2.0
    """Leading time left out of the metrics, in mean lifetimes."""
    prefill: bool = True
    """Start in steady state: the pods running at a random instant arrive at t = 0."""
    keep_log: bool = False
    """Keep every placement and re-partition in the result (for tests)."""
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    """migslice's controller settings; the defaults are production's (min pending 30 s,
    cooldown 600 s, one node in flight, deadline 600 s, backoff 1,800 s, the label 90 s after
    the config is written, for MIG Manager's copy of the ConfigMap; carve mode: min pending
    10 s, cooldown 60 s, four nodes in flight)."""
    interval_s: float = 15.0
    """Time between the controller's rounds (the extender's ``--repartition-interval-s``)."""
    batch_idle_s: float = 10.0
    """nos: a batch of pending pods closes after this long without a new one..."""
    batch_timeout_s: float = 60.0
    """...or this long after it opened (nos's ``batchWindowIdleSeconds``/``TimeoutSeconds``)."""

    @property
    def duration_s(self) -> float:
        return self.duration_lifetimes * self.lifetimes.mean_s

    @property
    def warmup_s(self) -> float:
        return self.warmup_lifetimes * self.lifetimes.mean_s


DEFAULT_CHURN = ChurnConfig()
"""Benchmarks.md §5.3 mode B at 95 % offered load, T_reconf 60 s, 64 nodes."""


@dataclass(frozen=True, slots=True)
class Arrival:
    time_s: float
    pod: SimPod
    lifetime_s: float
    patient: bool = False
    """Waits as long as it takes (the pods already running when the run starts)."""


@dataclass(frozen=True, slots=True)
class Placement:
    pod: str
    time_s: float
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Reconfiguration:
    node: str
    gpu: int
    decided_s: float
    usable_s: float


@dataclass(frozen=True, slots=True)
class Waits:
    """Waits (arrival to placement) of a set of placed pods, in seconds."""

    count: int
    mean_s: float
    p50_s: float
    p90_s: float
    p99_s: float

    @staticmethod
    def of(values: Sequence[float]) -> Waits:
        if not values:
            return Waits(0, 0.0, 0.0, 0.0, 0.0)
        ordered = sorted(values)
        return Waits(
            len(ordered),
            fmean(ordered),
            rank(ordered, 0.5),
            rank(ordered, 0.9),
            rank(ordered, 0.99),
        )


def rank(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of sorted values."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class PodClass:
    """One class of measured pods (a profile, or ``k x 7g`` for a multi-GPU pod): how many
    arrived and were placed, in pods and in compute slices, and their waits."""

    name: str
    arrived: int
    placed: int
    arrived_slices: int
    placed_slices: int
    waits: Waits

    @property
    def acceptance(self) -> float:
        return self.placed / self.arrived if self.arrived else 1.0

    @property
    def slice_acceptance(self) -> float:
        return self.placed_slices / self.arrived_slices if self.arrived_slices else 1.0


def class_of(pod: SimPod) -> str:
    return pod.profile if pod.count == 1 else f"{pod.count}x{pod.profile}"


@dataclass(frozen=True, slots=True)
class ChurnResult:
    policy: str
    workload: str
    seed: int
    nodes: int
    gpus: int
    load_pct: float
    t_reconf_s: float
    patience_s: float
    arrival_rate_per_s: float
    duration_s: float
    warmup_s: float
    arrived_pods: int
    """Measured pods: arrived in [warm-up, end - patience]."""
    placed_pods: int
    abandoned_pods: int
    waits: Waits
    repartition_waits: Waits
    """Pods a re-partition was planned for (named in the plan), from arrival to placement."""
    repartition_leads: Waits
    """The same pods, from arrival to the plan named for them (the rest of their wait is the
    re-partition or carve itself and the placement after it)."""
    slice_allocation: float
    """Time-average compute slices held by pods / (7 x GPUs) over [warm-up, end]."""
    mean_pending: float
    """Time-average count of waiting pods that arrived during the run (not the prefill)."""
    repartitions: int
    """Re-partitions (one node each) started in the measured window."""
    gpus_repartitioned: int
    disrupted_pods: int
    classes: tuple[PodClass, ...] = ()
    """Per pod class, in the catalog's profile order (multi-GPU classes last)."""
    placements: tuple[Placement, ...] = ()
    reconfigurations: tuple[Reconfiguration, ...] = ()
    instance_creates: int = 0
    """MIG instances created in the measured window (re-partitions, carves, per-pod carving)."""
    instance_destroys: int = 0
    blocked_node_s: float = 0.0
    """Node-seconds in the measured window during which a node took no new pod because MIG
    Manager or the node agent was changing its layout (per-pod carvers block no node; their
    pods wait the carve time instead, counted in their waits)."""

    @property
    def acceptance(self) -> float:
        return self.placed_pods / self.arrived_pods if self.arrived_pods else 1.0

    @property
    def slice_acceptance(self) -> float:
        """Acceptance weighted by demand: compute slices placed / compute slices arrived."""
        arrived = sum(c.arrived_slices for c in self.classes)
        return sum(c.placed_slices for c in self.classes) / arrived if arrived else 1.0

    @property
    def repartitions_per_placed_pod(self) -> float:
        return self.repartitions / self.placed_pods if self.placed_pods else 0.0

    @property
    def repartition_share(self) -> float:
        """Share of placed pods that needed a re-partition."""
        return self.repartition_waits.count / self.placed_pods if self.placed_pods else 0.0


def arrival_rate_per_s(workload: Workload, capacity_slices: int, config: ChurnConfig) -> float:
    mean_slices = fmean(p.compute_slices for p in workload.pods)
    return config.load_pct / 100 * capacity_slices / (mean_slices * config.lifetimes.mean_s)


def sample_churn(
    workload: Workload, capacity_slices: int, config: ChurnConfig, *, seed: int
) -> tuple[Arrival, ...]:
    """Poisson arrivals over the run, each a pod of the workload and its lifetime.

    Pods get unique names (the workload's name and the arrival's number)."""
    if not workload.pods:
        raise ValueError(f"workload {workload.name} has no GPU pods to sample")
    rate = arrival_rate_per_s(workload, capacity_slices, config)
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    lifetimes = config.lifetimes
    if config.prefill:
        running = 0
        clock = rng.expovariate(1.0)
        while clock < rate * lifetimes.mean_s:
            running += 1
            clock += rng.expovariate(1.0)
        for _ in range(running):
            pod = rng.choice(workload.pods)
            biased = rng.lognormvariate(lifetimes.mu + lifetimes.sigma**2, lifetimes.sigma)
            named = replace(pod, name=f"{pod.name}#{len(arrivals)}")
            arrivals.append(Arrival(0.0, named, rng.random() * biased, patient=True))
    t = rng.expovariate(rate)
    while t < config.duration_s:
        pod = rng.choice(workload.pods)
        lifetime = rng.lognormvariate(config.lifetimes.mu, config.lifetimes.sigma)
        named = replace(pod, name=f"{pod.name}#{len(arrivals)}")
        arrivals.append(Arrival(t, named, lifetime))
        t += rng.expovariate(rate)
    return tuple(arrivals)
