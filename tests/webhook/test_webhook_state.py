"""The webhook's compact state, fed the way the watch caches feed it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from harness.builders import make_node, make_pod, make_policy
from migslice.admission import SliceUsage
from migslice.admission.ledger import Charge, Ledger
from migslice.kube.policies import NODES, PODS, _FeedSink
from migslice.kube.status import merge_patch
from webhook.state import ClusterState


def test_a_relist_drops_objects_that_are_gone_and_marks_the_source_synced() -> None:
    state = ClusterState()
    state.expect(NODES)
    sink = _FeedSink(NODES, state, state.upsert_node, state.delete_node)
    sink.upsert("a", make_node("a"))
    sink.upsert("b", make_node("b", product="NVIDIA-H100-80GB-HBM3"))
    assert not state.is_ready()  # pages in, the list not yet complete
    sink.listed(frozenset({"a", "b"}))
    assert [o.product for o in state.offers()] == ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3"]
    assert state.is_ready()
    sink.upsert("a", make_node("a"))  # a re-list whose pages no longer have b
    sink.listed(frozenset({"a"}))
    assert [o.product for o in state.offers()] == ["NVIDIA-A100-SXM4-80GB"]


def test_tenant_usage_counts_live_gpu_pods_and_not_finished_ones() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy())
    state.upsert_node(make_node("gpu-1"))  # A100-80GB: 1g.10gb spans 1 memory slice
    sink = _FeedSink(PODS, state, state.upsert_pod, lambda key: state.delete_pod(*key.split("/")))
    sink.upsert("team-a/p1", make_pod("p1", profile="3g.40gb"))
    sink.upsert("team-a/p2", make_pod("p2", profile="1g.10gb", count=2))
    sink.upsert("team-a/p3", make_pod("p3", profile="7g.80gb", phase="Succeeded"))
    sink.upsert("team-b/p4", make_pod("p4", namespace="team-b", profile="7g.80gb"))
    assert state.tenant_usage("team-a") == SliceUsage(3, 5, 6, (("1g.10gb", 2), ("3g.40gb", 1)))
    sink.delete("team-a/p1")
    assert state.tenant_usage("team-a") == SliceUsage(2, 2, 2, (("1g.10gb", 2),))


def test_an_invalid_policy_is_kept_out_and_reported() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy(sizes={"x": {"memory": "lots"}}))
    assert state.policies() == ()
    assert "spec.sizes.x.memory" in state.invalid_policies["team-a"]


def test_an_invalid_policy_still_names_the_namespaces_it_selects_until_it_is_fixed() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy(sizes={"x": {"memory": "lots"}}))
    [(name, problems)] = state.invalid_selecting("team-a")
    assert name == "team-a" and "spec.sizes.x.memory" in problems
    assert state.invalid_selecting("team-b") == ()
    state.upsert_policy(make_policy())
    assert state.invalid_selecting("team-a") == ()
    assert [p.name for p in state.tenant_policies("team-a")] == ["team-a"]


def test_a_bound_pod_is_priced_on_its_node_model() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy())
    state.upsert_node(make_node("old", product="NVIDIA-A100-SXM4-40GB"))
    state.upsert_node(make_node("new"))
    state.upsert_pod(make_pod("p1", profile="1g.10gb", node_name="old"))  # 2 slices on A100-40GB
    state.upsert_pod(make_pod("p2", profile="1g.10gb", node_name="new"))
    assert state.tenant_usage("team-a").memory_slices == 3


NOW = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


A100_40GB = "NVIDIA-A100-SXM4-40GB"  # 1g.10gb spans 2 memory slices there, 1 on A100-80GB


def eight_1g_pods_on(node: str) -> list[dict[str, Any]]:
    return [make_pod(f"p{i}", profile="1g.10gb", node_name=node) for i in range(8)]


def used(state: ClusterState) -> dict[str, Any]:
    return dict(statuses(state)["team-a"][1]["used"])


def test_pods_seen_before_their_nodes_are_priced_on_their_nodes_model_once_it_is_known() -> None:
    """The status once read memorySlices 16 for 8 pods of 1g.10gb on an A100-80GB node: the
    pods were listed before the Nodes, priced at the largest count any model gives 1g.10gb
    (2, on an A100-40GB), and never priced again."""
    state = ClusterState()
    state.upsert_policy(make_policy())
    for pod in eight_1g_pods_on("new"):
        state.upsert_pod(pod)
    state.upsert_node(make_node("old", product=A100_40GB))
    state.upsert_node(make_node("new"))
    assert used(state)["memorySlices"] == 8
    assert used(state)["computeSlices"] == 8
    assert state.tenant_usage("team-a").memory_slices == 8  # quota counts the same


def test_a_node_whose_model_changes_prices_its_pods_again() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy())
    state.upsert_node(make_node("old", product=A100_40GB))
    state.upsert_node(make_node("gpu"))
    for pod in eight_1g_pods_on("gpu"):
        state.upsert_pod(pod)
    assert used(state)["memorySlices"] == 8
    state.upsert_node(make_node("gpu", product=A100_40GB))
    assert used(state)["memorySlices"] == 16
    state.delete_node("gpu")  # gone: the pods are priced on the cluster's models, A100-40GB
    assert used(state)["memorySlices"] == 16
    state.upsert_node(make_node("gpu"))
    assert used(state)["memorySlices"] == 8


def test_pending_pods_are_priced_on_the_models_the_cluster_has_now() -> None:
    """Before binding, a pod counts the largest memory-slice count among the cluster's models
    that offer its profile: 2 while an A100-40GB is in the cluster, 1 once only A100-80GB
    nodes are left (docs/policy.md, "Quota")."""
    state = ClusterState()
    state.upsert_policy(make_policy())
    state.upsert_node(make_node("new"))
    state.upsert_node(make_node("old", product=A100_40GB))
    state.upsert_pod(make_pod("waiting", profile="1g.10gb"))
    assert used(state)["memorySlices"] == 2
    state.delete_node("old")
    assert used(state)["memorySlices"] == 1


def statuses(state: ClusterState) -> dict[str, Any]:
    return {u.name: (u.observed, u.desired) for u in state.policy_statuses(NOW)}


def test_policy_statuses_cover_usage_reservations_conflicts_and_invalid_policies() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy(generation=2, quota={"computeSlices": 8}))
    state.upsert_policy(make_policy("team-b", namespaces=["team-a", "team-b"]))
    state.upsert_policy(
        make_policy("team-c", namespaces=["team-c"], sizes={"x": {"memory": "lots"}})
    )
    state.upsert_node(make_node("gpu-1"))
    state.upsert_pod(make_pod("p1", profile="2g.20gb"))
    charge = Charge("uid-2", "team-a", SliceUsage(1, 1, 1, (("1g.10gb", 1),)), 0.0)
    state.set_ledger(Ledger("team-a", (charge,), "1"))
    found = statuses(state)
    assert sorted(found) == ["team-a", "team-b", "team-c"]
    observed, team_a = found["team-a"]
    assert observed == {}
    assert team_a["observedGeneration"] == 2
    assert team_a["quotaSummary"] == "3/8 compute slices"  # the pod and the reservation
    assert team_a["conditions"][0]["reason"] == "NamespaceConflict"
    assert found["team-b"][1]["conditions"][0]["reason"] == "NamespaceConflict"
    assert found["team-c"][1]["conditions"][0]["reason"] == "InvalidSpec"
    assert "used" not in found["team-c"][1]


def test_the_status_last_seen_is_the_previous_one_and_goes_with_the_policy() -> None:
    state = ClusterState()
    seen = {"quotaSummary": "0 compute slices", "conditions": []}
    state.upsert_policy({**make_policy(), "status": seen})
    assert statuses(state)["team-a"][0] == seen
    state.delete_policy("team-a")
    assert statuses(state) == {}


def test_status_fields_this_version_does_not_write_are_never_patched_away() -> None:
    """The ledger's mark, and a newer version's fields during a rolling update, stay."""
    state = ClusterState()
    newer = {"type": "Placed", "status": "True", "reason": "Newer", "message": "a newer field"}
    seen = {
        "quotaSummary": "0 compute slices",
        "conditions": [{**newer, "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "quotaLedger": {"epoch": "e1", "configMap": "migslice-system/migslice-quota-team-a"},
        "placement": {"preferred": "a100"},
        "used": {"instances": 0, "claims": 3},
    }
    state.upsert_policy({**make_policy(), "status": seen})
    observed, desired = statuses(state)["team-a"]
    patch = merge_patch(observed, desired)
    assert "quotaLedger" not in patch and "placement" not in patch
    assert "claims" not in patch["used"]
    assert patch["observedGeneration"] == 1
    assert [c["type"] for c in patch["conditions"]] == ["Ready", "QuotaExhausted", "Placed"]
    assert patch["conditions"][-1] == seen["conditions"][0]


def test_listeners_hear_of_usage_and_policy_changes_but_not_of_pods_without_gpus() -> None:
    state = ClusterState()
    calls: list[int] = []
    state.add_listener(lambda: calls.append(1))
    state.upsert_policy(make_policy())
    state.upsert_pod(make_pod("p1", profile="1g.10gb"))
    state.upsert_pod(make_pod("p1", profile="1g.10gb"))  # the same charge again
    state.upsert_pod(make_pod("web"))
    state.set_ledger(Ledger("team-a", (Charge("uid-1", "team-a", SliceUsage(1, 1, 1), 0.0),)))
    state.delete_pod("team-a", "p1")
    state.delete_pod("team-a", "web")
    assert len(calls) == 4
