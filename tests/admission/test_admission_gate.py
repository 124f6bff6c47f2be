"""The admission gate in the core: the webhook's patch takes it off an admitted pod, and a pod
created behind it while the webhook was down is decided later, in place (docs/outages.md)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from harness.builders import make_created_pod, make_gated_pod, make_policy
from migslice.admission import (
    AdmissionSettings,
    SliceUsage,
    StaticView,
    Unmatched,
    decide,
)
from migslice.admission.decision import PodAdmission
from migslice.admission.gate import (
    ADMITTED,
    DENIED_REASON,
    WAITING_REASON,
    admission_uid,
    admitted_condition,
    gated_pod,
    in_place_refusal,
    note_of,
    queue,
    ungate_patch,
)
from migslice.admission.patch import remove_scheduling_gate
from migslice.mig import CATALOG
from migslice.objects.pods import is_admission_gated, slim_pod
from migslice.policy import Offer, parse_tenant_policy

A100 = Offer("NVIDIA-A100-SXM4-80GB", CATALOG.get("A100-80GB"))
DIRECT = {"nvidia.com/mig-1g.10gb": "1"}
GATE = "migslice.io/admission"


def view(quota: int | None = None, used: int = 0) -> StaticView:
    spec: dict[str, Any] = {} if quota is None else {"quota": {"instances": quota}}
    usage = {"team-a": SliceUsage(used, used, used)} if used else {}
    return StaticView((parse_tenant_policy(make_policy(**spec)),), (A100,), {}, usage)


def apply(pod: dict[str, Any], ops: Any) -> dict[str, Any]:
    return jsonpatch.apply_patch(copy.deepcopy(pod), [op.to_json() for op in ops])


def gates_of(pod: dict[str, Any]) -> list[str]:
    return [gate["name"] for gate in pod["spec"].get("schedulingGates", [])]


# -- the webhook's own patch -------------------------------------------------------------------


def test_an_admitted_pod_loses_the_admission_gate_and_keeps_its_other_gates() -> None:
    pod = make_created_pod(limits=DIRECT)
    pod["spec"]["schedulingGates"] = [{"name": "example.com/a"}, {"name": GATE}]
    decision = decide(PodAdmission("team-a", pod, "uid-1"), view())
    assert decision.allowed
    assert gates_of(apply(pod, decision.patch)) == ["example.com/a"]


def test_a_denied_pod_keeps_the_gate_and_is_not_created() -> None:
    pod = make_created_pod(limits=DIRECT)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    decision = decide(PodAdmission("team-a", pod, "uid-1"), view(quota=1, used=1))
    assert not decision.allowed and decision.reason == "quota" and decision.patch == ()


def test_a_pod_of_a_namespace_without_policy_allowed_untouched_is_ungated_too() -> None:
    pod = make_created_pod(namespace="elsewhere", limits=DIRECT)
    pod["spec"]["schedulingGates"] = [{"name": GATE}]
    settings = AdmissionSettings(unmatched_namespaces=Unmatched.ALLOW)
    decision = decide(PodAdmission("elsewhere", pod, "uid-1"), view(), settings)
    assert decision.allowed and decision.reason == "no-policy"
    assert gates_of(apply(pod, decision.patch)) == []


def test_every_entry_of_the_gate_is_removed_highest_index_first() -> None:
    pod = make_created_pod()
    pod["spec"]["schedulingGates"] = [{"name": GATE}, {"name": "x/y"}, {"name": GATE}]
    ops = remove_scheduling_gate(pod, GATE)
    assert [op.path for op in ops] == ["/spec/schedulingGates/2", "/spec/schedulingGates/0"]
    assert gates_of(apply(pod, ops)) == ["x/y"]
    assert remove_scheduling_gate(make_created_pod(), GATE) == []


# -- pods behind the gate ------------------------------------------------------------------------


def test_only_the_admission_gate_makes_a_pod_gated() -> None:
    assert is_admission_gated(make_gated_pod("a"))
    assert not is_admission_gated(make_gated_pod("b", gates=("example.com/a",)))
    assert not is_admission_gated(make_created_pod())


def test_the_pod_cache_keeps_a_gated_pod_whole_and_others_slim() -> None:
    gated = make_gated_pod("a", limits=DIRECT)
    gated["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    kept = slim_pod(gated)
    assert "managedFields" not in kept["metadata"]
    assert kept["spec"] == gated["spec"] and kept["metadata"]["uid"] == "uid-team-a-a"
    assert "schedulingGates" not in slim_pod(make_gated_pod("b", gates=()))["spec"]


def test_the_queue_is_oldest_first_and_skips_pods_not_stored_or_not_gated() -> None:
    pods = [
        make_gated_pod("late", created="2025-05-01T00:00:09Z"),
        make_gated_pod("b", created="2025-05-01T00:00:01Z"),
        make_gated_pod("a", created="2025-05-01T00:00:01Z"),
        make_gated_pod("free", gates=()),
        make_created_pod(limits=DIRECT) | {"spec": {"schedulingGates": [{"name": GATE}]}},
    ]
    assert [pod.name for pod in queue(pods)] == ["a", "b", "late"]


def test_a_gated_pod_is_admitted_under_a_request_uid_of_its_own() -> None:
    pod = gated_pod(make_gated_pod("a", limits=DIRECT))
    assert pod is not None
    assert pod.admission.request_uid == admission_uid("uid-team-a-a") == "gate-uid-team-a-a"


def test_the_ungate_patch_applies_to_the_stored_pod_as_the_apiserver_allows() -> None:
    """A gated pod may gain annotations, node selector keys and node affinity requirements,
    and lose gates; its resources and scheduler are immutable and stay as they are."""
    raw = make_gated_pod("a", limits=DIRECT, scheduler_name="default-scheduler")
    pod = gated_pod(raw)
    assert pod is not None
    decision = decide(pod.admission, view(quota=2))
    assert decision.allowed
    ops = ungate_patch(pod, decision)
    assert ops[0].to_json() == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    patched = apply(raw, ops)
    assert gates_of(patched) == []
    assert patched["spec"]["schedulerName"] == "default-scheduler"
    assert patched["spec"]["containers"] == raw["spec"]["containers"]
    annotations = patched["metadata"]["annotations"]
    assert annotations["migslice.io/reservation"] == "gate-uid-team-a-a"
    assert annotations["migslice.io/tenant"] == "team-a"
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"
    stale = copy.deepcopy(raw)
    stale["metadata"]["resourceVersion"] = "8"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        apply(stale, ops)


def test_the_ungate_patch_adds_no_node_selector_term_to_a_pod_that_has_some() -> None:
    """kube-apiserver lets a gated pod's required node affinity gain expressions in the terms
    it has, never a term more (validateNodeAffinityMutation: "no additions/deletions to
    non-empty NodeSelectorTerms list are allowed"). The patch appended the twin of each term
    (product DoesNotExist, for nodes without GPU Feature Discovery): refused with 422 every
    round, read as a pod changed since, the pod stayed gated while its charge was renewed."""
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    required = {"nodeSelectorTerms": [term]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    raw = make_gated_pod("a", limits=DIRECT, affinity=affinity)
    pod = gated_pod(raw)
    assert pod is not None
    decision = decide(pod.admission, view(quota=2))
    assert decision.allowed
    patched = apply(raw, ungate_patch(pod, decision))
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                *term["matchExpressions"],
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [A100.product]},
            ]
        }
    ]
    assert gates_of(patched) == []


def test_a_pod_without_gpu_intent_is_ungated_without_a_charge() -> None:
    pod = gated_pod(make_gated_pod("a"))
    assert pod is not None
    decision = decide(pod.admission, view())
    assert decision.reason == "no-gpu" and decision.charge is None
    assert gates_of(apply(pod.raw_pod | {}, ungate_patch(pod, decision))) == []


def test_a_sized_pod_created_while_the_webhook_was_down_cannot_be_admitted_in_place() -> None:
    pod = gated_pod(make_gated_pod("a", annotations={"migslice.io/gpu-size": "small"}))
    assert pod is not None
    refusal = in_place_refusal(pod)
    assert refusal is not None and refusal.reason == "created-unsized"
    assert "migslice.io/gpu-size: small" in refusal.message
    assert "delete it and create it again" in refusal.message
    direct = gated_pod(make_gated_pod("b", limits=DIRECT))
    assert direct is not None and in_place_refusal(direct) is None


@pytest.mark.parametrize(
    ("quota", "used", "reason", "warning"),
    [(2, 0, ADMITTED, False), (2, 2, WAITING_REASON, True), (0, 0, DENIED_REASON, True)],
    ids=["admitted", "waiting-for-quota", "denied"],
)
def test_what_the_reconciler_tells_says_the_reason_and_the_numbers(
    quota: int, used: int, reason: str, warning: bool
) -> None:
    pod = gated_pod(make_gated_pod("a", limits=DIRECT))
    assert pod is not None
    spec: dict[str, Any] = {"quota": {"instances": quota}}
    if quota == 0:
        spec = {"deniedProfiles": ["1g.10gb"]}
    usage = {"team-a": SliceUsage(used, used, used)} if used else {}
    cluster = StaticView((parse_tenant_policy(make_policy(**spec)),), (A100,), {}, usage)
    note = note_of(pod, decide(pod.admission, cluster))
    assert (note.reason, note.warning) == (reason, warning)
    condition = admitted_condition(note, "2025-05-01T00:00:00Z")
    assert condition["type"] == "migslice.io/Admitted"
    assert condition["status"] == ("True" if reason == ADMITTED else "False")
    if reason == WAITING_REASON:
        assert note.waiting
        assert "would use 3 GPU instances (2 in use or admitted + 1 for this pod)" in note.message
        assert "spec.quota.instances" in note.message and "stays gated" in note.message


def test_the_admitted_conditions_transition_time_moves_with_its_status_only() -> None:
    """A pod waiting for quota is told again as the message changes (the tenant's usage); its
    condition's lastTransitionTime stayed the time it first became False only if the status
    did not change (Kubernetes API conventions), and moves when it is admitted."""
    raw = make_gated_pod("a", limits=DIRECT)
    pod = gated_pod(raw)
    assert pod is not None
    usage = {"team-a": SliceUsage(2, 2, 2)}
    cluster = StaticView(
        (parse_tenant_policy(make_policy(quota={"instances": 2})),), (A100,), {}, usage
    )
    waiting = note_of(pod, decide(pod.admission, cluster))
    first = admitted_condition(waiting, "2025-05-01T00:00:00Z", raw)
    assert first["lastTransitionTime"] == "2025-05-01T00:00:00Z"
    raw["status"] = {"conditions": [{**first, "message": "an older count"}]}
    again = admitted_condition(waiting, "2025-05-01T00:05:00Z", raw)
    assert again["status"] == "False" and again["lastTransitionTime"] == "2025-05-01T00:00:00Z"
    cluster = StaticView((parse_tenant_policy(make_policy(quota={"instances": 2})),), (A100,))
    admitted = note_of(pod, decide(pod.admission, cluster))
    assert admitted.admitted
    moved = admitted_condition(admitted, "2025-05-01T00:09:00Z", raw)
    assert moved["status"] == "True" and moved["lastTransitionTime"] == "2025-05-01T00:09:00Z"


def test_a_gated_pod_larger_than_a_lowered_quota_is_denied_not_told_to_wait_for_usage() -> None:
    """Measured before: with spec.quota.instances lowered to 1, a gated pod asking 2 was told
    it waits and 'is decided again, oldest first, as the tenant's usage falls': it never fits."""
    pod = gated_pod(make_gated_pod("a", limits={"nvidia.com/mig-1g.10gb": "2"}))
    assert pod is not None
    note = note_of(pod, decide(pod.admission, view(quota=1)))
    assert not note.admitted and not note.waiting and note.reason == DENIED_REASON
    assert "spec.quota.instances to at least 2" in note.message
    assert "as the tenant's usage falls" not in note.message
    assert note_of(pod, decide(pod.admission, view(quota=2, used=1))).waiting
