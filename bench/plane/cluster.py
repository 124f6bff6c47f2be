"""Benchmark: migslice at cluster scale on the e2e's real control plane (a report, not a test).

    make bench-plane                                     # 5,000 nodes, 40,000 pods
    .venv/bin/python -m bench.plane.cluster --nodes 500 --run-pods 200 --churn-s 20   # quick

Loads ``--nodes`` fake GPU nodes and ``--pods-per-node`` bound pods each, shaped like real ones
(``bench/plane/objects.py``), into the e2e's kube-apiserver (``e2e/build.sh``), starts
``migslice extender`` and ``migslice webhook`` in-cluster as the e2e does (``harness/stack.py``:
gunicorn, TLS, each as its ServiceAccount with the shipped RBAC; from ``.venv`` unless
``MIGSLICE_E2E_SERVERS=image``) and reports:

* how long loading took, and each server's time from start to ``/readyz`` (its caches synced);
* the resident memory of every process (now and peak);
* kube-scheduler's throughput in pods bound per second for ``--run-pods`` new GPU pods with
  the shipped migslice-scheduler configuration (the extender), the same configuration without
  the extender, and the stock default configuration, one run after the other, with CPU
  seconds per pod of the scheduler and of the extender's worker and kube-scheduler's own
  algorithm timings (``bench/plane/runs.py``), in ``--repeats`` rounds (default 3); the goals
  (``bench/plane/goals.py``) read the median over the rounds;
* in each round, the same configuration against two null extenders that answer without
  deciding (``bench/plane/nulls.py``; ``--no-floor`` skips them): Go's ``net/http``, the
  protocol's floor, and migslice's own server, our serving stack's; with the extender's own
  time per call from its ``/metrics``, they split what the extender adds to kube-scheduler's
  cycle into the protocol, our server and our decision;
* in every run, the time kube-scheduler and the thread answering the calls spent on a core and
  waiting for one per pod (the kernel's schedstat), the machine's busy CPU time per pod and
  idle share, and the CPU per pod of every process it runs (kube-apiserver, etcd,
  kube-scheduler, our workers, the null extender, itself), so a run on a saturated machine
  says where its time went, and the garbage collections of kube-apiserver, etcd and
  kube-scheduler (the Go runtime's own trace, ``GODEBUG=gctrace=1``);
* with each round's ratios as measured, its steady ratios: the same with the control plane's
  CPU per pod (kube-apiserver, etcd) evened out across the runs (``steady_ratios``), since on
  this saturated machine pods/s is the cores over the busy CPU per pod and kube-apiserver's
  collections of a heap of gigabytes land in some runs and not others;
* the extender's cache lag under node and pod churn (``bench/plane/churn.py``).

Where the machine allows it (root, a writable cgroup ``cpu`` controller) every process runs in
a CPU cgroup weighted by its pod's request, as the kubelet would weight it on a node
(``bench/plane/cpu_weights.py``); elsewhere, or with ``--no-cpu-weights``, all share one cgroup.

Results are kept in the section ``cluster`` of ``bench/plane/report.json`` under ``--label`` (so
a run before a change and one after sit side by side) and rendered to ``report.md``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.common.programs import said_in_one_line
from bench.plane.api import Api
from bench.plane.churn import CHURN_NAMESPACE, Churn, Prober
from bench.plane.cpu_weights import CpuGroups, CpuWeightsError, parse_requests, shipped_shares
from bench.plane.load import ensure_namespace, load_cluster
from bench.plane.nulls import KINDS as FLOOR_KINDS
from bench.plane.nulls import Floor, pointed_at
from bench.plane.objects import ClusterPlan, ClusterShape
from bench.plane.procs import (
    GoLog,
    Sched,
    children,
    cpu_s,
    log_size,
    machine_s,
    memory_mib,
    sched_s,
    server_processes,
    snapshot,
)
from bench.plane.report import write_reports
from bench.plane.runs import (
    RUN_NAMESPACE,
    BindWatch,
    cpu_by_process,
    create_run_pods,
    delete_run_pods,
    extender_calls,
    median_ratios,
    over_bound,
    round_ratios,
    scheduler_metrics,
    steady_ratios,
    summarise_run,
    summarise_waits,
    watch_binds,
    with_client_qps,
    without_extenders,
)
from harness.controlplane import ControlPlane
from harness.image import build_image
from harness.paths import E2E_DIR, REPO
from harness.scheduler import default_scheduler_config
from harness.stack import BASE, migslice_server, scheduler_configuration, webhook_configurations


def git_head() -> str:
    """The checked-out commit (short), with ``+dirty`` when the tree has changes."""
    run = functools.partial(subprocess.run, capture_output=True, text=True, cwd=REPO)
    head = run(["git", "rev-parse", "--short", "HEAD"]).stdout.strip()
    dirty = run(["git", "status", "--porcelain", "--untracked-files=no"]).stdout.strip()
    return head + ("+dirty" if dirty else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument(
        "--client-qps",
        type=float,
        default=0.0,
        help="for the benchmark only: kube-scheduler's client QPS (burst twice that) in the "
        "shipped configuration and every configuration derived from it, so that longer runs "
        "are not capped (default: as shipped)",
    )
    parser.add_argument(
        "--run-pods",
        type=int,
        default=1000,
        help="new GPU pods per throughput run; the shipped client QPS (200, burst 400) caps a "
        "run at 400 + 200 binds a second, so a run of 3,000 is capped near 230 pods/s "
        "(see --client-qps)",
    )
    parser.add_argument("--churn-s", type=float, default=60.0)
    parser.add_argument("--churn-per-minute", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=6, help="loader threads")
    parser.add_argument("--label", default="latest", help="key of this run in report.json")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the extender worker, pprof kube-scheduler and kube-apiserver",
    )
    parser.add_argument(
        "--percentages",
        default="",
        help="more percentageOfNodesToScore values (comma-separated) to run with and without "
        "the extender after the shipped configuration, e.g. 100,0",
    )
    parser.add_argument(
        "--weighted",
        action="store_true",
        help="also run the chart's other placement, scheduler.placement=weighted (filter + "
        "prioritize), after the shipped configuration, in the same cluster",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="rounds of the runs with and without the extender (the floors and the stock "
        "configuration), one after the other; the goals read the median over the rounds (the "
        "runs are seconds long, and a shared machine's spread between runs is wide)",
    )
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="in each round, also run the shipped configuration against two null extenders "
        "(bench/plane/nulls.py: Go's net/http, and migslice's own server) that answer "
        "without deciding: what the extender protocol and our server cost by themselves",
    )
    parser.add_argument(
        "--gc-before-runs",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="before each run's binds, have kube-apiserver collect its garbage (as Go's own "
        "benchmarks do before each one). At 40,000 pods this does not keep its collections "
        "out of the runs: the next came 21-29 s later, so the longer runs still met one "
        "(bench/plane/README.md); the steady ratios take the control plane's swings out instead",
    )
    parser.add_argument(
        "--cpu-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run each process in a CPU cgroup weighted by its pod's CPU request, as the "
        "kubelet would (kubeadm's for the control plane, the chart's for ours); needs root "
        "and a writable cgroup cpu controller (bench/plane/cpu_weights.py). Default: weighted "
        "where the machine allows it, else every process in one cgroup (the report says which)",
    )
    parser.add_argument(
        "--cpu-request",
        action="append",
        default=[],
        metavar="GROUP=QUANTITY",
        help="with --cpu-weights, weight GROUP (etcd, kube-apiserver, kube-scheduler, extender, "
        "webhook, null-extender) by this request instead of the shipped one (repeatable)",
    )
    parser.add_argument("--out", type=Path, help="folder of report.json (default bench/plane)")
    args = parser.parse_args(argv)
    if args.cpu_request and args.cpu_weights is False:
        parser.error("--cpu-request needs the CPU weights (drop --no-cpu-weights)")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: at least 1")
    try:
        args.percentages = [int(p) for p in args.percentages.split(",") if p.strip()]
    except ValueError:
        parser.error(f"--percentages: {args.percentages!r} is not a list of integers 0-100")
    if any(not 0 <= p <= 100 for p in args.percentages):
        parser.error("--percentages: each value is 0 (adaptive) to 100")
    return args


class Bench:
    def __init__(
        self, args: argparse.Namespace, cp: ControlPlane, groups: CpuGroups | None = None
    ) -> None:
        self.args = args
        self.cp = cp
        self.groups = groups
        self.api = Api(cp.server, ca=cp.pki.ca_cert, cert=cp.pki.admin_cert, key=cp.pki.admin_key)
        self.plan = ClusterPlan(ClusterShape(nodes=args.nodes, pods_per_node=args.pods_per_node))
        self.report: dict[str, Any] = {
            "shape": {"nodes": args.nodes, "bound_pods": sum(len(n.pods) for n in self.plan.nodes)}
        }
        self.servers: dict[str, Any] = {}
        self.began = time.monotonic()
        self.report["code"] = git_head()
        self.report["gc_before_runs"] = args.gc_before_runs
        self.image = (
            None if os.environ.get("MIGSLICE_E2E_SERVERS", "venv") == "venv" else build_image()
        )

    def load(self) -> None:
        self.cp.apply(BASE / "crd" / "tenantpolicies.yaml")
        print(
            f"loading {self.args.nodes} nodes and {self.report['shape']['bound_pods']} pods",
            flush=True,
        )
        self.report["load"] = load_cluster(self.api, self.plan, threads=self.args.threads)
        for namespace in (RUN_NAMESPACE, CHURN_NAMESPACE):
            ensure_namespace(self.api, namespace, {"migslice.io/admission": "disabled"})
        ensure_namespace(self.api, "migslice-system")
        print(f"loaded in {self.report['load']['total_s']:.0f}s", flush=True)

    def start_servers(self) -> None:
        sync: dict[str, float] = {}
        for command in ("extender", "webhook"):
            server = migslice_server(
                self.cp,
                command,
                [],
                rbac_manifest=BASE / command / "rbac.yaml",
                account=f"migslice-{command}",
                image=self.image,
            )
            began = time.monotonic()
            server.start(timeout_s=900)
            sync[command] = round(time.monotonic() - began, 1)
            self.servers[command] = server
            self.weigh(command, server.process.pid)
            print(f"{command} ready (caches synced) in {sync[command]}s", flush=True)
        self.cp.apply(
            webhook_configurations(self.servers["webhook"].bundle, self.servers["webhook"].url)
        )
        self.report["sync_s"] = sync

    def processes(self) -> list[tuple[str, int]]:
        found = [(p.name, p.pid) for p in self.cp.processes()]
        for command, server in self.servers.items():
            for role, pid in server_processes(server.process.pid).items():
                found.append((f"{command} {role}", pid))
        return found

    def weigh(self, group: str, pid: int) -> None:
        """Where processes are weighted: ``pid`` and its children into ``group``'s cgroup."""
        if self.groups is None:
            return
        for process in (pid, *children(pid)):
            self.groups.place(group, process)

    def worker_pid(self, command: str) -> int:
        return server_processes(self.servers[command].process.pid)["worker"]

    def run_scheduler(
        self, key: str, config: dict[str, Any], scheduler: str, *, server: Floor | None = None
    ) -> dict[str, Any]:
        """One run; ``server``: the null extender the configuration calls, if not ours."""
        version = create_run_pods(
            self.api, scheduler, self.args.run_pods, threads=self.args.threads
        )
        collected_s = self.collect_garbage() if self.args.gc_before_runs else None
        watch = BindWatch(self.args.run_pods)
        cpu: dict[str, list[float]] = {}
        sched: dict[str, list[Sched]] = {}
        machine: list[dict[str, float]] = []
        # The extender's worker in every run: in a run without it, its watch alone.
        pids: dict[str, int] = {"extender_worker": self.worker_pid("extender")}
        # Every process of ours on the machine, by name (the running scheduler is added when it
        # starts): where the machine's CPU goes during the run.
        processes = dict(self.processes()) | {"bench": os.getpid()}
        by_process: dict[str, list[float]] = {}
        # Where the call is answered: the thread running the event loop of a Python server (a
        # gunicorn worker's main thread), every thread of the Go null.
        threads = self.answering_threads(server)
        if server is not None:
            processes["null extender"] = threads["server"][0]
        extender = self.servers["extender"]
        calls_before = extender_calls(extender.url, extender.bundle.ca_cert)
        # Each Go process of the control plane traces its garbage collections to its log
        # (GODEBUG=gctrace=1, set by measure): the log, where it stood before this run, the pid.
        go_logs = {
            name: GoLog(process.log_path, log_size(process.log_path), process.pid)
            for name, process in (("kube-apiserver", self.cp.apiserver), ("etcd", self.cp.etcd))
            if process is not None
        }
        scheduler_log = self.cp.workdir / f"{scheduler}.log"
        scheduler_offset = log_size(scheduler_log)
        moments: list[float] = []

        def sample() -> None:  # the scheduler is known from its spawn, before its /readyz
            running = self.cp.schedulers.get(scheduler)
            if running is not None:
                pids["scheduler"] = running.process.pid
                threads["scheduler"] = (running.process.pid, None)
                processes["kube-scheduler"] = running.process.pid
                go_logs["kube-scheduler"] = GoLog(
                    scheduler_log, scheduler_offset, running.process.pid
                )
            for name, pid in pids.items():
                cpu.setdefault(name, []).append(cpu_s(pid))
            for name, pid in processes.items():
                by_process.setdefault(name, []).append(cpu_s(pid))
            for name, (pid, tid) in threads.items():
                sched.setdefault(name, []).append(sched_s(pid, tid))
            machine.append(machine_s())
            moments.append(time.monotonic())
            for log in go_logs.values():
                log.note_start()

        watch.on_first = watch.on_last = sample
        watcher = threading.Thread(
            target=watch_binds, args=(self.api, RUN_NAMESPACE, version), kwargs={"watch": watch}
        )
        watcher.daemon = True
        watcher.start()
        started = self.cp.start_scheduler(config, name=scheduler, timeout=600)
        profilers = self.start_profilers(key, started.port) if self.args.profile else []
        deadline = time.monotonic() + 1800
        while not watch.done.wait(5) and watcher.is_alive() and time.monotonic() < deadline:
            pass
        if not watch.done.is_set():
            print(f"  {key}: only {len(watch.bound)} of {self.args.run_pods} bound", flush=True)
        metrics = scheduler_metrics(
            started.port, cert=self.cp.pki.admin_cert, key=self.cp.pki.admin_key
        )
        for profiler in profilers:
            profiler.wait()
        memory = memory_mib(started.process.pid)
        self.cp.stop_scheduler(scheduler)
        spans = {name: (values[0], values[-1]) for name, values in cpu.items() if len(values) == 2}
        result = summarise_run(watch, spans, metrics)
        waits = {name: (v[0], v[-1]) for name, v in sched.items() if len(v) == 2}
        result.update(summarise_waits(watch, waits, machine))
        result["cpu_ms_per_pod_by_process"] = cpu_by_process(watch, by_process, machine)
        result["over_bound_nodes"] = over_bound(self.plan, watch)
        if len(moments) >= 2:
            pods = max(1, len(watch.bound) - 1)
            result["go_gc"] = {
                name: log.per_pod(moments[0], moments[-1], pods) for name, log in go_logs.items()
            }
        if collected_s is not None:
            result["apiserver_gc_before_s"] = round(collected_s, 2)
        result["scheduler_memory_mib"] = memory
        calls, seconds = (
            after - before
            for after, before in zip(
                extender_calls(extender.url, extender.bundle.ca_cert), calls_before, strict=True
            )
        )
        if calls:
            result["extender_calls"] = int(calls)
            result["extender_app_ms_per_call"] = round(1000 * seconds / calls, 3)
        delete_run_pods(self.api, threads=self.args.threads)
        print(f"  {key}: {result}", flush=True)
        return result

    def collect_garbage(self) -> float:
        """kube-apiserver runs a whole garbage collection now (Go's ``runtime.GC()``, through
        its pprof heap endpoint's ``gc=1``), as Go's own benchmarks do before each one: the
        collection the runs before made due lands here, not in the next run's binds. Seconds
        it took."""
        context = ssl.create_default_context(cafile=str(self.cp.pki.ca_cert))
        context.load_cert_chain(str(self.cp.pki.admin_cert), str(self.cp.pki.admin_key))
        started = time.monotonic()
        url = f"{self.cp.server}/debug/pprof/heap?gc=1"
        with urllib.request.urlopen(url, context=context, timeout=300) as response:
            response.read()
        return time.monotonic() - started

    def answering_threads(self, server: Floor | None) -> dict[str, tuple[int, int | None]]:
        """``{"server": (pid, tid)}``: the thread that answers the run's extender calls (the
        event loop's, the worker's main thread, for Python; tid None: every thread)."""
        if server is None:
            worker = self.worker_pid("extender")
            return {"server": (worker, worker)}
        if server.kind == "go":
            return {"server": (server.process.pid, None)}
        worker = server_processes(server.process.pid).get("worker", server.process.pid)
        return {"server": (worker, worker)}

    def start_profilers(self, key: str, port: int) -> list[subprocess.Popen[bytes]]:
        """kube-scheduler's and kube-apiserver's CPU profiles (pprof) and, with the extender,
        py-spy on its worker."""
        out = self.args.out / "profiles"
        out.mkdir(parents=True, exist_ok=True)
        pki, seconds = self.cp.pki, "20"
        url = f"https://127.0.0.1:{port}/debug/pprof/profile?seconds={seconds}"
        pprof = ["curl", "-sk", "--cert", str(pki.admin_cert), "--key", str(pki.admin_key)]
        procs = [subprocess.Popen([*pprof, "-o", str(out / f"kube-scheduler-{key}.pprof"), url])]
        apiserver = f"{self.cp.server}/debug/pprof/profile?seconds={seconds}"
        procs.append(
            subprocess.Popen([*pprof, "-o", str(out / f"kube-apiserver-{key}.pprof"), apiserver])
        )
        spy = Path(sys.executable).parent / "py-spy"
        if key.startswith("extender") and spy.exists():
            pid = str(self.worker_pid("extender"))
            # --gil: only samples that hold the GIL, i.e. the worker's Python CPU (a thread
            # blocked in epoll, a socket read or a queue is not counted as busy).
            record = [str(spy), "record", "--pid", pid, "--duration", seconds, "--rate", "250"]
            record.append("--gil")
            output = ["--nonblocking", "--format", "raw", "--output", str(out / "extender.txt")]
            procs.append(subprocess.Popen([*record, *output], stdout=subprocess.DEVNULL))
        elif key.startswith("extender"):
            print("  no py-spy in this environment: pip install py-spy to profile", flush=True)
        return procs

    def throughput(self) -> None:
        shipped = scheduler_configuration(
            self.servers["extender"].bundle, self.servers["extender"].url
        )
        if self.args.client_qps:
            shipped = with_client_qps(shipped, self.args.client_qps)
        connection = shipped.get("clientConnection", {})
        results: dict[str, Any] = {
            "config": {
                "percentageOfNodesToScore": shipped.get("percentageOfNodesToScore"),
                "clientConnection": {k: v for k, v in connection.items() if k != "kubeconfig"},
                "filterVerb": next(
                    (e.get("filterVerb") for e in shipped.get("extenders", [])), None
                ),
                "prioritize": any("prioritizeVerb" in e for e in shipped.get("extenders", [])),
            }
        }
        self.report["throughput"] = results
        bare = without_extenders(shipped, "bench-no-extender")
        floors = self.start_floors() if self.args.floor else {}
        try:
            for number in range(self.args.repeats):
                runs = {
                    "extender": (shipped, "migslice-scheduler"),
                    "no_extender": (bare, "bench-no-extender"),
                }
                for kind, floor in floors.items():
                    runs[f"floor_{kind}"] = (pointed_at(shipped, floor.url), "migslice-scheduler")
                # The stock configuration in every round: a goal reads its ratio per round.
                runs["stock"] = (default_scheduler_config("bench-stock"), "bench-stock")
                one: dict[str, Any] = {}
                results.setdefault("rounds", []).append(one)
                for key, (config, name) in runs.items():
                    floor = (
                        floors.get(key.removeprefix("floor_")) if key.startswith("floor_") else None
                    )
                    one[key] = self.run_scheduler(key, config, name, server=floor)
                    if number == 0:
                        results[key] = one[key]
                    self.save()
                one.update(round_ratios(one))
                self.save()
        finally:
            for floor in floors.values():
                floor.stop()
        rate = {
            k: results[k].get("pods_per_s") or 0.0 for k in ("extender", "no_extender", "stock")
        }
        for other in ("no_extender", "stock"):
            ratio = rate["extender"] / rate[other] if rate[other] else None
            results[f"ratio_vs_{other}"] = None if ratio is None else round(ratio, 2)
        results["control_plane_ms_per_pod_median"] = steady_ratios(results["rounds"])
        results.update(median_ratios(results["rounds"]))
        if self.args.weighted:  # the chart's other placement, against the same bare run
            extender = self.servers["extender"]
            weighted = scheduler_configuration(
                extender.bundle, extender.url, ["scheduler.placement=weighted"]
            )
            run = results["extender_weighted"] = self.run_scheduler(
                "extender_weighted", weighted, "migslice-scheduler"
            )
            bare = rate["no_extender"]
            ratio = (run.get("pods_per_s") or 0.0) / bare if bare else None
            results["weighted_ratio_vs_no_extender"] = None if ratio is None else round(ratio, 2)
            self.save()
        # The same pair at other percentageOfNodesToScore values: what the setting costs.
        for percentage in self.args.percentages:
            at = dict(shipped, percentageOfNodesToScore=percentage)
            pair: dict[str, Any] = {}
            results.setdefault("percentages", {})[str(percentage)] = pair
            pair["extender"] = self.run_scheduler(
                f"extender@{percentage}", at, "migslice-scheduler"
            )
            self.save()
            bare = without_extenders(at, "bench-no-extender")
            pair["no_extender"] = self.run_scheduler(
                f"no_extender@{percentage}", bare, "bench-no-extender"
            )
            with_rate = pair["extender"].get("pods_per_s") or 0.0
            bare_rate = pair["no_extender"].get("pods_per_s") or 0.0
            pair["ratio_vs_no_extender"] = round(with_rate / bare_rate, 2) if bare_rate else None
            self.save()

    def start_floors(self) -> dict[str, Floor]:
        """The null extenders, with the extender's certificate (its CA is in the config)."""
        bundle = self.servers["extender"].bundle
        floors: dict[str, Floor] = {}
        try:
            for kind in FLOOR_KINDS:
                floors[kind] = Floor(
                    kind,
                    cert=bundle.cert,
                    key=bundle.key,
                    ca=bundle.ca_cert,
                    workdir=self.cp.workdir,
                )
                floors[kind].wait_ready()
                self.weigh("null-extender", floors[kind].process.pid)
                print(f"{kind} floor (null extender) at {floors[kind].url}", flush=True)
        except BaseException:
            for floor in floors.values():
                floor.stop()
            raise
        return floors

    def save(self) -> None:
        """Write what is measured so far (a run cut short still leaves its figures)."""
        self.report["wall_s"] = round(time.monotonic() - self.began)
        self.report["when"] = time.strftime("%Y-%m-%d %H:%M")
        self.report["load_average"] = round(os.getloadavg()[0], 1)
        if self.groups is not None:
            self.report["cpu_weights"] = self.groups.placed()
        write_reports(self.args.out, self.args.label, self.report)

    def churn(self) -> None:
        extender = self.servers["extender"]
        prober = Prober(extender.url, extender.bundle.ca_cert, extender.server_name)
        worker = self.worker_pid("extender")
        before = cpu_s(worker)
        churn = Churn(self.api, prober, self.plan, per_minute=self.args.churn_per_minute)
        result = churn.run(self.args.churn_s)
        result["extender_worker_cpu_s"] = round(cpu_s(worker) - before, 2)
        self.report["churn"] = result
        print(f"churn: {result}", flush=True)


