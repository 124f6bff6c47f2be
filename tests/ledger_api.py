"""ConfigMaps, a namespace's pods and ResourceClaims and TenantPolicy status, kept as
kube-apiserver keeps them, for tests of the quota ledgers over a real HTTP server
(``tests.local_api``).

What the ledgers rely on is kept as kube-apiserver does it: ``resourceVersion`` bumps on every
write; a PUT naming an old one is 409 Conflict, a POST of an existing name 409 AlreadyExists, a
PUT of a missing object 404; ``metadata.managedFields`` records, per manager (the
``fieldManager`` query parameter, else the User-Agent up to its first ``/``), the ``data`` keys
it last changed, as Update operations do (a key a manager changes leaves every other manager's
entry; an entry left with no fields is dropped); a merge patch of ``/status`` merges.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from tests.local_api import Request

CONFIGMAPS = "/api/v1/namespaces/migslice-system/configmaps"
POLICIES = "/apis/migslice.io/v1alpha1/tenantpolicies"


class LedgerApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.policies: dict[str, dict[str, Any]] = {}
        self.deleted_policies: set[str] = set()
        self.version = 100
        self.lock = threading.Lock()
        self.pods: list[list[dict[str, Any]]] = [[]]
        self.claims: list[dict[str, Any]] = []
        self.requests: list[Request] = []

    def answer(self, request: Request) -> tuple[int, Any]:
        self.requests.append(request)
        with self.lock:
            if request.path.endswith("/pods"):
                page = int(request.query.get("continue") or 0)
                token = str(page + 1) if page + 1 < len(self.pods) else ""
                return 200, {"metadata": {"continue": token}, "items": self.pods[page]}
            if request.path.endswith("/resourceclaims"):
                return 200, {"metadata": {"continue": ""}, "items": list(self.claims)}
            if request.path.startswith(POLICIES):
                return self._policy(request)
            return self._configmap(request)

    # -- what a test does by hand, as kubectl would ---------------------------------------------

    def edit(self, name: str, data: dict[str, str], manager: str = "kubectl-edit") -> None:
        """Replace a ConfigMap's data as ``manager`` (``kubectl edit``, ``kubectl apply``)."""
        with self.lock:
            stored = copy.deepcopy(self.objects[name])
            stored["data"] = dict(data)
            self._store(name, stored, manager, self.objects[name])

    def delete(self, name: str) -> None:
        with self.lock:
            del self.objects[name]

    def delete_policy(self, name: str) -> None:
        """``kubectl delete tenantpolicy``: reads and status patches of it answer 404."""
        with self.lock:
            self.policies.pop(name, None)
            self.deleted_policies.add(name)

    # -- answers --------------------------------------------------------------------------------

    def _configmap(self, request: Request) -> tuple[int, Any]:
        name = request.path.removeprefix(CONFIGMAPS).strip("/")
        if request.method == "GET":
            found = self.objects.get(name)
            return (200, copy.deepcopy(found)) if found else (404, _status(404, "NotFound"))
        if request.method == "DELETE":
            return (200, self.objects.pop(name)) if name in self.objects else (404, {})
        body = copy.deepcopy(request.body)
        name = name or body["metadata"]["name"]
        current = self.objects.get(name)
        if request.method == "POST" and current is not None:
            return 409, _status(409, "AlreadyExists")
        if request.method == "PUT":
            if current is None:
                return 404, _status(404, "NotFound")
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict")
        manager = request.query.get("fieldManager") or (request.user_agent or "").split("/")[0]
        stored = self._store(name, body, manager, current)
        return (201 if request.method == "POST" else 200), copy.deepcopy(stored)

    def _store(
        self, name: str, body: dict[str, Any], manager: str, current: dict[str, Any] | None
    ) -> dict[str, Any]:
        before = (current or {}).get("data") or {}
        after = body.get("data") or {}
        changed = {k for k in after if before.get(k) != after[k]} | (set(before) - set(after))
        entries = copy.deepcopy((current or {}).get("metadata", {}).get("managedFields") or [])
        for entry in entries:
            data = entry["fieldsV1"].get("f:data", {})
            for key in changed:
                data.pop(f"f:{key}", None)
            if not [k for k in data if k.startswith("f:")]:
                entry["fieldsV1"].pop("f:data", None)
        entries = [e for e in entries if e["fieldsV1"] and e["manager"] != manager]
        mine = next(
            (e for e in (current or {}).get("metadata", {}).get("managedFields") or ()
             if e["manager"] == manager),
            None,
        )  # fmt: skip
        owned = set((mine or {}).get("fieldsV1", {}).get("f:data", {})) - {"."}
        owned = {k for k in owned if k.removeprefix("f:") not in changed or k[2:] in after}
        owned |= {f"f:{k}" for k in changed if k in after}
        if owned:
            fields = {"f:data": {".": {}, **{k: {} for k in sorted(owned)}}}
            entries.append(
                {"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields,
                 "manager": manager, "operation": "Update"}
            )  # fmt: skip
        self.version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        body["metadata"]["managedFields"] = entries
        self.objects[name] = body
        return body

    def _policy(self, request: Request) -> tuple[int, Any]:
        name = request.path.removeprefix(POLICIES).strip("/").removesuffix("/status")
        if name in self.deleted_policies:
            return 404, _status(404, "NotFound")
        policy = self.policies.setdefault(name, {"metadata": {"name": name}, "status": {}})
        if request.method == "PATCH":
            policy["status"].update(request.body.get("status") or {})
        return 200, copy.deepcopy(policy)


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason}  # fmt: skip
