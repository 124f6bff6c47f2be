"""B7, the exact ILP of ``bench/packing/exact.py``, against answers known by hand (needs scipy, the
``bench`` extra; skipped without it)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.sim import GPU_MODEL, SimPod
from migslice.sim.limits import count_geometries

pytest.importorskip("scipy")

from bench.packing.exact import optimum


def pods(*profiles: str) -> list[SimPod]:
    return [SimPod(f"p{i}", p) for i, p in enumerate(profiles)]


@pytest.mark.parametrize(
    ("arrived", "nodes", "slices"),
    [
        (pods(*["7g.80gb"] * 9), 1, 56),  # 8 GPUs, one 7g each
        (pods(*["4g.40gb"] * 16), 1, 32),  # one 4g per GPU
        (pods(*["4g.40gb", "3g.40gb"] * 8), 1, 56),  # 4g + 3g share a GPU (R510 and later)
        (pods(*["1g.10gb"] * 60), 1, 56),  # seven 1g per GPU
        ([SimPod("a", "7g.80gb", 8), SimPod("b", "7g.80gb", 8)], 1, 56),  # one fits
        ([SimPod("a", "7g.80gb", 5), SimPod("b", "7g.80gb", 5)], 2, 70),  # one per node
    ],
    ids=["7g", "4g", "4g+3g", "1g", "two-8x7g-one-node", "two-5x7g-two-nodes"],
)
def test_the_ilp_places_the_most_slices_any_placement_can(
    arrived: list[SimPod], nodes: int, slices: int
) -> None:
    value, proven = optimum(arrived, nodes)
    assert proven
    assert value == pytest.approx(slices)


def test_a_multi_gpu_pod_needs_its_gpus_on_one_node() -> None:
    # 2 nodes x 8 GPUs: 16 whole GPUs, but a 9 x 7g pod fits on neither node
    value, _ = optimum([SimPod("big", "7g.80gb", 9), SimPod("small", "1g.10gb")], 2)
    assert value == pytest.approx(1)


def brute_force(arrived: Sequence[SimPod], nodes: int) -> int:
    """The most compute slices, by trying every pod on every GPU (or leaving it out)."""
    fits = [dict(g.counts) for g in count_geometries(GPU_MODEL)]
    gpus: list[list[Counter[str]]] = [[Counter() for _ in range(8)] for _ in range(nodes)]

    def legal(held: Counter[str]) -> bool:
        return any(all(n <= fit.get(p, 0) for p, n in held.items()) for fit in fits)

    def best(i: int) -> int:
        if i == len(arrived):
            return 0
        pod = arrived[i]
        value = best(i + 1)  # left out
        gain = GPU_MODEL.profile(pod.profile).compute_slices * pod.count
        for node in gpus:
            if pod.count > 1:  # k x 7g: k empty GPUs of one node
                empty = [g for g in node if not g]
                if len(empty) >= pod.count:
                    for g in empty[: pod.count]:
                        g[pod.profile] += 1
                    value = max(value, gain + best(i + 1))
                    for g in empty[: pod.count]:
                        g[pod.profile] -= 1
                        del g[pod.profile]
                continue
            tried_empty = False
            for g in node:
                if not g:
                    if tried_empty:
                        continue  # empty GPUs of a node are alike
                    tried_empty = True
                g[pod.profile] += 1
                if legal(g):
                    value = max(value, gain + best(i + 1))
                g[pod.profile] -= 1
                if not g[pod.profile]:
                    del g[pod.profile]
        return value

    return best(0)


small_pods = st.lists(
    st.one_of(
        st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")).map(
            lambda p: (p, 1)
        ),
        st.integers(2, 6).map(lambda k: ("7g.80gb", k)),
    ),
    min_size=1,
    max_size=7,
).map(lambda ps: [SimPod(f"p{i}", p, k) for i, (p, k) in enumerate(ps)])


@settings(max_examples=25, deadline=None)
@given(arrived=small_pods, nodes=st.integers(1, 2))
def test_the_ilp_equals_brute_force_on_tiny_instances(arrived: list[SimPod], nodes: int) -> None:
    value, proven = optimum(arrived, nodes)
    assert proven
    assert value == pytest.approx(brute_force(arrived, nodes))


def test_a_job_after_more_one_gpu_pods_than_leave_a_node_free_is_forced_out() -> None:
    # default/M1 #31: 16 GPUs; 9 x 7g and 2 x 4g (two 4g never share a GPU: 11 GPUs) before an
    # 8 x 7g job: no node can be left with 8 free GPUs unless earlier pods are turned away.
    from bench.packing.exact import forced_out, gpus_needed

    before = pods(*["7g.80gb"] * 9, "4g.40gb", "4g.40gb")
    assert gpus_needed(before) == 11
    job = forced_out([*before, SimPod("job", "7g.80gb", 8)], 16)
    assert job is not None
    assert (job["position"], job["count"], job["gpus_before"]) == (12, 8, 11)
    assert job["before"] == {"4g.40gb": 2, "7g.80gb": 9}
    # 4g and 3g share a GPU: 8 of each need 8 GPUs, leaving the other node free for the job
    shared = pods(*["4g.40gb", "3g.40gb"] * 8)
    assert gpus_needed(shared) == 8
    assert forced_out([*shared, SimPod("job", "7g.80gb", 8)], 16) is None
