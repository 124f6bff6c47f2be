"""The section ``cluster`` of ``bench/plane/report.json`` (every labelled run) and its part of
``report.md``: a summary of the goals over the runs, then each run's tables."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common.plots import bars
from bench.plane.goals import render_goals, render_summary
from bench.plane.suite import SUITE

RUN_NAMES = {
    "extender": "migslice-scheduler (shipped configuration, with the extender)",
    "no_extender": "same configuration without the extender",
    "stock": "stock default kube-scheduler configuration",
    "extender_weighted": "placement weighted (filter + prioritize), with the extender",
}


def write_reports(out: Path | None, label: str, report: dict[str, Any]) -> None:
    """Put this run under ``label`` in the section ``cluster`` of the suite's report."""
    runs = dict(SUITE.load(out).get("cluster", {}))
    runs[label] = report
    SUITE.write("cluster", runs, out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    return str(value)


def render(runs: dict[str, Any]) -> str:
    lines = [
        "# Cluster benchmark (`make bench-cluster`)",
        "",
        "Real kube-apiserver, etcd and kube-scheduler (`e2e/`), fake GPU nodes and bound pods "
        "shaped like real ones, migslice's webhook and extender in-cluster. Produced by "
        "`python -m bench.plane.cluster`; the goals and how to read them: bench/plane/README.md.",
        "",
        "Goals over the runs (added ms/pod: median over a run's rounds of 1/pods/s with the "
        "extender minus 1/pods/s without any, with the rounds' least and greatest; met: "
        "migslice's added latency per pod at most 1.3x the Python null extender's):",
        "",
        *render_summary(runs),
    ]
    for label, report in runs.items():
        lines += _render_one(label, report)
    return "\n".join(lines) + "\n"


def _render_one(label: str, report: dict[str, Any]) -> list[str]:
    shape, load = report["shape"], report["load"]
    lines = [
        f"## {label} ({report.get('when', '')}, code {report.get('code', '?')})",
        "",
        f"{shape['nodes']} nodes, {shape['bound_pods']} bound pods; loaded in "
        f"{load['total_s']:.0f} s (nodes {load['nodes_s']:.0f} s, pods {load['pods_s']:.0f} s); "
        f"whole benchmark {report.get('wall_s', 0) / 60:.1f} min; load average at the end "
        f"{report.get('load_average', 0):.1f} (2 shared cores).",
        "",
        *(
            [
                "kube-apiserver collected its garbage before each run's binds "
                "(`--gc-before-runs`).",
                "",
            ]
            if report.get("gc_before_runs")
            else []
        ),
        "Cache sync (server start to `/readyz` 200): "
        + ", ".join(f"{k} {v} s" for k, v in report.get("sync_s", {}).items()),
        "",
        *_render_weights(report.get("cpu_weights")),
        "| run | pods/s | span s | algorithm mean ms | scheduler CPU ms/pod "
        "| extender worker CPU ms/pod | kube-scheduler RSS MiB | nodes used | over-bound nodes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    throughput = report.get("throughput", {})
    for key, name in RUN_NAMES.items():
        run = throughput.get(key)
        if run is None:
            continue
        lines.append(
            f"| {name} | {_fmt(run.get('pods_per_s'))} | {_fmt(run.get('span_s'))} | "
            f"{_fmt(run.get('algorithm_mean_ms'))} | {_fmt(run.get('scheduler_cpu_ms_per_pod'))} | "
            f"{_fmt(run.get('extender_worker_cpu_ms_per_pod'))} | "
            f"{_fmt(run.get('scheduler_memory_mib', {}).get('rss_mib'))} | "
            f"{_fmt(run.get('nodes_used'))} | "
            f"{_fmt(run.get('over_bound_nodes'))} |"
        )
    lines += [
        "",
        f"With the extender / stock: {_fmt(throughput.get('ratio_vs_stock'))}x; "
        f"/ without: {_fmt(throughput.get('ratio_vs_no_extender'))}x (first round). Configuration: "
        f"`{json.dumps(throughput.get('config', {}))}`."
        + (
            f" Placement weighted / without: {_fmt(throughput['weighted_ratio_vs_no_extender'])}x."
            if throughput.get("weighted_ratio_vs_no_extender") is not None
            else ""
        ),
        "",
    ]
    lines += _render_rounds(throughput)
    lines += _render_waits(throughput)
    lines += _render_processes(throughput)
    lines += _render_go_gc(throughput)
    lines += _render_percentages(throughput.get("percentages", {}))
    lines += _render_churn(report.get("churn"))
    lines += render_goals(report)
    lines += ["| process | RSS after sync MiB | RSS at end MiB | peak MiB |", "|---|---|---|---|"]
    synced, end = report.get("memory_after_sync", {}), report.get("memory_end", {})
    for name in synced:
        lines.append(
            f"| {name} | {_fmt(synced[name].get('rss_mib'))} | "
            f"{_fmt(end.get(name, {}).get('rss_mib'))} | "
            f"{_fmt(end.get(name, synced[name]).get('peak_mib'))} |"
        )
    lines.append("")
    return lines


def _render_weights(weights: dict[str, Any] | None) -> list[str]:
    """The CPU cgroups of a ``--cpu-weights`` run, one line."""
    if not weights:
        return ["Every process in one CPU cgroup.", ""]
    groups = ", ".join(
        f"{group} {entry['cpu_shares']} ({len(entry['pids'])} processes)"
        for group, entry in sorted(weights.items())
    )
    return [f"CPU cgroups weighted by the pods' requests (cpu.shares): {groups}.", ""]


def _render_churn(churn: dict[str, Any] | None) -> list[str]:
    if not churn:
        return []
    lines: list[str] = []
    lines.append(
        "Extender cache lag under churn "
        f"({churn['duration_s']} s, "
        f"extender worker {churn.get('extender_worker_cpu_s')} CPU s):"
    )
    lines.append("")
    lines.append("| change | per minute | p50 ms | p99 ms | max ms | timeouts |")
    lines.append("|---|---|---|---|---|---|")
    for kind in ("node", "pod"):
        c = churn[kind]
        lines.append(
            f"| {kind} | {c['per_minute']} | {_fmt(c['p50_ms'])} | {_fmt(c['p99_ms'])} | "
            f"{_fmt(c['max_ms'])} | {c['timeouts']} |"
        )
    floor = churn.get("probe_round_trip")
    if floor:
        lines.append("")
        lines.append(
            f"The probe's own `/filter` round trip with nothing changing (the floor of every "
            f"lag): p50 {_fmt(floor['p50_ms'])} ms, max of 50 {_fmt(floor['max_ms'])} ms."
        )
    lines.append("")
    return lines


FLOORS = (("floor_go", "Go null extender"), ("floor_python", "Python null extender"))


def _render_rounds(throughput: dict[str, Any]) -> list[str]:
    """Each round of runs (``--repeats``, ``--floor``): ratios to the round's run without the
    extender (as measured, and steady: the control plane's CPU per pod evened out), and what
    each extender added to kube-scheduler's algorithm mean."""
    rounds = throughput.get("rounds", [])
    if len(rounds) < 2 and not any(key in r for r in rounds for key, _ in FLOORS):
        return []
    floors = [(k, n) for k, n in FLOORS if any(k in r for r in rounds)]
    steady = any("steady_ratio" in r for r in rounds)
    head = "| round | without pods/s | algorithm mean ms without | with the extender pods/s "
    head += "| ratio |" + (" steady |" if steady else "") + " added ms | extender app ms/call |"
    rule = "|---|---|---|---|---|" + ("---|" if steady else "") + "---|---|"
    for _, name in floors:
        head += f" {name} pods/s | ratio |" + (" steady |" if steady else "") + " added ms |"
        rule += "---|---|" + ("---|" if steady else "") + "---|"
    lines = [
        "Rounds, one after the other (ratio: pods/s over the same round's run without an "
        "extender; added ms: kube-scheduler's algorithm mean over that run's; the null "
        "extenders answer without deciding, `bench/plane/nulls.py`):",
        "",
        head,
        rule,
    ]

    def ratios(one: dict[str, Any], prefix: str) -> str:
        cells = f"{_fmt(one.get(f'{prefix}ratio'))}x |"
        if steady:
            cells += f" {_fmt(one.get(f'{prefix}steady_ratio'))}x |"
        return cells

    for number, one in enumerate(rounds, start=1):
        bare, ours = one.get("no_extender", {}), one.get("extender", {})
        added = one.get("added_algorithm_ms", {})
        row = (
            f"| {number} | {_fmt(bare.get('pods_per_s'))} | {_fmt(bare.get('algorithm_mean_ms'))} "
            f"| {_fmt(ours.get('pods_per_s'))} | {ratios(one, '')}"
            f" {_fmt(added.get('extender'))} | {_fmt(ours.get('extender_app_ms_per_call'))} |"
        )
        for key, _ in floors:
            run = one.get(key, {})
            row += (
                f" {_fmt(run.get('pods_per_s'))} | {ratios(one, f'{key}_')}"
                f" {_fmt(added.get(key))} |"
            )
        lines.append(row)
    medians = [f"extender {_fmt(throughput.get('ratio_median'))}x"]
    medians += [f"{name} {_fmt(throughput.get(f'{k}_ratio_median'))}x" for k, name in floors]
    lines += ["", "Median ratios: " + ", ".join(medians) + "."]
    if steady:
        found = [f"extender {_fmt(throughput.get('steady_ratio_median'))}x"]
        found += [
            f"{name} {_fmt(throughput.get(f'{k}_steady_ratio_median'))}x" for k, name in floors
        ]
        lines += [
            "",
            "Steady ratios (each run's kube-apiserver + etcd CPU per pod replaced by their "
            f"median over the rounds, {_fmt(throughput.get('control_plane_ms_per_pod_median'))}"
            " ms; on a saturated machine pods/s is the cores over the busy CPU per pod"
            + (
                "; computed afterwards from the figures this run recorded"
                if throughput.get("steady_ratios_afterwards")
                else ""
            )
            + "), medians: "
            + ", ".join(found)
            + ".",
        ]
    return [*lines, ""]


WAIT_RUNS = (("no_extender", "without"), ("extender", "with the extender"), *FLOORS)


def _render_waits(throughput: dict[str, Any]) -> list[str]:
    """Where each run's time went: kube-scheduler's and the answering thread's time on a core
    and waiting for one, per pod (schedstat), and the machine's idle and stolen share."""
    rounds = throughput.get("rounds", [])
    if not any("scheduler_wait_ms_per_pod" in run for r in rounds for run in r.values()
               if isinstance(run, dict)):  # fmt: skip
        return []
    lines = [
        "On a core and waiting for one, per pod, between the first and the last bind "
        "(the kernel's schedstat; answering thread: the event loop's of a Python server, "
        "every thread of the Go null; slept / preempted: the times it gave its core up to wait, "
        "for the socket, a lock or Python's GIL, and the times the kernel took its core from "
        "it; machine: the CPU time of every process on every core, and its idle and stolen "
        "shares):",
        "",
        "| round | run | pods/s | kube-scheduler on core ms | kube-scheduler waiting ms "
        "| answering thread on core ms | answering thread waiting ms "
        "| answering thread slept / preempted | machine busy ms | idle % | stolen % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, one in enumerate(rounds, start=1):
        for key, name in WAIT_RUNS:
            run = one.get(key)
            if not isinstance(run, dict):
                continue
            answering = key != "no_extender"
            lines.append(
                f"| {number} | {name} | {_fmt(run.get('pods_per_s'))} "
                f"| {_fmt(run.get('scheduler_on_core_ms_per_pod'))} "
                f"| {_fmt(run.get('scheduler_wait_ms_per_pod'))} "
                f"| {_fmt(run.get('server_on_core_ms_per_pod') if answering else None)} "
                f"| {_fmt(run.get('server_wait_ms_per_pod') if answering else None)} "
                f"| {_switches(run) if answering else '-'} "
                f"| {_fmt(run.get('machine_busy_ms_per_pod'))} "
                f"| {_fmt(run.get('machine_idle_pct'))} | {_fmt(run.get('machine_steal_pct'))} |"
            )
    return [*lines, ""]


PROCESS_ORDER = (
    "kube-apiserver",
    "etcd",
    "kube-scheduler",
    "extender worker",
    "null extender",
    "webhook worker",
    "bench",
)


def _runs_with(throughput: dict[str, Any], figure: str) -> list[tuple[int, str, dict[str, Any]]]:
    """``(round number, run name, run)`` of every run of the rounds that recorded ``figure``."""
    return [
        (number, name, one[key])
        for number, one in enumerate(throughput.get("rounds", []), start=1)
        for key, name in WAIT_RUNS
        if isinstance(one.get(key), dict) and one[key].get(figure)
    ]


def _run_table(
    intro: str,
    runs: list[tuple[int, str, dict[str, Any]]],
    columns: Sequence[str],
    cell: Callable[[dict[str, Any], str], str],
) -> list[str]:
    """A table of ``runs`` (:func:`_runs_with`): round, run, pods/s, then ``cell(run, column)``
    for each of ``columns``."""
    lines = [
        intro,
        "",
        "| round | run | pods/s | " + " | ".join(columns) + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for number, name, run in runs:
        cells = " | ".join(cell(run, column) for column in columns)
        lines.append(f"| {number} | {name} | {_fmt(run.get('pods_per_s'))} | {cells} |")
    return [*lines, ""]


def _render_processes(throughput: dict[str, Any]) -> list[str]:
    """CPU per pod of each process of the machine in each run (``cpu_ms_per_pod_by_process``)."""
    runs = _runs_with(throughput, "cpu_ms_per_pod_by_process")
    if not runs:
        return []
    seen = {process for *_, run in runs for process in run["cpu_ms_per_pod_by_process"]}
    columns = [process for process in PROCESS_ORDER if process in seen]
    columns += [*sorted(seen - set(columns) - {"other"}), "other"]
    return _run_table(
        "CPU ms per pod by process, between the first and the last bind (every process the "
        "benchmark runs; other: the rest of the machine's busy time):",
        runs,
        columns,
        lambda run, column: _fmt(run["cpu_ms_per_pod_by_process"].get(column)),
    )


GO_PROCESSES = ("kube-apiserver", "kube-scheduler", "etcd")


def _render_go_gc(throughput: dict[str, Any]) -> list[str]:
    """Each Go process's garbage collections in each run (``go_gc``): cycles and CPU ms per pod."""
    runs = _runs_with(throughput, "go_gc")
    if not runs:
        return []

    def cell(run: dict[str, Any], process: str) -> str:
        found = run["go_gc"].get(process)
        return "-" if found is None else f"{found['cycles']}: {_fmt(found['cpu_ms_per_pod'])}"

    return _run_table(
        "Garbage collections of the control plane's Go processes that ran between the first "
        "and the last bind (GODEBUG=gctrace=1): cycles, and their CPU ms per pod by the Go "
        "runtime's own account (idle-time marking included), each counted for the share of its "
        "wall time between the binds:",
        runs,
        GO_PROCESSES,
        cell,
    )


def _switches(run: dict[str, Any]) -> str:
    slept, preempted = run.get("server_slept_per_pod"), run.get("server_preempted_per_pod")
    if slept is None or preempted is None:
        return "-"
    return f"{_fmt(slept)} / {_fmt(preempted)}"


def _render_percentages(pairs: dict[str, Any]) -> list[str]:
    """The same pair of runs at other ``percentageOfNodesToScore`` values (``--percentages``)."""
    if not pairs:
        return []
    lines = [
        "| percentageOfNodesToScore | with the extender pods/s | without pods/s | ratio "
        "| scheduler CPU ms/pod with / without | extender worker CPU ms/pod | over-bound nodes |",
        "|---|---|---|---|---|---|---|",
    ]
    for percentage, pair in pairs.items():
        with_run, bare = pair.get("extender", {}), pair.get("no_extender", {})
        over = (with_run.get("over_bound_nodes") or 0) + (bare.get("over_bound_nodes") or 0)
        lines.append(
            f"| {percentage} | {_fmt(with_run.get('pods_per_s'))} | {_fmt(bare.get('pods_per_s'))} "
            f"| {_fmt(pair.get('ratio_vs_no_extender'))}x "
            f"| {_fmt(with_run.get('scheduler_cpu_ms_per_pod'))} / "
            f"{_fmt(bare.get('scheduler_cpu_ms_per_pod'))} "
            f"| {_fmt(with_run.get('extender_worker_cpu_ms_per_pod'))} | {over} |"
        )
    return [*lines, ""]


CONFIGURATIONS = (
    ("extender", "migslice extender"),
    ("no_extender", "no extender"),
    ("floor_python", "Python null extender"),
    ("floor_go", "Go null extender"),
    ("stock", "stock default scheduler"),
)
"""The runs of one round, as ``throughput.rounds[]`` keys them, and their names in the plot."""


def plot(runs: dict[str, Any], path: Path) -> str:
    """GPU pods bound per second in every round of every run, one bar per configuration."""
    groups: list[str] = []
    series: dict[str, list[float | None]] = {name: [] for _, name in CONFIGURATIONS}
    for label, report in runs.items():
        for number, round_ in enumerate(report.get("throughput", {}).get("rounds") or (), 1):
            short = label if len(label) <= 22 else f"{label[:10]}..{label[-10:]}"
            groups.append(f"{short}\nround {number}")
            for key, name in CONFIGURATIONS:
                found = round_.get(key)
                series[name].append(found["pods_per_s"] if found else None)
    return bars(
        path,
        title="Binding rate on the real control plane (5,000 nodes), per round",
        groups=groups,
        series=series,
        ylabel="pods/s",
    )
