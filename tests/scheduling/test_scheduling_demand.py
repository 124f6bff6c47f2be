"""The demand reader the extender's calls use: the same demand as ``demand_of`` for every pod,
well-formed or not, read once per pod shape."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_pod
from migslice.scheduling import DemandReader, demand_of

ODD = st.sampled_from([None, [], {}, "", 0, False, "x", ["x"], [None], [{}], {"x": 1}, 2**64])
QUANTITY = st.sampled_from(["1", "2", 1, 2, "0", "1.5", "500m", "-1", "1k", "x", None, [], 2**64])
RESOURCE = st.sampled_from(
    ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb", "nvidia.com/gpu", "nvidia.com/mig-9g",
     "nvidia.com/gpu.shared", "cpu", "memory"]
)  # fmt: skip
RESOURCES = st.one_of(
    ODD,
    st.fixed_dictionaries(
        {},
        optional={
            "limits": st.one_of(ODD, st.dictionaries(RESOURCE, QUANTITY, max_size=3)),
            "requests": st.one_of(ODD, st.dictionaries(RESOURCE, QUANTITY, max_size=3)),
        },
    ),
)
CONTAINER = st.one_of(
    ODD,
    st.fixed_dictionaries(
        {"image": st.just("train:1")},
        optional={
            "name": st.sampled_from(["main", "side", "warm", None, 3]),
            "restartPolicy": st.sampled_from(["Always", "Never", None]),
            "resources": RESOURCES,
        },
    ),
)
CONTAINERS = st.one_of(ODD, st.lists(CONTAINER, max_size=3))
PRODUCTS = ["NVIDIA-A100-SXM4-40GB", "NVIDIA-H100-80GB-HBM3"]
AFFINITY = st.one_of(
    ODD,
    st.builds(
        lambda values, operator: {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "nvidia.com/gpu.product",
                                    "operator": operator,
                                    "values": values,
                                }
                            ]
                        }
                    ]
                }
            }
        },
        st.lists(st.sampled_from(PRODUCTS), max_size=2),
        st.sampled_from(["In", "NotIn"]),
    ),
)
SPEC = st.fixed_dictionaries(
    {},
    optional={
        "containers": CONTAINERS,
        "initContainers": CONTAINERS,
        "nodeSelector": st.one_of(
            ODD, st.dictionaries(st.just("nvidia.com/gpu.product"), st.sampled_from(PRODUCTS))
        ),
        "affinity": AFFINITY,
    },
)


def named(spec: Any, name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a"}, "spec": copy.deepcopy(spec)}


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(SPEC, ODD), min_size=1, max_size=6), st.integers(1, 4))
def test_the_reader_reads_every_pod_as_demand_of_does(specs: list[Any], capacity: int) -> None:
    reader = DemandReader(capacity=capacity)
    for round_ in range(2):  # the second round reads shapes the reader may have kept
        for number, spec in enumerate(specs):
            pod = named(spec, f"pod-{number}-{round_}")
            assert reader.read(pod) == demand_of(pod)


def test_pods_of_one_shape_are_read_once_and_keep_their_own_names() -> None:
    reader = DemandReader()
    first = make_pod("first", profile="1g.10gb")
    second = make_pod("second", profile="1g.10gb")
    other = make_pod("other", profile="3g.40gb")
    demands = [reader.read(pod) for pod in (first, second, other)]
    assert len(reader) == 2  # first and second share one shape
    assert [d.key for d in demands] == ["team-a/first", "team-a/second", "team-a/other"]
    assert demands[1] == demand_of(second)


@pytest.mark.parametrize("field", ["containers", "initContainers", "nodeSelector", "affinity"])
@pytest.mark.parametrize("value", [None, [], {}, "", 0, False, [{}], [[]]], ids=repr)
def test_a_field_missing_and_a_field_empty_are_read_apart(field: str, value: Any) -> None:
    missing = make_pod("missing", profile="1g.10gb")
    missing["spec"].pop(field, None)
    empty = make_pod("empty", profile="1g.10gb")
    empty["spec"][field] = value
    reader = DemandReader()
    assert reader.read(missing) == demand_of(missing)
    assert reader.read(empty) == demand_of(empty)


def test_a_missing_and_an_empty_init_container_list_are_different_shapes() -> None:
    missing = make_pod("missing", profile="1g.10gb")
    not_a_list = make_pod("not-a-list", profile="1g.10gb")
    not_a_list["spec"]["initContainers"] = {}
    reader = DemandReader()
    assert reader.read(missing) == demand_of(missing)
    assert reader.read(not_a_list) == demand_of(not_a_list)
    assert demand_of(not_a_list).error  # "spec.initContainers must be a list"


def test_a_full_reader_starts_over_and_still_answers() -> None:
    reader = DemandReader(capacity=2)
    pods = [make_pod(f"p{n}", profile=p) for n, p in enumerate(["1g.10gb", "2g.20gb", "3g.40gb"])]
    assert [reader.read(pod) for pod in pods] == [demand_of(pod) for pod in pods]
    assert len(reader) == 1
