"""Builders for DRA objects shaped as kube-apiserver stores them (ResourceClaims, DeviceClasses,
pods that use claims, the Node of a DRA node), and the fixtures of ``tests/fixtures/dra``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import yaml

from harness.dra_slices import DRIVER
from tests import paths

FIXTURES = paths.FIXTURES / "dra"
SLICE_FIXTURES = tuple(sorted(p.name for p in FIXTURES.glob("*-resourceslices.json")))


@cache
def _fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def fixture(name: str) -> Any:
    """A fixture, parsed anew (callers may change it)."""
    text = _fixture_text(name)
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def fixture_slices(name: str) -> list[dict[str, Any]]:
    return list(fixture(name)["items"])


def profile_selector(profile: str) -> str:
    return f"device.attributes['{DRIVER}'].profile == '{profile}'"


def make_claim(
    name: str,
    *,
    namespace: str = "team-a",
    requests: Sequence[Mapping[str, Any]] | None = None,
    profile: str | None = "1g.10gb",
    device_class: str = "mig.nvidia.com",
    count: int = 1,
    allocated: Sequence[tuple[str, str]] | None = None,
    reserved_for: Sequence[str] = (),
    owner: str | None = None,
    extended_resource: bool = False,
) -> dict[str, Any]:
    """A ResourceClaim after defaulting (``allocationMode: ExactCount``); ``allocated``: the
    (pool, device) pairs of its allocation, as kube-scheduler writes them."""
    if requests is None:
        exactly: dict[str, Any] = {
            "deviceClassName": device_class,
            "allocationMode": "ExactCount",
            "count": count,
        }
        if profile is not None:
            exactly["selectors"] = [{"cel": {"expression": profile_selector(profile)}}]
        requests = [{"name": "mig", "exactly": exactly}]
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": owner,
                "uid": f"uid-{owner}",
                "controller": True,
            }
        ]
    if extended_resource:
        metadata["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": list(requests)}},
    }
    if allocated is not None:
        first = str(requests[0].get("name", "mig"))
        pools = sorted({pool for pool, _ in allocated})
        claim["status"] = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": first, "driver": DRIVER, "pool": pool, "device": device}
                        for pool, device in allocated
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": pools}
                            ]
                        }
                    ]
                },
            },
            "reservedFor": [
                {"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in reserved_for
            ],
        }
    return claim


def make_claim_pod(
    name: str,
    claims: Mapping[str, str],
    *,
    namespace: str = "team-a",
    node_name: str | None = None,
    phase: str = "Pending",
    templates: Mapping[str, str | None] | None = None,
    extended_claim: str | None = None,
    mig: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """A pod using ResourceClaims: ``claims`` maps its claim names to existing claims
    (``resourceClaimName``); ``templates`` maps names to the claim the controller made from a
    template (None: not made yet). ``mig``: extended resources it asks for instead or too."""
    spec: dict[str, Any] = {
        "schedulerName": "migslice-scheduler",
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04",
                "resources": {
                    "claims": [{"name": claim} for claim in [*claims, *(templates or {})]]
                },
            }
        ],
        "resourceClaims": [
            {"name": claim, "resourceClaimName": target} for claim, target in claims.items()
        ]
        + [
            {"name": claim, "resourceClaimTemplateName": f"{claim}-template"}
            for claim in templates or {}
        ],
    }
    if mig:
        limits = {f"nvidia.com/mig-{p.replace('+', '.')}": str(n) for p, n in mig.items()}
        spec["containers"][0]["resources"] = {"limits": limits, "requests": dict(limits)}
        if not claims and not templates:
            del spec["resourceClaims"]
    if node_name is not None:
        spec["nodeName"] = node_name
    status: dict[str, Any] = {"phase": phase}
    made = [
        {"name": claim, **({"resourceClaimName": target} if target else {})}
        for claim, target in (templates or {}).items()
        if target is not None
    ]
    if made:
        status["resourceClaimStatuses"] = made
    if extended_claim is not None:
        status["extendedResourceClaimStatus"] = {
            "requestMappings": [
                {"containerName": "main", "resourceName": r, "requestName": "container-0-request-0"}
                for r in spec["containers"][0]["resources"].get("limits", {})
            ],
            "resourceClaimName": extended_claim,
        }
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": spec,
        "status": status,
    }


def make_dra_node(name: str, *, resource_version: str = "", **labels: str) -> dict[str, Any]:
    """The Node of a DRA node: no ``nvidia.com/*`` allocatable (NVIDIA's device plugin does not
    run there), no GFD labels unless given."""
    metadata: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": dict(labels)}
    if resource_version:
        metadata["resourceVersion"] = resource_version
    allocatable = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    return {
        "metadata": metadata,
        "spec": {},
        "status": {"capacity": dict(allocatable), "allocatable": allocatable},
    }


def migslice_classes() -> list[dict[str, Any]]:
    """NVIDIA's classes and migslice's for the profiles the tests use."""
    return [
        fixture("deviceclass-mig.nvidia.com.yaml"),
        fixture("deviceclass-gpu.nvidia.com.yaml"),
        *(
            make_migslice_class(p)
            for p in (
                "1g.10gb",
                "1g.10gb+me",
                "2g.20gb",
                "3g.40gb",
                "4g.40gb",
                "7g.80gb",
                "1g.20gb",
            )
        ),
    ]


def make_migslice_class(profile: str) -> dict[str, Any]:
    """migslice's DeviceClass of one profile (as ``deviceclass-migslice-mig-1g.10gb.yaml``)."""
    expression = (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'mig' && "
        f"device.attributes['{DRIVER}'].profile == '{profile}'"
    )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "migslice-mig-" + profile.replace("+", ".")},
        "spec": {
            "selectors": [{"cel": {"expression": expression}}],
            "extendedResourceName": "nvidia.com/mig-" + profile.replace("+", "."),
        },
    }


def maintenance_rule(pool: str, device: str) -> dict[str, Any]:
    """An admin's DeviceTaintRule keeping new claims off one device of NVIDIA's driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"maintenance-{device}"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
