"""decide(): tenant by namespace, sizes to MIG resources, direct requests under the same
policy, tiers and isolation, per-pod limits, quota in slice units, and patches that apply."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_created_pod, make_policy
from migslice.admission import (
    AdmissionDecision,
    AdmissionSettings,
    SliceUsage,
    StaticView,
    Unmatched,
    decide,
    usage_of,
)
from migslice.admission.decision import PodAdmission
from migslice.mig import CATALOG
from migslice.objects import gpu_requests
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.policy import Offer, parse_tenant_policy, read_tenant_policy

A100 = Offer("NVIDIA-A100-SXM4-80GB", CATALOG.get("A100-80GB"))
H100 = Offer("NVIDIA-H100-80GB-HBM3", CATALOG.get("H100-80GB"))


def view(*policies: dict[str, Any], usage: dict[str, SliceUsage] | None = None) -> StaticView:
    return StaticView(
        tuple(parse_tenant_policy(p) for p in policies), (A100, H100), {}, usage or {}
    )


def run(
    pod: dict[str, Any], cluster: StaticView, settings: AdmissionSettings | None = None
) -> tuple[AdmissionDecision, dict[str, Any]]:
    namespace = pod["metadata"]["namespace"]
    decision = decide(
        PodAdmission(namespace, pod, "uid-1"), cluster, settings or AdmissionSettings()
    )
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), [op.to_json() for op in decision.patch])
    return decision, patched


def test_a_pod_without_gpu_intent_passes_untouched() -> None:
    decision, _ = run(make_created_pod(), view(make_policy()))
    assert decision.allowed and decision.patch == () and decision.reason == "no-gpu"


def test_a_size_becomes_the_mig_resource_annotations_affinity_and_scheduler() -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    decision, patched = run(pod, view(make_policy()))
    assert decision.allowed
    container = patched["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-2g.20gb": "1"}
    assert container["resources"]["requests"] == {"nvidia.com/mig-2g.20gb": "1"}
    annotations = patched["metadata"]["annotations"]
    assert annotations["migslice.io/tenant"] == "team-a"
    assert annotations["migslice.io/profile"] == "2g.20gb"
    assert annotations["migslice.io/policy"] == "team-a@1"
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-H100-80GB-HBM3",
    ]
    assert patched["spec"]["schedulerName"] == "migslice-scheduler"
    assert decision.charge == SliceUsage(1, 2, 2, (("2g.20gb", 1),))


def test_memory_compute_count_and_container_annotations_are_honoured() -> None:
    pod = make_created_pod(
        containers=("sidecar", "main"),
        annotations={
            "migslice.io/gpu-memory": "20Gi",
            "migslice.io/gpu-compute": "3",
            "migslice.io/gpu-count": "2",
            "migslice.io/gpu-container": "main",
        },
    )
    decision, patched = run(pod, view(make_policy()))
    assert decision.allowed
    assert patched["spec"]["containers"][1]["resources"]["limits"] == {
        "nvidia.com/mig-3g.40gb": "2"
    }
    assert patched["spec"]["containers"][0]["resources"] == {}


def test_the_policy_default_size_applies_when_only_a_count_is_given() -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-count": "1"})
    decision, _ = run(pod, view(make_policy(defaultSize="small")))
    assert decision.allowed and decision.charge is not None
    assert decision.charge.profiles == (("1g.10gb", 1),)


DENIALS = [
    (
        {"migslice.io/gpu-size": "huge"},
        {},
        "unknown-size",
        'size "huge" is not defined by policy "team-a" (spec.sizes); '
        "defined sizes: small, medium, large",
    ),
    (
        {"migslice.io/gpu-memory": "lots"},
        {},
        "bad-annotation",
        "annotation migslice.io/gpu-memory: 'lots' is not a Kubernetes quantity",
    ),
    ({"migslice.io/gpu-memory": "200Gi"}, {}, "no-profile", "the largest allowed is 7g.80gb"),
    (
        {"migslice.io/gpu-size": "small", "migslice.io/gpu-memory": "1Gi"},
        {},
        "bad-annotation",
        "both set",
    ),
    (
        {"migslice.io/gpu-size": "small", "migslice.io/gpu-count": "3"},
        {"maxSlicesPerPod": 2},
        "max-slices",
        'asks for 3 GPU slices; policy "team-a" allows 2 per pod (spec.maxSlicesPerPod)',
    ),
    (
        {"migslice.io/gpu-size": "small", "migslice.io/gpu-container": "nope"},
        {},
        "bad-annotation",
        'names container "nope"',
    ),
    ({"migslice.io/gpu-count": "1"}, {}, "bad-annotation", "no default size (spec.defaultSize)"),
]


@pytest.mark.parametrize(
    ("annotations", "spec", "reason", "text"),
    DENIALS,
    ids=[d[2] + "-" + str(i) for i, d in enumerate(DENIALS)],
)
def test_bad_requests_are_denied_with_a_message_that_names_the_fix(
    annotations: dict[str, str], spec: dict[str, Any], reason: str, text: str
) -> None:
    decision, _ = run(make_created_pod(annotations=annotations), view(make_policy(**spec)))
    assert not decision.allowed
    assert decision.reason == reason
    assert text in decision.message
    assert decision.message.startswith("pod team-a/train-*")


def test_over_quota_is_denied_with_the_numbers_and_the_policy_field() -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    cluster = view(make_policy(quota={"computeSlices": 8}), usage={"team-a": SliceUsage(4, 7, 7)})
    decision, _ = run(pod, cluster)
    assert not decision.allowed and decision.reason == "quota"
    assert decision.message == (
        'tenant "team-a" would use 9 compute slices (7 in use or admitted + 2 for this pod); '
        'policy "team-a" allows 8 (spec.quota.computeSlices)'
    )


def test_per_profile_quota_is_checked() -> None:
    pod = make_created_pod(limits={"nvidia.com/mig-3g.40gb": "1"})
    cluster = view(
        make_policy(quota={"profiles": {"3g.40gb": 1}}),
        usage={"team-a": SliceUsage(1, 3, 4, (("3g.40gb", 1),))},
    )
    decision, _ = run(pod, cluster)
    assert not decision.allowed
    assert "(spec.quota.profiles.3g.40gb)" in decision.message


def test_direct_mig_requests_are_checked_against_the_same_policy() -> None:
    pod = make_created_pod(limits={"nvidia.com/mig-4g.40gb": "1"})
    decision, _ = run(pod, view(make_policy(deniedProfiles=["4g.40gb"])))
    assert not decision.allowed and decision.reason == "profile-not-allowed"
    assert "spec.deniedProfiles: 4g.40gb" in decision.message


def test_direct_requests_that_pass_get_annotations_and_affinity_but_keep_their_resources() -> None:
    pod = make_created_pod(limits={"nvidia.com/mig-1g.10gb": "1"})
    decision, patched = run(pod, view(make_policy()))
    assert decision.allowed
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/mig-1g.10gb": "1"
    }
    assert patched["metadata"]["annotations"]["migslice.io/profile"] == "1g.10gb"


def test_a_time_sliced_mig_replica_is_refused_naming_what_to_ask_instead() -> None:
    """``nvidia.com/mig-1g.10gb.shared`` is what the device plugin's time-slicing with
    renameByDefault advertises: replicas of one instance shared between pods. It was refused
    as "not a MIG profile resource", which it is, shared."""
    pod = make_created_pod(limits={"nvidia.com/mig-1g.10gb.shared": "1"})
    decision, _ = run(pod, view(make_policy(isolation="process", tiers=["mig", "shared"])))
    assert not decision.allowed
    assert "time-sliced replica of a 1g.10gb MIG instance" in decision.message
    assert "nvidia.com/mig-1g.10gb" in decision.message
    assert "nvidia.com/gpu.shared" in decision.message


def test_hardware_isolation_never_gets_shared_or_mps_gpus() -> None:
    pod = make_created_pod(limits={"nvidia.com/gpu.shared": "1"})
    decision, _ = run(pod, view(make_policy(isolation="hardware")))
    assert not decision.allowed and decision.reason == "tier-not-allowed"
    assert 'isolation "hardware"' in decision.message


def test_whole_gpus_need_the_dedicated_tier() -> None:
    pod = make_created_pod(limits={"nvidia.com/gpu": "1"})
    assert not run(pod, view(make_policy()))[0].allowed
    decision, _ = run(pod, view(make_policy(tiers=["mig", "dedicated"])))
    assert decision.allowed and decision.charge == SliceUsage(1, 7, 8)


def test_a_shared_size_gets_a_shared_gpu_on_time_slicing_nodes() -> None:
    spec = {
        "isolation": "process",
        "tiers": ["mig", "shared"],
        "sizes": {"notebook": {"memory": "8Gi", "tier": "shared"}},
    }
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "notebook"})
    decision, patched = run(pod, view(make_policy(**spec)))
    assert decision.allowed
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu.shared": "1"}
    expression = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expression == {
        "key": "nvidia.com/gpu.sharing-strategy",
        "operator": "In",
        "values": ["time-slicing"],
    }


def test_a_namespace_without_a_policy_is_denied_by_default_and_allowed_when_configured() -> None:
    pod = make_created_pod(namespace="other", annotations={"migslice.io/gpu-size": "small"})
    decision, _ = run(pod, view(make_policy()))
    assert not decision.allowed and decision.reason == "no-policy"
    assert 'namespace "other" belongs to no TenantPolicy' in decision.message
    lenient = AdmissionSettings(unmatched_namespaces=Unmatched.ALLOW)
    decision, _ = run(pod, view(make_policy()), lenient)
    assert decision.allowed and decision.patch == () and decision.warnings


def test_a_namespace_whose_policy_is_invalid_is_denied_naming_it_even_when_unmatched_pass() -> None:
    """A policy stored unreadable (before the validating webhook was there) left its
    namespaces "unmatched": admitted untouched with no quota under --unmatched-namespaces
    allow, and told to join a policy they are already in under deny."""
    name, partial, errors = read_tenant_policy(make_policy(sizes={"x": {"memory": "lots"}}))
    assert partial is not None and errors
    problems = "; ".join(str(e) for e in errors)
    broken = StaticView(offer_list=(A100, H100), invalid_list=((partial, problems),))
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    for settings_used in (
        AdmissionSettings(),
        AdmissionSettings(unmatched_namespaces=Unmatched.ALLOW),
    ):
        decision, _ = run(pod, broken, settings_used)
        assert not decision.allowed and decision.reason == "invalid-policy"
        assert f'namespace "team-a" belongs to TenantPolicy "{name}", which is invalid' in (
            decision.message
        )
        assert "spec.sizes.x.memory" in decision.message
    other = make_created_pod(namespace="other", annotations={"migslice.io/gpu-size": "small"})
    decision, _ = run(other, broken)
    assert decision.reason == "no-policy"


@pytest.mark.parametrize(
    ("resource", "instead"),
    [
        ("migslice-mig-1g.10gb", "ask for nvidia.com/mig-1g.10gb (the DeviceClass's"),
        ("gpu.nvidia.com", "ask for nvidia.com/gpu (the DeviceClass's"),
        ("mig.nvidia.com", "ask for a MIG profile as nvidia.com/mig-<profile>, or by size"),
    ],
)
def test_a_device_class_implicit_resource_is_refused_naming_the_one_to_ask(
    resource: str, instead: str
) -> None:
    """KEP-5004: every DeviceClass serves deviceclass.resource.kubernetes.io/<class>. Read as
    asking nothing, such a pod passed a quota of 0 and every node."""
    implicit = f"deviceclass.resource.kubernetes.io/{resource}"
    pod = make_created_pod(limits={implicit: "1"})
    decision, _ = run(pod, view(make_policy(quota={"instances": 0})))
    assert not decision.allowed and decision.reason == "implicit-device-class"
    assert decision.code == 422
    assert f"asks for {implicit}, a DeviceClass's implicit extended resource" in decision.message
    assert instead in decision.message
    elsewhere = make_created_pod(namespace="other", limits={implicit: "1"})
    assert run(elsewhere, view(make_policy()))[0].reason == "no-gpu"  # no tenant there
    other_class = make_created_pod(limits={"deviceclass.resource.kubernetes.io/fpga.x.io": "1"})
    assert run(other_class, view(make_policy()))[0].reason == "no-gpu"


ADMINS_GPU_CLASS = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)


@pytest.mark.parametrize(
    ("selectors", "extended", "instead"),
    [
        (
            [ADMINS_GPU_CLASS],
            None,
            "ask for a MIG profile as nvidia.com/mig-<profile>, or by size",
        ),
        ([], None, "ask for a MIG profile as nvidia.com/mig-<profile>, or by size"),
        (
            [ADMINS_GPU_CLASS],
            "nvidia.com/gpu",
            "ask for nvidia.com/gpu (the DeviceClass's",
        ),
    ],
    ids=["an-admins-gpu-class", "a-catch-all-class", "with-an-nvidia-extended-resource"],
)
def test_the_implicit_resource_of_an_admins_class_that_may_give_nvidia_gpus_is_refused(
    selectors: list[str], extended: str | None, instead: str
) -> None:
    """KEP-5004 gives every DeviceClass its implicit extended resource, not only NVIDIA's and
    migslice's: an admin's class of NVIDIA's GPUs (or one naming no driver, which may be given
    them) under another name served a tenant's pod unchecked and outside its node pool."""
    raw = {
        "metadata": {"name": "big-gpus"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in selectors]},
    }
    if extended:
        raw["spec"]["extendedResourceName"] = extended
    nic = {
        "metadata": {"name": "nic"},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
    }
    classes = {f.name: f for f in map(device_class_facts_from_raw, (raw, nic)) if f is not None}
    cluster = replace(view(make_policy()), classes=classes)
    implicit = "deviceclass.resource.kubernetes.io/big-gpus"
    decision, _ = run(make_created_pod(limits={implicit: "1"}), cluster)
    assert (decision.allowed, decision.reason) == (False, "implicit-device-class")
    assert instead in decision.message
    nic_pod = make_created_pod(limits={"deviceclass.resource.kubernetes.io/nic": "1"})
    assert run(nic_pod, cluster)[0].reason == "no-gpu"


