"""TenantPolicy: types, defaults, parsing (all errors at once), validation, size resolution."""

from migslice.policy.errors import FieldError, PolicyError
from migslice.policy.parsing import parse_tenant_policy, read_tenant_policy, unknown_fields
from migslice.policy.resolution import (
    Need,
    Offer,
    Resolution,
    allows_product,
    resolve_profile,
)
from migslice.policy.types import (
    TIERS_BY_ISOLATION,
    DeviceApi,
    Isolation,
    LabelSelector,
    Quota,
    SelectorRequirement,
    SizeClass,
    TenantPolicy,
    Tier,
)
from migslice.policy.validation import check_against_catalog, namespace_conflicts

__all__ = [
    "TIERS_BY_ISOLATION",
    "DeviceApi",
    "FieldError",
    "Isolation",
    "LabelSelector",
    "Need",
    "Offer",
    "PolicyError",
    "Quota",
    "Resolution",
    "SelectorRequirement",
    "SizeClass",
    "TenantPolicy",
    "Tier",
    "allows_product",
    "check_against_catalog",
    "namespace_conflicts",
    "parse_tenant_policy",
    "read_tenant_policy",
    "resolve_profile",
    "unknown_fields",
]
