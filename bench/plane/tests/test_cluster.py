"""The pure parts of ``bench.plane.cluster``: the cluster it loads and the report it writes.

The loaded objects must read, through migslice's own readers, as exactly what the plan says
(allocatable per profile, one instance held per bound pod), or the benchmark would measure a
cluster other than the one it reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from bench.plane.goals import GOALS, added_ms, figures, is_met, over_stock
from bench.plane.nulls import build_go, null_app, pointed_at
from bench.plane.objects import ClusterPlan, ClusterShape, node_body, pod_body, resource
from bench.plane.procs import (
    GoGC,
    Sched,
    gc_traces,
    go_gc,
    log_size,
    machine_s,
    sched_s,
    started_s,
)
from bench.plane.report import render
from bench.plane.runs import (
    BindWatch,
    cpu_by_process,
    median_ratios,
    over_bound,
    request_totals,
    round_ratios,
    run_profile,
    steady_ratios,
    summarise_waits,
    with_client_qps,
    without_extenders,
)
from extender import ExtenderSettings, create_app
from harness.builders import running_status
from migslice.objects.nodes import node_facts_from_raw
from migslice.objects.pods import pod_facts_from_raw

PLAN = ClusterPlan(ClusterShape(nodes=40, pods_per_node=8))


def test_the_plan_is_deterministic_and_never_holds_more_than_a_node_has() -> None:
    again = ClusterPlan(ClusterShape(nodes=40, pods_per_node=8))
    assert [n.pods for n in again.nodes] == [n.pods for n in PLAN.nodes]
    for node in PLAN.nodes:
        assert min(node.free().values()) >= 0
        assert sum(node.allocatable().values()) - sum(node.free().values()) == len(node.pods)


def test_nodes_read_as_planned_by_migslice() -> None:
    for node in PLAN.nodes[:8]:
        facts = node_facts_from_raw(node_body(node))
        assert facts.name == node.name
        assert facts.problems == ()
        assert facts.agent_error == ""
        assert facts.mig_config_state == "success"
        assert dict(facts.allocatable) == node.allocatable()


def test_bound_pods_read_as_one_instance_held_on_their_node() -> None:
    for namespace, node, profile, number in list(PLAN.bound_pods())[:20]:
        body = pod_body(f"train-{number:06d}-0", namespace, profile, node=node.name, tenant="t")
        body.update(running_status(body, number))
        facts = pod_facts_from_raw(body)
        assert facts is not None
        assert facts.node_name == node.name
        assert dict(facts.requests) == {resource(profile): 1}


def test_run_pods_follow_the_mix() -> None:
    profiles = [run_profile(n) for n in range(1000)]
    assert 550 < profiles.count("1g.10gb") < 650
    assert 100 < profiles.count("3g.40gb") < 200


def test_over_bound_counts_nodes_given_more_than_they_had_free() -> None:
    gpu = resource(run_profile(0))
    node = next(n for n in PLAN.nodes if n.free().get(gpu, 0) > 0)
    numbers = [k for k in range(200) if run_profile(k) == run_profile(0)][: node.free()[gpu] + 1]
    watch = BindWatch(expected=len(numbers))
    watch.bound = {f"s-{k:05d}": (float(k), node.name) for k in numbers}
    assert over_bound(PLAN, watch) == 1
    watch.bound.popitem()
    assert over_bound(PLAN, watch) == 0


def report(ratio: float, worker_ms: float) -> dict[str, Any]:
    run = {"pods": 100, "pods_per_s": 10.0, "span_s": 9.9, "over_bound_nodes": 0}
    return {
        "shape": {"nodes": 40, "bound_pods": 320},
        "load": {"total_s": 10.0, "nodes_s": 1.0, "pods_s": 9.0},
        "sync_s": {"extender": 12.0, "webhook": 31.5},
        "throughput": {
            "extender": dict(run, extender_worker_cpu_ms_per_pod=worker_ms),
            "no_extender": run,
            "stock": run,
            "ratio_vs_no_extender": ratio,
        },
        "memory_after_sync": {"webhook worker": {"rss_mib": 120.0}},
        "memory_end": {"webhook worker": {"rss_mib": 140.0}},
    }


def rounded(round_runs: list[tuple[float, float, float, float]]) -> list[dict[str, Any]]:
    """Rounds of (without, migslice, Python null, stock) pods/s."""
    return [
        {
            "no_extender": {"pods_per_s": bare},
            "extender": {"pods_per_s": ours, "extender_worker_cpu_ms_per_pod": 2.0},
            "floor_python": {"pods_per_s": null},
            "stock": {"pods_per_s": stock},
        }
        for bare, ours, null, stock in round_runs
    ]


def test_added_latency_per_pod_is_the_time_per_pod_with_less_the_time_without() -> None:
    one = rounded([(200.0, 160.0, 190.0, 50.0)])[0]
    assert added_ms(one, "extender") == round(1000 / 160 - 1000 / 200, 2)  # 1.25 ms
    assert added_ms(one, "floor_python") == round(1000 / 190 - 1000 / 200, 2)  # 0.26 ms
    assert added_ms(one, "floor_go") is None  # not run
    assert over_stock(one) == 3.2


def test_the_goals_are_medians_over_the_rounds_with_their_spread() -> None:
    measured = report(0.8, 2.0)
    measured["throughput"]["rounds"] = rounded(
        [(200.0, 160.0, 190.0, 50.0), (250.0, 200.0, 240.0, 55.0), (200.0, 180.0, 200.0, 52.0)]
    )
    found = figures(measured)
    assert len(found) == len(GOALS)
    added, stock = found[0], found[1]
    # migslice: 1.25, 1.0, 0.56 ms; the Python null: 0.26, 0.17, 0.0 ms
    assert (added.value, added.low, added.high) == (1.0, 0.56, 1.25)
    assert added.bound == round(1.3 * 0.17, 2)
    assert is_met(GOALS[0], added) is False
    assert (stock.value, stock.low, stock.high) == (3.46, 3.2, 3.64)
    assert is_met(GOALS[1], stock) is True
    assert [f.value for f in found[3:]] == [140.0, None, 31.5, 12.0, 0.0]


def test_the_report_says_each_goal_met_or_missed_by_how_much() -> None:
    slow = report(0.5, 20.0)
    slow["throughput"]["rounds"] = rounded([(200.0, 100.0, 190.0, 80.0)])
    fast = report(0.85, 4.0)
    fast["throughput"]["rounds"] = rounded([(200.0, 190.0, 180.0, 50.0)])
    text = render({"before": slow, "after": fast})
    assert text.index("## before") < text.index("## after")
    assert "| <= 0.34 ms (the Python null's 0.26 ms x 1.3) | 5.00 ms | missed by 4.66 ms |" in text
    assert "| >= 1.50 x | 1.25 x | missed by 0.25 x |" in text
    assert "| <= 0.73 ms (the Python null's 0.56 ms x 1.3) | 0.26 ms | met |" in text
    assert "| 31.5 s | missed by 1.50 s |" in text
    assert "| extender worker RSS (300 MB) | <= 286.1 MiB | - | not measured |" in text
    assert "| before | ? | 5.00 | 0.26 | - | no | 1.25x |" in text  # the summary, a row a run


def test_a_run_without_the_python_null_says_its_bound_was_not_measured() -> None:
    measured = report(0.9, 4.0)
    text = render({"after": measured})
    assert (
        "| migslice's added scheduling latency per pod | - | 0.00 ms | no bound measured |" in text
    )


def test_runs_at_other_percentages_are_tabled_and_their_over_binds_counted() -> None:
    measured = report(0.7, 6.0)
    pair = {
        "extender": {"pods_per_s": 30.0, "scheduler_cpu_ms_per_pod": 12.0, "over_bound_nodes": 1},
        "no_extender": {"pods_per_s": 33.0, "scheduler_cpu_ms_per_pod": 10.0},
        "ratio_vs_no_extender": 0.91,
    }
    measured["throughput"]["percentages"] = {"0": pair}
    assert figures(measured)[7].value == 1.0
    text = render({"after": measured})
    assert "| 0 | 30.0 | 33.0 | 0.91x | 12.0 / 10.0 | - | 1 |" in text


def test_the_weighted_placement_run_is_tabled_with_its_ratio_and_over_binds_counted() -> None:
    measured = report(0.7, 6.0)
    measured["throughput"]["extender_weighted"] = {"pods_per_s": 21.0, "over_bound_nodes": 2}
    measured["throughput"]["weighted_ratio_vs_no_extender"] = 0.7
    assert figures(measured)[7].value == 2.0
    text = render({"after": measured})
    assert "| placement weighted (filter + prioritize), with the extender | 21.0 |" in text
    assert "Placement weighted / without: 0.70x." in text


def test_each_round_is_tabled_with_its_ratios_and_over_binds_counted() -> None:
    measured = report(0.7, 6.0)
    rounds = []
    for bare, ours, go in ((100.0, 60.0, 95.0), (120.0, 90.0, 110.0), (110.0, 55.0, 100.0)):
        one: dict[str, Any] = {
            "no_extender": {"pods_per_s": bare, "algorithm_mean_ms": 4.0},
            "extender": {
                "pods_per_s": ours,
                "algorithm_mean_ms": 7.5,
                "extender_app_ms_per_call": 0.4,
                "over_bound_nodes": 0,
            },
            # A null extender ignores MIG geometry: its binds are not the extender's.
            "floor_go": {"pods_per_s": go, "algorithm_mean_ms": 4.5, "over_bound_nodes": 3},
        }
        one.update(round_ratios(one))
        rounds.append(one)
    assert rounds[0]["ratio"] == 0.6
    assert rounds[0]["floor_go_ratio"] == 0.95
    assert rounds[0]["added_algorithm_ms"] == {"extender": 3.5, "floor_go": 0.5}
    rounds[2]["extender"]["over_bound_nodes"] = 2
    measured["throughput"]["rounds"] = rounds
    measured["throughput"].update(median_ratios(rounds))
    assert measured["throughput"]["ratio_median"] == 0.6  # of 0.6, 0.75, 0.5
    assert measured["throughput"]["floor_go_ratio_median"] == 0.92  # of 0.95, 0.92, 0.91
    assert figures(measured)[7].value == 2.0  # round 2's and 3's extender runs, never the null's
    text = render({"after": measured})
    assert "| 1 | 100.0 | 4.00 | 60.0 | 0.60x | 3.50 | 0.40 | 95.0 | 0.95x | 0.50 |" in text
    assert "Median ratios: extender 0.60x, Go null extender 0.92x." in text


def test_steady_ratios_even_out_the_control_planes_cpu_per_pod_across_runs() -> None:
    """Busy ms per pod and the control plane's share of it, per run; the shared figure is the
    median of the control plane's over every run but the stock one."""

    def run(pods_per_s: float, busy: float, apiserver: float, etcd: float) -> dict[str, Any]:
        by_process = {"kube-apiserver": apiserver, "etcd": etcd, "kube-scheduler": 3.0}
        return {
            "pods_per_s": pods_per_s,
            "machine_busy_ms_per_pod": busy,
            "cpu_ms_per_pod_by_process": by_process,
        }

    rounds: list[dict[str, Any]] = [
        # The extender's run took a collection of kube-apiserver's (5.5 ms a pod, not 2.5).
        {
            "no_extender": run(250.0, 8.0, 2.0, 0.5),
            "extender": run(160.0, 12.5, 5.0, 0.5),
            "floor_go": run(220.0, 9.0, 2.0, 0.5),
            "stock": run(50.0, 40.0, 30.0, 1.0),  # not one of the rounds' figures
        },
        # Here the run without an extender took it.
        {"no_extender": run(180.0, 11.0, 5.0, 0.5), "extender": run(200.0, 10.0, 2.5, 0.5)},
        # And a run that did not measure its processes is left as it is.
        {"no_extender": run(250.0, 8.0, 2.0, 0.5), "extender": {"pods_per_s": 200.0}},
    ]
    for one in rounds:
        one.update(round_ratios(one))
    shared = steady_ratios(rounds)
    # control plane per run: 2.5, 5.5, 2.5, 5.5, 3.0, 2.5 -> median 2.75
    assert shared == 2.75
    # round 1: without 8.0 - 2.5 + 2.75 = 8.25; with 12.5 - 5.5 + 2.75 = 9.75; Go 9.25
    assert rounds[0]["ratio"] == 0.64 and rounds[0]["steady_ratio"] == round(8.25 / 9.75, 2)
    assert rounds[0]["floor_go_steady_ratio"] == round(8.25 / 9.25, 2)
    assert "stock_steady_ratio" not in rounds[0]
    # round 2: without 11.0 - 5.5 + 2.75 = 8.25; with 10.0 - 3.0 + 2.75 = 9.75
    assert rounds[1]["ratio"] == 1.11 and rounds[1]["steady_ratio"] == round(8.25 / 9.75, 2)
    assert "steady_ratio" not in rounds[2]
    medians = median_ratios(rounds)
    assert (
        medians["steady_ratio_median"] == 0.85 and medians["floor_go_steady_ratio_median"] == 0.89
    )
    measured = report(0.7, 6.0)
    measured["throughput"]["rounds"] = rounds
    measured["throughput"]["control_plane_ms_per_pod_median"] = shared
    measured["throughput"].update(medians)
    text = render({"after": measured})
    assert "| 1 | 250.0 | - | 160.0 | 0.64x | 0.85x | - | - | 220.0 | 0.88x | 0.89x | - |" in text
    assert "median over the rounds, 2.75 ms" in text
    assert "medians: extender 0.85x, Go null extender 0.89x." in text
    assert steady_ratios([{"no_extender": {"pods_per_s": 1.0}}]) is None