def test_two_policies_selecting_one_namespace_deny_with_both_names() -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    decision, _ = run(pod, view(make_policy("team-a"), make_policy("team-b")))
    assert not decision.allowed and decision.reason == "conflicting-policies"
    assert 'TenantPolicies "team-a" and "team-b"' in decision.message


def test_existing_required_affinity_terms_each_get_the_product_requirement_and_a_twin() -> None:
    """Each term gets ``product In [...]``; a twin of it with ``product DoesNotExist`` lets a
    DRA node without GFD labels match too (the policy narrows no product)."""
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                ]
            }
        }
    }
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"}, affinity=affinity)
    _, patched = run(pod, view(make_policy()))
    terms = patched["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [len(t["matchExpressions"]) for t in terms] == [2, 1, 2, 1]
    product = [t["matchExpressions"][-1] for t in terms]
    assert [p["operator"] for p in product] == ["In", "In", "DoesNotExist", "DoesNotExist"]
    assert terms[3]["matchFields"] == terms[1]["matchFields"]
    again = jsonpatch.apply_patch(patched, [])
    decision, _ = run(again, view(make_policy()))
    assert not [op for op in decision.patch if "affinity" in op.path]


def test_the_policy_node_selector_is_merged_and_a_conflict_is_denied() -> None:
    policy = make_policy(nodeSelector={"pool": "gpu-a"})
    pod = make_created_pod(
        annotations={"migslice.io/gpu-size": "small"}, node_selector={"zone": "x"}
    )
    _, patched = run(pod, view(policy))
    assert patched["spec"]["nodeSelector"] == {"zone": "x", "pool": "gpu-a"}
    clash = make_created_pod(
        annotations={"migslice.io/gpu-size": "small"}, node_selector={"pool": "cpu"}
    )
    decision, _ = run(clash, view(policy))
    assert not decision.allowed and "(spec.nodeSelector)" in decision.message


def test_reinvocation_on_the_patched_pod_adds_nothing_twice() -> None:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "medium"})
    cluster = view(make_policy())
    _, once = run(pod, cluster)
    decision, twice = run(once, cluster)
    assert decision.allowed
    assert twice["spec"] == once["spec"]


