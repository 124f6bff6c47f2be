"""The churn benchmark's report: the base point per workload (acceptance by pods and by
slices, per pod class, waits), the load and T_reconf sweeps, the §5.7 churn goals, a plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common.stats import ci, fmt
from bench.packing.packing_report import HEADLINE, PER_POD

ORDER = tuple(p for p in HEADLINE if p != "B0")
"""The packing report's headline order (the opt-in reserve after M-dra), without B0."""


def point(report: dict[str, Any], spec: str, policy: str, at: tuple[float, float]) -> Any:
    """The aggregated point of ``policy`` on ``spec`` at (load, T_reconf) ``at``."""
    load, t = at
    for p in report["points"]:
        if (p["workload"], p["policy"], p["load"], p["t_reconf"]) == (spec, policy, load, t):
            return p
    return None


def seconds(summary: dict[str, float]) -> str:
    return fmt(summary, 1.0, 0)


def markdown(report: dict[str, Any]) -> str:
    meta = report["config"]
    controller = meta["controller"]
    base = meta["base"]
    lines = [
        "# Churn benchmark (mode B, production settings)",
        "",
        f"{meta['nodes']} nodes x 8 A100-80GB GPUs = {meta['gpus']} GPUs, GPU side only; seeds "
        f"{meta['seeds'][0]}-{meta['seeds'][-1]} ({len(meta['seeds'])}); "
        f"{meta['duration_s']:.0f} s simulated (20 mean lifetimes), the first "
        f"{meta['warmup_s']:.0f} s left out; patience {meta['patience_s']:.0f} s. migslice: "
        f"controller rounds every {meta['interval_s']:.0f} s, min pending "
        f"{controller['plan']['min_pending_s']:.0f} s, cooldown "
        f"{controller['plan']['cooldown_s']:.0f} s, {controller['plan']['max_nodes_in_flight']} "
        f"node in flight, the whole node off-limits until MIG Manager reports success. B5: nos's "
        f"batching windows ({meta['batch_idle_s']:.0f} s idle / {meta['batch_timeout_s']:.0f} s), "
        "one plan at a time, its nodes off-limits likewise. M-carve: every node in carve mode "
        f"(10 s min pending, 60 s cooldown, four nodes in flight), the node agent's carve "
        f"taking {meta.get('t_carve_s', 5.0):g} s with the node off-limits meanwhile. B6, B8 "
        "and B9 carve one instance per pod on GPUs in use; each pod starts the same carve "
        "time after it is placed (counted in its wait). Values: mean ± 95 % interval over "
        "seeds. Acceptance by pods, and by compute slices (a 8 x 7g pod weighs 56 times a 1g). "
        "Instances created and destroyed are per GPU per day of the measured window, whoever "
        "changed them (MIG Manager's stand-in, the node agent, a per-pod carver); node-time "
        "blocked is the share of node-time a node took no new pod because its layout was "
        "being changed.",
        "",
        f"Run: {meta['wall_s'] / 60:.1f} min wall, {meta['cpu_s'] / 60:.1f} min CPU on a 2-core "
        "machine shared with other work. Produced by `python -m bench.packing.churn`.",
        "",
    ]
    if meta.get("note"):
        lines += [meta["note"], ""]
    specs = sorted({p["workload"] for p in report["points"]})
    for spec in specs:
        at = (base["load"], base["t_reconf"])
        lines += base_table(report, spec, at)
        lines += class_table(report, spec, at)
        lines += sweep_table(report, spec, ("load", base["t_reconf"]))
        lines += sweep_table(report, spec, ("t_reconf", base["load"]))
        lines += goals(report, spec, at)
    return "\n".join(lines) + "\n"