def test_schedstat_reads_a_threads_time_on_a_core_and_the_process_sums_its_threads() -> None:
    import os
    import threading

    pid, tid = os.getpid(), threading.get_native_id()
    # A second thread of our own that burns some CPU, then waits (alive, so its time stays in
    # the process's sum and no longer grows).
    started, done = threading.Event(), threading.Event()
    worker_tid: list[int] = []

    def burn() -> None:
        worker_tid.append(threading.get_native_id())
        sum(i * i for i in range(300_000))
        started.set()
        done.wait(30)

    worker = threading.Thread(target=burn, daemon=True)
    worker.start()
    try:
        assert started.wait(30)
        before_thread = sched_s(pid, tid)
        machine_before = machine_s()
        sum(i * i for i in range(300_000))  # some CPU on this thread
        after_thread = sched_s(pid, tid)
        other = sched_s(pid, worker_tid[0])
        # Read last: each thread's time only grows and the process sums the threads it has now,
        # so it holds at least these two readings. (A difference of two process sums is no such
        # bound: the kernel credits a running thread's time at ticks, and other threads of the
        # process may end between the readings.)
        after_process = sched_s(pid)
    finally:
        done.set()
        worker.join(30)
    on_core = after_thread.on_core_s - before_thread.on_core_s
    assert on_core > 0
    assert other.on_core_s > 0
    assert after_thread.waiting_s >= before_thread.waiting_s  # waiting only grows
    assert after_thread.timeslices >= before_thread.timeslices >= 1
    # The process sums its threads' nanoseconds as seconds: equal sums may differ in the last bit.
    assert after_process.on_core_s >= after_thread.on_core_s + other.on_core_s - 1e-9
    assert after_process.timeslices >= after_thread.timeslices + other.timeslices
    assert machine_s()["busy"] >= machine_before["busy"]
    assert after_thread.slept + after_thread.preempted >= 1  # it was switched out at least once
    assert after_process.slept >= after_thread.slept + other.slept
    assert sched_s(2**22 + 12345) == Sched(0.0, 0.0, 0, 0, 0)  # no such process