def control_plane_group(name: str) -> str:
    """The CPU group of a process the control plane spawns (every scheduler is one binary)."""
    return name if name in ("etcd", "kube-apiserver") else "kube-scheduler"


def main(argv: list[str] | None = None) -> int:
    return said_in_one_line("bench.plane.cluster", _main, argv)


def _main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    groups: CpuGroups | None = None
    if args.cpu_weights is not False:
        try:
            groups = CpuGroups.open(shipped_shares(overrides=parse_requests(args.cpu_request)))
        except CpuWeightsError as error:
            if args.cpu_weights or args.cpu_request:  # asked for: no silent fallback
                print(error, file=sys.stderr)
                return 2
            print(f"every process in one CPU cgroup: {error}", flush=True)
    try:
        return measure(args, groups)
    finally:
        if groups is not None:
            groups.close()


def measure(args: argparse.Namespace, groups: CpuGroups | None) -> int:
    workdir = E2E_DIR / ".run" / f"bench-cluster-{time.strftime('%Y%m%d-%H%M%S')}"
    # kube-apiserver's pprof endpoints for a profiling run, or to collect its garbage before
    # each run (the control plane turns them off).
    profiling = ["--profiling=true"] if args.profile or args.gc_before_runs else []
    # Every Go process it spawns traces its garbage collections to its log (one line each), so
    # a run says how much of kube-apiserver's CPU went to its collector (GoLog).
    os.environ["GODEBUG"] = ",".join(filter(None, (os.environ.get("GODEBUG"), "gctrace=1")))
    on_spawn = None
    if groups is not None:
        groups.place("bench", os.getpid())
        on_spawn = lambda name, pid: groups.place(control_plane_group(name), pid)  # noqa: E731
    with ControlPlane(
        workdir, verbosity=1, start_timeout=180, apiserver_args=profiling, on_spawn=on_spawn
    ) as cp:
        bench = Bench(args, cp, groups)
        bench.load()
        bench.save()
        bench.start_servers()
        bench.report["memory_after_sync"] = snapshot(bench.processes())
        bench.save()
        bench.throughput()
        bench.churn()
        bench.report["memory_end"] = snapshot(bench.processes())
        for server in bench.servers.values():
            server.stop()
    bench.save()
    print(json.dumps(bench.report["throughput"], indent=1))
    print(f"done in {bench.report['wall_s']}s; workdir {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
