"""Checks of a parsed TenantPolicy that the CRD schema cannot do.

They need the GPU catalog (can every size be served by some allowed model? does each preferred
profile exist on its model and meet the size?) or the other policies (is a namespace claimed
by two?). Every problem is returned, with its field path; nothing stops at the first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from migslice.mig import Catalog
from migslice.policy.errors import FieldError
from migslice.policy.resolution import Need, meets, model_key_of, servable_models
from migslice.policy.tenancy import Tenancy
from migslice.policy.types import SizeClass, TenantPolicy, Tier


def check_against_catalog(policy: TenantPolicy, catalog: Catalog) -> tuple[FieldError, ...]:
    """Sizes no allowed model can serve, unknown products, models and profiles."""
    errors: list[FieldError] = []
    known_profiles = {p.name for m in catalog.models for p in m.profiles}
    for i, product in enumerate(policy.allowed_products):
        if model_key_of(product) is None:
            errors.append(
                FieldError(
                    f"spec.allowedProducts[{i}]",
                    f'"{product}" is not a GPU product or model the catalog knows '
                    f"(known: {', '.join(catalog.keys())})",
                )
            )
    for field, names in (
        ("allowedProfiles", policy.allowed_profiles),
        ("deniedProfiles", policy.denied_profiles),
    ):
        for i, name in enumerate(names):
            if name not in known_profiles:
                errors.append(
                    FieldError(
                        f"spec.{field}[{i}]", f'no GPU model in the catalog has profile "{name}"'
                    )
                )
    for name, _ in policy.quota.profiles:
        if name not in known_profiles:
            errors.append(
                FieldError(
                    f"spec.quota.profiles.{name}",
                    f'no GPU model in the catalog has profile "{name}"',
                )
            )
    for size in policy.sizes:
        errors.extend(_size_problems(policy, size, catalog))
    return tuple(errors)


def _size_problems(policy: TenantPolicy, size: SizeClass, catalog: Catalog) -> list[FieldError]:
    """Preferred profiles that do not exist, do not meet the size or are not allowed, a MIG
    size no allowed profile serves, and a dedicated size no allowed whole GPU has room for."""
    errors: list[FieldError] = []
    path = f"spec.sizes.{size.name}"
    need = Need(size.memory_mib, size.compute_slices, size)
    for model_name, profile_name in size.preferred_profiles:
        model = catalog.find(model_name)
        where = f"{path}.preferredProfiles.{model_name}"
        if model is None:
            errors.append(FieldError(where, f'"{model_name}" is not a GPU model the catalog knows'))
        elif not model.has_profile(profile_name):
            errors.append(
                FieldError(
                    where,
                    f'GPU model {model.key} has no profile "{profile_name}" '
                    f"(it has {', '.join(model.profile_names)})",
                )
            )
        elif not meets(model.profile(profile_name), need):
            errors.append(
                FieldError(where, f'profile "{profile_name}" is smaller than {need.describe()}')
            )
        elif not policy.allows_profile(profile_name):
            errors.append(
                FieldError(where, f'profile "{profile_name}" is not allowed by this policy')
            )
    said: dict[str, list[str]] = {}
    for model_key, profile_name in size.preferred_profiles:
        said.setdefault(model_key, []).append(profile_name)
    for model_key, profiles in sorted(said.items()):
        if len(profiles) > 1:  # two names of one model (a catalog key and a product label)
            errors.append(
                FieldError(
                    f"{path}.preferredProfiles",
                    f"names GPU model {model_key} more than once, with profiles "
                    f"{', '.join(profiles)}; keep one entry per model",
                )
            )
    if size.tier is Tier.MIG and not servable_models(policy, size, catalog.models):
        errors.append(
            FieldError(
                path,
                f"{need.describe()} fits no MIG profile that this policy allows on any GPU "
                "model it allows; lower the memory or compute, or widen spec.allowedProfiles "
                "/ spec.allowedProducts",
            )
        )
    if size.tier is Tier.DEDICATED and not servable_models(policy, size, catalog.models):
        errors.append(
            FieldError(
                path,
                f"{need.describe()} is more memory than a whole GPU of any model this policy "
                "allows has; lower the memory, or widen spec.allowedProducts",
            )
        )
    return errors


def namespace_conflicts(
    policy: TenantPolicy,
    others: Iterable[TenantPolicy],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> tuple[FieldError, ...]:
    """Namespaces that ``policy`` and another policy both select, one error per other policy.

    Listed namespaces are compared directly; selectors are evaluated on the namespaces that
    exist (``namespace_labels``), since two selectors can only be compared on real labels.
    Callers that keep policies current use a :class:`~migslice.policy.tenancy.Tenancy` index
    and ask it directly; this builds one for a single question.
    """
    index = Tenancy()
    for namespace, labels in namespace_labels.items():
        index.put_namespace(namespace, labels)
    for other in others:
        if other.name != policy.name:
            index.put_policy(other)
    return index.conflicts(policy)
