"""decide_claim(): a tenant's own ResourceClaims and ResourceClaimTemplates against its
TenantPolicy (profiles, products, isolation, what migslice reads exactly, per-claim limits,
quota in slice units), kube-scheduler's extended-resource claims paid for by their pod, and
pods of a deviceAPI: ResourceClaim tenant given claims from migslice's templates."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest
import yaml

from harness.builders import make_created_pod, make_policy
from migslice.admission import AdmissionSettings, SliceUsage, StaticView, decide
from migslice.admission.claims import ClaimAdmission, decide_claim, decide_claim_update
from migslice.admission.decision import AdmissionDecision, PodAdmission
from migslice.admission.view import TemplateFacts
from migslice.mig import CATALOG
from migslice.objects.claim_templates import migslice_claim_template
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.policy import Offer, parse_tenant_policy
from tests.dra_objects import make_claim, migslice_classes, profile_selector
from tests.paths import ROOT

A100 = Offer("NVIDIA-A100-SXM4-80GB", CATALOG.get("A100-80GB"))
H100 = Offer("NVIDIA-H100-80GB-HBM3", CATALOG.get("H100-80GB"))
SETTINGS = AdmissionSettings()


def classes(*extra: dict[str, Any]) -> dict[str, Any]:
    found = (device_class_facts_from_raw(c) for c in [*migslice_classes(), *extra])
    return {f.name: f for f in found if f is not None}


MPS_CLASS = {
    "metadata": {"name": "mig-mps"},
    "spec": {
        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
        "config": [
            {
                "opaque": {
                    "driver": "gpu.nvidia.com",
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "MigDeviceConfig",
                        "sharing": {"strategy": "MPS"},
                    },
                }
            }
        ],
    },
}
ANY_CLASS = {"metadata": {"name": "any-device"}, "spec": {}}
"""A class that names no driver (a catch-all): with a request's selectors it can reach NVIDIA's
GPUs."""
PCIE = "resource.kubernetes.io"
LOCAL_CLASS = {
    "metadata": {"name": "pcie-local"},
    "spec": {
        "selectors": [{"cel": {"expression": f"device.attributes['{PCIE}'].pcieRoot == 'pci0'"}}]
    },
}
NET_CLASS = {
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
}


def view(*policies: dict[str, Any], **kw: Any) -> StaticView:
    return StaticView(
        tuple(parse_tenant_policy(p) for p in policies or (make_policy(),)),
        (A100, H100),
        classes=classes(MPS_CLASS, NET_CLASS, ANY_CLASS, LOCAL_CLASS),
        **kw,
    )


def run_claim(
    claim: dict[str, Any], cluster: StaticView, *, template: bool = False
) -> tuple[AdmissionDecision, dict[str, Any]]:
    namespace = claim["metadata"]["namespace"]
    decision = decide_claim(ClaimAdmission(namespace, claim, "uid-1", template), cluster, SETTINGS)
    patched = jsonpatch.apply_patch(copy.deepcopy(claim), [op.to_json() for op in decision.patch])
    return decision, patched


def sharing(strategy: str, kind: str = "MigDeviceConfig") -> dict[str, Any]:
    return {
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": kind,
                "sharing": {"strategy": strategy},
            },
        }
    }


def claim_with(name: str = "train-1", **exactly: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "deviceClassName": "mig.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": profile_selector("1g.10gb")}}],
    }
    base.update(exactly)
    return make_claim(name, requests=[{"name": "gpu", "exactly": base}])


def with_config(claim: dict[str, Any], *configs: dict[str, Any]) -> dict[str, Any]:
    claim["spec"]["devices"]["config"] = list(configs)
    return claim


ONE_G = SliceUsage(1, 1, 1, (("1g.10gb", 1),))
ALLOWED = {"allowedProfiles": ["1g.10gb", "2g.20gb"]}
DENIALS = [
    (
        "a profile the policy does not list",
        make_claim("train-1", profile="3g.40gb"),
        make_policy(**ALLOWED),
        "profile-not-allowed",
        'claim team-a/train-1 asks for 3g.40gb; policy "team-a" allows 1g.10gb, 2g.20gb '
        "(spec.allowedProfiles)",
    ),
    (
        "a denied profile",
        make_claim("train-1", device_class="migslice-mig-2g.20gb", profile=None),
        make_policy(deniedProfiles=["2g.20gb"]),
        "profile-not-allowed",
        'claim team-a/train-1 asks for 2g.20gb; policy "team-a" denies it (spec.deniedProfiles)',
    ),
    (
        "a media variant not listed",
        make_claim("train-1", profile="1g.10gb+me"),
        make_policy(),
        "profile-not-allowed",
        "media or graphics variants only when listed (spec.allowedProfiles)",
    ),
    (
        "MPS in the claim's config",
        with_config(claim_with(), sharing("MPS")),
        make_policy(),
        "isolation",
        "claim team-a/train-1 asks for sharing strategy MPS (the claim's config); policy "
        '"team-a" is isolation: hardware (spec.isolation)',
    ),
    (
        "time-slicing of a whole-GPU config",
        with_config(claim_with(), sharing("TimeSlicing", "GpuConfig")),
        make_policy(),
        "isolation",
        "sharing strategy TimeSlicing (the claim's config)",
    ),
    (
        "MPS for a process-isolation tenant",
        with_config(claim_with(), sharing("MPS")),
        make_policy(isolation="process", tiers=["mig", "shared"]),
        "isolation",
        "is isolation: process with tiers mig, shared (spec.isolation, spec.tiers)",
    ),
    (
        "a class that configures MPS",
        claim_with(deviceClassName="mig-mps"),
        make_policy(),
        "isolation",
        "sharing strategy MPS (DeviceClass mig-mps)",
    ),
    (
        "adminAccess",
        claim_with(adminAccess=True),
        make_policy(),
        "isolation",
        "asks for request gpu: adminAccess (devices that other claims hold); policy "
        '"team-a" is isolation: hardware (spec.isolation)',
    ),
    (
        "a capacity request",
        claim_with(capacity={"requests": {"memory": "5Gi"}}),
        make_policy(),
        "isolation",
        "a capacity request (a consumable share of a device)",
    ),
    (
        "allocationMode All",
        claim_with(allocationMode="All"),
        make_policy(),
        "isolation",
        "allocationMode All (every matching device)",
    ),
    (
        "adminAccess for a tenant without hardware isolation",
        claim_with(adminAccess=True),
        make_policy(isolation="none", tiers=["mig", "mps"]),
        "unread-claim",
        "request gpu: adminAccess; migslice cannot read it exactly",
    ),
    (
        "firstAvailable",
        make_claim(
            "train-1",
            requests=[
                {
                    "name": "gpu",
                    "firstAvailable": [
                        {"name": "a", "deviceClassName": "migslice-mig-1g.10gb"},
                        {"name": "b", "deviceClassName": "migslice-mig-2g.20gb"},
                    ],
                }
            ],
        ),
        make_policy(),
        "unread-claim",
        "request gpu: firstAvailable sub-requests; migslice cannot read it exactly",
    ),
    (
        "a selector migslice does not read",
        claim_with(
            selectors=[
                {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile != '7g.80gb'"}}
            ]
        ),
        make_policy(),
        "unread-claim",
        "migslice reads requests of the form exactly",
    ),
    (
        "mig.nvidia.com without a profile",
        make_claim("train-1", profile=None),
        make_policy(),
        "unread-claim",
        "device type mig without one MIG profile",
    ),
    (
        "a class that does not exist",
        make_claim("train-1", device_class="gpu.example.com", profile=None),
        make_policy(),
        "unread-claim",
        "DeviceClass 'gpu.example.com' not known",
    ),
    (
        "whole GPUs without the dedicated tier",
        make_claim("train-1", device_class="gpu.nvidia.com", profile=None),
        make_policy(),
        "tier-not-allowed",
        'asks for whole GPUs; policy "team-a" allows tiers mig (spec.tiers)',
    ),
    (
        "a product the policy does not allow",
        claim_with(
            selectors=[
                {"cel": {"expression": profile_selector("1g.10gb")}},
                {
                    "cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].productName == "
                        "'NVIDIA H100 80GB HBM3'"
                    }
                },
            ]
        ),
        make_policy(allowedProducts=["A100-80GB"]),
        "no-model",
        'asks for 1g.10gb of productName "NVIDIA H100 80GB HBM3"; policy "team-a" allows '
        "A100-80GB (spec.allowedProducts)",
    ),
    (
        "any product while the policy narrows them",
        claim_with(),
        make_policy(allowedProducts=["A100-80GB"]),
        "no-model",
        "productName == '<product>' naming one",
    ),
    (
        "more slices than one pod may have",
        make_claim("train-1", count=3),
        make_policy(maxSlicesPerPod=2),
        "max-slices",
        'asks for 3 GPU slices; policy "team-a" allows 2 per pod (spec.maxSlicesPerPod)',
    ),
    (
        "over the compute quota",
        make_claim("train-1", device_class="migslice-mig-3g.40gb", profile=None),
        make_policy(quota={"computeSlices": 8}),
        "quota",
        'tenant "team-a" would use 9 compute slices (6 in use or admitted + 3 for this claim); '
        'policy "team-a" allows 8 (spec.quota.computeSlices)',
    ),
]


@pytest.mark.parametrize(
    ("claim", "policy", "reason", "message"),
    [d[1:] for d in DENIALS],
    ids=[d[0] for d in DENIALS],
)
def test_a_claim_against_its_policy_is_denied_naming_the_field(
    claim: dict[str, Any], policy: dict[str, Any], reason: str, message: str
) -> None:
    used = {"team-a": SliceUsage(2, 6, 4, (("3g.40gb", 2),))}
    decision, _ = run_claim(claim, view(policy, usage=used))
    assert (decision.allowed, decision.reason) == (False, reason), decision.message
    assert message in decision.message
    assert decision.charge is None


def test_an_allowed_claim_is_charged_and_carries_its_reservation() -> None:
    decision, patched = run_claim(make_claim("train-1", count=2), view())
    assert decision.allowed and decision.reason == "admitted"
    assert decision.charge == SliceUsage(2, 2, 2, (("1g.10gb", 2),))
    assert decision.reservation == "uid-1"
    annotations = patched["metadata"]["annotations"]
    assert annotations["migslice.io/reservation"] == "uid-1"
    assert annotations["migslice.io/tenant"] == "team-a"
    assert annotations["migslice.io/profile"] == "1g.10gb"


def test_a_claim_of_a_named_product_is_priced_on_that_model() -> None:
    claim = claim_with(
        deviceClassName="migslice-mig-1g.20gb",
        selectors=[
            {
                "cel": {
                    "expression": "device.attributes['gpu.nvidia.com'].productName == "
                    "'NVIDIA A100-SXM4-80GB'"
                }
            }
        ],
    )
    decision, _ = run_claim(claim, view())
    assert decision.charge == SliceUsage(1, 1, 2, (("1g.20gb", 1),))


def test_a_template_is_checked_but_not_charged() -> None:
    template = {
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"spec": make_claim("x", profile="3g.40gb")["spec"]},
    }
    decision, _ = run_claim(template, view(), template=True)
    assert decision.allowed and decision.charge is None and decision.patch == ()
    refused, _ = run_claim(template, view(make_policy(**ALLOWED)), template=True)
    assert not refused.allowed
    assert refused.message.startswith("claim template team-a/train asks for 3g.40gb")


def test_a_template_is_held_to_max_slices_per_pod_as_its_claims_are() -> None:
    """Each claim of a template asks what its spec asks, so a template of more devices than
    spec.maxSlicesPerPod is refused at its CREATE (no claim made from it could be admitted),
    naming the field; its quota is still only charged when a claim is made."""
    template = {
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {"spec": make_claim("x", count=3)["spec"]},
    }
    decision, _ = run_claim(template, view(make_policy(maxSlicesPerPod=2)), template=True)
    assert (decision.allowed, decision.reason) == (False, "max-slices")
    assert decision.message == (
        'claim template team-a/train asks for 3 GPU slices; policy "team-a" allows 2 per pod '
        "(spec.maxSlicesPerPod)"
    )
    full = {"team-a": SliceUsage(8, 8, 8, (("1g.10gb", 8),))}
    policy = make_policy(maxSlicesPerPod=3, quota={"instances": 8})
    decision, _ = run_claim(template, view(policy, usage=full), template=True)
    assert decision.allowed and decision.charge is None


def test_a_template_under_migslices_name_must_be_migslices() -> None:
    own = migslice_claim_template("team-a", "1g.10gb")
    assert run_claim(own, view(), template=True)[0].allowed
    forged = copy.deepcopy(own)
    forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 3
    decision, _ = run_claim(forged, view(), template=True)
    assert (decision.allowed, decision.reason) == (False, "reserved-name")


def test_claims_of_other_drivers_and_other_namespaces_pass_untouched() -> None:
    nic = make_claim("nic", device_class="nic.example.com", profile=None)
    assert run_claim(nic, view())[0].reason == "no-gpu"
    unknown = make_claim("fpga", namespace="team-z", device_class="fpga.example.com", profile=None)
    assert run_claim(unknown, view())[0].reason == "no-gpu"  # a class not seen, no tenant
    elsewhere = make_claim("train", namespace="team-z")
    decision, _ = run_claim(elsewhere, view())
    assert (decision.allowed, decision.reason) == (False, "no-policy")
    assert 'namespace "team-z" belongs to no TenantPolicy' in decision.message


def test_a_class_that_names_no_driver_is_read_as_reaching_nvidias_gpus() -> None:
    """Measured before: through a catch-all or topology-only class, a hardware tenant's claim
    with selectors migslice does not read, adminAccess, or an MPS config passed untouched:
    uncharged and unchecked."""
    hardware = view(make_policy(isolation="hardware", quota={"computeSlices": 2}))
    memory = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('10Gi')) >= 0"
    cases = {
        "unread selectors": claim_with(
            deviceClassName="any-device", count=50, selectors=[{"cel": {"expression": memory}}]
        ),
        "no selectors": claim_with(deviceClassName="any-device", selectors=[]),
        "a topology class": claim_with(deviceClassName="pcie-local", selectors=[]),
    }
    for what, claim in cases.items():
        decision, _ = run_claim(claim, hardware)
        assert (decision.allowed, decision.reason) == (False, "unread-claim"), what
        assert "selectors name no driver" in decision.message, decision.message
        assert "device.driver == 'gpu.nvidia.com'" in decision.message, decision.message
    admin = claim_with(deviceClassName="any-device", selectors=[], adminAccess=True)
    assert run_claim(admin, hardware)[0].reason == "isolation"
    shared = with_config(claim_with(deviceClassName="any-device", selectors=[]), sharing("MPS"))
    assert run_claim(shared, hardware)[0].reason == "isolation"
    # a request's own driver selector settles it either way
    nic = claim_with(
        deviceClassName="any-device",
        selectors=[{"cel": {"expression": "device.driver == 'nic.example.com'"}}],
    )
    assert run_claim(nic, hardware)[0].reason == "no-gpu"
    gpu = claim_with(
        deviceClassName="any-device",
        selectors=[
            {"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}},
            {"cel": {"expression": "device.attributes['gpu.nvidia.com'].type == 'mig'"}},
            {"cel": {"expression": profile_selector("1g.10gb")}},
        ],
    )
    decision, _ = run_claim(gpu, hardware)
    assert (decision.allowed, decision.charge) == (True, ONE_G), decision.message
    # as a class not seen yet, it is left alone where no tenant owns the namespace
    elsewhere = claim_with(deviceClassName="any-device", selectors=[])
    elsewhere["metadata"]["namespace"] = "team-z"
    assert run_claim(elsewhere, hardware)[0].reason == "no-gpu"


def extended_claim() -> dict[str, Any]:
    claim = make_claim(
        "", device_class="migslice-mig-1g.10gb", profile=None, owner="p1", extended_resource=True
    )
    del claim["metadata"]["name"]
    claim["metadata"]["generateName"] = "p1-extended-resources-"
    return claim


def test_kube_schedulers_claim_for_a_pods_extended_resources_is_paid_by_the_pod() -> None:
    pods = {"team-a/p1": ("uid-p1", {"nvidia.com/mig-1g.10gb": 1})}
    covered, _ = run_claim(extended_claim(), view(pods=pods))
    assert (covered.allowed, covered.reason, covered.charge) == (
        True,
        "extended-resource-claim",
        None,
    )
    for other in (
        {"team-a/p1": ("uid-other", {"nvidia.com/mig-1g.10gb": 1})},  # another pod of that name
        {"team-a/p1": ("uid-p1", {"nvidia.com/mig-2g.20gb": 1})},  # it asks for other devices
        {},  # not seen
    ):
        charged, _ = run_claim(extended_claim(), view(pods=other))
        assert charged.reason == "admitted" and charged.charge == ONE_G


def test_an_update_may_not_make_a_claim_look_paid_for() -> None:
    cluster = view()
    old = make_claim("train-1")
    new = make_claim("train-1", owner="p1", extended_resource=True)
    decision = decide_claim_update("team-a", old, new, cluster)
    assert (decision.allowed, decision.reason) == (False, "claim-update")
    assert "resource.kubernetes.io/extended-resource-claim" in decision.message
    finalizer = copy.deepcopy(old)
    finalizer["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert decide_claim_update("team-a", old, finalizer, cluster).allowed
    assert decide_claim_update("team-z", old, new, cluster).allowed


# -- pods ------------------------------------------------------------------------------------


def run_pod(pod: dict[str, Any], cluster: StaticView) -> tuple[AdmissionDecision, dict[str, Any]]:
    namespace = pod["metadata"]["namespace"]
    decision = decide(PodAdmission(namespace, pod, "uid-1"), cluster, SETTINGS)
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), [op.to_json() for op in decision.patch])
    return decision, patched


def test_a_sized_pod_of_a_resource_claim_tenant_gets_claims_from_the_template() -> None:
    policy = make_policy(deviceAPI="ResourceClaim")
    pod = make_created_pod(
        annotations={"migslice.io/gpu-size": "medium", "migslice.io/gpu-count": "2"}
    )
    decision, patched = run_pod(pod, view(policy))
    assert decision.allowed and decision.charge is None and decision.reservation is None
    assert decision.templates == (("team-a", "2g.20gb"),)
    assert patched["spec"]["resourceClaims"] == [
        {"name": "migslice-gpu", "resourceClaimTemplateName": "migslice-mig-2g.20gb"},
        {"name": "migslice-gpu-1", "resourceClaimTemplateName": "migslice-mig-2g.20gb"},
    ]
    container = patched["spec"]["containers"][0]
    assert container["resources"]["claims"] == [
        {"name": "migslice-gpu"},
        {"name": "migslice-gpu-1"},
    ]
    assert "nvidia.com/mig-2g.20gb" not in str(container["resources"])
    assert patched["spec"]["schedulerName"] == "migslice-scheduler"
    assert "migslice.io/reservation" not in patched["metadata"]["annotations"]
    again, _ = run_pod(patched, view(policy))
    assert again.allowed and not [op for op in again.patch if "claims" in op.path.lower()]


def test_a_resource_claim_tenants_sized_pod_that_names_its_node_is_not_given_claims() -> None:
    """A pod created with spec.nodeName bypasses kube-scheduler, and only kube-scheduler
    allocates a ResourceClaim: the claims migslice gave such a pod were made (and charged) from
    the template but never allocated, and the kubelet refused to start the pod for good. It is
    refused at once, naming the field, as an ExtendedResource tenant's pod is not."""
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    pod["spec"]["nodeName"] = "gpu-1"
    decision, patched = run_pod(pod, view(make_policy(deviceAPI="ResourceClaim")))
    assert (decision.allowed, decision.code, decision.templates) == (False, 422, ())
    assert "resourceClaims" not in patched["spec"]
    assert "spec.nodeName" in decision.message and "gpu-1" in decision.message
    assert run_pod(pod, view(make_policy()))[0].allowed


