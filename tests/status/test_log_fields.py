"""Every log line about a pod, a tenant or a node names it as ``pod=NAMESPACE/NAME``,
``tenant=NAME`` or ``node=NAME`` in its text, so its JSON line (``--log-format json``) carries
it as a field: real log calls of the webhook, the extender, the node agent and the Kubernetes
shell, formatted by :class:`migslice.console.JsonFormatter` (docs/operate.md, "Logs")."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest

from extender.app import create_app as extender_app
from extender.settings import ExtenderSettings
from extender.state import state_from_objects
from harness.builders import make_created_pod, make_policy, make_review
from migslice.console import JsonFormatter
from migslice.kube import Informer, ResourceRef
from migslice.kube.events import record_event
from migslice.objects import ClusterObjects
from tests.agent.test_agent_carve import big_request
from tests.carve_agent_harness import MemoryNode, balanced, carver
from tests.extender.test_extender_contract import (
    FakeCache,
    cluster_nodes,
    cluster_pods,
    names_args,
    scheduled_pod,
)
from tests.extender.test_extender_contract import post as post_extender
from tests.fake_nvml import installed
from tests.local_api import local_api
from tests.repartition.test_repartition_controller import FakeApi, controller
from tests.webhook.test_webhook_quota import Cache, replica
from webhook.quota import MemoryLedgers
from webhook.state import ClusterState


def json_lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[dict[str, Any]]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records if r.name == logger]


def test_the_formatter_keeps_every_node_a_line_names() -> None:
    record = logging.LogRecord(
        "x", logging.INFO, __file__, 1, "plan (node=gpu-a node=gpu-b node=gpu-a pod=t/p)", (), None
    )
    line = json.loads(JsonFormatter().format(record))
    assert (line["node"], line["pod"], line["namespace"]) == ("gpu-a,gpu-b", "p", "t")


# -- the webhook -----------------------------------------------------------------------------


def test_webhook_an_invalid_policy_names_its_tenant(caplog: pytest.LogCaptureFixture) -> None:
    state = ClusterState()
    with caplog.at_level(logging.WARNING, logger="webhook.state"):
        state.upsert_policy(make_policy("team-x", sizes={"small": {"memory": "lots"}}))
    (line,) = json_lines(caplog, "webhook.state")
    assert line["tenant"] == "team-x"


def test_webhook_a_blind_answer_names_the_pod_and_the_policy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    state = ClusterState()
    state.follow([Cache("pods", synced=False)])  # type: ignore[list-item]
    client = replica(MemoryLedgers(state), state)
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})  # generateName train-
    policy = make_policy("team-b", namespaces=["team-b"])
    with caplog.at_level(logging.WARNING, logger="webhook.app"):
        assert client.post("/mutate", json=make_review(pod)).status_code == 503
        body = make_review(policy, namespace="", kind=("migslice.io", "v1alpha1", "TenantPolicy"))
        assert client.post("/validate", json=body).status_code == 503
    mutate, validate = json_lines(caplog, "webhook.app")
    assert (mutate["pod"], mutate["namespace"]) == ("train-*", "team-a")
    assert validate["tenant"] == "team-b"


# -- the extender ----------------------------------------------------------------------------


def test_extender_a_plan_names_its_nodes_and_the_pods_it_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="extender.controller"):
        controller(FakeApi(), dry_run=True).run_once()
        controller(FakeApi()).run_once()
    lines = json_lines(caplog, "extender.controller")
    dry = next(line for line in lines if line["message"].startswith("dry run: would re-partition"))
    started = next(line for line in lines if line["message"].startswith("repartition start"))
    labelled = next(line for line in lines if "labelled" in line["message"])
    for line in (dry, started):
        assert (line["node"], line["pod"], line["namespace"]) == ("gpu-a", "train", "team-a")
    assert labelled["node"] == "gpu-a"


def test_extender_a_blind_filter_names_the_pod(caplog: pytest.LogCaptureFixture) -> None:
    objects = ClusterObjects(nodes=tuple(cluster_nodes()), pods=tuple(cluster_pods()))
    state = state_from_objects(objects, ExtenderSettings())
    state.caches = (FakeCache(True, 27.0),)
    client = extender_app(ExtenderSettings(), state).test_client()
    pod = scheduled_pod(profile="1g.10gb")
    with caplog.at_level(logging.WARNING, logger="extender.app"):
        post_extender(client, "filter", names_args(pod, ["gpu-0"]))
    (line,) = json_lines(caplog, "extender.app")
    assert f"{line['namespace']}/{line['pod']}" == (
        f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    )


# -- the node agent --------------------------------------------------------------------------


def test_agent_a_carve_names_its_node(caplog: pytest.LogCaptureFixture) -> None:
    library = balanced()
    node = MemoryNode(library)
    with installed(library), caplog.at_level(logging.INFO, logger="agent.carve.carver"):
        node.ask(big_request(library))  # type: ignore[arg-type]
        assert dataclasses.replace(carver(node), node_name="gpu-a").run_once().startswith("carved")
    lines = json_lines(caplog, "agent.carve.carver")
    assert lines and all(line["node"] == "gpu-a" for line in lines), lines


# -- the Kubernetes shell --------------------------------------------------------------------


def test_kube_an_event_not_recorded_and_an_object_skipped_name_theirs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with local_api(lambda request: (500, {"message": "etcd down"})) as transport:
        with caplog.at_level(logging.WARNING, logger="migslice.kube.events"):
            involved = {"apiVersion": "v1", "kind": "Node", "name": "gpu-a", "uid": "u"}
            record_event(transport, involved, "Tested", message="m", component="test")
        informer: Informer[Any] = Informer(
            name="pods",
            transport=transport,
            resource=ResourceRef("/api/v1/pods"),
            project=lambda raw: 1 / 0,
            sink=None,  # type: ignore[arg-type]
        )
        with caplog.at_level(logging.WARNING, logger="migslice.kube.informer"):
            informer._project({"metadata": {"namespace": "team-a", "name": "train-0"}})
    (event,) = json_lines(caplog, "migslice.kube.events")
    assert event["node"] == "gpu-a"
    (skipped,) = json_lines(caplog, "migslice.kube.informer")
    assert (skipped["pod"], skipped["namespace"]) == ("train-0", "team-a")
