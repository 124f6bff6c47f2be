"""Whole GPUs stay whole: over nodes of every shape GPU Feature Discovery labels (MIG mixed,
single, single with MIG-INVALID, none; time-sliced with and without renaming), a dedicated
pod may land only on an unshared, non-MIG GPU and a shared pod never on a MIG slice.

Measured before: for a pod asking ``nvidia.com/gpu: 1`` under a dedicated tier (a 40 GiB size),
the webhook's node affinity admitted the products ``...-MIG-3g.20gb`` (single strategy: the
nvidia.com/gpu there is a 3g slice), ``...-MIG-INVALID`` and ``...-SHARED`` (time-sliced
replicas), and the extender was never asked about such pods.

The nodes carry the labels GFD writes (NVIDIA/k8s-device-plugin at 1b826acc: each label
matches a regexp of its ``tests/expected-output-mig-{mixed,single,none}.txt``, copied to
``tests/fixtures/gfd/``; the product suffixes from ``internal/lm/resource.go`` and
``mig-strategy.go``) and the allocatable its device plugin advertises in that mode.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest

from extender import ExtenderSettings, create_app
from extender.state import state_from_objects
from harness.builders import make_created_pod, make_node, make_policy, make_review
from harness.gfd_shapes import DEDICATED, MIG, SHAPES, SHARED
from migslice.objects.clusterfile import ClusterObjects
from tests import paths
from webhook.app import create_app as create_webhook
from webhook.settings import WebhookSettings
from webhook.state import ClusterState

GFD = paths.FIXTURES / "gfd"


def node(shape: str) -> dict[str, Any]:
    _, labels, product, allocatable = SHAPES[shape]
    built = make_node(
        shape, product=product, strategy=None, gpu_count=1, mig_capable=True,
        extra_labels=labels,
    )  # fmt: skip
    built["status"]["allocatable"].update(allocatable)
    built["status"]["capacity"].update(allocatable)
    return {"apiVersion": "v1", "kind": "Node", **built}


def nodes() -> list[dict[str, Any]]:
    return [node(shape) for shape in SHAPES]


# GFD's expected-output files do not cover MIG-INVALID (its sharing-strategy is "", which their
# regexps cannot match); its labels are mig-strategy_test.go:316-327's.
@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "invalid"])
def test_each_shape_is_labelled_as_gpu_feature_discovery_labels_it(shape: str) -> None:
    expected, _, _, _ = SHAPES[shape]
    patterns = [
        re.compile(line)
        for line in (GFD / f"expected-output-{expected}.txt").read_text().splitlines()
        if line.strip()
    ]
    for key, value in node(shape)["metadata"]["labels"].items():
        if key.startswith("nvidia.com/"):
            line = f"{key}={value}"
            assert any(p.search(line) for p in patterns), f"{line} not as GFD writes it"


def admitted(spec: dict[str, Any], size: str) -> dict[str, Any]:
    """The pod of ``size`` as the webhook patches it over the cluster of every shape."""
    state = ClusterState()
    state.upsert_policy(make_policy(**spec))
    for raw in nodes():
        state.upsert_node(raw)
    client = create_webhook(WebhookSettings(), state).test_client()
    pod = make_created_pod(annotations={"migslice.io/gpu-size": size})
    answer = client.post("/mutate", json=make_review(pod)).get_json()["response"]
    assert answer["allowed"], answer
    patched: dict[str, Any] = jsonpatch.apply_patch(
        pod, json.loads(base64.b64decode(answer["patch"]))
    )
    return patched


def matches(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the pod's required node affinity admits a node with these labels."""
    required = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    for term in required["nodeSelectorTerms"]:
        ok = True
        for expression in term.get("matchExpressions", ()):
            present = expression["key"] in labels
            value = labels.get(expression["key"])
            if expression["operator"] == "In":
                ok = ok and present and value in expression["values"]
            elif expression["operator"] == "NotIn":
                ok = ok and not (present and value in expression["values"])
            elif expression["operator"] == "DoesNotExist":
                ok = ok and not present
            elif expression["operator"] == "Exists":
                ok = ok and present
            else:
                raise AssertionError(expression)
        if ok:
            return True
    return False


