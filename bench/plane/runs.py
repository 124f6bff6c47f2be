"""Scheduling throughput runs for ``bench.plane.cluster``: one kube-scheduler configuration per run.

A run creates its pending pods first (``pods`` GPU pods of a fixed mix, in a namespace the
webhook leaves alone, all naming the run's scheduler), then starts that kube-scheduler and
watches the pods get bound. Throughput is ``(n - 1) / (last bind - first bind)``, so the
scheduler's own start-up (listing every Node and Pod) is not counted. CPU seconds of the
scheduler (and of the extender's worker) are read from ``/proc`` at the first and the last
bind, with the time kube-scheduler and the thread answering the extender's calls spent on a
core and waiting for one (the kernel's schedstat). kube-scheduler's own metrics give the
scheduling algorithm's mean duration.
"""

from __future__ import annotations

import copy
import re
import ssl
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.plane.api import Api, in_parallel
from bench.plane.objects import ClusterPlan, pod_body, resource
from bench.plane.procs import Sched

RUN_NAMESPACE = "bench-runs"
MIX = (("1g.10gb", 0.6), ("2g.20gb", 0.25), ("3g.40gb", 0.15))


def run_profile(number: int) -> str:
    point = (number * 0.6180339887) % 1.0
    for profile, share in MIX:
        if point < share:
            return profile
        point -= share
    return MIX[0][0]


@dataclass
class BindWatch:
    """Times at which the run's pods were first seen bound (monotonic seconds)."""

    expected: int
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)
    on_first: Callable[[], None] | None = None
    on_last: Callable[[], None] | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def see(self, name: str, node: str) -> None:
        if name in self.bound:
            return
        self.bound[name] = (time.monotonic(), node)
        if len(self.bound) == 1 and self.on_first is not None:
            self.on_first()
        if len(self.bound) == self.expected:
            if self.on_last is not None:
                self.on_last()
            self.done.set()


def watch_binds(api: Api, namespace: str, version: str, *, watch: BindWatch) -> None:
    query = {"watch": "true", "resourceVersion": version, "timeoutSeconds": "900"}
    while not watch.done.is_set():
        for event in api.stream(f"/api/v1/namespaces/{namespace}/pods", query):
            raw = event.get("object") or {}
            node = (raw.get("spec") or {}).get("nodeName")
            version = (raw.get("metadata") or {}).get("resourceVersion") or version
            if node:
                watch.see(raw["metadata"]["name"], node)
            if watch.done.is_set():
                return
        query["resourceVersion"] = version


def create_run_pods(api: Api, scheduler: str, count: int, *, threads: int) -> str:
    """Create the pending pods; the list's resourceVersion to watch from."""
    base = f"/api/v1/namespaces/{RUN_NAMESPACE}/pods"

    def post(number: int) -> None:
        name = f"{scheduler}-{number:05d}"
        api.create(
            base, pod_body(name, RUN_NAMESPACE, run_profile(number), node=None, scheduler=scheduler)
        )

    in_parallel(range(count), post, threads=threads)
    listing = api.get(f"{base}?limit=1")
    return str(listing["metadata"]["resourceVersion"])


def delete_run_pods(api: Api, *, threads: int) -> None:
    names = [
        p["metadata"]["name"] for p in api.list_all(f"/api/v1/namespaces/{RUN_NAMESPACE}/pods")
    ]
    in_parallel(
        names, lambda n: api.delete(f"/api/v1/namespaces/{RUN_NAMESPACE}/pods/{n}"), threads=threads
    )


def over_bound(plan: ClusterPlan, watch: BindWatch) -> int:
    """Nodes given more pods of a profile than they had free instances of it."""
    by_name = {node.name: node for node in plan.nodes}
    taken: dict[tuple[str, str], int] = {}
    for name, (_, node) in watch.bound.items():
        number = int(name.rsplit("-", 1)[1])
        key = (node, resource(run_profile(number)))
        taken[key] = taken.get(key, 0) + 1
    return sum(
        1 for (node, gpu), count in taken.items() if count > by_name[node].free().get(gpu, 0)
    )


