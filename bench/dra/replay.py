"""Benchmark: the same MIG claims, allocated by kube-scheduler alone (first fit) and with
migslice (its extender's node score and its steer), on a real control plane (a report).

A real etcd, kube-apiserver and kube-scheduler (``e2e/.bin``) and DynamicMIG A100 nodes that
the fake DRA driver (``harness.dra_driver``) publishes exactly as NVIDIA's driver does. The
arrivals are pods of the Alibaba GPU trace (``../shared/data``, mapped to MIG profiles as the
packing suite maps them), drawn with a seed until their memory slices reach ``--load`` times
the cluster's; each asks its profile through a ResourceClaim of NVIDIA's ``mig.nvidia.com``.
Each policy gets a fresh control plane and the same arrivals:

* ``first-fit``: the stock ``default-scheduler``, no extender, no steer: what a cluster with
  NVIDIA's DRA driver does today;
* ``migslice``: ``migslice-scheduler`` with the shipped configuration and the extender
  (in-cluster, its steer on).

**Sequential**: one pod at a time, the next once the last is bound or reported unschedulable
(and, for migslice, once its steer matches the allocations: arrivals spaced as a real
cluster's are). A pod its first scheduling does not bind is **turned away**: deleted with its
claim, as the packing suite rejects a pod, so no queue forms and every arrival meets the
room the policy left (with a queue, the pods waiting take what departures free before the
next arrival does, in both runs, and placement on arrival then measures the queue). Arrivals
first fill the cluster to ``--load`` times its memory slices; then each of ``--churn`` more
arrivals comes after the oldest running pod leaves (its pod and claim deleted, the claim's
finalizer removed as kube-controller-manager's claim controller does: its devices are free
again), so holes open where each policy left them. Each workload of ``--workloads`` is one
arrival sequence per seed of ``--seeds``; the goals are judged on their mean (one sequence
is luck: the stranded figure of one policy moves several-fold between seeds). First fit runs
``--first-fit-runs`` times on each sequence (default 3) and counts as their mean: kube-scheduler
breaks ties between equal nodes at random, so its figure on one sequence moves between
identical runs (default/M1, seed 1: 15.2, 35.7 and 15.5 slices), where migslice's repeats
within about 2.

**Burst**: the fill's pods at once, timed from the first create until every pod is
bound or unschedulable (scheduling throughput; the steer cannot follow a burst, so its
packing there is mostly the node score's).

Reported per run: pods placed on arrival and turned away, per profile; the memory slices free
on GPUs in use when a pod is turned away (**stranded**: room it could not use) and whether
some placement of the pods then held and of it might exist (:func:`might_fit`: if none does,
no policy holding those pods could have served it); the slices free on GPUs in use and on
idle GPUs at the fill's end; devices or memory slices given twice (must be 0); pods left
unschedulable that a node could still serve (must be 0).

    python -m bench.dra.replay                   # 8 nodes x 8 A100, load 1.3 + 300 churn,
                                                 # seeds 1-5
    python -m bench.dra.replay --quick           # 2 nodes x 8 A100, sequential only

Writes the section ``replay`` of ``bench/dra/report.json`` (and ``report.md``, ``report.png``).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bench.common.programs import said_in_one_line
from bench.dra.suite import SUITE
from harness import dra_slices
from harness.api import ensure_namespace, register_gpu_node
from harness.binaries import DEFAULT_BIN_DIR
from harness.controlplane import ControlPlane
from harness.dra_driver import (
    FakeDraDriver,
    claim_objects,
    ensure_mig_class,
    read_cluster,
    release,
    results,
    settled,
)
from harness.scheduler import default_scheduler_config
from harness.stack import BASE, SCHEDULER_CLIENT, migslice_server, scheduler_configuration
from migslice.inventory.first_fit import Wanted, first_solution
from migslice.mig import GpuModel, Placed
from migslice.sim import SimPod
from migslice.sim.trace_files import DEFAULT_DATA_DIR, load_workload

DRA = ("resource.k8s.io", "v1")
NAMESPACE = "replay"
POLICIES = ("first-fit", "migslice")
RESERVE = "migslice-reserve"
"""migslice with the opt-in large-job reserve (``--dra-large-reserve``): not in the report's
runs; ``run(RESERVE, ...)`` measures it against them (bench/dra/README, "Conclusions")."""
A100_SLICES = 8
"""Memory slices of an A100-80GB (the nodes' GPUs)."""
LARGE = ("4g.40gb", "7g.80gb")
WORKLOADS = ("default/M1", "gpushare100/M2")
"""The packing suite's headline workload (mostly 1g-3g pods: where first fit strands the
larger placements) and a mix half of whole-GPU 7g pods."""


def arrivals(
    data_dir: Path, trace: str, mapping: str, seed: int, slices: int, more: int = 0
) -> list[SimPod]:
    """Pods of the trace, drawn with ``seed`` until their memory slices reach ``slices``, and
    ``more`` after them."""
    workload = load_workload(data_dir, trace, mapping)
    rng = random.Random(seed)
    drawn: list[SimPod] = []
    demand = 0
    while demand < slices:
        pod = rng.choice(workload.pods)
        drawn.append(pod)
        demand += pod.memory_slices
    drawn += [rng.choice(workload.pods) for _ in range(more)]
    return drawn


def decided(pod: k8s.V1Pod) -> str | None:
    """``bound``, ``unschedulable`` or None (not yet)."""
    if pod.spec.node_name:
        return "bound"
    for condition in pod.status.conditions or ():
        if condition.type == "PodScheduled" and condition.reason == "Unschedulable":
            return "unschedulable"
    return None


def wait(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def run(
    policy: str,
    pods: Sequence[SimPod],
    *,
    nodes: int,
    gpus: int,
    burst: bool,
    bin_dir: Path,
    progress: Callable[[str], None],
    churn: int = 0,
) -> dict[str, Any]:
    """One policy over ``pods`` on a fresh control plane; the last ``churn`` of them each after
    the oldest running pod leaves."""
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-dra-{policy}-"))
    with ControlPlane(workdir, bin_dir) as plane:
        api = plane.api_client()
        core = k8s.CoreV1Api(api)
        objects = k8s.CustomObjectsApi(api)
        ensure_mig_class(objects)
        names = [f"dra-{n:03d}" for n in range(nodes)]
        for name in names:
            register_gpu_node(api, name, {}, gfd_labels={})
            FakeDraDriver(api, name, [dra_slices.a100(g) for g in range(gpus)]).publish()
        extender = None
        scheduler = None
        if policy in ("migslice", RESERVE):
            ensure_namespace(core, "migslice-system")
            extender = migslice_server(
                plane,
                "extender",
                ["--dra-large-reserve"] if policy == RESERVE else [],
                rbac_manifest=BASE / "extender" / "rbac.yaml",
                account="migslice-extender",
                client_names=[SCHEDULER_CLIENT],
            ).start()
            config = scheduler_configuration(extender.bundle, extender.url)
            plane.start_scheduler(config, name="migslice-scheduler")
            scheduler = "migslice-scheduler"
            wait("the steer of the idle nodes", lambda: settled(core, objects, names), 120)
        else:
            plane.start_scheduler(default_scheduler_config(), name="default-scheduler")
        ensure_namespace(core, NAMESPACE)
        pod_names = [f"p{i:04d}" for i in range(len(pods))]

        def create(i: int) -> None:
            pod = pods[i]
            claim, raw = claim_objects(
                pod_names[i], NAMESPACE, pod.profile, scheduler=scheduler, count=pod.count
            )
            objects.create_namespaced_custom_object(*DRA, NAMESPACE, "resourceclaims", claim)
            core.create_namespaced_pod(NAMESPACE, raw)

        started = time.monotonic()
        steer_waits = 0
        on_arrival: dict[str, bool] = {}
        stranded_when_turned_away: list[int] = []
        floor_when_turned_away: list[int] = []
        with_room: Counter[str] = Counter()
        left: set[str] = set()
        at_fill: dict[str, Any] = {}
        if burst:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, range(len(pods))))

            def all_decided() -> bool:
                listed = core.list_namespaced_pod(NAMESPACE).items
                return len(listed) == len(pods) and all(decided(p) for p in listed)

            wait("every pod decided", all_decided, 900)
        else:
            fill = len(pods) - churn
            for i in range(len(pods)):
                if i >= fill:
                    listed = core.list_namespaced_pod(NAMESPACE).items
                    running = sorted(p.metadata.name for p in listed if p.spec.node_name)
                    if running:
                        depart(core, objects, running[0])
                        left.add(running[0])
                create(i)
                name = pod_names[i]
                verdict = wait(
                    f"pod {name} decided",
                    lambda name=name: decided(core.read_namespaced_pod(name, NAMESPACE)),
                    60,
                )
                on_arrival[name] = verdict == "bound"
                if verdict != "bound":
                    # turned away, as the packing suite's rejected pods: it leaves, and the
                    # next arrival meets the same room (no queue of waiting pods)
                    stranded, floor, room = free_now(core, objects, names, pods[i])
                    stranded_when_turned_away.append(stranded)
                    floor_when_turned_away.append(floor)
                    if room:
                        with_room[profile_key(pods[i])] += 1
                    depart(core, objects, name)
                if policy in ("migslice", RESERVE):
                    try:
                        wait("the steer", lambda: settled(core, objects, names), 10)
                    except TimeoutError:
                        steer_waits += 1
                if i == fill - 1:
                    at_fill = tally(core, objects, names, pods[:fill], pod_names[:fill], left)
                if (i + 1) % 50 == 0:
                    progress(f"{policy}: {i + 1}/{len(pods)} pods")
        seconds = time.monotonic() - started
        # In the burst, pods that wait are retried by kube-scheduler as others are bound:
        # give it time to place every one a node can serve.
        deadline = time.monotonic() + 120
        outcome = tally(core, objects, names, pods, pod_names, left)
        while outcome["servable_waiting"] and time.monotonic() < deadline:
            time.sleep(2)
            outcome = tally(core, objects, names, pods, pod_names, left)
        placed: Counter[str] = Counter()
        for i, name in enumerate(pod_names):
            placed[profile_key(pods[i])] += on_arrival.get(name, False)
        turned_away = stranded_when_turned_away
        outcome.update(
            seconds=round(seconds, 1),
            steer_timeouts=steer_waits,
            placed_on_arrival=dict(sorted(placed.items())) if on_arrival else {},
            turned_away=len(turned_away),
            turned_away_with_room=dict(sorted(with_room.items())),
            stranded_when_turned_away=(
                round(sum(turned_away) / len(turned_away), 1) if turned_away else 0.0
            ),
            stranded_floor=(
                round(sum(floor_when_turned_away) / len(turned_away), 1) if turned_away else 0.0
            ),
        )
        if at_fill:
            outcome["at_fill"] = {
                k: at_fill[k]
                for k in ("allocated_slices", "stranded_slices", "idle_free_slices", "arrived")
            } | {"accepted": at_fill["accepted"]}
        if extender is not None:
            extender.stop()
    return outcome