def test_a_resource_claim_tenants_pod_is_denied_over_quota_before_its_claim_exists() -> None:
    policy = make_policy(deviceAPI="ResourceClaim", quota={"instances": 1})
    used = {"team-a": SliceUsage(1, 1, 1, (("1g.10gb", 1),))}
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    decision, _ = run_pod(pod, view(policy, usage=used))
    assert not decision.allowed and "(spec.quota.instances)" in decision.message


def claim_pod(name: str, claim: str) -> dict[str, Any]:
    pod = make_created_pod()
    del pod["metadata"]["generateName"]
    pod["metadata"]["name"] = name
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    return pod


def test_a_hardware_tenants_pods_do_not_share_a_claim() -> None:
    cluster = view(gpu_claims={"team-a/shared": True}, users={"team-a/shared": ("first",)})
    decision, _ = run_pod(claim_pod("second", "shared"), cluster)
    assert (decision.allowed, decision.reason) == (False, "isolation")
    assert (
        'uses ResourceClaim team-a/shared (spec.resourceClaims "gpu"), which pod '
        'team-a/first uses too; policy "team-a" is isolation: hardware (spec.isolation)'
    ) in decision.message
    alone, patched = run_pod(claim_pod("first", "shared"), cluster)
    assert alone.allowed and alone.charge is None
    assert patched["spec"]["schedulerName"] == "migslice-scheduler"
    shared = view(
        make_policy(isolation="process", tiers=["mig", "shared"]),
        gpu_claims={"team-a/shared": True},
        users={"team-a/shared": ("first",)},
    )
    assert run_pod(claim_pod("second", "shared"), shared)[0].allowed