def test_waits_are_per_pod_between_the_first_and_last_bind_with_the_machines_shares() -> None:
    watch = BindWatch(5)
    for number in range(5):
        watch.see(f"run-{number}", "node-0")
    found = summarise_waits(
        watch,
        {
            "scheduler": (Sched(1.0, 0.5, 10, 4, 6), Sched(1.02, 0.508, 30, 16, 14)),
            "server": (Sched(3.0, 1.0, 100, 90, 10), Sched(3.004, 1.012, 105, 94, 11)),
        },
        [
            {"busy": 10.0, "idle": 5.0, "steal": 1.0},
            {"busy": 11.5, "idle": 5.4, "steal": 1.1},
        ],
    )
    assert found == {
        "scheduler_on_core_ms_per_pod": 5.0,  # 20 ms over the 4 pods after the first
        "scheduler_wait_ms_per_pod": 2.0,
        "scheduler_timeslices_per_pod": 5.0,
        "scheduler_slept_per_pod": 3.0,
        "scheduler_preempted_per_pod": 2.0,
        "server_on_core_ms_per_pod": 1.0,
        "server_wait_ms_per_pod": 3.0,
        "server_timeslices_per_pod": 1.25,
        "server_slept_per_pod": 1.0,
        "server_preempted_per_pod": 0.25,
        "machine_busy_ms_per_pod": 375.0,  # 1.5 s over 4 pods
        "machine_idle_pct": 20.0,  # 0.4 of 2.0 s
        "machine_steal_pct": 5.0,
    }
    measured = report(0.7, 6.0)
    measured["throughput"]["rounds"] = [
        {
            "no_extender": {"pods_per_s": 200.0, **found, "server_on_core_ms_per_pod": 0.01},
            "extender": {"pods_per_s": 120.0, **found},
        }
    ]
    text = render({"after": measured})
    assert "| 1 | without | 200.0 | 5.00 | 2.00 | - | - | - | 375.0 | 20.0 | 5.00 |" in text
    assert (
        "| 1 | with the extender | 120.0 | 5.00 | 2.00 | 1.00 | 3.00 | 1.00 / 0.25 | 375.0 "
        "| 20.0 | 5.00 |" in text
    )


