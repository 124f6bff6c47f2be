"""TenantPolicy: parsing with defaults, every error with its path at once, catalog checks,
namespace conflicts, size resolution, and the CRD schema agreeing with the examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harness.builders import make_policy
from migslice.console import CommandError
from migslice.mig import CATALOG
from migslice.policy import (
    Isolation,
    Need,
    Offer,
    PolicyError,
    Resolution,
    Tier,
    check_against_catalog,
    namespace_conflicts,
    parse_tenant_policy,
    resolve_profile,
    unknown_fields,
)
from migslice.serving import load_cluster_file
from migslice.whynot import WhyNot
from tests import paths

ROOT = paths.ROOT
EXAMPLES = sorted((ROOT / "manifests" / "examples").glob("tenantpolicy-*.yaml"))
A100 = Offer("NVIDIA-A100-SXM4-80GB", CATALOG.get("A100-80GB"))
H100_94 = Offer("NVIDIA-H100-NVL", CATALOG.get("H100-94GB"))
A30 = Offer("NVIDIA-A30", CATALOG.get("A30-24GB"))


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "manifests" / "base" / "crd" / "tenantpolicies.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_a_minimal_policy_gets_the_documented_defaults() -> None:
    policy = parse_tenant_policy(make_policy(sizes={"small": {"memory": "10Gi"}}))
    assert policy.isolation is Isolation.HARDWARE
    assert policy.tiers == (Tier.MIG,)
    assert policy.quota.compute_slices is None
    assert policy.ref == "team-a@1"


def test_every_error_is_reported_with_its_field_path_in_one_pass() -> None:
    raw = make_policy(
        namespaces=["Bad_NS"],
        isolation="hardware",
        tiers=["mig", "shared"],
        sizes={"medium": {"memory": "lots"}, "big": {"computeSlices": 0}},
        defaultSize="huge",
        allowedProfiles=["2g.20gb", "nonsense"],
        quota={"computeSlices": -1},
        maxSlicesPerPod=0,
    )
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(raw)
    paths = {e.path for e in caught.value.errors}
    assert {
        "spec.namespaces[0]",
        "spec.tiers[1]",
        "spec.sizes.medium.memory",
        "spec.sizes.big.memory",
        "spec.sizes.big.computeSlices",
        "spec.defaultSize",
        "spec.allowedProfiles[1]",
        "spec.quota.computeSlices",
        "spec.maxSlicesPerPod",
    } <= paths
    assert 'tier "shared" is not allowed with isolation "hardware"' in str(caught.value)


def test_fields_of_a_newer_crd_are_passed_over_and_named_only_for_a_cluster_file() -> None:
    """kube-apiserver drops every field its CRD does not declare and fills in the defaults of
    those it does: a field this version does not know comes from a newer CRD (a rolling
    update's older replica reads it) and must not void the policy."""
    raw = make_policy(
        sizes={"small": {"memory": "10Gi", "burst": "2x"}},
        quota={"instances": 4, "perNode": 2},
        priority="normal",
    )
    policy = parse_tenant_policy(raw)
    assert policy.quota.instances == 4 and policy.sizes[0].memory_mib == 10240
    assert [(e.path, e.message.split(";")[0]) for e in unknown_fields(raw)] == [
        ("spec.priority", "unknown field"),
        ("spec.sizes.small.burst", "unknown field"),
        ("spec.quota.perNode", "unknown field"),
    ]
    assert unknown_fields(make_policy()) == ()


def test_a_cluster_file_policy_with_a_field_this_version_does_not_know_is_refused(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(make_policy(qouta={"instances": 1})))
    with pytest.raises(CommandError, match=r"TenantPolicy team-a: spec\.qouta: unknown field"):
        load_cluster_file(path)
    path.write_text(yaml.safe_dump(make_policy(quota={"instances": 1})))
    assert len(load_cluster_file(path).tenant_policies) == 1


@pytest.mark.parametrize(
    ("selector", "problem"),
    [
        ({"pool": "gpu pool a"}, '"gpu pool a" is not a label value'),
        ({"pool": "-a"}, '"-a" is not a label value'),
        ({"pool": "a" * 64}, "is not a label value"),
        ({"gpu pool": "a"}, '"gpu pool" is not a label key'),
        ({"Example.COM/pool": "a"}, '"Example.COM/pool" is not a label key'),
        ({"/pool": "a"}, '"/pool" is not a label key'),
        ({"pool": "a\n"}, "is not a label value"),
        ({"pool\n": "a"}, "is not a label key"),
        ({"example.com\n/pool": "a"}, "is not a label key"),
    ],
    ids=[
        "space",
        "leading-dash",
        "too-long",
        "key-space",
        "upper-prefix",
        "empty-prefix",
        "value-newline",
        "key-newline",
        "prefix-newline",
    ],
)
def test_a_node_selector_kubernetes_would_refuse_in_every_pod_is_refused(
    selector: dict[str, str], problem: str
) -> None:
    """The selector is merged into each of the tenant's pods: a bad one made every pod's
    create fail with an error about a field its user never wrote."""
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(make_policy(nodeSelector=selector))
    [error] = caught.value.errors
    assert error.path == f"spec.nodeSelector.{next(iter(selector))}"
    assert problem in error.message


def test_a_node_selector_of_label_keys_and_values_is_kept() -> None:
    selector = {"example.com/pool": "gpu-a", "tier": "", "A_b.c": "X_1"}
    policy = parse_tenant_policy(make_policy(nodeSelector=selector))
    assert dict(policy.node_selector) == selector


def test_two_names_of_one_gpu_model_with_two_profiles_are_a_catalog_problem() -> None:
    """Not a parse error: a policy stored that way before kept serving (an error there would
    deny every GPU pod of the tenant after an upgrade); /validate refuses new ones, and the
    status says so. The same profile under both names is one entry."""
    both = {"A100-80GB": "1g.20gb", "NVIDIA-A100-SXM4-80GB": "2g.20gb"}
    policy = parse_tenant_policy(
        make_policy(sizes={"small": {"memory": "10Gi", "preferredProfiles": both}})
    )
    problems = {e.path: e.message for e in check_against_catalog(policy, CATALOG)}
    assert problems["spec.sizes.small.preferredProfiles"] == (
        "names GPU model A100-80GB more than once, with profiles 1g.20gb, 2g.20gb; keep one "
        "entry per model"
    )
    same = {"A100-80GB": "1g.20gb", "NVIDIA-A100-SXM4-80GB": "1g.20gb"}
    policy = parse_tenant_policy(
        make_policy(sizes={"small": {"memory": "10Gi", "preferredProfiles": same}})
    )
    assert policy.sizes[0].preferred_profiles == (("A100-80GB", "1g.20gb"),)
    assert check_against_catalog(policy, CATALOG) == ()


def test_a_policy_must_select_namespaces() -> None:
    with pytest.raises(
        PolicyError, match=r"spec\.namespaces: is empty and spec\.namespaceSelector"
    ):
        parse_tenant_policy(make_policy(namespaces=None))


def test_an_empty_namespace_selector_is_refused_because_it_selects_everything() -> None:
    with pytest.raises(PolicyError, match="would select every namespace"):
        parse_tenant_policy(make_policy(namespaces=None, namespaceSelector={}))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_examples_parse_pass_the_catalog_checks_and_the_crd_schema(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    policy = parse_tenant_policy(raw)
    assert check_against_catalog(policy, CATALOG) == ()
    jsonschema.validate(raw, crd_schema())


def test_the_crd_schema_rejects_an_unknown_tier_and_a_bad_profile_name() -> None:
    for spec in (
        {"namespaces": ["a"], "tiers": ["vgpu"]},
        {"namespaces": ["a"], "allowedProfiles": ["2g"]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"spec": spec}, crd_schema())


def test_an_empty_allowed_product_is_refused_by_the_crd_schema_as_by_the_parser() -> None:
    """kube-apiserver stored allowedProducts [""], which the parser refuses: stored without
    the validating webhook, the policy was invalid and denied every GPU pod of its tenant."""
    spec = {"namespaces": ["a"], "allowedProducts": [""]}
    with pytest.raises(jsonschema.ValidationError, match="minLength"):
        jsonschema.validate({"spec": spec}, crd_schema())
    with pytest.raises(PolicyError, match=r"spec\.allowedProducts\[0\]: must be a non-empty"):
        parse_tenant_policy(make_policy(allowedProducts=[""]))


def test_a_size_that_no_allowed_model_can_serve_is_a_catalog_error() -> None:
    policy = parse_tenant_policy(
        make_policy(sizes={"huge": {"memory": "200Gi"}}, allowedProducts=["NVIDIA-A100-SXM4-80GB"])
    )
    errors = check_against_catalog(policy, CATALOG)
    assert [e.path for e in errors] == ["spec.sizes.huge"]
    assert "fits no MIG profile" in errors[0].message


def test_a_dedicated_size_larger_than_any_allowed_gpu_is_a_catalog_error() -> None:
    """docs/policy.md: the validating webhook refuses a size no allowed model can serve.
    Measured before: a whole-GPU size of 200Gi on A100s only was accepted and shown Ready,
    and every pod of that size was denied at admission (no-model)."""
    sizes = {
        "whole": {"memory": "80Gi", "tier": "dedicated"},
        "huge": {"memory": "200Gi", "tier": "dedicated"},
    }
    policy = parse_tenant_policy(
        make_policy(
            sizes=sizes, tiers=["mig", "dedicated"], allowedProducts=["NVIDIA-A100-SXM4-80GB"]
        )
    )
    errors = check_against_catalog(policy, CATALOG)
    assert [e.path for e in errors] == ["spec.sizes.huge"]
    assert "200Gi" in errors[0].message and "whole GPU" in errors[0].message
    assert "spec.allowedProducts" in errors[0].message
    anywhere = parse_tenant_policy(make_policy(sizes=sizes, tiers=["mig", "dedicated"]))
    assert check_against_catalog(anywhere, CATALOG) == ()  # a B300 has more


def test_a_preferred_profile_must_exist_on_its_model_and_be_big_enough() -> None:
    policy = parse_tenant_policy(
        make_policy(
            sizes={
                "medium": {
                    "memory": "20Gi",
                    "preferredProfiles": {"A100-80GB": "1g.10gb", "H100-94GB": "2g.20gb"},
                }
            }
        )
    )
    messages = {e.path: e.message for e in check_against_catalog(policy, CATALOG)}
    assert "smaller than" in messages["spec.sizes.medium.preferredProfiles.A100-80GB"]
    assert "has no profile" in messages["spec.sizes.medium.preferredProfiles.H100-94GB"]


def test_a_namespace_claimed_by_two_policies_is_reported_with_the_other_name() -> None:
    first = parse_tenant_policy(make_policy("team-a", namespaces=["shared-ns", "a"]))
    second = parse_tenant_policy(make_policy("team-b", namespaces=["shared-ns"]))
    errors = namespace_conflicts(second, [first], {})
    assert len(errors) == 1
    assert 'namespace shared-ns already belongs to TenantPolicy "team-a"' in errors[0].message


def test_a_conflict_over_many_namespaces_names_twenty_and_counts_the_rest() -> None:
    """A condition's message has a limit (32 KiB in the CRD): 600 namespaces of 60 characters
    once made every status write of the policy fail."""
    selector = {"matchLabels": {"team": "a"}}
    first = parse_tenant_policy(make_policy("team-a", namespaces=None, namespaceSelector=selector))
    second = parse_tenant_policy(make_policy("team-b", namespaces=None, namespaceSelector=selector))
    names = [f"ns-{i:03d}-" + "x" * 53 for i in range(600)]
    [error] = namespace_conflicts(second, [first], {n: {"team": "a"} for n in names})
    assert error.message.startswith(f"namespaces {names[0]}, {names[1]}, ")
    assert f"{names[19]} and 580 more already belong to TenantPolicy" in error.message
    assert len(error.message) < 2000


def test_selectors_conflict_only_on_namespaces_that_both_select() -> None:
    first = parse_tenant_policy(
        make_policy("team-a", namespaces=None, namespaceSelector={"matchLabels": {"team": "a"}})
    )
    second = parse_tenant_policy(
        make_policy(
            "team-b",
            namespaces=None,
            namespaceSelector={"matchExpressions": [{"key": "team", "operator": "Exists"}]},
        )
    )
    labels = {"x": {"team": "a"}, "y": {"team": "b"}}
    assert "namespace x " in namespace_conflicts(second, [first], labels)[0].message
    assert namespace_conflicts(second, [first], {"y": {"team": "b"}}) == ()


def resolve(
    policy_spec: dict[str, Any], need: Need, offers: tuple[Offer, ...]
) -> Resolution | WhyNot:
    return resolve_profile(parse_tenant_policy(make_policy(**policy_spec)), need, offers)


def test_a_size_resolves_to_the_smallest_allowed_profile_that_meets_memory_and_compute() -> None:
    result = resolve({}, Need(20 * 1024, 2), (A100,))
    assert isinstance(result, Resolution)
    assert (result.profile, result.resource) == ("2g.20gb", "nvidia.com/mig-2g.20gb")
    assert result.products == ("NVIDIA-A100-SXM4-80GB",)


def test_nominal_memory_from_the_name_is_compared_so_10gi_gets_1g_10gb() -> None:
    # NVML reports 9728 MiB for 1g.10gb on an A100; the name promises 10 GiB.
    for memory_mib in (10 * 1024, 9537):
        result = resolve({}, Need(memory_mib), (A100,))
        assert isinstance(result, Resolution) and result.profile == "1g.10gb"


def test_memory_only_requests_take_the_fewest_compute_slices() -> None:
    result = resolve({}, Need(20 * 1024), (A100,))
    assert isinstance(result, Resolution) and result.profile == "1g.20gb"


def test_the_smallest_profile_across_models_wins_and_steers_to_its_products() -> None:
    result = resolve({}, Need(11 * 1024), (A100, H100_94))
    assert isinstance(result, Resolution)
    assert (result.profile, result.products) == ("1g.12gb", ("NVIDIA-H100-NVL",))


def test_a_preferred_profile_replaces_the_smallest_on_its_model() -> None:
    spec = {"sizes": {"medium": {"memory": "20Gi", "preferredProfiles": {"A100-80GB": "3g.40gb"}}}}
    policy = parse_tenant_policy(make_policy(**spec))
    size = policy.size("medium")
    assert size is not None
    result = resolve_profile(policy, Need(size.memory_mib, None, size), (A100,))
    assert isinstance(result, Resolution) and result.profile == "3g.40gb"


def test_denied_profiles_and_products_are_skipped() -> None:
    result = resolve({"deniedProfiles": ["1g.20gb"]}, Need(20 * 1024), (A100,))
    assert isinstance(result, Resolution) and result.profile == "2g.20gb"
    nothing = resolve({"allowedProducts": ["NVIDIA-H100-NVL"]}, Need(1024), (A100,))
    assert isinstance(nothing, WhyNot) and nothing.reason == "no-model"


def test_too_much_memory_says_what_the_largest_allowed_profile_is() -> None:
    result = resolve({}, Need(100 * 1024), (A30,))
    assert isinstance(result, WhyNot)
    assert "the largest allowed is 4g.24gb" in result.message


def test_a_profile_name_with_spaces_around_it_is_read_without_them() -> None:
    """The policy's profile names are compared as written: a quota of " 1g.10gb" limited no
    pod's 1g.10gb (its tenant had no such quota) and a preferred "1g.10gb " was passed over.
    Refused instead, a policy an earlier CRD stored (it had no pattern there) turned invalid
    on upgrade and denied every GPU pod of its tenant; the CRD refuses new ones."""
    policy = parse_tenant_policy(
        make_policy(
            quota={"profiles": {" 1g.10gb": 0}},
            sizes={"small": {"memory": "10Gi", "preferredProfiles": {"A100-80GB": "1g.10gb "}}},
            allowedProfiles=["1g.10gb\n", "3g.40gb"],
        )
    )
    assert policy.quota.profiles == (("1g.10gb", 0),)
    (small,) = policy.sizes
    assert small.preferred_profiles == (("A100-80GB", "1g.10gb"),)
    assert policy.allowed_profiles == ("1g.10gb", "3g.40gb")


def test_a_quota_key_differing_from_another_only_in_spaces_is_refused() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(make_policy(quota={"profiles": {"1g.10gb": 5, " 1g.10gb": 0}}))
    assert [(e.path, "again" in e.message) for e in caught.value.errors] == [
        ("spec.quota.profiles. 1g.10gb", True)
    ]


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"maxSlicesPerPod": 65}, "spec.maxSlicesPerPod", "must be at most 64, got 65"),
        ({"tiers": ["mig", "mig"]}, "spec.tiers", 'lists "mig" twice'),
        ({"allowedProfiles": ["1g.10gb"] * 2}, "spec.allowedProfiles", 'lists "1g.10gb" twice'),
        ({"deniedProfiles": ["1g.10gb"] * 2}, "spec.deniedProfiles", 'lists "1g.10gb" twice'),
        ({"allowedProducts": ["A100-80GB"] * 2}, "spec.allowedProducts", 'lists "A100-80GB"'),
    ],
)
def test_what_the_crd_schema_refuses_the_parser_refuses(
    spec: dict[str, Any], field: str, message: str
) -> None:
    """A cluster file (--cluster-file) passes no kube-apiserver: the parser holds the
    schema's limits itself (maxSlicesPerPod maximum 64; the lists are x-kubernetes-list-type
    set, whose duplicates kube-apiserver refuses), so a policy it accepts also applies."""
    schema = crd_schema()["properties"]["spec"]["properties"]
    (key,) = spec
    if key == "maxSlicesPerPod":
        assert schema[key]["maximum"] == 64
    else:
        assert schema[key]["x-kubernetes-list-type"] == "set"
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(make_policy(**spec))
    assert [(e.path, message in e.message) for e in caught.value.errors] == [(field, True)]


def test_kubectl_get_shows_whether_a_policy_is_ready_and_wide_shows_why() -> None:
    """A policy that is not Ready (InvalidSpec, NamespaceConflict) denies its tenant's GPU
    pods: `kubectl get tp` shows Ready (priority 0); `-o wide` adds the reason."""
    crd = yaml.safe_load((ROOT / "manifests" / "base" / "crd" / "tenantpolicies.yaml").read_text())
    columns = {c["name"]: c for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
    assert columns["Ready"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].status'
    assert columns["Ready"].get("priority", 0) == 0
    assert columns["Reason"]["jsonPath"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert columns["Reason"]["priority"] == 1


def test_the_documented_wide_listing_has_the_crds_columns_in_their_order() -> None:
    """kubectl prints a CRD's printer columns in the order the CRD lists them, ``-o wide``
    adding those of priority 1 in place (not at the end): docs/policy.md's example must show
    REASON where kubectl prints it."""
    crd = yaml.safe_load((ROOT / "manifests" / "base" / "crd" / "tenantpolicies.yaml").read_text())
    columns = [c["name"].upper() for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    lines = (ROOT / "docs" / "policy.md").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if "$ kubectl get tp -o wide" in line)
    assert lines[at + 1].split() == ["NAME", *columns]
