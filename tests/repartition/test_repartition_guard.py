"""The repartition controller plans only while MIG Manager reads its ConfigMap: judged on
NVIDIA's sample ClusterPolicy and on it patched as the README says, through the guard's port
(a fake), the controller's round, /metrics, and the ClusterPolicy API against a real local
HTTP server."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from prometheus_client import generate_latest

from extender.controller import RepartitionController
from extender.metrics import ExtenderMetrics
from extender.mig_manager import EVENT_REASON, MigManagerGuard
from extender.settings import ExtenderSettings, RepartitionSettings
from extender.state import ExtenderState, RepartitionStats, new_index
from migslice.kube.gpu_operator import (
    GpuOperatorUnknownError,
    GpuOperatorUnreadableError,
    KubeClusterPolicyApi,
)
from migslice.objects.cluster_policy import active_cluster_policy, cluster_policy_facts
from tests.doctor_cluster import patched_cluster_policy, sample_cluster_policy
from tests.local_api import Request, local_api
from tests.repartition.test_repartition_controller import NOW, Elector, FakeApi

CONFIG_MAP = "gpu-operator/migslice-mig-config"


class FakeClusterPolicies:
    """The ClusterPolicies as the guard's port sees them; None: no CRD; an exception: raised."""

    def __init__(self, policies: list[dict[str, Any]] | Exception | None) -> None:
        self.policies = policies
        self.warnings: list[tuple[str, str, str, str]] = []

    def list_cluster_policies(self) -> list[dict[str, Any]] | None:
        if isinstance(self.policies, Exception):
            raise self.policies
        return copy.deepcopy(self.policies)

    def record_warning(self, policy_name: str, policy_uid: str, reason: str, message: str) -> None:
        self.warnings.append((policy_name, policy_uid, reason, message))


def guard(
    api: FakeClusterPolicies, dry_run: bool = False
) -> tuple[MigManagerGuard, RepartitionStats]:
    stats = RepartitionStats(dry_run=dry_run)
    return MigManagerGuard(api, CONFIG_MAP, stats=stats, dry_run=dry_run), stats


def test_the_sample_cluster_policy_stops_planning_with_one_event() -> None:
    api = FakeClusterPolicies([sample_cluster_policy()])
    check, stats = guard(api)
    assert not check.allows_planning()
    assert not check.allows_planning()
    assert stats.mig_manager_config_mismatch
    ((name, uid, reason, message),) = api.warnings  # once, not every round
    assert (name, uid, reason) == ("cluster-policy", "uid-cluster-policy", EVENT_REASON)
    assert message == (
        "MIG Manager reads its generated default-mig-parted-config (the field is empty), not "
        "migslice-mig-config, where migslice writes its configs (ClusterPolicy cluster-policy "
        "spec.migManager.config.name); not re-partitioning until it does: kubectl patch "
        "clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
        '\'{"spec":{"migManager":{"config":{"name":"migslice-mig-config"}}}}\''
    )


def test_the_readme_patch_lets_it_plan_and_a_later_mismatch_is_reported_again() -> None:
    api = FakeClusterPolicies([sample_cluster_policy()])
    check, stats = guard(api)
    assert not check.allows_planning()
    api.policies = [patched_cluster_policy()]
    assert check.allows_planning()
    assert not stats.mig_manager_config_mismatch
    api.policies = [sample_cluster_policy()]
    assert not check.allows_planning()
    assert len(api.warnings) == 2


def test_a_dry_run_stops_planning_but_records_no_event() -> None:
    api = FakeClusterPolicies([sample_cluster_policy()])
    check, stats = guard(api, dry_run=True)
    assert not check.allows_planning()
    assert stats.mig_manager_config_mismatch and api.warnings == []


