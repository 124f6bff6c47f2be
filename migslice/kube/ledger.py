"""Tenants' quota ledgers as ConfigMaps in migslice's namespace, written by compare-and-swap.

One ConfigMap per tenant, ``migslice-quota-<tenant>``, data key ``charges.json`` (the text of
``migslice.admission.ledger``), labelled ``migslice.io/ledger=quota``. A write names the
resourceVersion it was read at: a PUT the API server refuses with 409 Conflict (or a create
that finds the object already there, or an update that finds it gone) is a
:class:`~migslice.admission.ledger.LedgerConflictError`, and the caller reads and decides again, as
kube-apiserver's own ResourceQuota admission does with ``status.used``.

Why a ConfigMap: nothing else watches it (a TenantPolicy's status would wake every policy
watcher on each admission, and the status writer patches that status too), it needs no schema
of its own, and the RBAC stays a Role on one namespace (``get``, ``create``, ``update`` on
configmaps). :meth:`ConfigMapLedgers.reservations_in` lists a namespace's pods, which the
webhook may read anyway, to tell a pod never created from one not yet cached.

Every write names the field manager ``migslice-webhook``, so the API server's
``metadata.managedFields`` tell whether anyone else has written the charges since: a read that
finds ``data`` owned by another manager (``kubectl-edit``, ``kubectl-client-side-apply``, ...)
raises :class:`ForeignWriteError`. Before a tenant's first ledger is created, its TenantPolicy's
``status.quotaLedger`` records the ledger's epoch (:meth:`ConfigMapLedgers.mark`), so that a
replica that never saw the ledger still knows it existed once it is gone.
"""

from __future__ import annotations

import hashlib
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

from migslice import names
from migslice.admission.ledger import (
    Ledger,
    LedgerConflictError,
    LedgerError,
    parse_ledger,
    render_ledger,
)
from migslice.kube.status import status_path
from migslice.kube.transport import ApiError, RawObject
from migslice.objects.pod_gpus import gpu_requests
from migslice.objects.pods import annotations_of, is_admission_gated

DATA_KEY = "charges.json"
LEDGER_LABEL = "migslice.io/ledger"
TENANT_ANNOTATION = "migslice.io/tenant"
PREFIX = "migslice-quota-"
MAX_NAME = 253
LIST_TIMEOUT_S = 10.0
FIELD_MANAGER = "migslice-webhook"
LEGACY_MANAGERS = frozenset({"python-urllib3"})
"""Who wrote v1 ledgers: releases before field managers sent urllib3's User-Agent."""
MARK_KEY = names.LEDGER_STATUS_KEY


class ForeignWriteError(LedgerError):
    """The stored charges were last written by a client other than the webhook."""


class PolicyGoneError(ApiError):
    """The tenant's TenantPolicy is not there to record a ledger's epoch (deleted)."""


class LedgerStore(Protocol):
    """Where the webhook keeps the tenants' ledgers (a port; see ``webhook.quota``)."""

    def read(self, tenant: str) -> Ledger:
        """The stored ledger (no charges and version "" when there is none)."""
        ...

    def write(self, ledger: Ledger) -> Ledger:
        """Store ``ledger`` if the stored one is still at ``ledger.version``; the stored
        ledger with its new version. :class:`LedgerConflictError` otherwise."""
        ...

    def reservations_in(
        self, namespace: str, *, timeout_s: float = LIST_TIMEOUT_S
    ) -> frozenset[str]:
        """The ``migslice.io/reservation`` uids of the GPU pods in ``namespace`` now (an
        authoritative answer, not a cache's), less those still behind the admission gate
        (not admitted: what they carry is not the webhook's). ``timeout_s`` bounds the whole
        list (every page): past it, an :class:`ApiError`."""
        ...

    def marked(self, tenant: str) -> str:
        """The epoch the tenant's policy records for its ledger, read from the API server
        ("" when it records none: the tenant never had a ledger)."""
        ...

    def mark(self, tenant: str, epoch: str) -> None:
        """Record ``epoch`` as the tenant's ledger before that ledger is first written;
        :class:`PolicyGoneError` when the tenant has no TenantPolicy."""
        ...

    def where(self, tenant: str) -> str:
        """Where the tenant's ledger is kept, for messages (``namespace/name``)."""
        ...


class Api(Protocol):
    def get_json(
        self, path: str, query: Mapping[str, str], *, timeout_s: float = ...
    ) -> RawObject: ...

    def put_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_s: float = ...,
        query: Mapping[str, str] = ...,
    ) -> RawObject: ...

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        *,
        timeout_s: float = ...,
        query: Mapping[str, str] = ...,
    ) -> RawObject: ...

    def patch_json(
        self,
        path: str,
        patch: Mapping[str, Any],
        content_type: str = ...,
        *,
        timeout_s: float = ...,
    ) -> RawObject: ...


def ledger_name(tenant: str) -> str:
    """``migslice-quota-<tenant>``; a name too long for a ConfigMap ends in a hash instead."""
    name = PREFIX + tenant
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11]}-{digest}"