def test_annotations_plus_a_different_direct_request_is_refused() -> None:
    pod = make_created_pod(
        annotations={"migslice.io/gpu-size": "small"}, limits={"nvidia.com/mig-7g.80gb": "1"}
    )
    decision, _ = run(pod, view(make_policy()))
    assert not decision.allowed and decision.reason == "mixed-request"


def with_gpu_containers(
    pod: dict[str, Any],
    init: Sequence[tuple[str, int, bool]] = (),
    app: Sequence[tuple[str, int]] = (),
) -> dict[str, Any]:
    """``pod`` with GPU init containers ((profile, count, is_sidecar), in order) and extra app
    containers ((profile, count)), each with limits and requests as the apiserver defaults them."""

    def container(name: str, profile: str, count: int) -> dict[str, Any]:
        amount = {f"nvidia.com/mig-{profile}": str(count)}
        return {"name": name, "image": "x", "resources": {"limits": amount, "requests": amount}}

    pod = copy.deepcopy(pod)
    inits = []
    for i, (profile, count, sidecar) in enumerate(init):
        built = container(f"init-{i}", profile, count)
        if sidecar:
            built["restartPolicy"] = "Always"
        inits.append(built)
    if inits:
        pod["spec"]["initContainers"] = inits
    for i, (profile, count) in enumerate(app):
        pod["spec"]["containers"].append(container(f"app-{i}", profile, count))
    return pod


