"""Parse a raw TenantPolicy object into :class:`TenantPolicy`, applying defaults.

Every structural problem is collected with its field path and raised together as one
:class:`PolicyError`; nothing stops at the first error. Checks that need the GPU catalog or the
other policies live in :mod:`.validation`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from migslice.errors import shown
from migslice.mig import CATALOG, ProfileNameError, parse_profile_name
from migslice.policy.errors import FieldError, PolicyError
from migslice.policy.types import (
    DRA_TIERS,
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
from migslice.quantity import QuantityError, parse_memory_mib

T = TypeVar("T")

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
_SIZE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
MAX_SLICES_PER_POD = 64  # the CRD's maximum
_SPEC_FIELDS = frozenset(
    {
        "namespaces",
        "namespaceSelector",
        "isolation",
        "tiers",
        "sizes",
        "defaultSize",
        "allowedProfiles",
        "deniedProfiles",
        "allowedProducts",
        "nodeSelector",
        "quota",
        "maxSlicesPerPod",
        "deviceAPI",
    }
)


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(FieldError(path, message))


def parse_tenant_policy(raw_policy: Mapping[str, object]) -> TenantPolicy:
    """A TenantPolicy from its API object; PolicyError lists every problem with its path."""
    name, policy, errors = read_tenant_policy(raw_policy)
    if policy is None or errors:
        raise PolicyError(name or "?", errors)
    return policy


_SIZE_FIELDS = frozenset({"memory", "computeSlices", "tier", "preferredProfiles"})
_QUOTA_FIELDS = frozenset({"instances", "computeSlices", "memorySlices", "profiles"})


def unknown_fields(raw_policy: Mapping[str, object]) -> tuple[FieldError, ...]:
    """Fields of the spec, a size or the quota that this version does not know. Only for a
    policy that never went through kube-apiserver (a cluster file): there, the CRD's
    structural schema drops every field it does not declare, so an unknown one comes from a
    newer CRD (its default filled in), and :func:`read_tenant_policy` passes over it; an
    older replica during a rolling update must not find every policy invalid."""
    errors = _Errors()
    spec = raw_policy.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    known = ", ".join(sorted(_SPEC_FIELDS))
    for key in sorted((k for k in spec if k not in _SPEC_FIELDS), key=str):
        errors.add(f"spec.{key}", f"unknown field; known fields: {known}")
    sizes = spec.get("sizes")
    for size, raw in (
        sorted(sizes.items(), key=lambda kv: str(kv[0])) if isinstance(sizes, Mapping) else ()
    ):
        for key in sorted(set(raw) - _SIZE_FIELDS if isinstance(raw, Mapping) else (), key=str):
            known = ", ".join(sorted(_SIZE_FIELDS))
            errors.add(f"spec.sizes.{size}.{key}", f"unknown field; known: {known}")
    quota = spec.get("quota")
    for key in sorted(set(quota) - _QUOTA_FIELDS if isinstance(quota, Mapping) else (), key=str):
        errors.add(f"spec.quota.{key}", f"unknown field; known: {', '.join(sorted(_QUOTA_FIELDS))}")
    return tuple(errors.items)


def read_tenant_policy(
    raw_policy: Mapping[str, object],
) -> tuple[str, TenantPolicy | None, tuple[FieldError, ...]]:
    """The policy's name, the policy as read (each field in error at its default, so that the
    checks of :mod:`.validation` can run on the rest; None without a spec) and every problem
    with its path. Fields this version does not know are passed over (a newer CRD's:
    :func:`unknown_fields`)."""
    errors = _Errors()
    name, generation = _metadata(raw_policy.get("metadata"), errors)
    spec = raw_policy.get("spec")
    if not isinstance(spec, Mapping):
        errors.add("spec", "is required (an object)")
        return name, None, tuple(errors.items)

    namespaces = _string_list(spec, "namespaces", errors, _check_namespace)
    if len(set(namespaces)) != len(namespaces):
        errors.add("spec.namespaces", "lists a namespace twice")
    selector = _selector(spec.get("namespaceSelector"), "spec.namespaceSelector", errors)
    if not namespaces and selector is None:
        errors.add(
            "spec.namespaces",
            "is empty and spec.namespaceSelector is absent: one of them must select the "
            "tenant's namespaces",
        )

    isolation = _enum(spec, "isolation", Isolation, Isolation.HARDWARE, errors)
    tier_values = _tiers(spec, isolation, errors)
    sizes = _sizes(spec.get("sizes"), tier_values, errors)
    default_size = _default_size(spec.get("defaultSize"), sizes, errors)

    allowed = tuple(
        map(_profile_name, _string_list(spec, "allowedProfiles", errors, _check_profile))
    )
    denied = tuple(map(_profile_name, _string_list(spec, "deniedProfiles", errors, _check_profile)))
    for profile in sorted(set(allowed) & set(denied)):
        errors.add("spec.deniedProfiles", f'profile "{profile}" is both allowed and denied')
    products = _string_list(spec, "allowedProducts", errors, None)
    node_selector = _string_map(spec.get("nodeSelector"), "spec.nodeSelector", errors)
    for key, value in node_selector:
        problem = _label_problem(key, value)
        if problem:  # merged into every pod's nodeSelector: the pod's create would be refused
            errors.add(f"spec.nodeSelector.{key}", problem)
    quota = _quota(spec.get("quota"), errors)
    max_slices = _int(spec.get("maxSlicesPerPod"), "spec.maxSlicesPerPod", 1, errors)
    if max_slices is not None and max_slices > MAX_SLICES_PER_POD:
        errors.add(
            "spec.maxSlicesPerPod", f"must be at most {MAX_SLICES_PER_POD}, got {max_slices}"
        )
        max_slices = None
    for key, values in (
        ("tiers", [t.value for t in tier_values]),
        ("allowedProfiles", allowed),
        ("deniedProfiles", denied),
        ("allowedProducts", products),
    ):  # x-kubernetes-list-type: set, as spec.namespaces
        for value in sorted({v for v in values if values.count(v) > 1}):
            errors.add(f"spec.{key}", f'lists "{value}" twice')
    device_api = _device_api(spec.get("deviceAPI"), tier_values, errors)

    policy = TenantPolicy(
        name=name,
        generation=generation,
        namespaces=namespaces,
        namespace_selector=selector,
        isolation=isolation,
        tiers=tier_values,
        sizes=sizes,
        default_size=default_size,
        allowed_profiles=allowed,
        denied_profiles=denied,
        allowed_products=products,
        node_selector=node_selector,
        quota=quota,
        max_slices_per_pod=max_slices,
        device_api=device_api,
    )
    return name, policy, tuple(errors.items)


def _device_api(value: object, tiers: tuple[Tier, ...], errors: _Errors) -> DeviceApi:
    """``spec.deviceAPI`` (default ExtendedResource); ResourceClaim only with DRA's tiers."""
    if value is None:
        return DeviceApi.EXTENDED_RESOURCE
    parsed = _enum_value(value, DeviceApi, "spec.deviceAPI", errors)
    if parsed is None:
        return DeviceApi.EXTENDED_RESOURCE
    other = [t.value for t in tiers if t not in DRA_TIERS]
    if parsed is DeviceApi.RESOURCE_CLAIM and other:
        errors.add(
            "spec.deviceAPI",
            f"ResourceClaim serves only the mig tier (migslice's claim templates ask for one "
            f"MIG device each); spec.tiers also has {', '.join(other)}: remove them or use "
            "deviceAPI ExtendedResource",
        )
    return parsed


