"""The extender's informer sinks: what a list and a watch event do to the index."""

from __future__ import annotations

from extender.state import MigConfigSink, NodeSink, PodSink, Warmup
from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex
from migslice.inventory.layouts import NodeState
from migslice.objects import node_facts_from_raw, pod_facts_from_raw
from migslice.scheduling import PreparedNode, prepare_node


def counting_index() -> tuple[ClusterIndex[PreparedNode], list[str]]:
    """An extender index, and the names of the nodes it derives, in order."""
    derived: list[str] = []

    def counting(state: NodeState) -> PreparedNode:
        derived.append(state.facts.name)
        return prepare_node(state)

    return ClusterIndex(counting), derived


def test_a_watch_event_derives_its_node_at_once_after_the_warm_up_and_never_before() -> None:
    """A bind's node is derived on the watch's thread, so the next extender call that names
    it reads a value instead of deriving it inside kube-scheduler's scheduling cycle."""
    index, derived = counting_index()
    warmup = Warmup(index, ("nodes", "pods"))
    nodes, pods = NodeSink(index, warmup), PodSink(index, warmup)
    node = node_facts_from_raw(make_node("n0", gpu_count=1, mig={"1g.10gb": 7}))
    nodes.replace({"n0": node})
    early = pod_facts_from_raw(make_pod("early", profile="1g.10gb", node_name="n0"))
    assert early is not None
    pods.upsert(early.key, early)  # before the pod list: the warm-up will derive n0
    assert derived == []
    pods.replace({early.key: early})
    assert derived == ["n0"]
    late = pod_facts_from_raw(make_pod("late", profile="1g.10gb", node_name="n0"))
    assert late is not None
    pods.upsert(late.key, late)
    assert derived == ["n0", "n0"]  # at the event, not at the next read
    value = index.get("n0")
    assert derived == ["n0", "n0"]
    fresh: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    fresh.replace_nodes([node])
    fresh.replace_pods([early, late])
    assert value == fresh.get("n0")
    pods.delete(late.key)
    nodes.upsert("n0", node_facts_from_raw(make_node("n0", gpu_count=1, mig={"1g.10gb": 7})))
    assert derived == ["n0", "n0", "n0", "n0"]


def test_a_mig_config_change_after_the_warm_up_derives_every_node_on_the_watchs_thread() -> None:
    index, derived = counting_index()
    warmup = Warmup(index, ("mig-config", "nodes"))
    configs = MigConfigSink(index, warmup)
    configs.upsert("early", {})  # before the warm-up: nothing derived
    assert derived == []
    NodeSink(index, warmup).replace(
        {f"n{i}": node_facts_from_raw(make_node(f"n{i}", gpu_count=1)) for i in range(3)}
    )
    assert derived == []
    configs.replace({"cm": {}})
    assert sorted(derived) == ["n0", "n1", "n2"]
    configs.upsert("cm", {})
    assert sorted(derived) == ["n0", "n0", "n1", "n1", "n2", "n2"]
    configs.delete("cm")
    assert len(derived) == 9