def test_cpu_by_process_is_per_pod_and_the_machines_rest_is_other() -> None:
    watch = BindWatch(5)
    for number in range(5):
        watch.see(f"run-{number}", "node-0")
    found = cpu_by_process(
        watch,
        {"kube-apiserver": [10.0, 10.02], "extender worker": [2.0, 2.008], "gone": [1.0]},
        [{"busy": 10.0, "idle": 5.0, "steal": 0.0}, {"busy": 10.04, "idle": 5.0, "steal": 0.0}],
    )
    # 20 ms and 8 ms over the 4 pods after the first; 40 ms busy, 12 of it elsewhere
    assert found == {"kube-apiserver": 5.0, "extender worker": 2.0, "other": 3.0}
    measured = report(0.7, 6.0)
    measured["throughput"]["rounds"] = [
        {
            "no_extender": {"pods_per_s": 200.0, "cpu_ms_per_pod_by_process": found},
            "extender": {
                "pods_per_s": 120.0,
                "cpu_ms_per_pod_by_process": found | {"kube-scheduler": 4.5, "bench": 0.25},
            },
        }
    ]
    text = render({"after": measured})
    head = "| round | run | pods/s | kube-apiserver | kube-scheduler | extender worker | bench "
    assert head + "| other |" in text
    assert "| 1 | without | 200.0 | 5.00 | - | 2.00 | - | 3.00 |" in text
    assert "| 1 | with the extender | 120.0 | 5.00 | 4.50 | 2.00 | 0.25 | 3.00 |" in text


