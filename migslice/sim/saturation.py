"""Mode A, FGD-style saturation: pods arrive until demand is 130 % of capacity, none depart.

Pods are drawn with replacement (``random.Random(seed)``) from a workload until the arrived
demand, in compute slices of the mapped profiles, reaches ``max_load`` x 7 x GPUs; each drawn
pod gets a name of its own (the trace's name and its arrival number), so that the end-of-run
disruption check sees every placed pod. Each pod is placed by the policy at once; if nothing
fits and the policy re-partitions, its layout changes are applied at once (mode A has no
clock) and the pod is placed again; otherwise it is counted failed (it is not retried). A
:class:`LoadPoint` is taken when arrived demand first reaches each whole percent of
capacity. Same inputs and seed, same result.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from migslice.mig import GpuModel, is_legal
from migslice.sim.cluster import GPUS_PER_NODE, SimCluster
from migslice.sim.metrics import LoadPoint, RunResult, Tally, disrupted_pods, size_class
from migslice.sim.placement import Policy, Reshaper, apply_changes
from migslice.sim.sampling import SampleTally
from migslice.sim.tenants import QuotaLedger, quota_policies, tenant_of
from migslice.sim.trace import GPU_MODEL, SimPod, Workload

Progress = Callable[[LoadPoint], None]


@dataclass(frozen=True, slots=True)
class SaturationConfig:
    nodes: int = 64
    gpus_per_node: int = GPUS_PER_NODE
    max_load_pct: int = 130
    check_layouts: bool = False
    """Check every GPU's layout with ``is_legal`` after each placement (slow; for tests)."""
    quotas: bool = False
    """Give each tenant a quota of its share of the arrivals' demand
    (:func:`migslice.sim.tenants.quota_policies`): a pod over it is denied before placement."""


def sample_arrivals(
    workload: Workload, capacity_slices: int, max_load_pct: int, *, seed: int
) -> tuple[SimPod, ...]:
    """Pods drawn with replacement until their compute slices reach the target load."""
    if not workload.pods:
        raise ValueError(f"workload {workload.name} has no GPU pods to sample")
    rng = random.Random(seed)
    target = capacity_slices * max_load_pct / 100
    arrived = 0
    pods: list[SimPod] = []
    choose = rng.choice
    while arrived < target:
        pod = choose(workload.pods)
        # Every field but the name, as dataclasses.replace would (a test holds them equal),
        # at a third of its cost: a draw is thousands of pods, once per run.
        pods.append(SimPod(f"{pod.name}#{len(pods)}", pod.profile, pod.count, pod.tenant))
        arrived += pod.compute_slices
    return tuple(pods)


def run_saturation(
    workload: Workload,
    policy: Policy,
    seed: int,
    *,
    config: SaturationConfig = SaturationConfig(),
    model: GpuModel = GPU_MODEL,
    progress: Progress | None = None,
) -> RunResult:
    capacity = model.compute_slices * config.nodes * config.gpus_per_node
    arrivals = sample_arrivals(workload, capacity, config.max_load_pct, seed=seed)
    return run_sequence(
        arrivals, policy, config, model=model, workload=workload.name, seed=seed, progress=progress
    )


def run_sequence(
    arrivals: Sequence[SimPod],
    policy: Policy,
    config: SaturationConfig = SaturationConfig(),
    *,
    model: GpuModel = GPU_MODEL,
    workload: str = "sequence",
    seed: int = 0,
    progress: Progress | None = None,
) -> RunResult:
    """Place ``arrivals`` in order on a fresh cluster; load points up to ``max_load_pct``.

    ``progress`` is called with every tenth load point (10 %, 20 %, ...) as it is reached.
    """
    cluster = SimCluster(
        model, config.nodes, policy.initial_layouts(model), gpus_per_node=config.gpus_per_node
    )
    placer = policy.start(cluster, seed)
    reshaper = placer if isinstance(placer, Reshaper) else None
    tally = Tally(cluster.gpu_count)
    capacity = model.compute_slices * cluster.gpu_count
    points: list[LoadPoint] = []
    arrived = 0
    first_failure: float | None = None
    ledger = QuotaLedger(quota_policies(arrivals, capacity), model) if config.quotas else None
    for pod in arrivals:
        arrived += pod.compute_slices
        denied = ledger is not None and not ledger.admit(pod)
        assignment = None if denied else placer.place(pod)
        if assignment is None and reshaper is not None and not denied:
            if apply_changes(cluster, reshaper.reshape([pod])):
                assignment = placer.place(pod)
        if assignment is None and ledger is not None:
            ledger.release(pod.name)
        tally.arrive(
            size_class(model, pod),
            assignment is not None,
            tenant_of(pod),
            denied,
            pod.compute_slices,
        )
        if assignment is not None:
            tally.add(model, pod.compute_slices, assignment)
        elif not denied:
            tally.failed += 1
            if first_failure is None:
                first_failure = 100.0 * arrived / capacity
        if config.check_layouts:
            _check_layouts(cluster)
        reached = min(config.max_load_pct, (100 * arrived) // capacity)
        while len(points) < reached:
            point = tally.point(len(points) + 1, model.compute_slices, model.memory_slices)
            points.append(point)
            if progress is not None and point.arrived_pct % 10 == 0:
                progress(point)
    sampled = getattr(placer, "sampling", None)
    return RunResult(
        policy=policy.name,
        workload=workload,
        seed=seed,
        nodes=config.nodes,
        gpus=cluster.gpu_count,
        arrived_pods=len(arrivals),
        placed_pods=tally.placed,
        failed_pods=tally.failed,
        first_failure_pct=first_failure,
        gpus_repartitioned=cluster.gpus_touched,
        repartition_operations=cluster.repartitions,
        disrupted_pods=disrupted_pods(cluster),
        points=tuple(points),
        instances_created=cluster.instances_created,
        sampling=sampled if isinstance(sampled, SampleTally) else None,
    )


def _check_layouts(cluster: SimCluster) -> None:
    for node, gpu in cluster.all_gpus():
        if gpu.mig_enabled and not is_legal(cluster.model, gpu.instances):
            raise AssertionError(f"{node.name} GPU {gpu.index} has an illegal layout")