def _metadata(metadata: object, errors: _Errors) -> tuple[str, int]:
    """The policy's name and generation."""
    if not isinstance(metadata, Mapping):
        errors.add("metadata", "must be an object with a name")
        return "", 1
    name = ""
    raw_name = metadata.get("name")
    if not isinstance(raw_name, str) or not raw_name:
        errors.add("metadata.name", "is required")
    else:
        name = raw_name
    raw_generation = metadata.get("generation", 1)
    if isinstance(raw_generation, int) and not isinstance(raw_generation, bool):
        return name, raw_generation
    errors.add("metadata.generation", f"must be an integer, got {shown(raw_generation)}")
    return name, 1


def _tiers(spec: Mapping[str, object], isolation: Isolation, errors: _Errors) -> tuple[Tier, ...]:
    """``spec.tiers`` (default ``[mig]``), each allowed by the isolation."""
    tiers = tuple(
        _enum_value(value, Tier, f"spec.tiers[{i}]", errors)
        for i, value in enumerate(_list(spec, "tiers", errors) or ["mig"])
    )
    allowed = TIERS_BY_ISOLATION[isolation]
    for i, tier in enumerate(tiers):
        if tier is not None and tier not in allowed:
            errors.add(
                f"spec.tiers[{i}]",
                f'tier "{tier.value}" is not allowed with isolation "{isolation.value}" '
                f"(allowed: {', '.join(sorted(t.value for t in allowed))})",
            )
    return tuple(t for t in tiers if t is not None)


