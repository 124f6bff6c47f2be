"""ResourceClaimTemplates (``resource.k8s.io/v1``): migslice's own, one per MIG profile in each
namespace of a tenant whose policy says ``deviceAPI: ResourceClaim``, and what any template's
claims will ask (its ``spec.spec`` is a claim's spec).

migslice's template of ``1g.10gb`` is named :func:`migslice.names.mig_claim_template`
(``migslice-mig-1g.10gb``) and asks, in one request ``gpu``, for one device of migslice's
DeviceClass of that profile: no selectors, no config, no constraints. A template's spec is
immutable, so one of that name that asks for anything else (written by someone else) is
never migslice's: :func:`migslice_template_profile` says None for it.
"""

from __future__ import annotations

from migslice import names
from migslice.objects.json import JsonObject, items, mapping, text

REQUEST = "gpu"
MANAGED_BY = "migslice-webhook"


def migslice_claim_template(namespace: str, profile: str) -> dict[str, object]:
    """migslice's ResourceClaimTemplate of ``profile`` in ``namespace``, as the webhook creates
    it (defaults written out, so the stored spec reads the same)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": names.mig_claim_template(profile),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": MANAGED_BY},
            "annotations": {names.PROFILE: profile},
        },
        "spec": {
            "metadata": {"annotations": {names.PROFILE: profile}},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": REQUEST,
                            "exactly": {
                                "deviceClassName": names.mig_device_class(profile),
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            },
        },
    }


def template_claim_spec(raw_template: JsonObject) -> JsonObject:
    """The spec of the claims a template makes (its ``spec.spec``)."""
    return mapping(mapping(raw_template.get("spec")).get("spec"))


def migslice_template_profile(raw_template: JsonObject) -> str | None:
    """The profile of a template that is exactly migslice's of its name, else None."""
    name = text(mapping(raw_template.get("metadata")).get("name")) or ""
    profile = names.profile_of_device_class(name)
    if profile is None:
        return None
    claim = template_claim_spec(raw_template)
    devices = mapping(claim.get("devices"))
    if set(claim) - {"devices"} or set(devices) - {"requests"}:
        return None
    requests = items(devices.get("requests"))
    if len(requests) != 1:
        return None
    request = mapping(requests[0])
    exactly = mapping(request.get("exactly"))
    wanted = {
        "deviceClassName": names.mig_device_class(profile),
        "allocationMode": "ExactCount",
        "count": 1,
    }
    shown = {k: exactly.get(k, wanted[k] if k != "deviceClassName" else None) for k in wanted}
    if set(request) != {"name", "exactly"} or set(exactly) - set(wanted) or shown != wanted:
        return None
    return profile


def slim_template(raw_template: JsonObject) -> dict[str, object]:
    """What the webhook keeps of a ResourceClaimTemplate: its name, namespace and spec."""
    metadata = mapping(raw_template.get("metadata"))
    return {
        "metadata": {k: metadata[k] for k in ("name", "namespace") if k in metadata},
        "spec": raw_template.get("spec"),
    }
