"""Kept decisions (``DecisionCache``) answer exactly as the reference filter and score."""

from __future__ import annotations

import threading
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex
from migslice.inventory.layouts import NodeState
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.scheduling import (
    DecisionCache,
    FilterResult,
    PreparedNode,
    best_fit_nodes,
    demand_of,
    filter_nodes,
    prepare_node,
    reasons,
    score_nodes,
)
from tests.scheduling.test_scheduling import PROFILES, clusters

Cluster = tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]]


def pair(name: str, score: int) -> tuple[str, int]:
    return (name, score)


def cached_index() -> tuple[ClusterIndex[PreparedNode], DecisionCache[tuple[str, int]]]:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    cache = DecisionCache(index.get, pair)
    index.subscribe(cache.forget)
    return index, cache


def reference(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], pod: dict[str, Any], names: list[str]
) -> tuple[FilterResult, list[tuple[str, int]], FilterResult]:
    """The answers of the reference path over a fresh index of the same objects: filter,
    scores, best-fit filter."""
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.replace_nodes(node_facts_from_raw(n) for n in nodes)
    index.replace_pods(p for p in map(pod_facts_from_raw, pods) if p is not None)
    candidates = [(n, index.get(n)) for n in names]
    demand = demand_of(pod)
    return (
        filter_nodes(demand, candidates),
        list(score_nodes(demand, candidates)),
        best_fit_nodes(demand, candidates),
    )


def single(resource: str) -> dict[str, Any]:
    key = "nvidia.com/gpu" if resource == "gpu" else "nvidia.com/mig-" + resource.replace("+", ".")
    return make_pod(f"ask-{resource}", requests={key: "1"})


events = st.lists(
    st.tuples(
        st.sampled_from(("bind", "unbind", "relabel", "drop-node", "relist-pods")),
        st.integers(0, 5),
        st.sampled_from((*PROFILES, "gpu")),
    ),
    max_size=8,
)


@settings(max_examples=120, deadline=None)
@given(clusters(), events, st.sampled_from((*PROFILES, "gpu")))
def test_kept_decisions_equal_the_reference_path_through_any_events(
    cluster: Cluster, changes: list[tuple[str, int, str]], other: str
) -> None:
    nodes, pods, pod, names = cluster
    nodes, pods = list(nodes), list(pods)
    index, cache = cached_index()
    index.replace_nodes(node_facts_from_raw(n) for n in nodes)
    index.replace_pods(p for p in map(pod_facts_from_raw, pods) if p is not None)
    asks = (pod, single(other))
    for step, (kind, which, resource) in enumerate([("none", 0, "gpu"), *changes]):
        target = f"n{which}"
        if kind == "bind":
            key = "nvidia.com/gpu" if resource == "gpu" else "nvidia.com/mig-" + resource
            bound = make_pod(f"e{step}", requests={key: "1"}, node_name=target, phase="Running")
            pods.append(bound)
            facts = pod_facts_from_raw(bound)
            assert facts is not None
            index.upsert_pod(facts)
        elif kind == "unbind" and pods:
            gone = pods.pop(which % len(pods))
            index.delete_pod(f"{gone['metadata']['namespace']}/{gone['metadata']['name']}")
        elif kind == "relabel" and which < len(nodes):
            target = nodes[which]["metadata"]["name"]
            nodes[which] = make_node(target, gpu_count=1, mig={resource: 1}, config_state="pending")
            if resource == "gpu":
                nodes[which] = make_node(target, strategy=None, whole_gpus=2)
            index.upsert_node(node_facts_from_raw(nodes[which]))
        elif kind == "drop-node" and which < len(nodes):
            index.delete_node(nodes.pop(which)["metadata"]["name"])
        elif kind == "relist-pods":
            index.replace_pods(p for p in map(pod_facts_from_raw, pods) if p is not None)
        for ask in asks:
            expected_filter, expected_scores, expected_best = reference(nodes, pods, ask, names)
            demand = demand_of(ask)
            assert cache.filter(demand, names) == expected_filter
            assert cache.score(demand, names) == expected_scores
            assert cache.best_fit(demand, names) == expected_best
            assert cache.best_fit(demand, names) == expected_best  # from what it kept
            assert [n for n, _ in cache.score(demand, names)] == list(dict.fromkeys(names))


