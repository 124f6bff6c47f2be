"""The TenantPolicy custom resource on the wire (``migslice.io/v1alpha1``), as TypedDicts.

Field names are the CRD's camelCase; the schema is
``charts/migslice/templates/crd/tenantpolicies.yaml``.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class SelectorRequirementWire(TypedDict):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: NotRequired[list[str]]


class LabelSelectorWire(TypedDict, total=False):
    matchLabels: dict[str, str]
    matchExpressions: list[SelectorRequirementWire]


class SizeWire(TypedDict):
    memory: str | int
    computeSlices: NotRequired[int]
    tier: NotRequired[Literal["mig", "dedicated", "shared", "mps"]]
    preferredProfiles: NotRequired[dict[str, str]]


class QuotaWire(TypedDict, total=False):
    instances: int
    computeSlices: int
    memorySlices: int
    profiles: dict[str, int]


class TenantPolicySpecWire(TypedDict, total=False):
    namespaces: list[str]
    namespaceSelector: LabelSelectorWire
    isolation: Literal["hardware", "process", "none"]
    tiers: list[Literal["mig", "dedicated", "shared", "mps"]]
    sizes: dict[str, SizeWire]
    defaultSize: str
    allowedProfiles: list[str]
    deniedProfiles: list[str]
    allowedProducts: list[str]
    nodeSelector: dict[str, str]
    quota: QuotaWire
    maxSlicesPerPod: int
    deviceAPI: Literal["ExtendedResource", "ResourceClaim"]


class ConditionWire(TypedDict):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str
    message: str
    lastTransitionTime: str
    observedGeneration: NotRequired[int]


class UsageWire(TypedDict):
    instances: int
    computeSlices: int
    memorySlices: int
    profiles: NotRequired[dict[str, int]]


class TenantPolicyStatusWire(TypedDict, total=False):
    observedGeneration: int
    used: UsageWire
    quotaSummary: str
    conditions: list[ConditionWire]