def test_an_init_container_gpu_is_charged_as_kubernetes_counts_it_not_added_twice() -> None:
    pod = with_gpu_containers(
        make_created_pod(limits={"nvidia.com/mig-1g.10gb": "1"}), init=[("1g.10gb", 1, False)]
    )
    decision, _ = run(pod, view(make_policy(quota={"instances": 1})))
    assert decision.allowed, decision.message
    assert decision.charge == SliceUsage(1, 1, 1, (("1g.10gb", 1),))


GPU_CONTAINERS = st.tuples(
    st.lists(
        st.tuples(st.sampled_from(["1g.10gb", "2g.20gb"]), st.integers(1, 3), st.booleans()),
        max_size=3,
    ),
    st.lists(st.tuples(st.sampled_from(["1g.10gb", "2g.20gb"]), st.integers(1, 3)), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(GPU_CONTAINERS)
def test_the_admission_charge_is_what_the_pod_holds_once_seen_and_what_the_scheduler_counts(
    containers: tuple[list[tuple[str, int, bool]], list[tuple[str, int]]],
) -> None:
    init, app = containers
    pod = with_gpu_containers(
        make_created_pod(limits={"nvidia.com/mig-1g.10gb": "1"}), init=init, app=app
    )
    held = dict(gpu_requests(pod))
    assert held == dict(gpu_requests(pod))
    decision, _ = run(pod, StaticView((parse_tenant_policy(make_policy()),), (A100,)))
    assert decision.allowed, decision.message
    assert decision.charge == usage_of(held, ("A100-80GB",))


def resources(limits: dict[str, str] | None, requests: dict[str, str] | None) -> dict[str, Any]:
    pod = make_created_pod()
    section = {"limits": limits, "requests": requests}
    pod["spec"]["containers"][0]["resources"] = {k: v for k, v in section.items() if v is not None}
    return pod


RESOURCE_DENIALS = [
    (
        None,
        {"nvidia.com/mig-1g.10gb": "1"},
        'container "main" requests nvidia.com/mig-1g.10gb: 1 but sets no limit for it',
    ),
    (
        {"nvidia.com/mig-1g.10gb": "2"},
        {"nvidia.com/mig-1g.10gb": "1"},
        'container "main" requests nvidia.com/mig-1g.10gb: 1 but limits it to 2',
    ),
    (
        {"nvidia.com/mig-1g.10gb": "500m"},
        {"nvidia.com/mig-1g.10gb": "500m"},
        'container "main" sets nvidia.com/mig-1g.10gb: 500m; GPU resources are whole units',
    ),
    (
        {"nvidia.com/gpu": "-1"},
        {"nvidia.com/gpu": "-1"},
        'container "main" sets nvidia.com/gpu: -1; GPU resources are whole units',
    ),
]


@pytest.mark.parametrize(
    ("limits", "requests", "text"),
    RESOURCE_DENIALS,
    ids=["requests-without-limits", "requests-not-limits", "milli-units", "negative"],
)
def test_gpu_resources_kubernetes_would_refuse_are_denied_with_the_field_to_fix(
    limits: dict[str, str] | None, requests: dict[str, str] | None, text: str
) -> None:
    decision, _ = run(resources(limits, requests), view(make_policy(quota={"instances": 4})))
    assert not decision.allowed
    assert (decision.reason, decision.code, decision.charge) == ("bad-resource", 422, None)
    assert decision.message.startswith(f"pod team-a/train-*: {text}"), decision.message


def test_limits_alone_are_enough_for_a_gpu_resource() -> None:
    decision, _ = run(resources({"nvidia.com/mig-1g.10gb": "1"}, None), view(make_policy()))
    assert decision.allowed and decision.charge == SliceUsage(1, 1, 1, (("1g.10gb", 1),))


def test_a_pod_larger_than_a_lowered_quota_is_told_it_never_fits_and_what_to_raise() -> None:
    """Measured before: after spec.quota.computeSlices went down to 2, a medium (2g) pod asking
    3 was denied as one that waits for usage to fall (reason quota): a gated pod waited for
    ever, told it would be decided again as the tenant's usage falls."""
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "large"})
    cluster = view(make_policy(quota={"computeSlices": 2}), usage={"team-a": SliceUsage(1, 1, 1)})
    decision, _ = run(pod, cluster)
    assert not decision.allowed and decision.reason == "larger-than-quota"
    assert decision.message == (
        'tenant "team-a" would use 4 compute slices (1 in use or admitted + 3 for this pod); '
        'policy "team-a" allows 2 (spec.quota.computeSlices); this pod alone asks more than the '
        "limit, so it is refused whatever the tenant's usage: ask for less, or have a cluster "
        "admin raise spec.quota.computeSlices to at least 3"
    )
    fits = view(make_policy(quota={"computeSlices": 3}), usage={"team-a": SliceUsage(1, 1, 1)})
    assert run(pod, fits)[0].reason == "quota"  # it fits once usage falls: it waits