def test_a_node_that_changes_while_it_is_judged_is_not_kept_with_its_old_answer() -> None:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.replace_nodes([node_facts_from_raw(make_node("n0", gpu_count=1, mig={"3g.40gb": 1}))])
    taken = make_pod("taken", profile="3g.40gb", node_name="n0", phase="Running")
    facts = pod_facts_from_raw(taken)
    assert facts is not None
    lookups: list[str] = []

    def lookup_while_a_pod_binds(name: str) -> PreparedNode | None:
        node = index.get(name)  # the value before the bind ...
        if not lookups:
            index.upsert_pod(facts)  # ... and the bind lands before the answer is kept
        lookups.append(name)
        return node

    cache = DecisionCache(lookup_while_a_pod_binds, pair)
    index.subscribe(cache.forget)
    demand = demand_of(make_pod("ask", profile="3g.40gb"))
    assert cache.filter(demand, ["n0"]).fits == ("n0",)  # judged on the value it read
    assert cache.filter(demand, ["n0"]).failed == {"n0": reasons.all_in_use("3g.40gb")}
    assert cache.score(demand, ["n0"]) == [("n0", 0)]


def test_start_up_derives_each_node_once_whatever_order_the_lists_arrive_in() -> None:
    derived: list[str] = []

    def counting(state: NodeState) -> PreparedNode:
        derived.append(state.facts.name)
        return prepare_node(state)

    index: ClusterIndex[PreparedNode] = ClusterIndex(counting)
    nodes = [make_node(f"n{i}", gpu_count=1, mig={"1g.10gb": 7}) for i in range(4)]
    pods = [make_pod(f"p{i}", profile="1g.10gb", node_name=f"n{i}") for i in range(4)]
    index.replace_nodes(node_facts_from_raw(n) for n in nodes)
    index.replace_pods(p for p in map(pod_facts_from_raw, pods) if p is not None)
    assert derived == []
    assert index.derive_pending() == 4
    assert sorted(derived) == ["n0", "n1", "n2", "n3"]
    assert index.derive_pending() == 0
    bound = pod_facts_from_raw(make_pod("late", profile="1g.10gb", node_name="n2"))
    assert bound is not None
    index.upsert_pod(bound)
    assert index.get("n2") is not None
    assert index.get("n1") is not None
    assert sorted(derived) == ["n0", "n1", "n2", "n2", "n3"]


def test_deriving_every_node_does_not_hold_the_lock_while_it_computes() -> None:
    """A watch writer (or a request needing a node derived) gets through while the start-up
    derivation runs; before, it waited for every node to be derived."""
    writer_finished: list[bool] = []
    late = node_facts_from_raw(make_node("late", gpu_count=1, mig={"1g.10gb": 7}))

    def deriving(state: NodeState) -> PreparedNode:
        if not writer_finished:
            writer = threading.Thread(target=index.upsert_node, args=(late,))
            writer.start()
            writer.join(timeout=5)
            writer_finished.append(not writer.is_alive())
        return prepare_node(state)

    index: ClusterIndex[PreparedNode] = ClusterIndex(deriving)
    index.replace_nodes(
        node_facts_from_raw(make_node(f"n{i}", gpu_count=1, mig={"1g.10gb": 7})) for i in range(3)
    )
    assert index.derive_pending() == 3
    assert writer_finished == [True]
    assert index.get("late") is not None


def test_a_node_that_changes_while_it_is_derived_keeps_no_stale_value() -> None:
    nodes = [make_node(f"n{i}", gpu_count=1, mig={"1g.10gb": 7}) for i in range(3)]
    bound = pod_facts_from_raw(make_pod("late", profile="1g.10gb", node_name="n1"))
    assert bound is not None
    changed: list[str] = []

    def deriving(state: NodeState) -> PreparedNode:
        if state.facts.name == "n1" and not changed:
            changed.append("n1")
            index.upsert_pod(bound)  # the watch reports a bind while n1 is being derived
        return prepare_node(state)

    index: ClusterIndex[PreparedNode] = ClusterIndex(deriving)
    index.replace_nodes(node_facts_from_raw(n) for n in nodes)
    index.derive_pending()
    fresh: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    fresh.replace_nodes(node_facts_from_raw(n) for n in nodes)
    fresh.upsert_pod(bound)
    assert index.get("n1") == fresh.get("n1")
    assert index.get("n1") != fresh.get("n0")


def test_a_write_names_the_nodes_it_left_to_derive_again() -> None:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.replace_nodes(
        node_facts_from_raw(make_node(f"n{i}", gpu_count=1, mig={"1g.10gb": 7})) for i in range(2)
    )
    bound = pod_facts_from_raw(make_pod("p", profile="1g.10gb", node_name="n0"))
    moved = pod_facts_from_raw(make_pod("p", profile="1g.10gb", node_name="n1"))
    assert bound is not None and moved is not None
    assert index.upsert_pod(bound) == ("n0",)
    assert index.upsert_pod(bound) == ()  # unchanged: nothing dropped
    assert sorted(index.upsert_pod(moved)) == ["n0", "n1"]
    assert index.delete_pod(moved.key) == ("n1",)
    assert index.delete_pod(moved.key) == ()
    assert index.upsert_node(node_facts_from_raw(make_node("n2", gpu_count=1))) == ("n2",)
    assert index.delete_node("n2") == ()
