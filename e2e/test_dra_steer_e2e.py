"""The steer on the real control plane: the extender's DeviceTaintRules make the real
kube-scheduler's first fit land where migslice prefers, so a 7g.80gb still fits where first fit
strands it (test_dra_driver_e2e's node, left unsteered, is the contrast), and a burst of 200
claims over 32 DynamicMIG GPUs ends with no device or memory slice given twice, no claim left
waiting that a node could serve, and the rules equal to migslice's steer of what is allocated;
a steer rule edited by hand is written again as the steer writes it, through the admission
policy that keeps the extender to its own rules.

Run: .venv/bin/pytest e2e/test_dra_steer_e2e.py -m e2e -p no:cacheprovider -q
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from kubernetes import client as k8s

from harness import dra_slices
from harness.api import wait_for
from harness.dra_driver import (
    FakeDraDriver,
    allocated_devices,
    claim_objects,
    ensure_mig_class,
    read_cluster,
    results,
    settled,
    steer_rules,
)
from harness.scheduler import Scheduler
from harness.stack import Server
from migslice.inventory.first_fit import Wanted, first_fit

pytestmark = pytest.mark.e2e

DRA = ("resource.k8s.io", "v1")
STEER_KEY = "migslice.io/steer"


@pytest.fixture(scope="module")
def mig_class(k8s_api: k8s.ApiClient) -> Iterator[None]:
    ensure_mig_class(k8s.CustomObjectsApi(k8s_api))
    yield


@pytest.fixture
def objects(k8s_api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(k8s_api)


@pytest.fixture
def dra_nodes(
    k8s_api: k8s.ApiClient, gpu_node: Callable[..., k8s.V1Node]
) -> Iterator[Callable[[int, int], list[str]]]:
    """Factory: ``count`` nodes of ``gpus`` DynamicMIG A100s each, published by the fake
    driver; withdrawn afterwards."""
    drivers: list[FakeDraDriver] = []

    def make(count: int, gpus: int) -> list[str]:
        names = []
        for _ in range(count):
            node = gpu_node({}, gfd_labels={}).metadata.name
            driver = FakeDraDriver(k8s_api, node, [dra_slices.a100(g) for g in range(gpus)])
            driver.publish()
            drivers.append(driver)
            names.append(str(node))
        return names

    yield make
    for driver in drivers:
        driver.withdraw()


def test_steered_a_7g_still_fits_where_first_fit_strands_it(
    core_v1: k8s.CoreV1Api,
    objects: k8s.CustomObjectsApi,
    extender: Server,
    default_scheduler: Scheduler,
    dra_nodes: Callable[[int, int], list[str]],
    namespace: str,
    mig_class: None,
) -> None:
    nodes = dra_nodes(1, 2)
    (node,) = nodes
    wait_for("the steer of the idle node", lambda: settled(core_v1, objects, nodes), 60)
    assert "gpu-0-mig-1g10gb-19-0" in steer_rules(objects, nodes)[node]
    wanted = [("a", "1g.10gb"), ("b", "1g.10gb"), ("c", "4g.40gb"), ("d", "7g.80gb")]
    for name, profile in wanted:
        claim, pod = claim_objects(name, namespace, profile)
        objects.create_namespaced_custom_object(*DRA, namespace, "resourceclaims", claim)
        core_v1.create_namespaced_pod(namespace, pod)
        wait_for(
            f"pod {name} bound",
            lambda name=name: core_v1.read_namespaced_pod(name, namespace).spec.node_name,
            timeout=60,
        )
        wait_for(f"the steer after {name}", lambda: settled(core_v1, objects, nodes), 60)
    devices = {name: allocated_devices(objects, namespace, name) for name, _ in wanted}
    # The same claims first fit alone places 1g@0, 1g@1, 4g on GPU 1, and no 7g
    # (test_dra_driver_e2e): steered, both 1g take the end of GPU 0, its 4g stays, and GPU 1
    # stays whole for the 7g.
    assert devices["a"] == ["gpu-0-mig-1g10gb-19-6"]
    assert devices["b"] in (["gpu-0-mig-1g10gb-19-4"], ["gpu-0-mig-1g10gb-19-5"])
    assert devices["c"] == ["gpu-0-mig-4g40gb-5-0"]
    assert devices["d"] == ["gpu-1-mig-7g80gb-0-0"]


def as_written(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule's spec without the time kube-apiserver stamps on its taint at each create."""
    spec = rule["spec"]
    return {**spec, "taint": {k: v for k, v in spec["taint"].items() if k != "timeAdded"}}


