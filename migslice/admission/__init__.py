"""Admission: decide(pod CREATE, cluster view) -> AdmissionDecision (patch ops, reasons)."""

from migslice.admission.decide import decide, quota_denial
from migslice.admission.decision import (
    AdmissionDecision,
    AdmissionSettings,
    Denial,
    PodAdmission,
    Unmatched,
)
from migslice.admission.intent import MalformedPodError, PodIntent, read_intent
from migslice.admission.patch import JsonValue, PatchOp, escape
from migslice.admission.usage import SliceUsage, charge, usage_of
from migslice.admission.view import ClusterView, StaticView

__all__ = [
    "AdmissionDecision",
    "AdmissionSettings",
    "ClusterView",
    "Denial",
    "JsonValue",
    "MalformedPodError",
    "PatchOp",
    "PodAdmission",
    "PodIntent",
    "SliceUsage",
    "StaticView",
    "Unmatched",
    "charge",
    "decide",
    "escape",
    "quota_denial",
    "read_intent",
    "usage_of",
]