def base_table(report: dict[str, Any], spec: str, at: tuple[float, float]) -> list[str]:
    load, t = at
    mix = report["config"]["mixes"].get(spec, {})
    lines = [
        f"## {spec}: offered load {load:g} %, T_reconf {t:g} s",
        "",
        "Mix by pod: " + ", ".join(f"{p} {n}" for p, n in mix.items()) + ".",
        "",
        "| policy | accepted, pods % | accepted, slices % | slice alloc. % | mean pending "
        "| wait p50 / p90 / p99 s | planned-for pods' wait p50 / p99 s "
        "| re-partitions / 20 placed | GPUs re-partitioned | instances created / destroyed "
        "per GPU-day | node-time blocked % | pods disrupted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for policy in ORDER:
        p = point(report, spec, policy, at)
        if p is None:
            continue
        w = p["waits"]
        blocked = fmt(p["blocked_node_pct"], 1.0, 2) if "blocked_node_pct" in p else "—"
        lines.append(
            f"| {p['name']} | {fmt(p['acceptance'])} | {fmt(p['slice_acceptance'])} "
            f"| {fmt(p['slice_allocation'])} | {fmt(p['mean_pending'], 1.0)} "
            f"| {seconds(w['p50_s'])} / {seconds(w['p90_s'])} / {seconds(w['p99_s'])} "
            f"| {planned_waits(p)} "
            f"| {fmt(p['repartitions_per_20_placed'], 1.0, 2)} "
            f"| {fmt(p['gpus_repartitioned'], 1.0, 0)} "
            f"| {changes(p)} | {blocked} "
            f"| {p['disrupted_pods']} |"
        )
    return [*lines, ""]


def planned_waits(p: dict[str, Any]) -> str:
    """The planned-for pods' wait; "—" where the policy planned no re-partition or carve (a
    static one, or one that gives each pod an instance of its own: its wait is every pod's)."""
    if p["repartitions_per_20_placed"]["mean"] == 0:
        return "—"
    rw = p["repartition_waits"]
    return f"{seconds(rw['p50_s'])} / {seconds(rw['p99_s'])}"


def changes(p: dict[str, Any]) -> str:
    if "creates_per_gpu_day" not in p:
        return "—"
    return f"{fmt(p['creates_per_gpu_day'], 1.0, 1)} / {fmt(p['destroys_per_gpu_day'], 1.0, 1)}"


def class_table(report: dict[str, Any], spec: str, at: tuple[float, float]) -> list[str]:
    shown = [p for p in ORDER if point(report, spec, p, at)]
    if not shown:
        return []
    first = point(report, spec, shown[0], at)
    names = sorted(first["classes"], key=class_order)
    header = " | ".join(point(report, spec, p, at)["name"] for p in shown)
    lines = [
        "Per pod class, accepted % (by pods; a class's slices are its pods times its size) "
        "and p99 wait s:",
        "",
        f"| class | {header} |",
        "|---|" + "---|" * len(shown),
    ]
    for name in names:
        cells = []
        for policy in shown:
            c = point(report, spec, policy, at)["classes"].get(name)
            cells.append("—" if c is None else f"{fmt(c['acceptance'])} ({seconds(c['p99_s'])} s)")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def class_order(name: str) -> tuple[int, int, str]:
    """1g, 2g, ... 7g, then k x 7g by k."""
    count, _, profile = name.rpartition("x")
    return (int(count) if count else 1, int(profile.split("g.")[0]), profile)


def sweep_table(report: dict[str, Any], spec: str, sweep: tuple[str, float]) -> list[str]:
    axis, fixed = sweep
    other = "t_reconf" if axis == "load" else "load"
    rows = [p for p in report["points"] if p["workload"] == spec and p[other] == fixed]
    values = sorted({p[axis] for p in rows})
    if len(values) < 2:
        return []
    label = "offered load %" if axis == "load" else "T_reconf s"
    shown = [x for x in ORDER if any(p["policy"] == x for p in rows)]
    lines = [
        f"Sweep of {label} ({'T_reconf' if axis == 'load' else 'load'} {fixed:g}): accepted % "
        "by pods / by slices",
        "",
        f"| {label} | "
        + " | ".join(next(p["name"] for p in rows if p["policy"] == x) for x in shown)
        + " |",
        "|---|" + "---|" * len(shown),
    ]
    for value in values:
        cells = []
        for policy in shown:
            p = next((r for r in rows if r["policy"] == policy and r[axis] == value), None)
            cells.append(
                "—" if p is None else f"{fmt(p['acceptance'])} / {fmt(p['slice_acceptance'])}"
            )
        lines.append(f"| {value:g} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def goals(report: dict[str, Any], spec: str, at: tuple[float, float]) -> list[str]:
    t = at[1]
    mine, nos = point(report, spec, "migslice", at), point(report, spec, "B5", at)
    if mine is None:
        return []
    checks = []
    if nos is not None:
        for metric, label in (("acceptance", "pods"), ("slice_acceptance", "slices")):
            d = ci(
                [
                    a - b
                    for a, b in zip(mine["per_seed"][metric], nos["per_seed"][metric], strict=True)
                ]
            )
            ok = d["mean"] >= 0.05
            checks.append(
                f"acceptance ≥ B5 + 5 pp by {label}: {'met' if ok else 'MISSED'} "
                f"({fmt(d, 100.0, 1)} pp)"
            )
    rate = mine["repartitions_per_20_placed"]["mean"]
    checks.append(
        f"≤ 1 re-partition per 20 placements: {'met' if rate <= 1 else 'MISSED'} ({rate:.2f})"
    )
    p99 = mine["repartition_waits"]["p99_s"]["mean"]
    checks.append(
        f"p99 wait of planned-for pods ≤ T_reconf + 30 s = {t + 30:.0f} s: "
        f"{'met' if p99 <= t + 30 else 'MISSED'} ({p99:.0f} s; the controller alone adds "
        "30 s of min pending and up to 15 s to its next round)"
    )
    checks.append(f"0 pods disrupted: {'met' if mine['disrupted_pods'] == 0 else 'MISSED'}")
    lines = [f"- **migslice vs §5.7 (churn), {spec}**: " + "; ".join(checks) + "."]
    carve = point(report, spec, "M-carve", at)
    if carve is not None:
        t_carve = report["config"].get("t_carve_s", 5.0)
        p99 = carve["repartition_waits"]["p99_s"]["mean"]
        p50 = carve["repartition_waits"]["p50_s"]["mean"]
        lines.append(
            f"- **M-carve, {spec}**: p99 pending of the pods a carve was planned for (new "
            f"shapes) ≤ carve time + 30 s = {t_carve + 30:g} s: "
            f"{'met' if p99 <= t_carve + 30 else 'MISSED'} (p50 {p50:.0f} s, p99 {p99:.0f} s: "
            "10 s of min pending, up to 15 s to the controller's next round, then the carve; "
            "a pod that finds no node to carve waits for a departure)"
            + per_pod_waits(report, spec, at)
            + "."
        )
    return [*lines, ""]


def per_pod_waits(report: dict[str, Any], spec: str, at: tuple[float, float]) -> str:
    """The p99 wait of every pod under the per-pod carvers (M-dra too), whose every pod is a
    new shape."""
    found = [(b, point(report, spec, b, at)) for b in ("M-dra", *PER_POD)]
    cells = [f"{b} {p['waits']['p99_s']['mean']:.0f} s" for b, p in found if p is not None]
    if not cells:
        return ""
    return (
        "; the per-pod carvers, whose every pod is a new shape carved when it is placed, "
        "p99 " + ", ".join(cells)
    )


def plot(report: dict[str, Any], path: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'); plot skipped"
    base = report["config"]["base"]
    specs = sorted({p["workload"] for p in report["points"]})
    figure, axes = plt.subplots(len(specs), 2, figsize=(11, 3.8 * len(specs)), squeeze=False)
    for row, spec in enumerate(specs):
        for column, (axis_name, fixed_name) in enumerate(
            (("load", "t_reconf"), ("t_reconf", "load"))
        ):
            axis = axes[row][column]
            fixed = base[fixed_name]
            for n, policy in enumerate(ORDER):
                rows = sorted(
                    (
                        p
                        for p in report["points"]
                        if p["workload"] == spec
                        and p["policy"] == policy
                        and p[fixed_name] == fixed
                    ),
                    key=lambda p: p[axis_name],
                )
                if len(rows) < 2:
                    continue
                xs = [p[axis_name] for p in rows]
                mean = [100 * p["slice_acceptance"]["mean"] for p in rows]
                half = [100 * p["slice_acceptance"]["ci"] for p in rows]
                axis.plot(xs, mean, "o-", color=f"C{n}", label=rows[0]["name"])
                axis.fill_between(
                    xs,
                    [m - h for m, h in zip(mean, half, strict=True)],
                    [m + h for m, h in zip(mean, half, strict=True)],
                    color=f"C{n}",
                    alpha=0.25,
                )
            if axis_name == "t_reconf":
                axis.set_xscale("log")
            axis.set_xlabel("offered load (%)" if axis_name == "load" else "T_reconf (s)")
            axis.set_ylabel("accepted, by slices (%)")
            axis.set_title(f"{spec}, {fixed_name.replace('_', ' ')} {fixed:g}", fontsize=10)
            axis.grid(alpha=0.3)
            axis.legend(fontsize=8)
    figure.suptitle("Mode B churn, production settings: mean and 95 % band over seeds")
    figure.tight_layout(rect=(0, 0, 1, 0.96))
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return f"wrote {path}"