@pytest.mark.parametrize(
    ("policies", "said", "level"),
    [
        (None, "no ClusterPolicy CRD (MIG Manager installed without the GPU Operator)", "INFO"),
        ([], "no ClusterPolicy object (MIG Manager installed without the GPU Operator)", "INFO"),
        (
            GpuOperatorUnreadableError("HTTP 403: forbidden"),
            "ClusterPolicies unreadable (HTTP 403: forbidden)",
            "WARNING",
        ),
    ],
    ids=["no-crd", "no-policy", "forbidden"],
)
def test_without_a_cluster_policy_to_read_it_plans_and_says_so_once(
    policies: Any, said: str, level: str, caplog: pytest.LogCaptureFixture
) -> None:
    check, stats = guard(FakeClusterPolicies(policies))
    with caplog.at_level(logging.INFO, logger="extender.mig_manager"):
        assert check.allows_planning()
        assert check.allows_planning()
    (record,) = caplog.records
    assert record.getMessage().startswith(said)
    assert record.levelname == level
    assert not stats.mig_manager_config_mismatch


RESTARTING = GpuOperatorUnknownError(
    "HTTP 404: the server could not find the requested resource, while discovery lists "
    "clusterpolicies.nvidia.com/v1"
)


def test_a_cluster_policy_read_that_may_pass_keeps_the_last_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An API server restarting answers 404 for a CRD's objects before it serves the CRD
    again: read as "no GPU Operator", the round planned into the ConfigMap MIG Manager does
    not read, which the ClusterPolicy had stopped the round before."""
    api = FakeClusterPolicies([sample_cluster_policy()])
    check, stats = guard(api)
    assert not check.allows_planning()  # MIG Manager reads another ConfigMap
    caplog.clear()
    api.policies = RESTARTING
    with caplog.at_level(logging.INFO, logger="extender.mig_manager"):
        assert not check.allows_planning()
    assert stats.mig_manager_config_mismatch
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert record.getMessage().startswith(
        "ClusterPolicies not read this round (HTTP 404: the server could not find the "
        "requested resource, while discovery lists clusterpolicies.nvidia.com/v1); "
        "not re-partitioning, as the last read said"
    )
    api.policies = [patched_cluster_policy()]
    assert check.allows_planning()
    api.policies = GpuOperatorUnknownError("HTTP 503: etcdserver: leader changed")
    assert check.allows_planning()  # as the last read said
    assert len(api.warnings) == 1  # the unknown rounds recorded no Event


def test_a_cluster_policy_read_that_may_pass_before_any_answer_skips_planning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    check, stats = guard(FakeClusterPolicies(RESTARTING))
    with caplog.at_level(logging.INFO, logger="extender.mig_manager"):
        assert not check.allows_planning()
    (record,) = caplog.records
    assert record.levelname == "WARNING"
    assert "not re-partitioning until they are read" in record.getMessage()
    assert not stats.mig_manager_config_mismatch


def test_a_round_whose_cluster_policy_read_may_pass_writes_nothing() -> None:
    api = FakeApi()
    settings = ExtenderSettings(repartition=RepartitionSettings(enabled=True))
    stats = RepartitionStats()
    check = MigManagerGuard(FakeClusterPolicies(RESTARTING), CONFIG_MAP, stats=stats)
    ctl = RepartitionController(
        api, Elector(), new_index(), settings, stats, clock=lambda: NOW, guard=check
    )
    assert ctl.run_once() == []
    assert api.log == [] and stats.errors == 0


def test_a_blocked_round_writes_nothing_and_metrics_say_why() -> None:
    api = FakeApi()
    settings = ExtenderSettings(repartition=RepartitionSettings(enabled=True))
    stats = RepartitionStats()
    check = MigManagerGuard(FakeClusterPolicies([sample_cluster_policy()]), CONFIG_MAP, stats=stats)
    ctl = RepartitionController(
        api, Elector(), new_index(), settings, stats, clock=lambda: NOW, guard=check
    )
    assert ctl.run_once() == []
    assert api.log == []
    metrics = ExtenderMetrics(ExtenderState(new_index(), repartition=stats))
    text = generate_latest(metrics.registry).decode()
    assert "migslice_repartition_mig_manager_config_mismatch 1.0" in text


def test_the_oldest_cluster_policy_is_the_one_the_operator_acts_on() -> None:
    older, newer = patched_cluster_policy(), sample_cluster_policy()
    newer["metadata"].update(name="b", creationTimestamp="2026-03-01T00:00:00Z")
    older["metadata"]["name"] = "z"
    active = active_cluster_policy([newer, older])
    assert active is not None and active.name == "z"
    facts = cluster_policy_facts(sample_cluster_policy())
    assert (facts.mig_strategy, facts.mig_manager_enabled, facts.mig_manager_config) == (
        "single",
        True,
        "",
    )


# -- the API calls --------------------------------------------------------------------------------


DISCOVERY = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "nvidia.com/v1",
    "resources": [
        {
            "name": "clusterpolicies",
            "singularName": "clusterpolicy",
            "namespaced": False,
            "kind": "ClusterPolicy",
            "verbs": ["delete", "deletecollection", "get", "list", "patch", "create", "update"],
            "storageVersionHash": "Uf4o3uUcf0k=",
        },
        {
            "name": "clusterpolicies/status",
            "singularName": "",
            "namespaced": False,
            "kind": "ClusterPolicy",
            "verbs": ["get", "patch", "update"],
        },
    ],
}


def _status(code: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "no",
        "code": code,
    }


def test_cluster_policies_are_listed_and_a_missing_crd_or_403_told_apart() -> None:
    answers: dict[str, Any] = {"code": 200, "discovery": 404}

    def answer(request: Request) -> tuple[int, Any]:
        if request.path == "/apis/nvidia.com/v1":
            code = answers["discovery"]
            return (200, DISCOVERY) if code == 200 else (code, _status(code))
        assert request.path == "/apis/nvidia.com/v1/clusterpolicies"
        if answers["code"] != 200:
            return answers["code"], _status(answers["code"])
        return 200, {"kind": "ClusterPolicyList", "items": [sample_cluster_policy()]}

    with local_api(answer) as transport:
        api = KubeClusterPolicyApi(transport, "migslice-repartition")
        listed = api.list_cluster_policies()
        assert listed is not None and listed[0]["metadata"]["name"] == "cluster-policy"
        answers["code"] = 404  # and discovery serves no nvidia.com/v1: no CRD
        assert api.list_cluster_policies() is None
        answers["code"] = 403
        with pytest.raises(GpuOperatorUnreadableError):
            api.list_cluster_policies()


@pytest.mark.parametrize(
    ("code", "discovery", "said"),
    [
        (404, 200, "while discovery lists clusterpolicies.nvidia.com/v1"),
        (404, 503, "discovery of nvidia.com/v1 unread: HTTP 503"),
        (503, 404, "HTTP 503"),
        (429, 404, "HTTP 429"),
    ],
    ids=["404-listed", "404-discovery-failing", "unavailable", "throttled"],
)
def test_a_cluster_policy_read_that_may_pass_is_neither_there_nor_absent(
    code: int, discovery: int, said: str
) -> None:
    """An API server restarting serves a CRD's objects (404) before its discovery stops
    listing them; a 5xx or a 429 passes too: none says the GPU Operator is not there."""

    def answer(request: Request) -> tuple[int, Any]:
        if request.path == "/apis/nvidia.com/v1":
            return (200, DISCOVERY) if discovery == 200 else (discovery, _status(discovery))
        return code, _status(code)

    with local_api(answer) as transport:
        api = KubeClusterPolicyApi(transport, "migslice-repartition")
        with pytest.raises(GpuOperatorUnknownError, match=said):
            api.list_cluster_policies()


def test_the_warning_event_is_about_the_cluster_policy() -> None:
    posted: list[Request] = []

    def answer(request: Request) -> tuple[int, Any]:
        posted.append(request)
        return 201, request.body

    with local_api(answer) as transport:
        KubeClusterPolicyApi(transport, "migslice-repartition").record_warning(
            "cluster-policy", "uid-1", EVENT_REASON, "MIG Manager reads another ConfigMap"
        )
    (request,) = posted
    assert (request.method, request.path) == ("POST", "/api/v1/namespaces/default/events")
    assert request.body["involvedObject"] == {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "name": "cluster-policy",
        "uid": "uid-1",
    }
    assert (request.body["type"], request.body["reason"]) == ("Warning", EVENT_REASON)
    assert request.body["source"] == {"component": "migslice-repartition"}


def test_a_blocked_round_still_exports_the_pods_that_wait() -> None:
    """While MIG Manager reads another ConfigMap nothing is planned, and the pods that wait
    meanwhile are what the pending alert reads: they are counted as in any round."""
    api = FakeApi()
    settings = ExtenderSettings(repartition=RepartitionSettings(enabled=True))
    stats = RepartitionStats()
    check = MigManagerGuard(FakeClusterPolicies([sample_cluster_policy()]), CONFIG_MAP, stats=stats)
    now = [NOW]
    ctl = RepartitionController(
        api, Elector(), new_index(), settings, stats, clock=lambda: now[0], guard=check
    )
    ctl.run_once()
    now[0] += 3600
    ctl.run_once()
    text = generate_latest(ExtenderMetrics(ExtenderState(new_index(), repartition=stats)).registry)
    assert 'migslice_extender_pending_pods{profile="3g.40gb"} 1.0' in text.decode()
    # Unschedulable since 15:00:00, NOW is 15:06:40, an hour later
    assert 'migslice_extender_pending_max_age_seconds{profile="3g.40gb"} 4000.0' in text.decode()


def test_mig_manager_disabled_in_the_cluster_policy_stops_planning_with_one_event() -> None:
    # No MIG Manager pod runs anywhere: every node labelled would sit at the state=pending our
    # label sets, closed to pods, until the deadline quarantined it.
    policy = patched_cluster_policy()
    policy["spec"]["migManager"]["enabled"] = False
    api = FakeClusterPolicies([policy])
    check, stats = guard(api)
    assert not check.allows_planning()
    assert not check.allows_planning()
    assert stats.mig_manager_config_mismatch
    ((name, _, reason, message),) = api.warnings
    assert (name, reason) == ("cluster-policy", EVENT_REASON)
    assert message == (
        "MIG Manager is disabled (ClusterPolicy cluster-policy spec.migManager.enabled false): "
        "no re-partition is ever applied; not re-partitioning until it is: kubectl patch "
        "clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
        '\'{"spec":{"migManager":{"enabled":true}}}\''
    )


def test_a_config_map_of_another_namespace_than_the_operators_stops_planning() -> None:
    # MIG Manager's pods run in the GPU Operator's namespace (status.namespace) and mount the
    # ConfigMap of that name from there: ours, in another namespace, is never read.
    policy = patched_cluster_policy()
    policy["status"]["namespace"] = "nvidia-gpu-operator"
    api = FakeClusterPolicies([policy])
    check, stats = guard(api)
    assert not check.allows_planning()
    assert stats.mig_manager_config_mismatch
    ((_, _, reason, message),) = api.warnings
    assert reason == EVENT_REASON
    assert message == (
        "MIG Manager reads migslice-mig-config of namespace nvidia-gpu-operator, where the GPU "
        "Operator runs (ClusterPolicy cluster-policy status.namespace), not of gpu-operator, "
        "where migslice writes its configs; not re-partitioning until it does: install "
        "migslice with --set gpuOperator.namespace=nvidia-gpu-operator (the extender's "
        "--mig-config-map=nvidia-gpu-operator/migslice-mig-config)"
    )
    policy["status"]["namespace"] = "gpu-operator"
    assert check.allows_planning()
