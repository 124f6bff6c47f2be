"""migslice's ResourceClaimTemplates created in the API server (``resource.k8s.io/v1``).

The webhook creates the template a ``deviceAPI: ResourceClaim`` tenant's pod names, before it
answers, when its cache does not hold it yet, and its template loop creates the missing ones
of every such tenant's namespaces; either may find the template already there (another
replica was first): 409 AlreadyExists reads the stored one instead. It never updates or
deletes one (a template's spec is immutable): RBAC ``get``, ``list``, ``watch``, ``create``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any, Protocol

from migslice.kube.transport import ApiError, RawObject
from migslice.names import DRA_API
from migslice.objects.json import mapping, text

TIMEOUT_S = 3.0
FIELD_MANAGER = "migslice-webhook"


class Api(Protocol):
    def get_json(
        self, path: str, query: Mapping[str, str], *, timeout_s: float = ...
    ) -> RawObject: ...

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_s: float = ...,
        query: Mapping[str, str] = ...,
    ) -> RawObject: ...


def templates_path(namespace: str) -> str:
    return f"{DRA_API}/namespaces/{urllib.parse.quote(namespace)}/resourceclaimtemplates"


class ApiTemplates:
    """Creates templates through the API server; the stored object (the existing one when
    another writer was first)."""

    def __init__(self, api: Api, *, timeout_s: float = TIMEOUT_S) -> None:
        self._api = api
        self._timeout_s = timeout_s

    def create(self, template: Mapping[str, Any]) -> RawObject:
        metadata = mapping(template.get("metadata"))
        namespace, name = text(metadata.get("namespace")) or "", text(metadata.get("name")) or ""
        path = templates_path(namespace)
        try:
            return self._api.post_json(
                path, template, timeout_s=self._timeout_s, query={"fieldManager": FIELD_MANAGER}
            )
        except ApiError as error:
            if error.status != 409:
                raise
        return self._api.get_json(
            f"{path}/{urllib.parse.quote(name, safe='')}", {}, timeout_s=self._timeout_s
        )