GC_PROGRAM = """package main

import (
	"fmt"
	"os"
	"runtime"
	"time"
)

func main() {
	for i := 0; i < 8; i++ {
		if i == 3 {
			time.Sleep(600 * time.Millisecond)
		}
		runtime.GC()
		// A line logged as klog logs it, in one write, while the runtime writes its trace.
		fmt.Fprintf(os.Stderr, "I1201 20:05:07.172250   12345 main.go:12] after %d\\n", i)
	}
	time.Sleep(500 * time.Millisecond) // the last trace line is still being written
}
"""


def test_go_gc_reads_a_real_go_runtimes_gctrace_by_when_each_collection_ran(
    tmp_path: Path,
) -> None:
    """A Go program forces 3 collections, sleeps, forces 5 more, and logs a klog line after
    each, traced as the benchmark's control plane is (GODEBUG=gctrace=1). The runtime writes a
    trace line in pieces, so the klog lines land inside some; every collection is still read,
    and placed in time from the process's start."""
    import os
    import subprocess
    import time

    source = tmp_path / "gc" / "main.go"
    source.parent.mkdir()
    source.write_text(GC_PROGRAM)
    binary = build_go(tmp_path / "bin", source, "gc")
    log = tmp_path / "gc.log"
    log.write_bytes(b"### 20:05:07 gc\n")  # as the control plane's Process heads a log
    offset = log_size(log)
    with log.open("ab") as out:
        env = dict(os.environ, GODEBUG="gctrace=1")
        process = subprocess.Popen([str(binary)], stdout=out, stderr=subprocess.STDOUT, env=env)
        started = started_s(process.pid)
        assert process.wait(30) == 0
    finished = time.monotonic()
    assert started is not None and started <= finished
    assert log_size(log) == len(log.read_bytes()) and log_size(tmp_path / "none.log") == 0
    assert started_s(process.pid) is None  # gone
    traces = gc_traces(log.read_bytes())
    assert len(traces) == 8  # a heap this small gives the runtime no cause for its own
    assert all(0 <= began < 5 and 0 <= wall < 1 and cpu > 0 for began, wall, cpu in traces)
    # The sleep parts the first three from the last five.
    assert max(t[0] for t in traces[:3]) + 0.4 < min(t[0] for t in traces[3:])
    whole = go_gc(log, offset, started, started, finished)
    assert whole.cycles == 8
    assert whole.cpu_ms == pytest.approx(sum(cpu for *_, cpu in traces), abs=1e-3)
    middle = started + (traces[2][0] + traces[3][0]) / 2
    early, late = (
        go_gc(log, offset, started, started, middle),
        go_gc(log, offset, started, middle, finished),
    )
    assert (early.cycles, late.cycles) == (3, 5)
    assert early.cpu_ms + late.cpu_ms == pytest.approx(whole.cpu_ms, abs=1e-3)
    assert go_gc(log, offset, started, finished + 1, finished + 2) == GoGC(0, 0.0)
    assert go_gc(tmp_path / "none.log", 0, started, started, finished) == GoGC(0, 0.0)