def _default_size(value: object, sizes: Sequence[SizeClass], errors: _Errors) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        errors.add("spec.defaultSize", f"must be a string, got {shown(value)}")
        return None
    if value not in {s.name for s in sizes}:
        errors.add(
            "spec.defaultSize",
            f'"{value}" is not one of spec.sizes ({", ".join(s.name for s in sizes)})',
        )
    return value


def _check_namespace(value: str) -> str | None:
    return (
        None
        if _DNS_LABEL.fullmatch(value)
        else f'"{value}" is not a namespace name (a DNS-1123 label)'
    )


def _check_profile(value: str) -> str | None:
    """Why ``value`` is not a MIG profile name (:func:`parse_profile_name` reads one with
    spaces around it; the callers keep it without them, see :func:`_profile_name`)."""
    try:
        parse_profile_name(value)
    except ProfileNameError as error:
        return str(error)
    return None


def _profile_name(value: str) -> str:
    """A profile name as the policy compares it: without spaces around it. The CRD refuses
    such a name now, but an earlier one stored ``preferredProfiles`` values and
    ``quota.profiles`` keys with them; kept as written, a quota of " 1g.10gb" limited no pod's
    1g.10gb and a preferred "1g.10gb " was passed over, and refused, the stored policy would
    turn invalid on upgrade and deny its tenant's GPU pods."""
    return value.strip()


def _list(spec: Mapping[str, object], key: str, errors: _Errors) -> list[object]:
    value = spec.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        errors.add(f"spec.{key}", f"must be a list, got {type(value).__name__}")
        return []
    return value


def _string_list(
    spec: Mapping[str, object],
    key: str,
    errors: _Errors,
    check: Callable[[str], str | None] | None,
) -> tuple[str, ...]:
    result: list[str] = []
    for i, item in enumerate(_list(spec, key, errors)):
        if not isinstance(item, str) or not item:
            errors.add(f"spec.{key}[{i}]", f"must be a non-empty string, got {shown(item)}")
            continue
        problem = check(item) if check is not None else None
        if problem is not None:
            errors.add(f"spec.{key}[{i}]", problem)
            continue
        result.append(item)
    return tuple(result)


def _label_problem(key: str, value: str) -> str:
    """Why ``key: value`` is not a label Kubernetes accepts ("" when it is): the rules of
    apimachinery's ``IsQualifiedName`` and ``IsValidLabelValue``."""
    prefix, slash, name = key.rpartition("/")
    if not _LABEL_NAME.fullmatch(name) or (
        slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix))
    ):
        return (
            f'"{key}" is not a label key (an optional DNS subdomain prefix and "/", then at '
            "most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)"
        )
    if not _LABEL_VALUE.fullmatch(value):
        return (
            f"\"{value}\" is not a label value (at most 63 letters, digits, '-', '_' or '.', "
            "beginning and ending with a letter or digit, or empty)"
        )
    return ""


def _string_map(value: object, path: str, errors: _Errors) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a map of strings, got {type(value).__name__}")
        return ()
    result: list[tuple[str, str]] = []
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            errors.add(f"{path}.{key}", f"must be a string, got {shown(item)}")
        else:
            result.append((key, item))
    return tuple(sorted(result))


def _enum(
    spec: Mapping[str, object], key: str, kind: type[Isolation], default: Isolation, errors: _Errors
) -> Isolation:
    value = spec.get(key)
    if value is None:
        return default
    parsed = _enum_value(value, kind, f"spec.{key}", errors)
    return default if parsed is None else parsed


def _enum_value(value: object, kind: type[T], path: str, errors: _Errors) -> T | None:
    choices = [member.value for member in kind]  # type: ignore[attr-defined]
    if value not in choices:
        errors.add(path, f"must be one of {', '.join(choices)}, got {shown(value)}")
        return None
    return kind(value)  # type: ignore[call-arg]


def _int(value: object, path: str, minimum: int, errors: _Errors) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        errors.add(path, f"must be an integer, got {shown(value)}")
        return None
    if value < minimum:
        errors.add(path, f"must be at least {minimum}, got {value}")
        return None
    return value


