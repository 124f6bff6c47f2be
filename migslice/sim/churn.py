"""Mode B, churn / steady state (benchmarks.md §5.3): pods arrive, wait, run and depart.

* **Arrivals**: a Poisson process; each pod is drawn with replacement from the workload's
  mapped pods. The rate makes the offered load ``load_pct`` % of the cluster's compute slices:
  rate = load x capacity / (mean slices per pod x mean lifetime).
* **Lifetimes**: lognormal through the trace's median 236 s and p90 4,012 s (mean 2,718 s).
  The tail is heavy, so the run starts in steady state (``prefill``): at t = 0 the pods
  running at a random instant arrive, each with its residual lifetime (an M/G/infinity queue
  in equilibrium). They are placed as in mode A, re-partitioning at once where the policy
  does (the cluster as it would be after running for a while), and wait if they still do
  not fit; the warm-up then settles placement under the production rules. (Carve mode's
  prefill re-partitions idle GPUs with the MIG Manager planner; it carves afterwards.)
* **Queue**: a pod that cannot be placed on arrival waits in a FIFO queue, retried in order
  whenever a node gains free instances (a departure, a finished re-partition). A pod still
  waiting after ``patience_s`` gives up: it counts as not accepted.
* **Re-partitioning** by whoever decides it in production: migslice's controller
  (:mod:`migslice.sim.controller`: rounds every 15 s, 30 s pending before a pod counts,
  600 s cooldown per node, one node in flight; in carve mode 10 s pending, 60 s cooldown,
  four nodes in flight) or nos's batching windows
  (:mod:`migslice.sim.batching`). Either way a node being re-partitioned takes no new pod
  (its ``nvidia.com/mig.config.state`` is ``pending``) until the stand-in for MIG Manager
  (or nos's agent) has taken ``t_reconf_s``, applied the new layouts and reported
  ``success``. Policies that never re-partition have no driver.
* **Measured window**: pods arriving in [warm-up, end - patience] (so each one's outcome is
  known by the end); slice allocation and pending pods are time averages over [warm-up, end].
  Acceptance is counted by pods and by compute slices, overall and per pod class.

Same inputs and seed, same result. The arrival sequence depends only on the workload, the
load, the lifetimes and the seed, so every policy sees the same pods at the same times.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from migslice.mig import GpuModel
from migslice.names import MIG_STATE_PENDING, MIG_STATE_SUCCESS
from migslice.objects.carve_handshake import CarvePhase, CarveRequest, CarveStatus
from migslice.sim.batching import NosBatching
from migslice.sim.carving import carve_node, carving_settings
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
from migslice.sim.churn_tally import ChurnTally
from migslice.sim.cluster import Assignment, SimCluster, SimNode
from migslice.sim.controller import MigsliceController
from migslice.sim.metrics import disrupted_pods
from migslice.sim.nos import NosPlacer
from migslice.sim.ours import Migslice, MigslicePlacer
from migslice.sim.placement import Holding, LayoutChange, Policy, Reshaper, apply_changes
from migslice.sim.trace import GPU_MODEL, SimPod, Workload

DEPART, DONE, TIMER, ARRIVE, GIVE_UP = 0, 1, 2, 3, 4
"""Event kinds, in the order they run at equal times."""


@dataclass(slots=True)
class _Waiting:
    arrival: Arrival
    index: int
    since: float


@dataclass(slots=True)
class _Job:
    node: SimNode
    changes: Sequence[LayoutChange]
    config: str
    done: Callable[[float], None]
    records: list[Reconfiguration] = field(default_factory=list)


class ChurnRun:
    """One mode B run (the ``ReconfiguringRun`` the drivers see)."""

    def __init__(
        self,
        policy: Policy,
        config: ChurnConfig,
        model: GpuModel,
        *,
        arrivals: Sequence[Arrival],
        seed: int = 0,
    ) -> None:
        self.config = config
        self.model = model
        self.arrivals = arrivals
        self.cluster = SimCluster(
            model, config.nodes, policy.initial_layouts(model), gpus_per_node=config.gpus_per_node
        )
        self.placer = policy.start(self.cluster, seed)
        self.reshaper = self.placer if isinstance(self.placer, Reshaper) else None
        self.holding = self.placer if isinstance(self.placer, Holding) else None
        self.events: list[tuple[float, int, int, int]] = []
        self.callbacks: dict[int, Callable[[float], None]] = {}
        self.jobs: dict[int, _Job] = {}
        self.seq = 0
        self.now = 0.0
        self.queue: dict[int, _Waiting] = {}
        self.served: dict[str, float] = {}
        """Pods a re-partition or carve was planned for, and when it was planned."""
        self.end = config.duration_s - config.patience_s
        self.tally = ChurnTally(config, model)
        self.per_pod = bool(getattr(self.placer, "carves_per_pod", False))
        self.carve_s = config.t_carve_s if self.per_pod else 0.0
        """Per-pod carvers (B6, B8, B9): a pod starts this long after it is placed."""
        self.changes = InstanceChanges()
        self.batching: NosBatching | None = None
        if isinstance(policy, Migslice):
            settings = carving_settings(config.controller) if policy.carves else config.controller
            MigsliceController(self, settings, config.interval_s)
            if isinstance(self.placer, MigslicePlacer):
                # the prefill shapes idle GPUs as the MIG Manager planner does (asking the
                # carve planner about every node for each of ~1,000 prefill pods costs
                # minutes); the controller carves from the first round on
                self.placer.carve = False
        elif isinstance(self.placer, NosPlacer):
            self.batching = NosBatching(
                self, self.placer, config.batch_idle_s, timeout_s=config.batch_timeout_s
            )

    # -- the ReconfiguringRun port ---------------------------------------------------------

    def waiting(self) -> list[tuple[SimPod, float]]:
        return [(w.arrival.pod, w.since) for w in self.queue.values()]

    def push(self, time_s: float, kind: int, key: int) -> None:
        heapq.heappush(self.events, (time_s, kind, self.seq, key))
        self.seq += 1

    def at(self, time_s: float, callback: Callable[[float], None]) -> None:
        self.callbacks[self.seq] = callback
        self.push(time_s, TIMER, self.seq)

    def every(self, interval_s: float, callback: Callable[[float], None]) -> None:
        def again(now: float) -> None:
            callback(now)
            self.at(now + interval_s, again)

        self.at(interval_s, again)

    def reconfigure(
        self,
        node: SimNode,
        changes: Sequence[LayoutChange],
        config: str,
        *,
        done: Callable[[float], None],
        serves: Sequence[str] = (),
    ) -> None:
        self.cluster.set_mig_state(node, config, MIG_STATE_PENDING)
        if self.in_window():
            for change in changes:
                old = set(node.gpus[change.gpu].instances)
                new = set(change.new)
                self.changes.add(len(new - old), len(old - new), self.config.t_reconf_s)
        self.served.update(dict.fromkeys(serves, self.now))
        job = _Job(node, changes, config, done)
        key = self.seq
        self.jobs[key] = job
        self.push(self.now + self.config.t_reconf_s, DONE, key)
        self.tally.reconfiguration_started(self.now, len(changes))
        if self.config.keep_log:
            for change in changes:
                job.records.append(
                    Reconfiguration(
                        node.name, change.gpu, self.now, self.now + self.config.t_reconf_s
                    )
                )

    def carve(self, node: SimNode, request: CarveRequest, *, serves: Sequence[str]) -> None:
        self.cluster.set_carve(node, request, None)
        if self.in_window():
            created = sum(len(g.create) for g in request.gpus)
            destroyed = sum(len(g.destroy) for g in request.gpus)
            self.changes.add(created, destroyed, self.config.t_carve_s)
        self.served.update(dict.fromkeys(serves, self.now))
        self.tally.reconfiguration_started(self.now, len(request.gpus))
        usable = self.now + self.config.t_carve_s
        if self.config.keep_log:
            self.tally.reconfigurations.extend(
                Reconfiguration(node.name, g.index, self.now, usable) for g in request.gpus
            )

        def carved(now: float) -> None:
            carve_node(self.cluster, node, request)
            self.cluster.set_carve(
                node, node.carve_request, CarveStatus(request.plan_id, CarvePhase.SUCCESS)
            )
            self.retry(node)

        self.at(usable, carved)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        for i, arrival in enumerate(self.arrivals):
            if arrival.patient:
                self.prefill(i)
            else:
                self.push(arrival.time_s, ARRIVE, i)
        while self.events:
            time_s, kind, _, key = heapq.heappop(self.events)
            if time_s > self.config.duration_s:
                break
            self.tally.advance(time_s, self.queue.values())
            self.now = time_s
            if kind == ARRIVE:
                self.arrive(key)
            elif kind == DEPART:
                self.depart(key)
            elif kind == DONE:
                self.reconfigured(key)
            elif kind == TIMER:
                self.callbacks.pop(key)(time_s)
            else:
                self.give_up(key)
        self.tally.advance(self.config.duration_s, self.queue.values())

    def prefill(self, index: int) -> None:
        """A pod running when the run starts: placed as in mode A, else it waits."""
        waiting = _Waiting(self.arrivals[index], index, 0.0)
        if self.try_place(waiting):
            return
        if self.reshaper is not None:
            if apply_changes(self.cluster, self.reshaper.reshape([waiting.arrival.pod])):
                if self.try_place(waiting):
                    return
        self.queue[index] = waiting

    def arrive(self, index: int) -> None:
        arrival = self.arrivals[index]
        waiting = _Waiting(arrival, index, self.now)
        if self.try_place(waiting):
            return
        self.queue[index] = waiting
        self.push(self.now + self.config.patience_s, GIVE_UP, index)
        hold = None if self.holding is None else self.holding.max_hold_s
        if hold is not None and hold < self.config.patience_s:
            self.at(self.now + hold, lambda _: self.try_again(index))
        if self.batching is not None:
            self.batching.pending(self.now)

    def depart(self, index: int) -> None:
        pod = self.arrivals[index].pod
        assignment = self.cluster.assignments[pod.name]
        self.tally.departed(self.cluster, assignment, self.slices(assignment))
        self.placer.depart(pod.name)
        if self.carve_s and self.in_window():
            self.changes.add(0, len(assignment.units), 0.0)
        self.retry(self.cluster.by_name[assignment.node])

    def reconfigured(self, key: int) -> None:
        job = self.jobs.pop(key)
        apply_changes(self.cluster, job.changes)
        self.cluster.set_mig_state(job.node, job.config, MIG_STATE_SUCCESS)
        self.tally.reconfigurations.extend(job.records)
        self.retry(job.node)
        job.done(self.now)

    def try_again(self, index: int) -> None:
        """A held-back pod's longest hold is over: try it now (kube-scheduler tries a pod
        the extender turned away again on the next change in the cluster, of which a busy
        one has many a second)."""
        waiting = self.queue.get(index)
        if waiting is not None and self.try_place(waiting):
            del self.queue[index]

    def give_up(self, index: int) -> None:
        waiting = self.queue.pop(index, None)
        if waiting is not None and self.measured(waiting.arrival):
            self.tally.gave_up(waiting.arrival.pod)

    def in_window(self) -> bool:
        return self.now >= self.config.warmup_s

    def measured(self, arrival: Arrival) -> bool:
        return not arrival.patient and self.config.warmup_s <= arrival.time_s <= self.end

    # -- placement -----------------------------------------------------------------------

    def try_place(self, waiting: _Waiting) -> bool:
        pod = waiting.arrival.pod
        if self.holding is not None:
            self.holding.waited_s = self.now - waiting.since
        assignment = self.placer.place(pod)
        if assignment is None:
            return False
        arrival = waiting.arrival
        self.push(self.now + self.carve_s + arrival.lifetime_s, DEPART, waiting.index)
        if self.carve_s and self.in_window():
            self.changes.add(len(assignment.units), 0, 0.0)
        self.tally.placed(
            pod,
            self.slices(assignment),
            self.now + self.carve_s - arrival.time_s,
            measured=self.measured(arrival),
            planned_s=self.served.pop(pod.name, None),
            arrived_s=arrival.time_s,
        )
        if self.config.keep_log:
            gpus = tuple(index for index, _ in assignment.units)
            self.tally.placements.append(Placement(pod.name, self.now, assignment.node, gpus))
        return True

    def retry(self, node: SimNode) -> None:
        """Retry the queue in FIFO order after ``node`` gained free instances: a pod is tried
        only if ``node`` now has enough free instances of its profile (nothing else changed
        since it last failed); under a per-pod carver every waiting pod is tried."""
        seen = -1
        free: Counter[str] = Counter()
        for index, waiting in list(self.queue.items()):
            if node.is_blocked:
                return
            if self.per_pod:
                # a per-pod carver has no free instances to count: the freed slices may
                # take any waiting pod, so each is tried in turn
                if self.try_place(waiting):
                    del self.queue[index]
                continue
            if node.version != seen:
                seen = node.version
                free = _free_counts(node)
            pod = waiting.arrival.pod
            if free[pod.profile] >= pod.count and self.try_place(waiting):
                del self.queue[index]

    def slices(self, assignment: Assignment) -> int:
        total = 0
        for _, placed in assignment.units:
            if placed is None:
                total += self.model.compute_slices
            else:
                total += self.model.profile(placed.profile).compute_slices
        return total


@dataclass(slots=True)
class InstanceChanges:
    """MIG instances created and destroyed in the measured window, whoever did it (MIG
    Manager's stand-in, the node agent's carve, a per-pod carver), and the node-seconds
    nodes spent taking no new pod while MIG Manager or the node agent worked on them."""

    created: int = 0
    destroyed: int = 0
    blocked_node_s: float = 0.0

    def add(self, created: int, destroyed: int, blocked_s: float) -> None:
        self.created += created
        self.destroyed += destroyed
        self.blocked_node_s += blocked_s


def _free_counts(node: SimNode) -> Counter[str]:
    return Counter(
        p.profile
        for gpu in node.gpus
        for p, h in zip(gpu.instances, gpu.holders, strict=True)
        if h is None
    )


def run_churn(
    workload: Workload,
    policy: Policy,
    seed: int,
    *,
    config: ChurnConfig = DEFAULT_CHURN,
    model: GpuModel = GPU_MODEL,
) -> ChurnResult:
    capacity = model.compute_slices * config.nodes * config.gpus_per_node
    arrivals = sample_churn(workload, capacity, config, seed=seed)
    return run_arrivals(
        arrivals,
        policy,
        config,
        model=model,
        workload=workload.name,
        seed=seed,
        rate_per_s=arrival_rate_per_s(workload, capacity, config),
    )


def run_arrivals(
    arrivals: Sequence[Arrival],
    policy: Policy,
    config: ChurnConfig = DEFAULT_CHURN,
    *,
    model: GpuModel = GPU_MODEL,
    workload: str = "sequence",
    seed: int = 0,
    rate_per_s: float = 0.0,
) -> ChurnResult:
    """Run given arrivals (in time order) on a fresh cluster for ``config.duration_s``."""
    run = ChurnRun(policy, config, model, arrivals=arrivals, seed=seed)
    run.run()
    tally = run.tally
    window = config.duration_s - config.warmup_s
    gpus = run.cluster.gpu_count
    return ChurnResult(
        policy=policy.name,
        workload=workload,
        seed=seed,
        nodes=config.nodes,
        gpus=gpus,
        load_pct=config.load_pct,
        t_reconf_s=config.t_reconf_s,
        patience_s=config.patience_s,
        arrival_rate_per_s=rate_per_s,
        duration_s=config.duration_s,
        warmup_s=config.warmup_s,
        arrived_pods=sum(1 for a in arrivals if run.measured(a)),
        placed_pods=len(tally.waits),
        abandoned_pods=tally.abandoned,
        waits=Waits.of(tally.waits),
        repartition_waits=Waits.of(tally.served_waits),
        repartition_leads=Waits.of(tally.served_leads),
        slice_allocation=tally.slice_area / (window * model.compute_slices * gpus),
        mean_pending=tally.pending_area / window,
        repartitions=tally.repartitions,
        gpus_repartitioned=tally.gpus_repartitioned,
        disrupted_pods=tally.disrupted + disrupted_pods(run.cluster),
        instance_creates=run.changes.created,
        instance_destroys=run.changes.destroyed,
        blocked_node_s=run.changes.blocked_node_s,
        classes=tally.classes([a for a in arrivals if run.measured(a)]),
        placements=tuple(tally.placements),
        reconfigurations=tuple(tally.reconfigurations),
    )
