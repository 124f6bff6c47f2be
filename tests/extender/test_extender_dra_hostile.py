"""The extender on a DRA node whose ResourceSlices are of shapes NVIDIA's driver never writes
(:mod:`tests.hostile_slices`): it always answers, never places a pod on a node whose pool is
not ready, calls an unknown node unresolvable, and records one Warning Event on it saying why,
as the slice reader reads the node."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings

from extender import ExtenderSettings, create_app
from extender.dra_warnings import EVENT_REASON, DraWarnings
from extender.state import state_from_objects
from migslice.objects.clusterfile import ClusterObjects
from migslice.objects.dra_pool import PoolState, read_pool
from migslice.objects.resource_slices import slice_facts_from_raw
from migslice.scheduling import reasons
from tests.dra_objects import (
    fixture_slices,
    make_claim,
    make_claim_pod,
    make_dra_node,
    migslice_classes,
)
from tests.hostile_slices import Mutated, mutated_slices


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record_warning(self, node: str, reason: str, message: str) -> None:
        self.events.append((node, reason, message))


@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(mutated=mutated_slices())
def test_a_node_of_slices_the_driver_never_writes_is_placed_on_only_when_read_ready(
    mutated: Mutated,
) -> None:
    node = fixture_slices(mutated.fixture)[0]["spec"]["nodeName"]
    facts = [slice_facts_from_raw(raw) for raw in mutated.raw]
    pool = read_pool(node, [f for f in facts if f is not None and f.node_name == node])
    claim = make_claim("train-0-gpu-x7k2p", profile="1g.10gb", owner="train-0")
    pod = make_claim_pod("train-0", {}, templates={"gpu": "train-0-gpu-x7k2p"})
    objects = ClusterObjects(
        nodes=(make_dra_node(node),),
        pods=(),
        resource_slices=tuple(mutated.raw),
        resource_claims=(claim,),
        device_classes=tuple(migslice_classes()),
    )
    state = state_from_objects(objects, ExtenderSettings())
    client = create_app(ExtenderSettings(), state).test_client()
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [node]})
    reply = client.post("/filter", data=body, content_type="application/json")
    assert reply.status_code == 200
    answer = reply.get_json()
    assert answer["Error"] == ""
    recorder = Recorder()
    recorded = DraWarnings(recorder).review(state.dra_problems())
    if pool.state is PoolState.READY:
        assert recorded == []
        return
    assert answer["NodeNames"] == []
    if pool.state is PoolState.UNKNOWN:
        assert answer["FailedAndUnresolvableNodes"] == {node: reasons.DRA_UNKNOWN}
        ((where, why, message),) = recorder.events
        assert (where, why) == (node, EVENT_REASON) and message.endswith(pool.reason)
    else:
        assert recorded == []


@pytest.mark.parametrize("field", ["name", "namespace"])
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_a_pod_whose_name_nests_past_pythons_recursion_limit_is_answered(
    field: str, verb: str
) -> None:
    """A Pod's name or namespace nested 1,000 levels deep (the body is parsed to 1,024): its
    key was formatted with str(), which raised RecursionError (answered 'migslice extender
    internal error'), and so did the log line of that failure, which escaped the handler."""
    node = "gpu-node-a100-c"
    objects = ClusterObjects(
        nodes=(make_dra_node(node),),
        resource_slices=tuple(
            fixture_slices("a100-80gb-dynamicmig-2gpu-combined-resourceslices.json")
        ),
        resource_claims=(make_claim("train-0-gpu-x7k2p", profile="1g.10gb", owner="train-0"),),
        device_classes=tuple(migslice_classes()),
    )
    client = create_app(ExtenderSettings(), state_from_objects(objects, ExtenderSettings()))
    pod = make_claim_pod("train-0", {}, templates={"gpu": "train-0-gpu-x7k2p"})
    pod["metadata"][field] = "DEEP"
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": [node]})
    deep = "[" * 1000 + "1" + "]" * 1000
    reply = client.test_client().post(
        f"/{verb}", data=body.replace('"DEEP"', deep), content_type="application/json"
    )
    assert reply.status_code == 200
    answer = reply.get_json()
    error = answer.get("Error", "") if isinstance(answer, dict) else ""
    assert "internal error" not in error, error