def _selector(value: object, path: str, errors: _Errors) -> LabelSelector | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.add(path, f"must be a label selector object, got {type(value).__name__}")
        return None
    labels = _string_map(value.get("matchLabels"), f"{path}.matchLabels", errors)
    requirements: list[SelectorRequirement] = []
    raw_expressions = value.get("matchExpressions") or []
    if not isinstance(raw_expressions, list):
        errors.add(f"{path}.matchExpressions", "must be a list")
        raw_expressions = []
    for i, item in enumerate(raw_expressions):
        where = f"{path}.matchExpressions[{i}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            errors.add(where, "must be an object with key, operator and values")
            continue
        operator = item.get("operator")
        values = item.get("values") or []
        if operator not in _OPERATORS:
            choices = ", ".join(_OPERATORS)
            errors.add(f"{where}.operator", f"must be one of {choices}, got {shown(operator)}")
            continue
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            errors.add(f"{where}.values", "must be a list of strings")
            continue
        if operator in ("In", "NotIn") and not values:
            errors.add(f"{where}.values", f"must not be empty for operator {operator}")
            continue
        if operator in ("Exists", "DoesNotExist") and values:
            errors.add(f"{where}.values", f"must be empty for operator {operator}")
            continue
        requirements.append(SelectorRequirement(str(item["key"]), str(operator), tuple(values)))
    selector = LabelSelector(labels, tuple(requirements))
    if selector == LabelSelector():
        errors.add(path, "is empty and would select every namespace; list the labels to match")
    return selector


def _sizes(value: object, tiers: tuple[Tier, ...], errors: _Errors) -> tuple[SizeClass, ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        errors.add("spec.sizes", f"must be a map of size name to size, got {type(value).__name__}")
        return ()
    sizes: list[SizeClass] = []
    for name, raw in value.items():
        path = f"spec.sizes.{name}"
        if not isinstance(name, str) or not _SIZE_NAME.fullmatch(name):
            errors.add(path, "a size name is lower-case letters, digits, '-' and '.'")
            continue
        if not isinstance(raw, Mapping):
            errors.add(path, "must be an object with memory and optional computeSlices")
            continue
        memory = raw.get("memory")
        memory_mib = 0
        if memory is None:
            errors.add(f"{path}.memory", "is required (e.g. 20Gi)")
        else:
            try:
                memory_mib = parse_memory_mib(memory)
            except QuantityError as error:
                errors.add(f"{path}.memory", str(error))
        compute = _int(raw.get("computeSlices"), f"{path}.computeSlices", 1, errors)
        if compute is not None and compute > 8:
            errors.add(f"{path}.computeSlices", f"must be at most 8, got {compute}")
        tier = _enum_value(raw.get("tier", "mig"), Tier, f"{path}.tier", errors)
        if tier is not None and tier not in tiers:
            errors.add(
                f"{path}.tier",
                f'tier "{tier.value}" is not in spec.tiers ({", ".join(t.value for t in tiers)})',
            )
        preferred = _string_map(raw.get("preferredProfiles"), f"{path}.preferredProfiles", errors)
        normalised: list[tuple[str, str]] = []
        for model_name, profile in preferred:
            problem = _check_profile(profile)
            if problem is not None:
                errors.add(f"{path}.preferredProfiles.{model_name}", problem)
                continue
            profile = _profile_name(profile)
            model = CATALOG.find(model_name)
            key = model.key if model is not None else model_name
            if (key, profile) not in normalised:  # two names of one model, one profile: one
                normalised.append((key, profile))
        sizes.append(SizeClass(name, memory_mib, compute, tier or Tier.MIG, tuple(normalised)))
    return tuple(sizes)


def _quota(value: object, errors: _Errors) -> Quota:
    if value is None:
        return Quota()
    if not isinstance(value, Mapping):
        errors.add("spec.quota", f"must be an object, got {type(value).__name__}")
        return Quota()
    profiles: list[tuple[str, int]] = []
    raw_profiles = value.get("profiles")
    if raw_profiles is not None and not isinstance(raw_profiles, Mapping):
        errors.add("spec.quota.profiles", "must be a map of profile name to instance count")
    elif isinstance(raw_profiles, Mapping):
        for profile, count in raw_profiles.items():
            path = f"spec.quota.profiles.{profile}"
            problem = _check_profile(str(profile))
            if problem is not None:
                errors.add(path, problem)
                continue
            name = _profile_name(str(profile))
            if any(name == seen for seen, _ in profiles):
                errors.add(path, f"names {name} again (a key differing only in spaces)")
                continue
            limit = _int(count, path, 0, errors)
            if limit is not None:
                profiles.append((name, limit))
    return Quota(
        instances=_int(value.get("instances"), "spec.quota.instances", 0, errors),
        compute_slices=_int(value.get("computeSlices"), "spec.quota.computeSlices", 0, errors),
        memory_slices=_int(value.get("memorySlices"), "spec.quota.memorySlices", 0, errors),
        profiles=tuple(sorted(profiles)),
    )
