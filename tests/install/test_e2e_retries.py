"""The harness's one retry of what kube-apiserver refuses while etcd recovers (504, 503, 500
with etcd's error, a reset connection), bounded, and nothing else: a denial or a conflict is
the answer, not a reason to call again."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client as k8s

from harness.api import is_recovering, while_recovering


def api_error(status: int, message: str = "") -> k8s.ApiException:
    error = k8s.ApiException(status=status, reason="")
    error.body = f'{{"kind":"Status","code":{status},"message":"{message}"}}'
    return error


@pytest.mark.parametrize(
    ("error", "recovering"),
    [
        (api_error(504, "Timeout: request did not complete within requested timeout"), True),
        (api_error(503, "etcd unavailable"), True),
        (api_error(500, "etcdserver: request timed out"), True),
        (api_error(500, "context deadline exceeded"), True),
        (ConnectionResetError(104, "Connection reset by peer"), True),
        (api_error(500, 'failed calling webhook "pods.webhook.migslice.io"'), False),
        (api_error(403, "denied the request"), False),
        (api_error(409, "already exists"), False),
        (ValueError("a bug"), False),
    ],
    ids=["504", "503", "500-etcd", "500-deadline", "reset", "500-webhook", "403", "409", "bug"],
)
def test_only_what_kube_apiserver_answers_while_etcd_recovers_is_retried(
    error: Exception, recovering: bool
) -> None:
    assert is_recovering(error) is recovering


def failing(errors: list[Exception], answer: str = "ok") -> Callable[[], str]:
    def call() -> str:
        if errors:
            raise errors.pop(0)
        return answer

    return call


def test_a_call_is_made_again_until_kube_apiserver_answers() -> None:
    errors: list[Exception] = [api_error(504), ConnectionResetError(), api_error(503)]
    assert while_recovering(failing(errors), first_pause_s=0.0) == "ok"
    assert errors == []


def test_a_retried_write_that_landed_the_first_time_is_done() -> None:
    errors: list[Exception] = [api_error(504), api_error(404, "not found")]
    assert while_recovering(failing(errors), done=(404,), first_pause_s=0.0) is None


def test_the_retries_end_at_the_deadline_with_the_last_error() -> None:
    errors: list[Exception] = [api_error(504)] * 1000
    with pytest.raises(k8s.ApiException) as raised:
        while_recovering(failing(errors), deadline_s=0.05, first_pause_s=0.01)
    assert raised.value.status == 504
    assert len(errors) < 1000


def test_an_answer_about_the_call_itself_is_not_retried() -> None:
    errors: list[Exception] = [api_error(403, "denied the request"), api_error(504)]
    with pytest.raises(k8s.ApiException) as raised:
        while_recovering(failing(errors), first_pause_s=0.0)
    assert raised.value.status == 403 and len(errors) == 1