def test_a_steer_rule_edited_by_hand_is_written_again(
    core_v1: k8s.CoreV1Api,
    objects: k8s.CustomObjectsApi,
    extender: Server,
    dra_nodes: Callable[[int, int], list[str]],
    mig_class: None,
) -> None:
    """Measured before: a rule whose effect was edited to None stayed so (the extender did not
    see it, then the admission policy refused its delete of a rule not of the steer's shape),
    first fit took the device it was for, and the rule outlived its node."""
    nodes = dra_nodes(1, 1)
    (node,) = nodes
    wait_for("the steer of the idle node", lambda: settled(core_v1, objects, nodes), 60)
    name = f"migslice-steer-{node}-gpu-0-mig-1g10gb-19-0"
    rule = objects.get_cluster_custom_object(*DRA, "devicetaintrules", name)
    written = rule["spec"]
    edits = (
        {"taint": {**written["taint"], "effect": "None"}},
        {"deviceSelector": {**written["deviceSelector"], "device": "gpu-0-mig-7g80gb-0-0"}},
    )
    for edit in edits:
        rule = objects.get_cluster_custom_object(*DRA, "devicetaintrules", name)
        rule["spec"] = {**written, **edit}
        objects.replace_cluster_custom_object(*DRA, "devicetaintrules", name, rule)
        wait_for(
            "the rule as the steer writes it",
            lambda: (
                as_written(objects.get_cluster_custom_object(*DRA, "devicetaintrules", name))
                == as_written({"spec": written})
            ),
            timeout=30,
        )
    wait_for("the steer settled", lambda: settled(core_v1, objects, nodes), 60)


PROFILES = (("1g.10gb", 10), ("2g.20gb", 4), ("3g.40gb", 3), ("4g.40gb", 2), ("7g.80gb", 1))
BURST = 200


def test_a_burst_of_200_claims_gives_no_device_twice_leaves_none_stuck_and_keeps_the_steer(
    core_v1: k8s.CoreV1Api,
    objects: k8s.CustomObjectsApi,
    migslice_scheduler: Scheduler,
    dra_nodes: Callable[[int, int], list[str]],
    namespace: str,
    mig_class: None,
) -> None:
    nodes = dra_nodes(4, 8)
    wait_for("the steer of the idle nodes", lambda: settled(core_v1, objects, nodes), 120)
    rng = random.Random(7)
    names = [f"c{i:03d}" for i in range(BURST)]
    chosen = {n: rng.choices([p for p, _ in PROFILES], [w for _, w in PROFILES])[0] for n in names}

    def create(name: str) -> None:
        claim, pod = claim_objects(name, namespace, chosen[name], scheduler="migslice-scheduler")
        objects.create_namespaced_custom_object(*DRA, namespace, "resourceclaims", claim)
        core_v1.create_namespaced_pod(namespace, pod)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))

    def quiet() -> bool:
        pods = core_v1.list_namespaced_pod(namespace).items
        waiting = [
            p
            for p in pods
            if not p.spec.node_name
            and not any(
                c.type == "PodScheduled" and c.reason == "Unschedulable"
                for c in p.status.conditions or ()
            )
        ]
        return len(pods) == BURST and not waiting

    wait_for("every pod bound or reported unschedulable", quiet, 300)
    time.sleep(5)  # a last retry of a pod whose node freed up under a stale steer
    wait_for("the steer after the burst", lambda: settled(core_v1, objects, nodes), 120)

    claims = objects.list_namespaced_custom_object(*DRA, namespace, "resourceclaims")["items"]
    given = Counter((r["pool"], r["device"]) for c in claims for r in results(c))
    assert given and max(given.values()) == 1, [d for d, n in given.items() if n > 1]
    index = read_cluster(core_v1, objects, nodes)
    # No memory slice is held twice on any GPU (DynamicMIG placements overlap by design).
    for node in nodes:
        state = index.state_of(node)
        assert state is not None and state.dra is not None
        for gpu in state.gpus:
            taken = 0
            for placed in gpu.instances:
                assert not taken & placed.mask, (node, gpu.index, gpu.instances)
                taken |= placed.mask
    # No claim waits that a node could serve now, steered or not.
    bound = {
        p.metadata.name for p in core_v1.list_namespaced_pod(namespace).items if p.spec.node_name
    }
    for name in set(names) - bound:
        for node in nodes:
            state = index.state_of(node)
            assert state is not None and state.dra is not None and state.dra.use is not None
            bare = dataclasses.replace(state.dra.pool, steered=frozenset())
            assert first_fit(bare, Wanted.mig(chosen[name]), state.dra.use) is None, (name, node)
    assert len(bound) >= 0.5 * BURST