def depart(core: k8s.CoreV1Api, objects: k8s.CustomObjectsApi, name: str) -> None:
    """The pod leaves (:func:`harness.dra_driver.release`)."""
    release(core, objects, NAMESPACE, name)


def profile_key(pod: SimPod) -> str:
    return pod.profile if pod.count == 1 else f"{pod.count}x{pod.profile}"


def free_now(
    core: k8s.CoreV1Api, objects: k8s.CustomObjectsApi, nodes: list[str], pod: SimPod
) -> tuple[int, int, bool]:
    """Memory slices free now on GPUs in use (stranded), the least any
    placement of the pods held would leave on GPUs in use (:func:`stranded_floor`), and
    whether some placement of them might have served ``pod`` too (:func:`might_fit`)."""
    index = read_cluster(core, objects, nodes)
    found = gpus = 0
    held: list[Placed] = []
    model = None
    for node in nodes:
        state = index.state_of(node)
        if state is None or state.model is None:
            continue
        model = state.model
        for gpu in state.gpus:
            gpus += 1
            used = sum(p.size for p in gpu.instances)
            held += gpu.instances
            if used:
                found += state.model.memory_slices - used
    if model is None:
        return found, 0, False
    return found, stranded_floor(model, held), might_fit(model, held, pod, gpus)


