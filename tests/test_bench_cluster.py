"""The pure parts of ``bench.cluster``: the cluster it loads and the report it writes.

The loaded objects must read, through migslice's own readers, as exactly what the plan says
(allocatable per profile, one instance held per bound pod), or the benchmark would measure a
cluster other than the one it reports.
"""

from __future__ import annotations

from typing import Any

from bench.cluster_nodes import node_body
from bench.cluster_objects import ClusterPlan, ClusterShape, resource
from bench.cluster_pods import pod_body, running_status
from bench.cluster_report import GOALS, goal_values, render
from bench.cluster_runs import BindWatch, over_bound, run_profile
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


def test_goals_take_the_worse_figure_and_say_what_was_not_measured() -> None:
    values = goal_values(report(0.9, 4.0))
    assert len(values) == len(GOALS)
    assert values[:6] == [0.9, 4.0, 140.0, None, 31.5, 12.0]
    assert values[6] == 0.0


def test_the_report_says_each_goal_met_or_missed_by_how_much() -> None:
    text = render({"before": report(0.5, 20.0), "after": report(0.85, 4.0)})
    assert text.index("## before") < text.index("## after")
    assert "| 0.50 x | missed by 0.30 x |" in text
    assert "| 0.85 x | met |" in text
    assert "| 20.0 ms | missed by 15.00 ms |" in text
    assert "| 31.5 s | missed by 1.50 s |" in text
    assert "| extender worker RSS (300 MB) | <= 286.1 MiB | - | not measured |" in text


def test_runs_at_other_percentages_are_tabled_and_their_over_binds_counted() -> None:
    measured = report(0.7, 6.0)
    pair = {
        "extender": {"pods_per_s": 30.0, "scheduler_cpu_ms_per_pod": 12.0, "over_bound_nodes": 1},
        "no_extender": {"pods_per_s": 33.0, "scheduler_cpu_ms_per_pod": 10.0},
        "ratio_vs_no_extender": 0.91,
    }
    measured["throughput"]["percentages"] = {"0": pair}
    assert goal_values(measured)[6] == 1.0
    text = render({"after": measured})
    assert "| 0 | 30.0 | 33.0 | 0.91x | 12.0 / 10.0 | - | 1 |" in text


def test_the_weighted_placement_run_is_tabled_with_its_ratio_and_over_binds_counted() -> None:
    measured = report(0.7, 6.0)
    measured["throughput"]["extender_weighted"] = {"pods_per_s": 21.0, "over_bound_nodes": 2}
    measured["throughput"]["weighted_ratio_vs_no_extender"] = 0.7
    assert goal_values(measured)[6] == 2.0
    text = render({"after": measured})
    assert "| placement weighted (filter + prioritize), with the extender | 21.0 |" in text
    assert "Placement weighted / without: 0.70x." in text