class ConfigMapLedgers:
    """A :class:`LedgerStore` over ConfigMaps in ``namespace``. Ledger reads and writes give
    up after ``timeout_s`` (under the webhook's own timeout, so that an API server that does
    not answer, e.g. while etcd is down, is reported at once rather than holding the tenant)."""

    def __init__(
        self, api: Api, namespace: str, *, timeout_s: float = 3.0, claims: bool = False
    ) -> None:
        self._api = api
        self._namespace = namespace
        self._timeout_s = timeout_s
        self._claims = claims
        self._collection = f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/configmaps"

    def read(self, tenant: str) -> Ledger:
        try:
            stored = self._api.get_json(self._path(tenant), {}, timeout_s=self._timeout_s)
        except ApiError as error:
            if error.status == 404:
                return Ledger(tenant)
            raise
        data = stored.get("data") or {}
        version = _version_of(stored)
        try:
            ledger = parse_ledger(tenant, data.get(DATA_KEY), version)
        except LedgerError as error:
            raise LedgerError(f"{error} (ConfigMap {self._where(tenant)})", version) from None
        allowed = {FIELD_MANAGER} | (LEGACY_MANAGERS if not ledger.epoch else set())
        writers = sorted(set(data_writers(stored)) - allowed)
        if writers:
            raise ForeignWriteError(
                f"quota ledger of tenant {tenant!r} (ConfigMap {self._where(tenant)}) was "
                f"written by {', '.join(writers)}",
                version,
            )
        return ledger

    def write(self, ledger: Ledger) -> Ledger:
        body = self._object(ledger)
        query = {"fieldManager": FIELD_MANAGER}
        try:
            if ledger.version:
                body["metadata"]["resourceVersion"] = ledger.version
                stored = self._api.put_json(
                    self._path(ledger.tenant), body, timeout_s=self._timeout_s, query=query
                )
            else:
                stored = self._api.post_json(
                    self._collection, body, timeout_s=self._timeout_s, query=query
                )
        except ApiError as error:
            if error.status in (404, 409):
                raise LedgerConflictError(
                    f"ledger of tenant {ledger.tenant!r} changed (HTTP {error.status})"
                ) from None
            raise
        return replace(ledger, version=_version_of(stored))

    def reservations_in(
        self, namespace: str, *, timeout_s: float = LIST_TIMEOUT_S
    ) -> frozenset[str]:
        """The reservations of the namespace's GPU pods and, with ``claims``, of its
        ResourceClaims (a claim's charge is matched to it as a pod's is), listed within
        ``timeout_s`` in all."""
        quoted = urllib.parse.quote(namespace)
        deadline = time.monotonic() + timeout_s
        found = self._reservations(
            f"/api/v1/namespaces/{quoted}/pods", gpu_only=True, deadline=deadline
        )
        if self._claims:
            path = f"{names.DRA_API}/namespaces/{quoted}/resourceclaims"
            found |= self._reservations(path, gpu_only=False, deadline=deadline)
        return frozenset(found)

    def _reservations(self, path: str, *, gpu_only: bool, deadline: float) -> set[str]:
        found: set[str] = set()
        token = ""
        while True:
            query = {"limit": "500", **({"continue": token} if token else {})}
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                raise ApiError(0, f"GET {path}: not listed within its time")
            page = self._api.get_json(path, query, timeout_s=left_s)
            for raw in page.get("items") or ():
                uid = annotations_of(raw).get(names.RESERVATION)
                # A pod behind the admission gate is no admission yet: its annotation is not
                # the webhook's (docs/outages.md).
                if (
                    isinstance(uid, str)
                    and (not gpu_only or gpu_requests(raw))
                    and not is_admission_gated(raw)
                ):
                    found.add(uid)
            token = str((page.get("metadata") or {}).get("continue") or "")
            if not token:
                return found

    def marked(self, tenant: str) -> str:
        path = status_path(tenant).removesuffix("/status")
        try:
            policy = self._api.get_json(path, {}, timeout_s=self._timeout_s)
        except ApiError as error:
            if error.status == 404:
                return ""
            raise
        mark = (policy.get("status") or {}).get(MARK_KEY) or {}
        epoch = mark.get("epoch") if isinstance(mark, Mapping) else None
        return epoch if isinstance(epoch, str) else ""

    def mark(self, tenant: str, epoch: str) -> None:
        patch = {"status": {MARK_KEY: {"epoch": epoch, "configMap": self._where(tenant)}}}
        try:
            self._api.patch_json(
                status_path(tenant),
                patch,
                "application/merge-patch+json",
                timeout_s=self._timeout_s,
            )
        except ApiError as error:
            if error.status == 404:
                raise PolicyGoneError(404, f"TenantPolicy {tenant!r} is gone ({error})") from None
            raise

    def where(self, tenant: str) -> str:
        return f"ConfigMap {self._where(tenant)}"

    def _where(self, tenant: str) -> str:
        return f"{self._namespace}/{ledger_name(tenant)}"

    def _path(self, tenant: str) -> str:
        return f"{self._collection}/{urllib.parse.quote(ledger_name(tenant), safe='')}"

    def _object(self, ledger: Ledger) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": ledger_name(ledger.tenant),
                "namespace": self._namespace,
                "labels": {
                    LEDGER_LABEL: "quota",
                    "app.kubernetes.io/managed-by": "migslice-webhook",
                },
                "annotations": {TENANT_ANNOTATION: ledger.tenant},
            },
            "data": {DATA_KEY: render_ledger(ledger)},
        }


def data_writers(raw: RawObject) -> tuple[str, ...]:
    """The managers ``metadata.managedFields`` names as owning a key of ``data``."""
    found: list[str] = []
    for entry in (raw.get("metadata") or {}).get("managedFields") or ():
        if not isinstance(entry, Mapping):
            continue
        data = (entry.get("fieldsV1") or {}).get("f:data")
        if isinstance(data, Mapping) and any(key.startswith("f:") for key in data):
            found.append(str(entry.get("manager") or "?"))
    return tuple(found)


def _version_of(raw: RawObject) -> str:
    version = (raw.get("metadata") or {}).get("resourceVersion")
    if not isinstance(version, str) or not version:
        raise ApiError(0, "the API server answered a ConfigMap without metadata.resourceVersion")
    return version