def landable(pod: dict[str, Any]) -> set[str]:
    """The shapes the pod can land on: its affinity admits the node, the node advertises what
    it asks (kube-scheduler's NodeResourcesFit), and the extender keeps the node."""
    container = pod["spec"]["containers"][0]
    (resource,) = container["resources"]["limits"]
    candidates = [
        n for n in nodes()
        if matches(pod, n["metadata"]["labels"])
        and int(n["status"]["allocatable"].get(resource, "0")) > 0
    ]  # fmt: skip
    objects = ClusterObjects(nodes=tuple(nodes()))
    extender = create_app(
        ExtenderSettings(), state_from_objects(objects, ExtenderSettings())
    ).test_client()
    scheduled = {k: v for k, v in pod.items() if k not in ("apiVersion", "kind")}
    scheduled["metadata"] = {**pod["metadata"], "name": "p", "uid": "u-1"}
    args = {"Pod": scheduled, "NodeNames": [n["metadata"]["name"] for n in candidates]}
    answer = extender.post("/filter", json=args).get_json()
    return set(answer["NodeNames"] or ())


def test_a_dedicated_pod_lands_only_on_a_whole_unshared_gpu() -> None:
    pod = admitted(DEDICATED, "full")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert landable(pod) == {"mixed", "none"}


def test_a_shared_pod_never_lands_on_a_mig_slice() -> None:
    pod = admitted(SHARED, "notebook")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.shared": "1"}
    assert landable(pod) == {"time-sliced-renamed"}


def test_a_mig_pod_never_lands_on_a_time_sliced_mig_resource() -> None:
    """Measured before: a hardware tenant's 3g.20gb pod could land on the node whose
    nvidia.com/mig-3g.20gb GFD labels time-sliced (2 replicas of each instance, advertised
    under the resource's own name): a slice shared with another pod."""
    pod = admitted(MIG, "medium")
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.20gb": "1"}
    assert landable(pod) == {"mixed"}
    objects = ClusterObjects(nodes=tuple(nodes()))
    extender = create_app(
        ExtenderSettings(), state_from_objects(objects, ExtenderSettings())
    ).test_client()
    direct = make_created_pod(limits={"nvidia.com/mig-3g.20gb": "1"})
    direct["metadata"] = {**direct["metadata"], "name": "p", "uid": "u-3"}
    args = {"Pod": direct, "NodeNames": ["mixed-time-sliced"]}
    answer = extender.post("/filter", json=args).get_json()
    assert answer["FailedAndUnresolvableNodes"] == {
        "mixed-time-sliced": "node's nvidia.com/mig-3g.20gb are shared replicas, "
        "not MIG instances of their own"
    }


def test_the_extender_refuses_a_whole_gpu_on_sliced_or_shared_products_even_if_asked() -> None:
    """Defence in depth: a pod with ``nvidia.com/gpu`` that reached migslice-scheduler without
    the webhook's affinity still never gets a slice or a replica."""
    objects = ClusterObjects(nodes=tuple(nodes()))
    extender = create_app(
        ExtenderSettings(), state_from_objects(objects, ExtenderSettings())
    ).test_client()
    pod = make_created_pod(limits={"nvidia.com/gpu": "1"})
    pod["metadata"] = {**pod["metadata"], "name": "p", "uid": "u-2"}
    answer = extender.post("/filter", json={"Pod": pod, "NodeNames": list(SHAPES)}).get_json()
    assert set(answer["NodeNames"]) == {"mixed", "none"}
    refused = ["single", "invalid", "time-sliced", "single-time-sliced", "time-sliced-renamed"]
    answer = extender.post("/filter", json={"Pod": pod, "NodeNames": refused}).get_json()
    assert answer["NodeNames"] == []
    reasons = {**answer["FailedNodes"], **answer["FailedAndUnresolvableNodes"]}
    assert reasons["single"] == "node's nvidia.com/gpu are MIG slices, not whole GPUs"
    assert reasons["invalid"] == "node's nvidia.com/gpu are MIG slices, not whole GPUs"
    assert reasons["time-sliced"] == "node's nvidia.com/gpu are shared replicas, not whole GPUs"
    assert set(answer["FailedAndUnresolvableNodes"]) >= {"single", "invalid", "time-sliced"}
