"""The CRD's CEL rules (``x-kubernetes-validations`` on ``spec``), evaluated with a CEL
interpreter over specs defaulted as kube-apiserver defaults them, against the parser: a spec
the rules refuse is one ``parse_tenant_policy`` refuses too, naming the same field. (e2e/
test_dra_admission_e2e.py checks that the real kube-apiserver enforces the deviceAPI rule.)"""

from __future__ import annotations

import re
from typing import Any

import celpy
import pytest
import yaml

from migslice.policy import DeviceApi, PolicyError, parse_tenant_policy
from migslice.quantity import QuantityError, parse_quantity
from tests import paths

CRD = paths.ROOT / "manifests" / "base" / "crd" / "tenantpolicies.yaml"


def spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(schema["properties"]["spec"])


def defaulted(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the schema's top-level defaults filled in, as kube-apiserver does."""
    properties = spec_schema()["properties"]
    filled = dict(spec)
    for key, schema in properties.items():
        if "default" in schema and key not in filled:
            filled[key] = schema["default"]
    return filled


def broken_rules(spec: dict[str, Any]) -> list[str]:
    """The fieldPath (or message) of every rule the defaulted spec breaks."""
    environment = celpy.Environment()
    activation = {"self": celpy.json_to_cel(defaulted(spec))}
    broken = []
    for rule in spec_schema()["x-kubernetes-validations"]:
        program = environment.program(environment.compile(rule["rule"]))
        if not bool(program.evaluate(activation)):
            broken.append(rule.get("fieldPath", rule["message"]))
    return broken


BASE: dict[str, Any] = {"namespaces": ["team-a"]}
CASES = [
    ("the default is ExtendedResource", {}, []),
    ("ResourceClaim with the default tiers", {"deviceAPI": "ResourceClaim"}, []),
    ("ResourceClaim with mig", {"deviceAPI": "ResourceClaim", "tiers": ["mig"]}, []),
    (
        "ResourceClaim with dedicated",
        {"deviceAPI": "ResourceClaim", "tiers": ["mig", "dedicated"]},
        [".deviceAPI"],
    ),
    (
        "ResourceClaim with shared",
        {"deviceAPI": "ResourceClaim", "isolation": "process", "tiers": ["shared"]},
        [".deviceAPI"],
    ),
    (
        "ExtendedResource with every tier",
        {"deviceAPI": "ExtendedResource", "isolation": "none", "tiers": ["mig", "mps"]},
        [],
    ),
    ("hardware with shared", {"tiers": ["shared"]}, [".tiers"]),
    # An empty list is present to CEL's has(): [] namespaces select nothing, [] tiers are [mig].
    ("empty namespaces alone", {"namespaces": []}, [".namespaces"]),
    (
        "empty namespaces and a selector",
        {"namespaces": [], "namespaceSelector": {"matchLabels": {"team": "a"}}},
        [],
    ),
    ("empty tiers and a mig size", {"tiers": [], "sizes": {"s": {"memory": "10Gi"}}}, []),
    (
        "empty tiers and a dedicated size",
        {"tiers": [], "sizes": {"s": {"memory": "10Gi", "tier": "dedicated"}}},
        [".sizes"],
    ),
    # Size names: the parser reads only DNS-subdomain-like names, so the CRD refuses the rest
    # (stored, such a policy would be invalid and deny every GPU pod of its tenant).
    ("a lower-case size name with a dot", {"sizes": {"a.b-2": {"memory": "10Gi"}}}, []),
    ("an upper-case size name", {"sizes": {"Medium": {"memory": "10Gi"}}}, [".sizes"]),
    ("a size name with '_'", {"sizes": {"gpu_small": {"memory": "10Gi"}}}, [".sizes"]),
    ("an empty size name", {"sizes": {"": {"memory": "10Gi"}}}, [".sizes"]),
    ("a size name of 64 characters", {"sizes": {"a" * 64: {"memory": "10Gi"}}}, [".sizes"]),
    ("a size name of 63 characters", {"sizes": {"a" * 63: {"memory": "10Gi"}}}, []),
    # Memory: the parser refuses a quantity that is not more than 0.
    *(
        (f"memory {memory!r}", {"sizes": {"s": {"memory": memory}}}, broken)
        for memory, broken in (
            ("0", [".sizes"]),
            ("+0", [".sizes"]),
            ("0.0Gi", [".sizes"]),
            ("0e3", [".sizes"]),
            ("-1Gi", [".sizes"]),
            (0, [".sizes"]),
            (-5, [".sizes"]),
            ("1e-3", []),
            ("0.5Gi", []),
            (".5Gi", []),
            ("+10Gi", []),
            (1, []),
        )
    ),
    # quota.profiles keys: MIG profile names as the parser reads them, no spaces around.
    ("a quota of profiles", {"quota": {"profiles": {"1g.10gb": 1, "1g.10gb+me.all": 0}}}, []),
    ("a quota of no profile", {"quota": {"profiles": {"1gx10gb": 1}}}, [".quota.profiles"]),
]


@pytest.mark.parametrize(("spec", "broken"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_crd_rules_and_the_parser_agree(spec: dict[str, Any], broken: list[str]) -> None:
    assert broken_rules({**BASE, **spec}) == broken
    raw = {"metadata": {"name": "team-a"}, "spec": {**BASE, **spec}}
    if not broken:
        policy = parse_tenant_policy(raw)
        assert policy.device_api is DeviceApi(defaulted(spec)["deviceAPI"])
        return
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(raw)
    paths_refused = {e.path for e in caught.value.errors}
    assert all(any(p.startswith("spec" + f) for p in paths_refused) for f in broken)


def test_a_quota_profile_with_spaces_is_refused_by_the_crd_and_read_without_them() -> None:
    """The one place the two differ on purpose: an earlier CRD stored such a key (it had no
    rule there), and refused by the parser that policy turned invalid on upgrade."""
    spec = {**BASE, "quota": {"profiles": {" 1g.10gb": 1}}}
    assert broken_rules(spec) == [".quota.profiles"]
    policy = parse_tenant_policy({"metadata": {"name": "team-a"}, "spec": spec})
    assert policy.quota.profiles == (("1g.10gb", 1),)


def test_the_deviceapi_rule_names_the_field_to_change() -> None:
    (rule,) = [
        r for r in spec_schema()["x-kubernetes-validations"] if r.get("fieldPath") == ".deviceAPI"
    ]
    assert "spec.tiers" in rule["message"] and "ExtendedResource" in rule["message"]
    assert spec_schema()["properties"]["deviceAPI"]["enum"] == ["ExtendedResource", "ResourceClaim"]


def test_an_unknown_device_api_is_refused_with_its_field() -> None:
    raw = {"metadata": {"name": "t"}, "spec": {**BASE, "deviceAPI": "Claims"}}
    with pytest.raises(PolicyError) as caught:
        parse_tenant_policy(raw)
    assert [e.path for e in caught.value.errors] == ["spec.deviceAPI"]


def test_the_memory_schema_matches_the_parsers_quantities() -> None:
    """What the pattern and length let through is what the parser reads: an exponent of at
    most three digits (``1e1000`` is refused by both), at most 64 characters."""
    memory = spec_schema()["properties"]["sizes"]["additionalProperties"]["properties"]["memory"]
    pattern = re.compile(memory["pattern"])
    for text in ("20Gi", "1e3", "1E-3", "+.5G", "10", "1e999", "0" * 60 + "10Gi"):
        assert pattern.fullmatch(text) and len(text) <= memory["maxLength"], text
        parse_quantity(text)
    for text in ("1e1000", "1e2.5", "0" * 61 + "10Gi"):
        assert not (pattern.fullmatch(text) and len(text) <= memory["maxLength"]), text
        with pytest.raises(QuantityError):
            parse_quantity(text)


def refusals(spec: dict[str, Any]) -> list[str]:
    """The message of every rule the defaulted spec breaks, as kube-apiserver answers it."""
    environment = celpy.Environment()
    activation = {"self": celpy.json_to_cel(defaulted(spec))}
    return [
        rule["message"]
        for rule in spec_schema()["x-kubernetes-validations"]
        if not bool(environment.program(environment.compile(rule["rule"])).evaluate(activation))
    ]


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        # spec.tiers absent: the answer says which tiers are in force and what to change
        (
            {"sizes": {"whole": {"memory": "1Gi", "tier": "dedicated"}}},
            ["mig while spec.tiers is absent or empty", "add the tier to spec.tiers"],
        ),
        (
            {"tiers": [], "sizes": {"whole": {"memory": "1Gi", "tier": "dedicated"}}},
            ["mig while spec.tiers is absent or empty", "add the tier to spec.tiers"],
        ),
        (
            {"allowedProfiles": ["1g.10gb"], "deniedProfiles": ["1g.10gb"]},
            ["remove it from spec.allowedProfiles or spec.deniedProfiles"],
        ),
    ],
    ids=["size tier, no spec.tiers", "size tier, empty spec.tiers", "allowed and denied"],
)
def test_a_refusal_says_what_to_change(spec: dict[str, Any], named: list[str]) -> None:
    """Measured before: 'every size's tier must be one of spec.tiers' for a spec that has no
    spec.tiers (the tiers in force are [mig]), with nothing said of the fix."""
    (answer,) = refusals({**BASE, **spec})
    for text in named:
        assert text in answer, answer