def scheduler_metrics(port: int, *, cert: Path, key: Path) -> dict[str, float]:
    """A few of kube-scheduler's own metrics (its /metrics, as the admin client)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(str(cert), str(key))
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", context=context) as reply:
        text = reply.read().decode()
    wanted: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.match(r"([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$", line)
        if not match:
            continue
        name, labels, value = match.group(1), match.group(2) or "", float(match.group(3))
        if name.startswith("scheduler_scheduling_algorithm_duration_seconds_") and name[-3:] in (
            "sum",
            "unt",
        ):
            wanted[name.rsplit("_", 1)[1]] = value
        elif name.startswith("scheduler_framework_extension_point_duration_seconds_"):
            point = re.search(r'extension_point="([A-Za-z]+)"', labels)
            status = re.search(r'status="([A-Za-z]+)"', labels)
            if point and status and status.group(1) == "Success" and name[-3:] in ("sum", "unt"):
                key = f"{point.group(1)}_{name.rsplit('_', 1)[1]}"
                wanted[key] = wanted.get(key, 0.0) + value
    return wanted


def extender_calls(url: str, ca: Path) -> tuple[float, float]:
    """The extender's verb calls so far and the seconds its app spent in them (body read to
    body written: its ``migslice_extender_request_duration_seconds`` histogram)."""
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=10) as reply:
        return request_totals(reply.read().decode())


def request_totals(text: str) -> tuple[float, float]:
    """Calls and seconds summed over every verb, from the extender's ``/metrics`` text."""
    count = total = 0.0
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith("migslice_extender_request_duration_seconds_count{"):
            count += float(value)
        elif name.startswith("migslice_extender_request_duration_seconds_sum{"):
            total += float(value)
    return count, total