def test_a_collection_counts_for_the_share_of_its_wall_time_in_the_run_and_is_tabled(
    tmp_path: Path,
) -> None:
    log = tmp_path / "kube-apiserver.log"
    log.write_bytes(
        b"I1201 20:05:07.172250 some klog line\n"
        # began 120.5 s after the process, 250 ms of wall time, 496.1 ms of CPU
        b"gc 41 @120.5s 3%: 0.10+249.85+0.05 ms clock, 0.40+12/480/3.5+0.20 ms cpu, "
        b"7900->8100->4000 MB, 8000 MB goal, 1 MB stacks, 0 MB globals, 4 P\n"
        # began 130.0 s after, 1 s of wall time, 501 ms of CPU
        b"gc 42 @130.0s 3%: 0.5+999+0.5 ms clock, 0.5+0/500/0+0.5 ms cpu, "
        b"7900->8100->4000 MB, 8000 MB goal, 1 MB stacks, 0 MB globals, 4 P (forced)\n"
    )
    assert gc_traces(log.read_bytes()) == [
        (120.5, pytest.approx(0.25), pytest.approx(496.1)),
        (130.0, pytest.approx(1.0), pytest.approx(501.0)),
    ]
    started = 1000.0
    # Half of the first, all of the second.
    found = go_gc(log, 0, started, started + 120.625, started + 140)
    assert found.cycles == 2
    assert found.cpu_ms == pytest.approx(496.1 / 2 + 501.0, abs=1e-3)
    # Between the two: none; a quarter of the second.
    assert go_gc(log, 0, started, started + 121, started + 129) == GoGC(0, 0.0)
    assert go_gc(log, 0, started, started + 130.75, started + 200).cpu_ms == pytest.approx(
        501.0 / 4, abs=1e-3
    )
    # A log read from an offset past the first trace does not see it.
    second = log.read_bytes().index(b"gc 42")
    assert go_gc(log, second, started, started, started + 200).cycles == 1
    measured = report(0.7, 6.0)
    measured["throughput"]["rounds"] = [
        {
            "no_extender": {"pods_per_s": 200.0},
            "extender": {
                "pods_per_s": 120.0,
                "go_gc": {
                    "kube-apiserver": {"cycles": 2, "cpu_ms_per_pod": 0.5},
                    "etcd": {"cycles": 0, "cpu_ms_per_pod": 0.0},
                },
            },
        }
    ]
    text = render({"after": measured})
    assert "collected its garbage before each run" not in text
    assert "| round | run | pods/s | kube-apiserver | kube-scheduler | etcd |" in text
    assert "| 1 | with the extender | 120.0 | 2: 0.50 | - | 0: 0.00 |" in text
    assert "| 1 | without |" not in text  # a run without the trace is not tabled
    measured["gc_before_runs"] = True
    assert "kube-apiserver collected its garbage before each run's binds" in render(
        {"after": measured}
    )


