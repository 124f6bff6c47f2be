"""The section ``slow_clients`` of ``bench/serving/report.md``, for
``bench.serving.slow_clients``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common.plots import bars


def attack_label(report: dict[str, Any], attack: str) -> str:
    """``1000 idle``: runs before the 3,000-idle attack keyed their medians by the mode alone."""
    return attack if attack[:1].isdigit() else f"{report['connections']} {attack}"


def markdown(report: dict[str, Any]) -> str:
    rows = [
        "# Slow clients against the shipped servers (`bench/serving/slow_clients.py`)",
        "",
        "| server | load | kept-alive p50 ms | kept-alive p99 ms | fresh conn p50 ms "
        "| fresh conn p99 ms | p99 / unloaded p99 (kept-alive, fresh) | stalled conns open "
        "| stalled lifetime p50 / max s | worker RSS MiB | worker CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for command in [c for c in ("webhook", "extender") if c in report]:
        for phase in report[command]["phases"]:
            attack = phase.get("attack_at_end", {})
            lifetime = phase.get("attack_final", {}).get("lifetime_s", {})
            ratio = phase.get("p99_over_unloaded")
            ratio_text = f"{ratio['keepalive']}, {ratio['fresh_connection']}" if ratio else "-"
            rows.append(
                f"| {command} | {phase['load']} | {phase['keepalive']['p50_ms']} | "
                f"{phase['keepalive']['p99_ms']} | {phase['fresh_connection']['p50_ms']} | "
                f"{phase['fresh_connection']['p99_ms']} | {ratio_text} | "
                f"{attack.get('open', '-')} | "
                f"{lifetime.get('p50', '-')} / {lifetime.get('max', '-')} | "
                f"{phase['worker_rss_mib']} | {phase['worker_cpu_percent']} |"
            )
    rows += [
        "",
        "| server | stalled connections | median over rounds of p99 / unloaded p99: kept-alive "
        "| fresh connection |",
        "|---|---|---|---|",
    ]
    for command in [c for c in ("webhook", "extender") if c in report]:
        for attack, ratio in report[command].get("median_p99_over_unloaded", {}).items():
            rows.append(
                f"| {command} | {attack_label(report, attack)} | {ratio['keepalive']} "
                f"| {ratio['fresh_connection']} |"
            )
    rows += [
        "",
        "| server | request | body MiB | ms per request | steady RSS MiB | peak RSS MiB "
        "| peak / steady |",
        "|---|---|---|---|---|---|---|",
    ]
    for command in [c for c in ("webhook", "extender") if c in report]:
        for row in report[command]["largest"]:
            rows.append(
                f"| {command} | {row['request']} | {row['body_mib']} "
                f"| {row.get('request_ms', '-')} | {row['steady_rss_mib']} "
                f"| {row['peak_rss_mib']} | {row['peak_over_steady']} |"
            )
    return "\n".join(rows) + "\n"


def plot(report: dict[str, Any], path: Path) -> str:
    """Per server and kind of stalled connection, the median over rounds of the attacked p99
    over the unloaded p99, kept-alive and on new connections, against the 2x goal."""
    groups: list[str] = []
    kept: list[float | None] = []
    fresh: list[float | None] = []
    for command in [c for c in ("webhook", "extender") if c in report]:
        for attack, ratio in report[command].get("median_p99_over_unloaded", {}).items():
            groups.append(f"{command}\n{attack_label(report, attack)}")
            kept.append(ratio["keepalive"])
            fresh.append(ratio["fresh_connection"])
    return bars(
        path,
        title="Slow clients: honest p99 under stalled connections / unloaded p99 "
        "(median of rounds)",
        groups=groups,
        series={"kept-alive": kept, "new connection": fresh},
        ylabel="p99 ratio",
        goal=(2.0, "goal 2x"),
    )