def least_gpus(model: GpuModel, held: Sequence[Placed]) -> int:
    """A lower bound on the GPUs of ``model`` any placement of the instances ``held`` needs:
    an instance whose profile starts only at slice 0 (4g.40gb, 7g.80gb on an A100) needs a
    GPU of its own, beside which the smaller ones fill the rest before any other GPU is used
    (memory alone: a relaxation of the placement rules, so no packing needs fewer)."""
    size = model.memory_slices
    alone = [p for p in held if model.profile(p.profile).placements == (0,)]
    beside = sum(size - p.size for p in alone)
    small = sum(p.size for p in held) - sum(p.size for p in alone)
    return len(alone) + -(-max(0, small - beside) // size)


def stranded_floor(model: GpuModel, held: Sequence[Placed]) -> int:
    """A lower bound on the memory slices free on GPUs in use, over every placement of the
    instances ``held`` on GPUs of ``model`` (:func:`least_gpus`)."""
    return least_gpus(model, held) * model.memory_slices - sum(p.size for p in held)


def might_fit(model: GpuModel, held: Sequence[Placed], pod: SimPod, gpus: int) -> bool:
    """Whether some placement of the instances ``held`` and of ``pod``'s on ``gpus`` GPUs of
    ``model`` might exist: False proves none does (:func:`least_gpus`; a multi-GPU pod's
    instances are counted apart, its node ignored), so no policy holding the same pods could
    have served it."""
    asked = model.profile(pod.profile)
    extra = [Placed(0, pod.profile, asked.memory_slices)] * pod.count
    return least_gpus(model, [*held, *extra]) <= gpus


def tally(
    core: k8s.CoreV1Api,
    objects: k8s.CustomObjectsApi,
    nodes: list[str],
    pods: Sequence[SimPod],
    pod_names: Sequence[str],
    left: set[str],
) -> dict[str, Any]:
    """What the run holds now, read from the API server by migslice's own readers; ``left``:
    the pods that ran and departed (accepted)."""
    listed = {p.metadata.name: p for p in core.list_namespaced_pod(NAMESPACE).items}
    bound = {name for name, p in listed.items() if p.spec.node_name}
    accepted_names = bound | (left & set(pod_names))
    claims = objects.list_namespaced_custom_object(*DRA, NAMESPACE, "resourceclaims")["items"]
    given = Counter((r["pool"], r["device"]) for c in claims for r in results(c))
    index = read_cluster(core, objects, nodes)
    capacity = allocated = stranded = idle_free = overlaps = 0
    for node in nodes:
        state = index.state_of(node)
        assert state is not None and state.dra is not None and state.model is not None
        size = state.model.memory_slices
        for gpu in state.gpus:
            taken = 0
            for placed in gpu.instances:
                overlaps += bool(taken & placed.mask)
                taken |= placed.mask
            held = bin(taken).count("1")
            capacity += size
            allocated += held
            if held:
                stranded += size - held
            else:
                idle_free += size
    servable = 0
    examples: list[str] = []
    claim_by_name = {c["metadata"]["name"]: c for c in claims}
    for i, name in enumerate(pod_names):
        if name in accepted_names or name not in listed:
            continue
        wanted = [(Wanted.mig(pods[i].profile), pods[i].count)]
        for node in nodes:
            state = index.state_of(node)
            assert state is not None and state.dra is not None and state.dra.use is not None
            bare = dataclasses.replace(state.dra.pool, steered=frozenset())
            if first_solution(bare, wanted, state.dra.use) is not None:
                servable += 1
                if len(examples) < 5:
                    pod = listed[name]
                    said = [c.message for c in pod.status.conditions or () if c.message]
                    allocation = (claim_by_name.get(name, {}).get("status") or {}).get("allocation")
                    examples.append(
                        f"{name} ({pods[i].count}x{pods[i].profile}) fits {node}; "
                        f"allocated: {bool(allocation)}; says: {said[-1:] or '-'}"
                    )
                break
    arrived: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    for i, name in enumerate(pod_names):
        key = profile_key(pods[i])
        arrived[key] += 1
        accepted[key] += name in accepted_names
    return {
        "pods": len(pod_names),
        "bound": len(accepted_names),
        "running": len(bound),
        "capacity_slices": capacity,
        "allocated_slices": allocated,
        "stranded_slices": stranded,
        "idle_free_slices": idle_free,
        "double_devices": sum(1 for n in given.values() if n > 1),
        "overlapping_slices": overlaps,
        "servable_waiting": servable,
        "servable_examples": examples,
        "arrived": dict(sorted(arrived.items())),
        "accepted": dict(sorted(accepted.items())),
    }


def large_acceptance(outcome: dict[str, Any], key: str = "accepted") -> float | None:
    """4g/7g pods ``key`` (accepted in the end, or placed on arrival), % of those arrived."""
    arrived = sum(n for k, n in outcome["arrived"].items() if k in LARGE)
    accepted = sum(n for k, n in (outcome.get(key) or {}).items() if k in LARGE)
    return None if not arrived or key not in outcome else round(100 * accepted / arrived, 1)


def large_ceiling(outcome: dict[str, Any]) -> float | None:
    """4g/7g placed on arrival, % of those arrived, were every 4g/7g pod turned away with
    room (some placement of the pods then held and of it might exist: :func:`might_fit`)
    placed too: no policy holding the same pods could place more."""
    arrived = sum(n for k, n in outcome["arrived"].items() if k in LARGE)
    placed = sum(n for k, n in (outcome.get("placed_on_arrival") or {}).items() if k in LARGE)
    room = sum(n for k, n in (outcome.get("turned_away_with_room") or {}).items() if k in LARGE)
    return round(100 * (placed + room) / arrived, 1) if arrived else None


def markdown(report: dict[str, Any]) -> str:
    s = report["settings"]
    lines = [
        "# First fit against migslice on the same claims (`bench/dra/replay.py`)",
        "",
        f"{s['nodes']} DynamicMIG nodes x {s['gpus']} A100-80GB ({s['capacity_slices']} memory "
        f"slices); per workload one arrival sequence of the trace per seed "
        f"({', '.join(map(str, s['seeds']))}; the tables below hold the first's, the goals "
        "the mean of all"
        + (
            f"; first fit {s['first_fit_runs']} times per seed, the first run in the tables "
            "below, the mean of all in the per-seed table and the goals"
            if s.get("first_fit_runs", 1) > 1
            else ""
        )
        + "): a fill "
        f"to load {s['load']} of the memory slices, then {s['churn']} arrivals each after the "
        f"oldest running pod leaves; kube-scheduler {s['kubernetes']}, a fresh control plane "
        "per run. A pod is placed on arrival when its first scheduling bound it; otherwise it "
        "is **turned away** (deleted, as the packing suite rejects it: no queue forms, and the "
        "next arrival meets the same room). **Stranded**: the memory slices free on GPUs in use "
        "when a pod is turned away (room it could not use), their mean; **with room**: pods "
        "turned away that some placement of the pods then held and of them might have served "
        "(memory alone, each 4g/7g instance on a GPU of its own, the smaller beside them: a "
        "bound; none other could be served by any placement of those pods); at the fill's end, "
        "those free on GPUs in use and on idle GPUs. 4g/7g: 4g.40gb and 7g.80gb pods placed "
        "on arrival, % of those that arrived. The burst creates the first workload's fill at "
        "once (pods wait there, as in any cluster; pods bound/s from the first create until "
        "every pod is bound or unschedulable).",
    ]
    for workload, w in report["workloads"].items():
        lines += [
            "",
            f"## {workload}: {w['pods']} pods ({w['demand_slices']} memory slices)",
            "",
            "| mode | policy | placed on arrival | turned away (with room, of them 4g/7g) | "
            "stranded when turned away (mean slices; at least, for the pods held) | 4g/7g placed "
            "on arrival % | free on GPUs "
            "in use / idle at the fill's end | devices given twice | slices given twice | "
            "waiting but servable | seconds | pods bound/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for mode, runs in w["runs"].items():
            for policy, o in runs.items():
                burst = mode == "burst"
                rate = round(o["bound"] / o["seconds"], 1) if burst and o["seconds"] else "-"
                placed = sum((o.get("placed_on_arrival") or {}).values())
                arrival = f"{placed}/{o['pods']}" if not burst else f"{o['bound']}/{o['pods']}"
                away = o.get("turned_away", "-") if not burst else "-"
                stranded = o.get("stranded_when_turned_away", "-") if away not in ("-", 0) else "-"
                if stranded != "-" and "stranded_floor" in o:
                    stranded = f"{stranded} (at least {o['stranded_floor']})"
                if not burst and "turned_away_with_room" in o:
                    room = o["turned_away_with_room"]
                    large = sum(n for k, n in room.items() if k in LARGE)
                    away = f"{away} ({sum(room.values())}, {large})"
                end = o.get("at_fill") or o
                lines.append(
                    f"| {mode} | {policy} | {arrival} | {away} | {stranded} | "
                    f"{large_acceptance(o, 'placed_on_arrival') or '-'} | "
                    f"{end['stranded_slices']} / {end['idle_free_slices']} | "
                    f"{o['double_devices']} | {o['overlapping_slices']} | "
                    f"{o['servable_waiting']} | {o['seconds']} | {rate} |"
                )
        lines += [
            "",
            "Placed on arrival per profile (bound, for the burst):",
            "",
            "| mode | policy | " + " | ".join(w["profiles"]) + " |",
            "|---|---|" + "---|" * len(w["profiles"]),
        ]
        for mode, runs in w["runs"].items():
            for policy, o in runs.items():
                counts = o.get("placed_on_arrival") or o["accepted"]
                cells = [f"{counts.get(p, 0)}/{o['arrived'].get(p, 0)}" for p in w["profiles"]]
                lines.append(f"| {mode} | {policy} | " + " | ".join(cells) + " |")
        by_seed = w.get("seeds") or {}
        if len(by_seed) > 1:
            lines += [
                "",
                "Sequential, per seed: placed on arrival, stranded when turned away (mean "
                "slices; at least: the least any placement of the pods then held leaves), 4g/7g "
                "placed on arrival %"
                + (
                    f"; first fit's the mean of its {report['settings']['first_fit_runs']} runs "
                    "on the seed's arrivals (it breaks ties between equal nodes at random), "
                    "with the range of their stranded figures:"
                    if report["settings"].get("first_fit_runs", 1) > 1
                    else ":"
                ),
                "",
                "| seed | first fit | migslice | stranded: migslice against first fit |",
                "|---|---|---|---|",
            ]
            for seed, runs in by_seed.items():
                ff, ms = runs["first-fit"], runs["migslice"]
                key = "stranded_when_turned_away"
                lines.append(
                    f"| {seed} | {_brief(ff)} | {_brief(ms)} | {_fewer(ff.get(key), ms.get(key))} |"
                )
        if w.get("goals"):
            lines += ["", "| goal | first fit | migslice | met |", "|---|---|---|---|"]
            for goal in w["goals"]:
                lines.append(
                    f"| {goal['goal']} | {goal['first-fit']} | {goal['migslice']} | "
                    f"{'yes' if goal['met'] else 'no'} |"
                )
    return "\n".join(lines) + "\n"


def _brief(o: dict[str, Any]) -> str:
    runs = o.get("runs", 1)
    placed = sum((o.get("placed_on_arrival") or {}).values())
    stranded = o.get("stranded_when_turned_away", "-")
    if "stranded_floor" in o:
        stranded = f"{stranded} (at least {o['stranded_floor']})"
    each = [x for x in o.get("stranded_each") or () if x is not None]
    if runs > 1 and each:
        stranded = f"{stranded}, runs {min(each)}-{max(each)}"
    count = f"{placed:.1f}" if runs > 1 else f"{placed:.0f}"
    return f"{count}/{o['pods']}, {stranded}, {large_acceptance(o, 'placed_on_arrival')}"


def _fewer(first_fit: float | None, migslice: float | None) -> str:
    if not first_fit or migslice is None:
        return "-"
    return f"{round(100 * (1 - migslice / first_fit), 1)} % fewer"


def _with_floor(o: dict[str, Any]) -> str:
    stranded = o.get("stranded_when_turned_away")
    return (
        f"{stranded} (at least {o['stranded_floor']})" if "stranded_floor" in o else f"{stranded}"
    )


def pooled(outcomes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sequential outcomes of several seeds as one: the mean of their stranded figures, the
    per-profile counts and the faults summed."""
    key = "stranded_when_turned_away"
    found = [o[key] for o in outcomes if o.get("turned_away") and key in o]
    merged: dict[str, Any] = {
        "pods": sum(o["pods"] for o in outcomes),
        "turned_away": sum(o.get("turned_away", 0) for o in outcomes),
    }
    if found:
        merged[key] = round(sum(found) / len(found), 1)
    floors = [
        o["stranded_floor"] for o in outcomes if o.get("turned_away") and "stranded_floor" in o
    ]
    if floors and len(floors) == len(found):
        merged["stranded_floor"] = round(sum(floors) / len(floors), 1)
    for part in ("arrived", "placed_on_arrival", "turned_away_with_room"):
        total: Counter[str] = Counter()
        for o in outcomes:
            total.update(o.get(part) or {})
        merged[part] = dict(sorted(total.items()))
    for k in ("double_devices", "overlapping_slices", "servable_waiting"):
        merged[k] = sum(o[k] for o in outcomes)
    return merged


def repeated(outcomes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sequential runs of one policy over one seed's arrivals, as one: first fit breaks ties
    between equal nodes at random (kube-scheduler's ``selectHost``), so its figure on one
    sequence moves between identical runs. The runs' mean: the stranded figures averaged
    (:func:`pooled`), the per-profile counts the runs' means (so the seed weighs as one
    sequence where seeds are pooled), with how many runs and each run's stranded figure."""
    merged = pooled(outcomes)
    for part in ("arrived", "placed_on_arrival", "turned_away_with_room"):
        merged[part] = {k: n / len(outcomes) for k, n in merged[part].items()}
    merged["pods"] = outcomes[0]["pods"]
    merged["runs"] = len(outcomes)
    merged["turned_away"] = round(merged["turned_away"] / len(outcomes), 1)
    merged["stranded_each"] = [o.get("stranded_when_turned_away") for o in outcomes]
    return merged


def goals_of(seeds: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The issue's goals on the sequential runs of every seed (each first-fit and migslice),
    judged on their mean (:func:`pooled`)."""
    ff = pooled([runs["first-fit"] for runs in seeds])
    ms = pooled([runs["migslice"] for runs in seeds])
    key = "stranded_when_turned_away"
    fewer = None if not ff.get(key) else round(100 * (1 - ms.get(key, 0) / ff[key]), 1)
    large_ff = large_acceptance(ff, "placed_on_arrival")
    large_ms = large_acceptance(ms, "placed_on_arrival")
    ceiling = large_ceiling(ms)
    return [
        {
            "goal": "stranded slices (when a pod is turned away) at least 50 % fewer than first "
            "fit's",
            "first-fit": _with_floor(ff),
            "migslice": f"{_with_floor(ms)} ({fewer} % fewer)",
            "met": fewer is not None and fewer >= 50,
        },
        {
            "goal": "4g/7g placed on arrival at least first fit's + 10 pp, or migslice's "
            "ceiling (the 4g/7g pods it placed and those it turned away with room: no "
            "placement of the pods then held could serve the others)",
            "first-fit": large_ff,
            "migslice": f"{large_ms} (ceiling {ceiling})",
            "met": large_ff is not None
            and large_ms is not None
            and (large_ms >= large_ff + 10 or (ceiling is not None and large_ms >= ceiling)),
        },
        {
            "goal": "0 devices or memory slices given twice, 0 servable pods left waiting",
            "first-fit": ff["double_devices"] + ff["overlapping_slices"] + ff["servable_waiting"],
            "migslice": ms["double_devices"] + ms["overlapping_slices"] + ms["servable_waiting"],
            "met": not any(
                o[k]
                for o in (ff, ms)
                for k in ("double_devices", "overlapping_slices", "servable_waiting")
            ),
        },
    ]


def plot(report: dict[str, Any], path: Path) -> str:
    from bench.common.plots import bars

    groups: list[str] = []
    series: dict[str, list[float]] = {}
    for workload, w in report["workloads"].items():
        if not w["runs"].get("sequential"):
            continue
        seeds = list((w.get("seeds") or {"-": w["runs"]["sequential"]}).values())
        runs = {p: pooled([r[p] for r in seeds]) for p in POLICIES}
        groups += [f"{workload}\nstranded (slices)", f"{workload}\n4g/7g placed %"]
        for policy, o in runs.items():
            series.setdefault(policy, []).extend(
                [
                    float(o.get("stranded_when_turned_away", 0)),
                    float(large_acceptance(o, "placed_on_arrival") or 0),
                ]
            )
    return bars(
        path,
        title="The same claims: first fit against migslice (mean over seeds)",
        groups=groups,
        series=series,
        ylabel="mean free slices on GPUs in use / %",
    )


def main(argv: Sequence[str] | None = None) -> int:
    return said_in_one_line("bench.dra.replay", _main, argv)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8, help="A100s per node (at most 8)")
    parser.add_argument("--load", type=float, default=1.3, help="memory slices asked / held")
    parser.add_argument(
        "--churn", type=int, default=300, help="arrivals after the fill, each after a departure"
    )
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help="comma-separated trace/mapping (the first also runs the burst)",
    )
    parser.add_argument(
        "--seeds",
        default="1,2,3,4,5",
        help="arrival sequences per workload (the first also bursts)",
    )
    parser.add_argument(
        "--first-fit-runs",
        type=int,
        default=3,
        help="sequential first-fit runs per seed, their mean judged (its ties fall at random)",
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--modes", nargs="+", default=["sequential", "burst"])
    parser.add_argument("--bin-dir", type=Path, default=DEFAULT_BIN_DIR)
    parser.add_argument("--quick", action="store_true", help="2 nodes, sequential only")
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/dra)")
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.modes, args.churn = 2, ["sequential"], 30
        args.first_fit_runs = 1
    capacity = args.nodes * args.gpus * A100_SLICES
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    if args.quick:
        seeds = seeds[:1]
    workloads: dict[str, dict[str, Any]] = {}
    for n, workload in enumerate(w.strip() for w in args.workloads.split(",")):
        trace, _, mapping = workload.partition("/")
        by_seed: dict[str, dict[str, dict[str, Any]]] = {}
        first: dict[str, dict[str, Any]] = {}
        for k, seed in enumerate(seeds):
            pods = arrivals(
                args.data_dir, trace, mapping, seed, int(args.load * capacity), args.churn
            )
            runs: dict[str, dict[str, Any]] = {}
            repeats: dict[str, dict[str, Any]] = {}
            for mode in args.modes:
                if mode == "burst" and (n or k):
                    continue
                runs[mode] = {}
                for policy in POLICIES:
                    again = (policy, mode) == ("first-fit", "sequential")
                    times = args.first_fit_runs if again else 1
                    each: list[dict[str, Any]] = []
                    for r in range(times):
                        print(f"{workload} seed {seed} {mode} {policy} run {r + 1}", flush=True)
                        each.append(
                            run(
                                policy,
                                pods if mode != "burst" else pods[: len(pods) - args.churn],
                                nodes=args.nodes,
                                gpus=args.gpus,
                                burst=mode == "burst",
                                churn=0 if mode == "burst" else args.churn,
                                bin_dir=args.bin_dir,
                                progress=lambda line: print(line, flush=True),
                            )
                        )
                        print(each[-1], flush=True)
                    runs[mode][policy] = each[0]
                    if mode == "sequential":
                        repeats[policy] = repeated(each) if len(each) > 1 else each[0]
            if "sequential" in runs:
                by_seed[str(seed)] = repeats
            if not k:
                first = runs
                workloads[workload] = {
                    "pods": len(pods),
                    "demand_slices": sum(p.memory_slices for p in pods),
                    "profiles": sorted(
                        {k for m in runs.values() for o in m.values() for k in o["arrived"]}
                    ),
                    "runs": first,
                }
        if by_seed:
            workloads[workload]["seeds"] = by_seed
            workloads[workload]["goals"] = goals_of(list(by_seed.values()))
    version = subprocess.run(
        [str(args.bin_dir / "kube-scheduler"), "--version"], capture_output=True, text=True
    ).stdout.split()[-1:]
    report = {
        "benchmark": "replay",
        "settings": {
            "nodes": args.nodes,
            "gpus": args.gpus,
            "capacity_slices": capacity,
            "load": args.load,
            "seeds": seeds,
            "kubernetes": version[0] if version else "",
            "churn": args.churn,
            "first_fit_runs": args.first_fit_runs,
        },
        "workloads": workloads,
    }
    SUITE.write("replay", report, args.out)
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
