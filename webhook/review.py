"""AdmissionReview ``admission.k8s.io/v1`` on the wire: TypedDicts, parsing, responses.

A body that is not a v1 AdmissionReview with a request uid raises :class:`ReviewError`
(HTTP 400). The response echoes ``apiVersion``, ``kind`` and ``request.uid``; the patch is the
base64 of a JSON array of RFC 6902 ops with ``patchType: JSONPatch``, present only together.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

import orjson

from migslice.admission import PatchOp
from migslice.errors import InvalidInputError

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class GroupVersionKindWire(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequestWire(TypedDict):
    uid: str
    kind: GroupVersionKindWire
    resource: NotRequired[dict[str, str]]
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: NotRequired[dict[str, Any]]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]
    options: NotRequired[dict[str, Any] | None]


class StatusWire(TypedDict):
    code: int
    message: str
    reason: NotRequired[str]
    status: NotRequired[str]


class AdmissionResponseWire(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[StatusWire]
    patch: NotRequired[str]
    patchType: NotRequired[Literal["JSONPatch"]]
    warnings: NotRequired[list[str]]


class AdmissionReviewWire(TypedDict):
    apiVersion: str
    kind: str
    request: NotRequired[AdmissionRequestWire]
    response: NotRequired[AdmissionResponseWire]


class ReviewError(InvalidInputError):
    """A request body that is not a usable AdmissionReview (HTTP 400)."""


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of an AdmissionReview request we use; ``raw_object`` is the object as sent."""

    uid: str
    group: str
    kind: str
    operation: str
    namespace: str
    raw_object: Mapping[str, object] | None
    dry_run: bool
    raw_old_object: Mapping[str, object] | None = None
    sub_resource: str = ""


def parse_review(body: bytes) -> Review:
    try:
        raw_review = orjson.loads(body)  # nesting deeper than 1,024 levels is a ValueError
    except (ValueError, RecursionError) as error:
        raise ReviewError(f"request body is not JSON: {error}") from None
    if not isinstance(raw_review, dict):
        raise ReviewError("request body is not a JSON object (expected an AdmissionReview)")
    api_version, kind = raw_review.get("apiVersion"), raw_review.get("kind")
    if api_version != API_VERSION or kind != KIND:
        raise ReviewError(
            f"expected {API_VERSION} {KIND}, got apiVersion={api_version!r} kind={kind!r}; "
            "list v1 in admissionReviewVersions"
        )
    request = raw_review.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("AdmissionReview request has no uid")
    gvk = request.get("kind")
    if not isinstance(gvk, dict) or not isinstance(gvk.get("kind"), str):
        raise ReviewError("AdmissionReview request.kind is missing or not {group, version, kind}")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise ReviewError(f"AdmissionReview request.operation {operation!r} is not an operation")
    raw_object = request.get("object")
    if raw_object is not None and not isinstance(raw_object, dict):
        raise ReviewError("AdmissionReview request.object is not an object")
    if operation in ("CREATE", "UPDATE") and raw_object is None:
        raise ReviewError(f"AdmissionReview {operation} request has no object")
    namespace = request.get("namespace", "")
    if not isinstance(namespace, str):
        raise ReviewError("AdmissionReview request.namespace is not a string")
    dry_run = request.get("dryRun", False)
    raw_old = request.get("oldObject")
    if raw_old is not None and not isinstance(raw_old, dict):
        raise ReviewError("AdmissionReview request.oldObject is not an object")
    sub_resource = request.get("subResource", "")
    if not isinstance(sub_resource, str):
        raise ReviewError("AdmissionReview request.subResource is not a string")
    return Review(
        uid=uid,
        group=str(gvk.get("group", "")),
        kind=str(gvk["kind"]),
        operation=str(operation),
        namespace=namespace,
        raw_object=raw_object,
        dry_run=dry_run is True,
        raw_old_object=raw_old,
        sub_resource=sub_resource,
    )


def allow(
    uid: str, patch: Sequence[PatchOp] = (), warnings: Sequence[str] = ()
) -> AdmissionReviewWire:
    response: AdmissionResponseWire = {"uid": uid, "allowed": True}
    if patch:
        encoded = json.dumps([op.to_json() for op in patch], separators=(",", ":")).encode()
        response["patch"] = base64.b64encode(encoded).decode("ascii")
        response["patchType"] = "JSONPatch"
    if warnings:
        response["warnings"] = [_short(w) for w in warnings]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


MAX_MESSAGE = 2048
"""The longest denial message sent whole; a longer one keeps its first and last ``KEPT``
characters: it repeats a value the webhook read before kube-apiserver validated it, which may
run to megabytes, between the subject and what to do."""
KEPT = 960


def deny(uid: str, message: str, code: int = 403) -> AdmissionReviewWire:
    reason = {400: "BadRequest", 403: "Forbidden", 422: "Invalid"}.get(code, "Forbidden")
    status: StatusWire = {
        "code": code,
        "message": _bounded(message),
        "reason": reason,
        "status": "Failure",
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": {"uid": uid, "allowed": False, "status": status},
    }


def _bounded(message: str) -> str:
    if len(message) <= MAX_MESSAGE:
        return message
    left_out = len(message) - 2 * KEPT
    return f"{message[:KEPT]} [... {left_out} characters not shown ...] {message[-KEPT:]}"


def _short(warning: str) -> str:
    return warning if len(warning) <= 250 else warning[:247] + "..."
