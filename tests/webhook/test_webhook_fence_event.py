"""The Warning Event of a fenced ledger (``QuotaLedgerRebuilt``) is on the TenantPolicy as
``kubectl describe tp`` finds Events: by the object's name, kind and uid (kubectl's
``searchEvents`` puts ``involvedObject.uid=<uid>`` in its field selector, so an Event without
the policy's uid is never shown there)."""

from __future__ import annotations

from typing import Any

from harness.builders import make_policy
from migslice.admission.ledger import Damage
from tests.local_api import Request, local_api
from webhook.quota import Fence
from webhook.service import fence_event_recorder
from webhook.state import ClusterState


def test_the_fence_event_names_the_tenant_policy_by_its_uid() -> None:
    posted: list[Any] = []

    def answer(request: Request) -> tuple[int, Any]:
        if request.method == "POST":
            posted.append(request)
        return 201, request.body or {}

    state = ClusterState()
    state.upsert_policy(make_policy("team-a"))
    with local_api(answer) as transport:
        fence_event_recorder(transport, state)(Fence("team-a", Damage.LOST, "ledger lost"))
    (post,) = posted
    assert post.path == "/api/v1/namespaces/default/events"
    event = post.body
    assert event["reason"] == "QuotaLedgerRebuilt" and event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": "migslice.io/v1alpha1",
        "kind": "TenantPolicy",
        "name": "team-a",
        "uid": "uid-policy-team-a",
    }


def test_a_policy_deleted_or_replaced_is_named_by_its_new_uid_or_none() -> None:
    state = ClusterState()
    state.upsert_policy(make_policy("team-a"))
    replaced = make_policy("team-a", generation=2)
    replaced["metadata"]["uid"] = "uid-2"
    state.upsert_policy(replaced)
    assert state.policy_uid("team-a") == "uid-2"
    state.delete_policy("team-a")
    assert state.policy_uid("team-a") is None