def round_ratios(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A round's throughput of each extender run over the run without one, and the time each
    added to kube-scheduler's scheduling algorithm (its mean, with minus without)."""
    bare = runs.get("no_extender", {})
    rate, algorithm = bare.get("pods_per_s"), bare.get("algorithm_mean_ms")
    found: dict[str, Any] = {}
    for key, run in runs.items():
        if key in ("no_extender", "stock") or not isinstance(run, Mapping):
            continue
        name = "ratio" if key == "extender" else f"{key}_ratio"
        if rate and run.get("pods_per_s"):
            found[name] = round(run["pods_per_s"] / rate, 2)
        if algorithm is not None and run.get("algorithm_mean_ms") is not None:
            found.setdefault("added_algorithm_ms", {})[key] = round(
                run["algorithm_mean_ms"] - algorithm, 2
            )
    return found


def median_ratios(rounds: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The median over rounds of each ratio :func:`round_ratios` found."""
    names = sorted({k for r in rounds for k in r if k == "ratio" or k.endswith("_ratio")})
    found: dict[str, float] = {}
    for name in names:
        values = [r[name] for r in rounds if r.get(name) is not None]
        if values:
            found[f"{name}_median"] = round(statistics.median(values), 2)
    return found


CONTROL_PLANE = ("kube-apiserver", "etcd")
"""The processes every run shares whatever the scheduler calls: their cost per pod is the same
work in every run, but it swings by run (kube-apiserver's collector and sweeps of a heap of
gigabytes land in some runs and not others)."""


def control_plane_ms(run: Mapping[str, Any]) -> float | None:
    """CPU ms per pod of the control plane (:data:`CONTROL_PLANE`) in a run, if measured."""
    figures = run.get("cpu_ms_per_pod_by_process")
    if not isinstance(figures, Mapping) or run.get("machine_busy_ms_per_pod") is None:
        return None
    return float(sum(figures.get(name, 0.0) for name in CONTROL_PLANE))


def steady_ratios(rounds: Sequence[MutableMapping[str, Any]]) -> float | None:
    """Adds to each round the ratios its runs would have had with the control plane's CPU per
    pod the same in every run: each run's median over the benchmark's rounds, in place of its
    own. On a saturated machine a run's pods/s is its cores over its busy CPU per pod, so a
    ratio is the run without an extender's busy ms per pod over this run's (the measured ratios
    match that to a hundredth); this one takes the control plane's swings out of both. Returns
    the median used, None where the runs did not measure it."""
    runs = [
        run
        for one in rounds
        for key, run in one.items()
        if key != "stock" and isinstance(run, Mapping) and control_plane_ms(run) is not None
    ]
    if not runs:
        return None
    shared = statistics.median(control_plane_ms(run) or 0.0 for run in runs)

    def busy(run: Mapping[str, Any]) -> float | None:
        own = control_plane_ms(run)
        return None if own is None else run["machine_busy_ms_per_pod"] - own + shared

    for one in rounds:
        bare = one.get("no_extender")
        base = busy(bare) if isinstance(bare, Mapping) else None
        for key, run in list(one.items()):
            if key in ("no_extender", "stock") or not isinstance(run, Mapping):
                continue
            mine = busy(run)
            if base and mine:
                name = "steady_ratio" if key == "extender" else f"{key}_steady_ratio"
                one[name] = round(base / mine, 2)
    return round(shared, 2)


def summarise_run(
    watch: BindWatch, cpu: Mapping[str, tuple[float, float]], metrics: Mapping[str, float]
) -> dict[str, Any]:
    times = sorted(t for t, _ in watch.bound.values())
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    pods = len(times)
    result: dict[str, Any] = {
        "pods": pods,
        "span_s": round(span, 2),
        "pods_per_s": round((pods - 1) / span, 1) if span > 0 else None,
        "nodes_used": len({node for _, node in watch.bound.values()}),
    }
    for name, (first, last) in cpu.items():
        result[f"{name}_cpu_s"] = round(last - first, 2)
        result[f"{name}_cpu_ms_per_pod"] = round(1000 * (last - first) / max(1, pods - 1), 2)
    count = metrics.get("count", 0.0)
    if count:
        result["algorithm_mean_ms"] = round(1000 * metrics["sum"] / count, 2)
    for point in ("Filter", "Score", "PreFilter", "PreScore"):
        total = metrics.get(f"{point}_count", 0.0)
        if total:
            result[f"{point.lower()}_mean_ms"] = round(1000 * metrics[f"{point}_sum"] / total, 3)
    return result


def summarise_waits(
    watch: BindWatch,
    waits: Mapping[str, tuple[Sched, Sched]],
    machine: Sequence[Mapping[str, float]],
) -> dict[str, Any]:
    """Per pod bound between the first and the last bind: each thread's (or process's) time on
    a core, time runnable but waiting for one, times put on a core, times it gave its core up
    to wait and times the kernel took it (``cluster_procs.sched_s`` at both binds), the
    machine's busy CPU time (every process, every core), and the share of its CPU time idle and
    stolen by the hypervisor over the same span."""
    pods = max(1, len(watch.bound) - 1)
    found: dict[str, Any] = {}
    for name, (first, last) in waits.items():
        found[f"{name}_on_core_ms_per_pod"] = round(
            1000 * (last.on_core_s - first.on_core_s) / pods, 3
        )
        found[f"{name}_wait_ms_per_pod"] = round(
            1000 * (last.waiting_s - first.waiting_s) / pods, 3
        )
        found[f"{name}_timeslices_per_pod"] = round((last.timeslices - first.timeslices) / pods, 2)
        found[f"{name}_slept_per_pod"] = round((last.slept - first.slept) / pods, 2)
        found[f"{name}_preempted_per_pod"] = round((last.preempted - first.preempted) / pods, 2)
    if len(machine) >= 2:
        first, last = machine[0], machine[-1]
        spent = {k: last[k] - first[k] for k in ("busy", "idle", "steal")}
        total = sum(spent.values())
        found["machine_busy_ms_per_pod"] = round(1000 * spent["busy"] / pods, 2)
        if total > 0:
            found["machine_idle_pct"] = round(100 * spent["idle"] / total, 1)
            found["machine_steal_pct"] = round(100 * spent["steal"] / total, 1)
    return found


def cpu_by_process(
    watch: BindWatch,
    readings: Mapping[str, Sequence[float]],
    machine: Sequence[Mapping[str, float]],
) -> dict[str, float]:
    """CPU ms per pod bound between the first and the last bind, for each named process (its
    CPU seconds read at both binds), and ``other`` for the rest of the machine's busy time
    (processes not named, the kernel's own work)."""
    pods = max(1, len(watch.bound) - 1)
    found = {
        name: round(1000 * (values[-1] - values[0]) / pods, 2)
        for name, values in readings.items()
        if len(values) >= 2
    }
    if len(machine) >= 2:
        busy = 1000 * (machine[-1]["busy"] - machine[0]["busy"]) / pods
        found["other"] = round(max(0.0, busy - sum(found.values())), 2)
    return found


def with_client_qps(config: Mapping[str, Any], qps: float) -> dict[str, Any]:
    """``config`` with kube-scheduler's client QPS set to ``qps`` and its burst to twice that:
    its rate limiter lets it bind at most ``burst + qps * t`` pods in ``t`` seconds."""
    raised = copy.deepcopy(dict(config))
    connection = raised.setdefault("clientConnection", {})
    connection["qps"] = qps
    connection["burst"] = int(2 * qps)
    return raised


def without_extenders(config: Mapping[str, Any], scheduler: str) -> dict[str, Any]:
    """The same KubeSchedulerConfiguration without its extenders, under another name."""
    bare = copy.deepcopy(dict(config))
    bare.pop("extenders", None)
    bare["profiles"] = [dict(bare["profiles"][0], schedulerName=scheduler)]
    return bare