def test_a_pod_naming_claims_of_other_devices_passes_untouched() -> None:
    cluster = view(gpu_claims={"team-a/nic": False}, templates={"team-a/t": TemplateFacts(False)})
    pod = claim_pod("p", "nic")
    pod["spec"]["resourceClaims"].append({"name": "t", "resourceClaimTemplateName": "t"})
    decision, _ = run_pod(pod, cluster)
    assert (decision.reason, decision.patch) == ("no-gpu-claim", ())


def readme_dra_policies() -> dict[str, dict[str, Any]]:
    """The TenantPolicies of the README's "Both paths: the device plugin and DRA", by name."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Both paths: the device plugin and DRA", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(block) if d}


def test_the_readmes_dra_tenants_do_what_the_readme_says() -> None:
    """A medium pod of "inference" gets nvidia.com/mig-2g.20gb, one of "vision" a claim from
    migslice-mig-2g.20gb, and vision's own claim of a 3g.40gb is refused with the message the
    README quotes (its policy allowed every profile, so that claim was admitted)."""
    policies = readme_dra_policies()
    readme = " ".join((ROOT / "README.md").read_text().split())
    cluster = view(*policies.values())
    medium = {"migslice.io/gpu-size": "medium"}
    inference, patched = run_pod(
        make_created_pod(namespace="inference", annotations=medium), cluster
    )
    assert inference.allowed, inference.message
    limits = patched["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/mig-2g.20gb": "1"}
    vision, patched = run_pod(make_created_pod(namespace="vision", annotations=medium), cluster)
    assert vision.allowed, vision.message
    assert patched["spec"]["resourceClaims"] == [
        {"name": "migslice-gpu", "resourceClaimTemplateName": "migslice-mig-2g.20gb"}
    ]
    assert (
        "resourceClaims: [{name: migslice-gpu, resourceClaimTemplateName: migslice-mig-2g.20gb}]"
        in readme
    )
    decision, _ = run_claim(make_claim("train-1", namespace="vision", profile="3g.40gb"), cluster)
    assert not decision.allowed
    assert f"`{decision.message}`" in readme