def test_a_raised_client_qps_reaches_the_configuration_without_the_extender_too() -> None:
    shipped = {
        "clientConnection": {"kubeconfig": "/k", "qps": 200, "burst": 400},
        "extenders": [{"urlPrefix": "https://x", "filterVerb": "filter-best-fit"}],
        "profiles": [{"schedulerName": "migslice-scheduler"}],
    }
    raised = with_client_qps(shipped, 1000)
    assert raised["clientConnection"] == {"kubeconfig": "/k", "qps": 1000, "burst": 2000}
    assert shipped["clientConnection"]["qps"] == 200  # the shipped one is left alone
    bare = without_extenders(raised, "bench-no-extender")
    assert bare["clientConnection"]["qps"] == 1000 and "extenders" not in bare


def test_request_totals_sum_every_verb_of_the_extenders_own_metrics() -> None:
    client = create_app(ExtenderSettings()).test_client()
    args = {"Pod": pod_body("p-0", "ns", "1g.10gb", node=None), "NodeNames": ["a"], "Nodes": None}
    for verb in ("filter-best-fit", "filter-best-fit", "prioritize"):
        assert client.post(f"/{verb}", json=args).status_code == 200
    calls, total = request_totals(client.get("/metrics").get_data(as_text=True))
    assert calls == 3
    assert total > 0


def test_the_python_null_extender_answers_the_first_name_and_fails_none() -> None:
    client = Client(null_app)
    args = {"Pod": {"metadata": {"name": "p"}}, "NodeNames": ["a", "b", "c"], "Nodes": None}
    answer = client.post("/filter-best-fit", json=args)
    assert answer.status_code == 200
    assert answer.json == {"NodeNames": ["a"], "FailedNodes": {}, "Error": ""}
    scores = client.post("/prioritize", json=args).json
    assert scores == [{"Host": n, "Score": 0} for n in ("a", "b", "c")]
    assert client.get("/filter").status_code == 404


def test_a_floor_run_changes_only_where_the_extenders_are_called() -> None:
    shipped = {
        "percentageOfNodesToScore": 1,
        "extenders": [{"urlPrefix": "https://127.0.0.1:1", "tlsConfig": {"caData": "x"}}],
    }
    moved = pointed_at(shipped, "https://127.0.0.1:2")
    assert moved["extenders"] == [
        {"urlPrefix": "https://127.0.0.1:2", "tlsConfig": {"caData": "x"}}
    ]
    assert moved["percentageOfNodesToScore"] == 1
    assert shipped["extenders"][0]["urlPrefix"] == "https://127.0.0.1:1"
