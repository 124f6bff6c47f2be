"""Filter and fragmentation score for one pod over candidate nodes."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_node, make_pod
from migslice.inventory import ClusterIndex
from migslice.objects import node_facts_from_raw, pod_facts_from_raw, render_layout_annotation
from migslice.objects.gpu_layout import AgentGpu, AgentInstance, AgentReport
from migslice.scheduling import (
    Outcome,
    PreparedNode,
    best_fit_nodes,
    check_node,
    demand_of,
    filter_nodes,
    prepare_node,
    score_nodes,
    score_units,
)

BALANCED = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def index_of(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None
) -> ClusterIndex[PreparedNode]:
    index: ClusterIndex[PreparedNode] = ClusterIndex(prepare_node)
    index.replace_nodes(node_facts_from_raw(n) for n in nodes)
    index.replace_pods(p for p in map(pod_facts_from_raw, pods or []) if p is not None)
    return index


def running(name: str, node: str, profile: str | None = None, **kw: Any) -> dict[str, Any]:
    return make_pod(name, profile=profile, node_name=node, phase="Running", **kw)


def verdict(
    node: dict[str, Any], pod: dict[str, Any], pods: list[dict[str, Any]] | None = None
) -> tuple[Outcome, str]:
    index = index_of([node], pods)
    result = check_node(demand_of(pod), index.get(node["metadata"]["name"]))
    return result.outcome, result.reason


A100_40GB = "NVIDIA-A100-SXM4-40GB"
LABELLED_3G = {"nvidia.com/mig-3g.20gb.count": "2"}  # GFD has seen two 3g.20gb instances


@pytest.mark.parametrize(
    ("node", "outcome", "reason"),
    [
        (
            make_node("n", product=A100_40GB, gpu_count=1, extra_labels=LABELLED_3G),
            Outcome.FAILED,
            "MIG devices not advertised yet",
        ),
        (
            make_node(
                "n", product=A100_40GB, gpu_count=1, mig={"1g.5gb": 1}, extra_labels=LABELLED_3G
            ),
            Outcome.FAILED,
            "MIG devices not advertised yet",
        ),
        (
            make_node("n", product=A100_40GB, gpu_count=1, mig={"1g.5gb": 1}),
            Outcome.UNRESOLVABLE,
            "no 3g.20gb instance in node's MIG layout",
        ),
        (
            make_node(
                "n",
                product=A100_40GB,
                gpu_count=1,
                extra_labels={"nvidia.com/mig-3g.20gb.count": "1"},
            ),
            Outcome.UNRESOLVABLE,
            "no 3g.20gb instance in node's MIG layout",
        ),
    ],
    ids=["labelled-only", "labelled-beside-another", "neither", "labelled-too-few"],
)
def test_mig_devices_labelled_but_not_yet_advertised_fail_the_node_for_now(
    node: dict[str, Any], outcome: Outcome, reason: str
) -> None:
    """GFD labelled nvidia.com/mig-3g.20gb.count=2 before the device plugin advertised them:
    the extender answered unresolvable, so kube-scheduler would never try the node again."""
    pod = make_pod("p", profile="3g.20gb", count=2)
    assert verdict(node, pod) == (outcome, reason)
    names = ["n"]
    result = filter_nodes(demand_of(pod), [("n", index_of([node]).get("n"))])
    part = result.failed if outcome is Outcome.FAILED else result.unresolvable
    assert list(part) == names and part["n"] == reason


@pytest.mark.parametrize(
    ("node", "pod", "outcome", "reason"),
    [
        (
            make_node("n", gpu_count=1, mig=BALANCED, config="all-balanced"),
            make_pod("p", profile="2g.20gb"),
            Outcome.FITS,
            "",
        ),
        (
            make_node("n", gpu_count=1, mig=BALANCED, config_state="pending"),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "node being re-partitioned (nvidia.com/mig.config.state=pending)",
        ),
        (
            make_node("n", gpu_count=1, mig=BALANCED, config_state="rebooting"),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "node being re-partitioned (nvidia.com/mig.config.state=rebooting)",
        ),
        (
            make_node("n", product=None, gpu_count=None, strategy=None, mig_capable=None),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "node has no NVIDIA GPU",
        ),
        (
            make_node("n", strategy=None, whole_gpus=8),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "MIG disabled on node",
        ),
        (
            make_node("n", config="all-disabled", whole_gpus=8),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "MIG disabled on node",
        ),
        (
            make_node("n", strategy="single", whole_gpus=56),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "MIG strategy single (nvidia.com/mig.strategy); migslice needs mixed",
        ),
        (
            make_node("n", product="NVIDIA-Tesla-T4", mig_capable=False, whole_gpus=1),
            make_pod("p", profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "GPU product NVIDIA-Tesla-T4 not in migslice catalog",
        ),
        (
            make_node("n", product="NVIDIA-A30", mig={"1g.6gb": 4}),
            make_pod("p", profile="3g.40gb"),
            Outcome.UNRESOLVABLE,
            "A30-24GB has no MIG profile 3g.40gb",
        ),
        (
            make_node("n", mig={"1g.10gb": 7}),
            make_pod("p", profile="3g.40gb"),
            Outcome.UNRESOLVABLE,
            "no 3g.40gb instance in node's MIG layout",
        ),
        (
            make_node("n", mig={"3g.40gb": 1}),
            make_pod("p", profile="3g.40gb", count=2),
            Outcome.UNRESOLVABLE,
            "node's MIG layout has fewer than 2 x 3g.40gb",
        ),
        (
            make_node("n", mig=BALANCED),
            make_pod("p", affinity_products=["NVIDIA-H100-80GB-HBM3"], profile="1g.10gb"),
            Outcome.UNRESOLVABLE,
            "GPU product NVIDIA-A100-SXM4-80GB not allowed for pod",
        ),
        (
            make_node("n", mig=BALANCED),
            make_pod("p", requests={"nvidia.com/mig-1g.10gb": "half"}),
            Outcome.UNRESOLVABLE,
            "pod's GPU request is invalid: spec.containers[0].resources.limits"
            "[nvidia.com/mig-1g.10gb]='half' is not a quantity; expected a whole count",
        ),
        (
            make_node("n", mig=BALANCED),
            make_pod("p", requests={"nvidia.com/mig-9g.1gb": "1"}),
            Outcome.UNRESOLVABLE,
            "A100-80GB has no MIG profile 9g.1gb",
        ),
        (
            make_node("n", mig=BALANCED),
            make_pod("p", requests={"nvidia.com/gpu": "1"}),
            Outcome.UNRESOLVABLE,
            "no whole GPU on node (MIG enabled on every GPU)",
        ),
        (
            make_node("n", mig=BALANCED),
            make_pod("p"),
            Outcome.FITS,
            "",
        ),
    ],
    ids=[
        "fits",
        "pending",
        "rebooting",
        "no-gpu",
        "mig-off-no-strategy",
        "all-disabled",
        "single-strategy",
        "unknown-product",
        "model-lacks-profile",
        "layout-lacks-profile",
        "layout-too-small",
        "product-excluded",
        "malformed-quantity",
        "unknown-profile",
        "no-whole-gpu",
        "no-gpu-request",
    ],
)
def test_each_cause_has_one_outcome_and_one_wording(
    node: dict[str, Any], pod: dict[str, Any], outcome: Outcome, reason: str
) -> None:
    assert verdict(node, pod) == (outcome, reason)


def test_a_node_whose_instances_are_all_held_is_failed_not_unresolvable() -> None:
    node = make_node("n", gpu_count=1, mig=BALANCED, config="all-balanced")
    pods = [running("a", "n", "3g.40gb")]
    assert verdict(node, make_pod("p", profile="3g.40gb"), pods) == (
        Outcome.FAILED,
        "all 3g.40gb MIG instances in use",
    )


def test_whole_gpu_pods_fit_where_gpus_are_free() -> None:
    node = make_node("n", strategy=None, whole_gpus=2)
    pods = [running("a", "n", requests={"nvidia.com/gpu": "1"})]
    assert verdict(node, make_pod("p", requests={"nvidia.com/gpu": "1"}), pods)[0] is Outcome.FITS
    full = [*pods, running("b", "n", requests={"nvidia.com/gpu": "1"})]
    assert verdict(node, make_pod("p", requests={"nvidia.com/gpu": "1"}), full) == (
        Outcome.FAILED,
        "all whole GPUs in use",
    )


def scores(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], pod: dict[str, Any]
) -> dict[str, int]:
    index = index_of(nodes, pods)
    names = [n["metadata"]["name"] for n in nodes]
    return dict(score_nodes(demand_of(pod), [(n, index.get(n)) for n in names]))


def test_an_exact_fit_on_a_gpu_in_use_beats_breaking_an_idle_gpu() -> None:
    nodes = [
        make_node("busy", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        make_node("idle", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
    ]
    result = scores(nodes, [running("a", "busy", "1g.10gb")], make_pod("p", profile="1g.10gb"))
    assert result["busy"] > result["idle"]
    assert result["busy"] >= 6 > 5 >= result["idle"]


def test_the_fullest_gpu_in_use_wins_and_filling_the_last_slot_scores_ten() -> None:
    nodes = [
        make_node("fuller", gpu_count=1, mig=BALANCED, config="all-balanced"),
        make_node("emptier", gpu_count=1, mig=BALANCED, config="all-balanced"),
    ]
    pods = [
        running("a", "fuller", "3g.40gb"),
        running("b", "fuller", "2g.20gb"),
        running("c", "fuller", "1g.10gb"),
        running("d", "emptier", "1g.10gb"),
    ]
    result = scores(nodes, pods, make_pod("p", profile="1g.10gb"))
    assert result == {"fuller": 10, "emptier": 7}


def test_an_idle_gpu_on_a_node_in_use_is_taken_before_one_on_an_idle_node() -> None:
    nodes = [
        make_node("partly", gpu_count=2, mig={"3g.40gb": 4}, config="all-3g.40gb"),
        make_node("whole", gpu_count=2, mig={"3g.40gb": 4}, config="all-3g.40gb"),
    ]
    pods = [running("a", "partly", "3g.40gb"), running("b", "partly", "3g.40gb")]
    result = scores(nodes, pods, make_pod("p", profile="3g.40gb"))
    assert result["partly"] > result["whole"]


def test_the_agents_busy_flags_steer_the_choice_of_gpu() -> None:
    def gpu(index: int, busy: bool) -> AgentGpu:
        return AgentGpu(
            index,
            True,
            (AgentInstance("3g.40gb", 0, 4, busy), AgentInstance("3g.40gb", 4, 4, False)),
        )

    annotation = render_layout_annotation(
        AgentReport("NVIDIA-A100-SXM4-80GB", (gpu(0, False), gpu(1, True)))
    )
    node = make_node("n", gpu_count=2, mig={"3g.40gb": 4}, layout_annotation=annotation)
    # One instance is busy without a pod the cache has seen yet; the next pod joins it.
    assert scores([node], [], make_pod("p", profile="3g.40gb")) == {"n": 10}


def test_a_multi_unit_pod_scores_its_worst_unit() -> None:
    node = make_node("n", gpu_count=2, mig={"1g.10gb": 14}, config="all-1g.10gb")
    pods = [running(f"a{i}", "n", "1g.10gb") for i in range(6)]
    one = scores([node], pods, make_pod("p", profile="1g.10gb"))["n"]
    two = scores([node], pods, make_pod("p", profile="1g.10gb", count=2))["n"]
    assert one == 10
    assert two < one


def test_whole_gpu_pods_prefer_the_node_with_fewer_free_gpus() -> None:
    nodes = [
        make_node("used", strategy=None, whole_gpus=8),
        make_node("empty", strategy=None, whole_gpus=8),
    ]
    pods = [running(f"a{i}", "used", requests={"nvidia.com/gpu": "1"}) for i in range(6)]
    result = scores(nodes, pods, make_pod("p", requests={"nvidia.com/gpu": "1"}))
    assert result["used"] > result["empty"]


# -- properties over random clusters -------------------------------------------------------

PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me")
CONFIGS = ("all-balanced", "all-1g.10gb", "all-3g.40gb", "all-7g.80gb", "all-2g.20gb")


@st.composite
def clusters(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]]:
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for n in range(draw(st.integers(1, 6))):
        name = f"n{n}"
        kind = draw(st.sampled_from(("config", "counts", "whole", "a30", "cpu")))
        state = draw(st.sampled_from((None, "success", "pending", "failed")))
        gpus = draw(st.integers(1, 3))
        if kind == "config":
            from migslice.inventory import builtin_counts
            from migslice.mig import CATALOG

            config = draw(st.sampled_from(CONFIGS))
            built = builtin_counts(config, CATALOG.get("A100-80GB"))
            assert built is not None
            mig = {p: c * gpus for p, c in built[1].items()}
            nodes.append(
                make_node(name, gpu_count=gpus, mig=mig, config=config, config_state=state)
            )
        elif kind == "counts":
            mig = draw(st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 7), max_size=3))
            nodes.append(make_node(name, gpu_count=gpus, mig=mig, config_state=state))
        elif kind == "whole":
            nodes.append(make_node(name, strategy=None, whole_gpus=gpus))
        elif kind == "a30":
            nodes.append(
                make_node(name, product="NVIDIA-A30", gpu_count=gpus, mig={"1g.6gb": 4 * gpus})
            )
        else:
            nodes.append(
                make_node(name, product=None, gpu_count=None, strategy=None, mig_capable=None)
            )
        for p in range(draw(st.integers(0, 6))):
            resource = draw(st.sampled_from((*PROFILES, "gpu")))
            requests = {
                "nvidia.com/gpu"
                if resource == "gpu"
                else "nvidia.com/mig-" + resource.replace("+", "."): "1"
            }
            holder = draw(st.sampled_from(("bound", "nominated")))
            pods.append(
                make_pod(
                    f"{name}-p{p}",
                    requests=requests,
                    node_name=name if holder == "bound" else None,
                    nominated_node_name=name if holder == "nominated" else None,
                    phase="Running" if holder == "bound" else "Pending",
                )
            )
    resource = draw(st.sampled_from((*PROFILES, "gpu", "9g.1gb")))
    count = draw(st.integers(1, 3))
    key = "nvidia.com/gpu" if resource == "gpu" else "nvidia.com/mig-" + resource.replace("+", ".")
    extra = draw(st.dictionaries(st.sampled_from(PROFILES), st.integers(1, 2), max_size=1))
    requests = {
        key: str(count),
        **{"nvidia.com/mig-" + p.replace("+", "."): str(c) for p, c in extra.items()},
    }
    pod = make_pod("candidate", requests=requests)
    names = [n["metadata"]["name"] for n in nodes] + draw(
        st.lists(st.sampled_from(("ghost", "n0")), max_size=2)
    )
    return nodes, pods, pod, names


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_filter_partitions_its_input_exactly_and_scores_stay_in_range(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
) -> None:
    nodes, pods, pod, names = cluster
    index = index_of(nodes, pods)
    candidates = [(n, index.get(n)) for n in names]
    demand = demand_of(pod)
    result = filter_nodes(demand, candidates)
    fits, failed, unresolvable = set(result.fits), set(result.failed), set(result.unresolvable)
    assert fits | failed | unresolvable == set(names)
    assert not (fits & failed or fits & unresolvable or failed & unresolvable)
    assert len(result.fits) == len(fits)
    scored = score_nodes(demand, candidates)
    assert [n for n, _ in scored] == list(dict.fromkeys(names))
    assert all(isinstance(s, int) and 0 <= s <= 10 for _, s in scored)
    assert all(s == 0 for n, s in scored if n not in fits)
    assert all(s >= 1 for n, s in scored if n in fits and demand.units)


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_the_best_fit_filter_keeps_exactly_the_fullest_fits_of_the_highest_score(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
) -> None:
    nodes, pods, pod, names = cluster
    index = index_of(nodes, pods)
    candidates = [(n, index.get(n)) for n in names]
    demand = demand_of(pod)
    full, best = filter_nodes(demand, candidates), best_fit_nodes(demand, candidates)
    assert (best.failed, best.unresolvable) == (full.failed, full.unresolvable)
    assert bool(best.fits) == bool(full.fits)
    scored = dict(score_nodes(demand, candidates))
    held = {n: held_memory_slices(index.get(n)) for n in full.fits}
    top = max(((scored[n], held[n]) for n in full.fits), default=None)
    assert best.fits == tuple(n for n in full.fits if (scored[n], held[n]) == top)


def held_memory_slices(node: PreparedNode | None) -> int:
    """Counted here from the node's GPUs, apart from the product's own count."""
    assert node is not None
    state = node.state
    size = state.model.memory_slices if state.model is not None else 0
    return sum(
        size
        if gpu.whole_held
        else sum(p.size for p, h in zip(gpu.instances, gpu.held, strict=True) if h)
        for gpu in state.gpus
    )


def test_of_nodes_a_pod_fits_equally_well_the_best_fit_filter_keeps_the_fullest() -> None:
    nodes = [
        make_node(name, gpu_count=2, mig={"1g.10gb": 14}, config="all-1g.10gb")
        for name in ("one", "two", "none")
    ]
    pods = [running("a", "one", "1g.10gb"), running("b", "two", "1g.10gb")]
    pods += [running("c", "two", "1g.10gb")]
    index = index_of(nodes, pods)
    candidates = [(n, index.get(n)) for n in ("one", "two", "none")]
    demand = demand_of(make_pod("p", profile="1g.10gb"))
    # a 1g.10gb on the GPU in use scores 6 + 4 x 3 // 8 = 7 on "two", 6 + 4 x 2 // 8 = 7 on "one"
    scores = dict(score_nodes(demand, candidates))
    assert scores["one"] == scores["two"] > scores["none"]
    assert best_fit_nodes(demand, candidates).fits == ("two",)


def test_the_best_fit_filter_sends_only_the_exact_fit_on_a_gpu_in_use() -> None:
    nodes = [
        make_node("idle", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        make_node("busy", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        make_node("twin", gpu_count=1, mig={"1g.10gb": 7}, config="all-1g.10gb"),
        make_node("full", gpu_count=1, mig={"3g.40gb": 2}, config="all-3g.40gb"),
    ]
    index = index_of(nodes, [running("a", "busy", "1g.10gb"), running("b", "twin", "1g.10gb")])
    candidates = [(n, index.get(n)) for n in ("idle", "busy", "twin", "full")]
    result = best_fit_nodes(demand_of(make_pod("p", profile="1g.10gb")), candidates)
    assert result.fits == ("busy", "twin")  # equals both kept, for kube-scheduler's own scores
    assert set(result.unresolvable) == {"full"} and not result.failed


@settings(max_examples=100, deadline=None)
@given(clusters())
def test_a_node_never_fits_a_profile_it_has_no_free_instance_of(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
) -> None:
    nodes, pods, pod, names = cluster
    index = index_of(nodes, pods)
    result = filter_nodes(demand_of(pod), [(n, index.get(n)) for n in names])
    wanted = pod["spec"]["containers"][0]["resources"]["limits"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    for name in result.fits:
        held: Counter[str] = Counter()
        for other in pods:
            if name in (other["spec"].get("nodeName"), other["status"].get("nominatedNodeName")):
                for resource, value in other["spec"]["containers"][0]["resources"][
                    "limits"
                ].items():
                    if resource.startswith("nvidia.com/"):
                        held[resource] += int(value)
        allocatable = by_name[name]["status"]["allocatable"]
        for resource, value in wanted.items():
            if resource.startswith("nvidia.com/"):
                assert int(allocatable.get(resource, "0")) - held[resource] >= int(value)


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_the_same_input_gives_the_same_answer(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
) -> None:
    nodes, pods, pod, names = cluster
    first, second = index_of(nodes, pods), index_of(list(reversed(nodes)), list(reversed(pods)))
    answers = []
    for index in (first, second, first):
        candidates = [(n, index.get(n)) for n in names]
        answers.append(
            (filter_nodes(demand_of(pod), candidates), score_nodes(demand_of(pod), candidates))
        )
    assert answers[0] == answers[1] == answers[2]


@settings(max_examples=80, deadline=None)
@given(clusters(), st.sampled_from((*PROFILES, "gpu", "9g.1gb")))
def test_the_single_unit_fast_path_agrees_with_the_full_check(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
    resource: str,
) -> None:
    nodes, pods, _, names = cluster
    index = index_of(nodes, pods)
    key = "nvidia.com/gpu" if resource == "gpu" else "nvidia.com/mig-" + resource.replace("+", ".")
    demand = demand_of(make_pod("single", requests={key: "1"}))
    assert demand.is_single_unit
    candidates = [(n, index.get(n)) for n in names]
    result = filter_nodes(demand, candidates)
    for name, node in dict(candidates).items():
        verdict = check_node(demand, node)
        if verdict.outcome is Outcome.FITS:
            assert name in result.fits
        elif verdict.outcome is Outcome.FAILED:
            assert result.failed[name] == verdict.reason
        else:
            assert result.unresolvable[name] == verdict.reason


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_a_prepared_nodes_unit_scores_are_the_score_of_taking_one_unit(
    cluster: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any], list[str]],
) -> None:
    nodes, pods, _, _ = cluster
    index = index_of(nodes, pods)
    for raw in nodes:
        node = index.get(raw["metadata"]["name"])
        assert node is not None
        scored = {
            resource: score_units(node.state, ((resource, 1),))
            for resource, count in node.free.items()
            if count > 0
            and (resource == "nvidia.com/gpu" or resource.startswith("nvidia.com/mig-"))
        }
        assert node.unit_scores == scored
