"""Namespaces excluded from admission: their pods are admitted unchanged, whatever arrives."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.cli import main
from migslice.console import name_list
from webhook.app import create_app
from webhook.settings import DEFAULT_EXCLUDED_NAMESPACES, WebhookSettings
from webhook.state import ClusterState


def gpu_operator_pod(namespace: str) -> dict[str, Any]:
    """What the GPU Operator's validator asks for: a whole GPU, no migslice annotation."""
    return make_created_pod(
        namespace=namespace, generate_name="nvidia-cuda-validator-", limits={"nvidia.com/gpu": "1"}
    )


def client_with(settings: WebhookSettings, *policies: dict[str, Any]) -> FlaskClient:
    state = ClusterState()
    for policy in policies:
        state.upsert_policy(policy)
    state.upsert_node(make_node("gpu-1"))
    return create_app(settings, state).test_client()


def mutate(client: FlaskClient, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    reply = client.post("/mutate", json=make_review(pod, namespace=namespace))
    assert reply.status_code == 200
    response: dict[str, Any] = reply.get_json()["response"]
    return response


def test_a_gpu_pod_in_the_gpu_operator_namespace_is_admitted_unchanged() -> None:
    client = client_with(WebhookSettings(), make_policy())
    response = mutate(client, gpu_operator_pod("gpu-operator"), "gpu-operator")
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response
    assert not response.get("warnings")


def test_the_same_pod_elsewhere_is_denied_for_want_of_a_policy() -> None:
    client = client_with(WebhookSettings(), make_policy())
    response = mutate(client, gpu_operator_pod("gpu-operator-2"), "gpu-operator-2")
    assert response["allowed"] is False
    assert "TenantPolicy" in response["status"]["message"]


def test_an_excluded_namespace_wins_over_a_policy_that_selects_it() -> None:
    client = client_with(WebhookSettings(), make_policy("ops", namespaces=["kube-system"]))
    pod = make_created_pod(namespace="kube-system", annotations={"migslice.io/gpu-size": "small"})
    response = mutate(client, pod, "kube-system")
    assert response["allowed"] is True and "patch" not in response


def test_with_no_exclusions_the_gpu_operator_namespace_is_judged_like_any_other() -> None:
    client = client_with(WebhookSettings(exclude_namespaces=frozenset()), make_policy())
    response = mutate(client, gpu_operator_pod("gpu-operator"), "gpu-operator")
    assert response["allowed"] is False


def test_the_default_exclusions_are_the_system_and_gpu_operator_namespaces() -> None:
    assert DEFAULT_EXCLUDED_NAMESPACES == {
        "gpu-operator",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "migslice-system",
    }


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu-operator,kube-system", {"gpu-operator", "kube-system"}),
        (" a , b ,", {"a", "b"}),
        ("", set()),
    ],
    ids=["two", "spaces-and-trailing-comma", "none"],
)
def test_exclude_namespaces_is_a_comma_list(text: str, names: set[str]) -> None:
    assert set(name_list(text)) == names


def test_a_bad_namespace_name_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["webhook", "--exclude-namespaces", "kube-system,GPU_Operator"])
    assert exited.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument --exclude-namespaces: 'GPU_Operator' is not a DNS label" in last
