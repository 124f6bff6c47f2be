"""Mode B, churn / steady state (benchmarks.md §5.3): pods arrive, wait, run and depart.

* **Arrivals**: a Poisson process; each pod is drawn with replacement from the workload's
  mapped pods. The rate makes the offered load ``load_pct`` % of the cluster's compute slices:
  rate = load x capacity / (mean slices per pod x mean lifetime).
* **Lifetimes**: lognormal through the trace's median 236 s and p90 4,012 s (mean 2,718 s).
  The tail is heavy (sigma 2.2, p99 about 40,000 s): started empty, the cluster would still
  hold only about 3/4 of the offered load after 20 mean lifetimes. So the run starts in steady
  state (``prefill``): at t = 0 a Poisson(rate x mean lifetime) number of pods arrive, each
  with the residual lifetime of a pod running at a random instant (length-biased lifetime
  x uniform), as in an M/G/infinity queue in equilibrium. They wait as long as it takes (a
  policy that cannot place them at once would otherwise lose, for the whole run, the
  longest-lived pods); the warm-up then settles placement.
* **Queue**: a pod that cannot be placed on arrival waits in a FIFO queue. The queue is retried,
  in order, after every departure and every completed re-partition (a pod only needs a retry
  when the node that just gained free instances could take it). A pod still waiting after
  ``patience_s`` gives up: it counts as not accepted.
* **Re-partitioning** (policies that do it): a pod that cannot be placed asks the policy to
  re-partition idle GPUs for it, unless an in-flight re-partition will leave a spare instance
  it can claim. The new layout is decided at t and usable at t + ``t_reconf_s``: until then its
  instances are held by the re-partition, so nothing is placed on the GPU and no other
  re-partition touches it. A new re-partition's spare instances are offered at once, in FIFO
  order, to waiting pods that wait for none (as a planner that sees every pending pod would).
  When it completes, the pods waiting for it are tried first (it was made for them), then the
  queue in FIFO order.
* **Measured window**: pods arriving in [warm-up, end - patience] (so each one's outcome is
  known by the end); slice allocation and pending pods are time averages over [warm-up, end].

Same inputs and seed, same result. The arrival sequence depends only on the workload, the
load, the lifetimes and the seed, so every policy sees the same pods at the same times.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from migslice.mig import GpuModel
from migslice.sim.churn_model import (
    DEFAULT_CHURN,
    Arrival,
    ChurnConfig,
    ChurnResult,
    Placement,
    Reconfiguration,
    Waits,
    arrival_rate_per_s,
    sample_churn,
)
from migslice.sim.cluster import Assignment, SimCluster, SimNode
from migslice.sim.metrics import disrupted_pods
from migslice.sim.policies import Policy, Repartitioning
from migslice.sim.trace import GPU_MODEL, Workload

# -- the event loop ---------------------------------------------------------------------------

ARRIVE, DEPART, RECONFIGURED, GIVE_UP = 0, 1, 2, 3
"""Event kinds; at equal times departures and completions come before arrivals."""
ORDER = {DEPART: 0, RECONFIGURED: 1, ARRIVE: 2, GIVE_UP: 3}


@dataclass(slots=True)
class _Waiting:
    arrival: Arrival
    index: int
    awaits: int | None = None
    """The re-partition this pod waits for (asked for or claimed), if any."""
    asked_s: float | None = None
    """When it began to wait for its last re-partition (None: it never waited for one)."""


@dataclass(slots=True)
class _Reshape:
    decided_s: float
    locks: list[tuple[SimNode, int, int]]
    """(node, gpu index, instance position) held by the re-partition until it completes."""
    spare: Counter[str] = field(default_factory=Counter)


Progress = Callable[[str], None]


class _Run:
    def __init__(
        self, policy: Policy, config: ChurnConfig, model: GpuModel, arrivals: Sequence[Arrival]
    ) -> None:
        self.policy = policy
        self.splits = policy if isinstance(policy, Repartitioning) else None
        self.config = config
        self.model = model
        self.cluster = SimCluster(
            model, config.nodes, policy.initial_layouts(model), gpus_per_node=config.gpus_per_node
        )
        self.arrivals = arrivals
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.queue: dict[int, _Waiting] = {}
        self.reshapes: dict[int, _Reshape] = {}
        self.next_reshape = 0
        self.end = config.duration_s - config.patience_s
        # metrics
        self.now = 0.0
        self.held_slices = 0
        self.slice_area = 0.0
        self.pending_area = 0.0
        self.patient_waiting = 0
        self.waits: list[float] = []
        self.repartition_waits: list[float] = []
        self.repartition_delays: list[float] = []
        self.placed = 0
        self.abandoned = 0
        self.repartitions = 0
        self.gpus_repartitioned = 0
        self.disrupted = 0
        self.placements: list[Placement] = []
        self.reconfigurations: list[Reconfiguration] = []

    def push(self, time_s: float, kind: int, key: int) -> None:
        heapq.heappush(self.events, (time_s, ORDER[kind], self.seq, key))
        self.seq += 1

    def measured(self, arrival: Arrival) -> bool:
        return self.config.warmup_s <= arrival.time_s <= self.end

    def advance(self, time_s: float) -> None:
        start = max(self.now, self.config.warmup_s)
        if time_s > start:
            self.slice_area += self.held_slices * (time_s - start)
            self.pending_area += (len(self.queue) - self.patient_waiting) * (time_s - start)
        self.now = time_s

    def run(self) -> None:
        kinds = {v: k for k, v in ORDER.items()}
        for i, arrival in enumerate(self.arrivals):
            self.push(arrival.time_s, ARRIVE, i)
        while self.events:
            time_s, order, _, key = heapq.heappop(self.events)
            if time_s > self.config.duration_s:
                break
            self.advance(time_s)
            kind = kinds[order]
            if kind == ARRIVE:
                self.arrive(key)
            elif kind == DEPART:
                self.depart(key)
            elif kind == RECONFIGURED:
                self.reconfigured(key)
            else:
                self.give_up(key)
        self.advance(self.config.duration_s)

    # -- events ------------------------------------------------------------------------

    def arrive(self, index: int) -> None:
        arrival = self.arrivals[index]
        waiting = _Waiting(arrival, index)
        if self.try_place(waiting):
            return
        self.queue[index] = waiting
        if arrival.patient:
            self.patient_waiting += 1
        else:
            self.push(arrival.time_s + self.config.patience_s, GIVE_UP, index)
        self.try_reshape(waiting)

    def depart(self, index: int) -> None:
        pod = self.arrivals[index].pod
        assignment = self.cluster.assignments[pod.name]
        if not _intact(self.cluster, assignment):
            self.disrupted += 1
        self.cluster.release(pod.name)
        self.held_slices -= self.slices(assignment)
        self.retry(self.cluster.by_name[assignment.node])

    def reconfigured(self, key: int) -> None:
        reshape = self.reshapes.pop(key)
        nodes: dict[str, SimNode] = {}
        for node, gpu_index, position in reshape.locks:
            self.cluster.free_instance(node, node.gpus[gpu_index], position, _lock_name(key))
            nodes[node.name] = node
        claimants = [w for w in self.queue.values() if w.awaits == key]
        for waiting in claimants:
            waiting.awaits = None
        for waiting in claimants:
            if self.try_place(waiting):
                del self.queue[waiting.index]
        for node in nodes.values():
            self.retry(node)

    def give_up(self, index: int) -> None:
        waiting = self.queue.pop(index, None)
        if waiting is None:
            return
        self.unclaim(waiting)
        if self.measured(waiting.arrival):
            self.abandoned += 1

    def unclaim(self, waiting: _Waiting) -> None:
        """Give back the spare instance a pod claimed, if it no longer waits for it."""
        reshape = None if waiting.awaits is None else self.reshapes.get(waiting.awaits)
        if reshape is not None:
            pod = waiting.arrival.pod
            reshape.spare[pod.profile] += pod.count
        waiting.awaits = None

    # -- placement ---------------------------------------------------------------------

    def try_place(self, waiting: _Waiting) -> bool:
        pod = waiting.arrival.pod
        if self.splits is not None:
            assignment = self.splits.place_now(self.cluster, pod)
        else:
            assignment = self.policy.place(self.cluster, pod)
        if assignment is None:
            return False
        self.unclaim(waiting)
        if waiting.arrival.patient and waiting.index in self.queue:
            self.patient_waiting -= 1
        self.held_slices += self.slices(assignment)
        arrival = waiting.arrival
        self.push(self.now + arrival.lifetime_s, DEPART, waiting.index)
        if self.measured(arrival):
            self.placed += 1
            wait = self.now - arrival.time_s
            self.waits.append(wait)
            if waiting.asked_s is not None:
                self.repartition_waits.append(wait)
                self.repartition_delays.append(self.now - waiting.asked_s)
        if self.config.keep_log:
            gpus = tuple(index for index, _ in assignment.units)
            self.placements.append(Placement(pod.name, self.now, assignment.node, gpus))
        return True

    def try_reshape(self, waiting: _Waiting) -> None:
        """Claim a spare instance of an in-flight re-partition, else ask for one."""
        if self.splits is None or waiting.awaits is not None:
            return
        pod = waiting.arrival.pod
        for key, reshape in self.reshapes.items():
            if reshape.spare[pod.profile] >= pod.count:
                reshape.spare[pod.profile] -= pod.count
                waiting.awaits, waiting.asked_s = key, self.now
                return
        changed = self.splits.reshape_for(self.cluster, pod)
        if not changed:
            return
        key = self.next_reshape
        self.next_reshape += 1
        reshape = _Reshape(self.now, [])
        usable = self.now + self.config.t_reconf_s
        for node, gpu_index in changed:
            gpu = node.gpus[gpu_index]
            for position, holder in enumerate(gpu.holders):
                if holder is None:
                    self.cluster.hold_instance(node, gpu, position, _lock_name(key))
                    reshape.locks.append((node, gpu_index, position))
                    reshape.spare[gpu.instances[position].profile] += 1
            if self.config.keep_log:
                self.reconfigurations.append(
                    Reconfiguration(node.name, gpu_index, self.now, usable)
                )
        reshape.spare[pod.profile] -= pod.count
        self.reshapes[key] = reshape
        waiting.awaits, waiting.asked_s = key, self.now
        for other in self.queue.values():
            wanted = other.arrival.pod
            if other.awaits is None and reshape.spare[wanted.profile] >= wanted.count:
                reshape.spare[wanted.profile] -= wanted.count
                other.awaits, other.asked_s = key, self.now
        if self.config.warmup_s <= self.now:
            self.repartitions += 1
            self.gpus_repartitioned += len(changed)
        self.push(usable, RECONFIGURED, key)

    def retry(self, node: SimNode) -> None:
        """Retry the queue in FIFO order after ``node`` gained free instances or idle GPUs.

        A waiting pod could not be placed before, and only ``node`` has gained since, so a
        pod is tried only if ``node`` has enough free instances of its profile, and offered
        a re-partition only if ``node`` has an idle GPU."""
        seen = -1
        free: Counter[str] = Counter()
        idle = False
        for index, waiting in list(self.queue.items()):
            if node.version != seen:
                seen = node.version
                free = _free_counts(node)
                idle = _has_idle(node)
            pod = waiting.arrival.pod
            if free[pod.profile] >= pod.count and self.try_place(waiting):
                del self.queue[index]
                continue
            if idle and waiting.awaits is None and self.splits is not None:
                self.try_reshape(waiting)

    def slices(self, assignment: Assignment) -> int:
        total = 0
        for _, placed in assignment.units:
            if placed is None:
                total += self.model.compute_slices
            else:
                total += self.model.profile(placed.profile).compute_slices
        return total


def _lock_name(key: int) -> str:
    return f"<re-partition {key}>"


def _free_counts(node: SimNode) -> Counter[str]:
    return Counter(
        p.profile
        for gpu in node.gpus
        for p, h in zip(gpu.instances, gpu.holders, strict=True)
        if h is None
    )


def _has_idle(node: SimNode) -> bool:
    return any(gpu.mig_enabled and gpu.is_idle for gpu in node.gpus)


def _intact(cluster: SimCluster, assignment: Assignment) -> bool:
    node = cluster.by_name[assignment.node]
    for index, placed in assignment.units:
        gpu = node.gpus[index]
        if placed is None:
            if gpu.whole_holder != assignment.pod:
                return False
        elif not any(
            p == placed and h == assignment.pod
            for p, h in zip(gpu.instances, gpu.holders, strict=True)
        ):
            return False
    return True


def run_churn(
    workload: Workload,
    policy: Policy,
    seed: int,
    config: ChurnConfig = DEFAULT_CHURN,
    model: GpuModel = GPU_MODEL,
) -> ChurnResult:
    capacity = model.compute_slices * config.nodes * config.gpus_per_node
    arrivals = sample_churn(workload, capacity, config, seed)
    return run_arrivals(
        arrivals,
        policy,
        config,
        model,
        workload=workload.name,
        seed=seed,
        rate_per_s=arrival_rate_per_s(workload, capacity, config),
    )


def run_arrivals(
    arrivals: Sequence[Arrival],
    policy: Policy,
    config: ChurnConfig = DEFAULT_CHURN,
    model: GpuModel = GPU_MODEL,
    workload: str = "sequence",
    seed: int = 0,
    rate_per_s: float = 0.0,
) -> ChurnResult:
    """Run given arrivals (in time order) on a fresh cluster for ``config.duration_s``."""
    run = _Run(policy, config, model, arrivals)
    run.run()
    cluster = run.cluster
    window = config.duration_s - config.warmup_s
    arrived = sum(1 for a in arrivals if run.measured(a))
    return ChurnResult(
        policy=policy.name,
        workload=workload,
        seed=seed,
        nodes=config.nodes,
        gpus=cluster.gpu_count,
        load_pct=config.load_pct,
        t_reconf_s=config.t_reconf_s,
        patience_s=config.patience_s,
        arrival_rate_per_s=rate_per_s,
        duration_s=config.duration_s,
        warmup_s=config.warmup_s,
        arrived_pods=arrived,
        placed_pods=run.placed,
        abandoned_pods=run.abandoned,
        waits=Waits.of(run.waits),
        repartition_waits=Waits.of(run.repartition_waits),
        repartition_delays=Waits.of(run.repartition_delays),
        slice_allocation=run.slice_area / (window * model.compute_slices * cluster.gpu_count),
        mean_pending=run.pending_area / window,
        repartitions=run.repartitions,
        gpus_repartitioned=run.gpus_repartitioned,
        disrupted_pods=run.disrupted + disrupted_pods(cluster),
        placements=tuple(run.placements),
        reconfigurations=tuple(run.reconfigurations),
    )
