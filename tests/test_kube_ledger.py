"""Quota ledgers as ConfigMaps, against a real HTTP server answering as kube-apiserver does:
create, replace guarded by resourceVersion (409 Conflict), and a paged list of pods."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from harness.builders import make_pod
from migslice import names
from migslice.admission.ledger import Charge, Ledger, LedgerConflictError
from migslice.admission.usage import SliceUsage
from migslice.kube.ledger import DATA_KEY, ConfigMapLedgers, ledger_name
from tests.local_api import Request, local_api

PATH = "/api/v1/namespaces/migslice-system/configmaps"
ONE = SliceUsage(1, 1, 1, (("1g.10gb", 1),))


class ConfigMapApi:
    """ConfigMaps kept as kube-apiserver keeps them: resourceVersion bumps on every write."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.lock = threading.Lock()
        self.pods: list[list[dict[str, Any]]] = []
        self.requests: list[Request] = []

    def answer(self, request: Request) -> tuple[int, Any]:
        self.requests.append(request)
        if request.path.endswith("/pods"):
            page = int(request.query.get("continue") or 0)
            token = str(page + 1) if page + 1 < len(self.pods) else ""
            return 200, {"metadata": {"continue": token}, "items": self.pods[page]}
        with self.lock:
            return self._configmap(request)

    def _configmap(self, request: Request) -> tuple[int, Any]:
        name = request.path.removeprefix(PATH).strip("/")
        if request.method == "GET":
            found = self.objects.get(name)
            return (200, found) if found else (404, {"kind": "Status", "code": 404})
        body = copy.deepcopy(request.body)
        name = name or body["metadata"]["name"]
        current = self.objects.get(name)
        if request.method == "POST" and current is not None:
            return 409, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}
        if request.method == "PUT":
            if current is None:
                return 404, {"kind": "Status", "code": 404}
            if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
                return 409, {"kind": "Status", "code": 409, "reason": "Conflict"}
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[name] = body
        return (201 if request.method == "POST" else 200), body


@pytest.fixture
def api() -> Iterator[tuple[ConfigMapApi, ConfigMapLedgers]]:
    fake = ConfigMapApi()
    with local_api(fake.answer) as transport:
        yield fake, ConfigMapLedgers(transport, "migslice-system")


def test_a_ledger_is_created_then_replaced_only_at_the_version_it_was_read(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    empty = ledgers.read("team-a")
    assert empty == Ledger("team-a")
    first = ledgers.write(Ledger("team-a", (Charge("u-1", "team-a", ONE, 1.0e9),)))
    assert first.version == "101"
    stored = fake.objects[ledger_name("team-a")]
    assert stored["metadata"]["labels"]["migslice.io/ledger"] == "quota"
    assert stored["metadata"]["annotations"]["migslice.io/tenant"] == "team-a"
    assert '"uid":"u-1"' in stored["data"][DATA_KEY]
    assert ledgers.read("team-a") == first
    with pytest.raises(LedgerConflictError):
        ledgers.write(Ledger("team-a"))  # a create, but another replica created it first
    with pytest.raises(LedgerConflictError):
        ledgers.write(Ledger("team-a", (), "100"))  # read before someone else's write
    second = ledgers.write(first.without({"u-1"}))
    assert second.version == "102" and ledgers.read("team-a").charges == ()
    put = [r for r in fake.requests if r.method == "PUT"][-1]
    assert put.body["metadata"]["resourceVersion"] == "101"
    assert put.content_type == "application/json"


def test_a_ledger_deleted_meanwhile_is_a_conflict_and_reads_as_empty(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    stored = ledgers.write(Ledger("team-a", (Charge("u-1", "team-a", ONE, 1.0e9),)))
    fake.objects.clear()
    with pytest.raises(LedgerConflictError):
        ledgers.write(stored.without({"u-1"}))
    assert ledgers.read("team-a") == Ledger("team-a")


def test_reservations_in_lists_every_page_and_counts_only_gpu_pods(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    gpu = make_pod("train-1", profile="1g.10gb")
    gpu["metadata"]["annotations"][names.RESERVATION] = "u-1"
    later = make_pod("train-2", profile="2g.20gb", phase="Succeeded")
    later["metadata"]["annotations"][names.RESERVATION] = "u-2"
    forged = make_pod("web")
    forged["metadata"]["annotations"][names.RESERVATION] = "u-3"
    fake.pods = [[gpu, forged], [later]]
    assert ledgers.reservations_in("team-a") == {"u-1", "u-2"}
    lists = [r for r in fake.requests if r.path.endswith("/pods")]
    assert [r.query.get("continue") for r in lists] == [None, "1"]
    assert lists[0].path == "/api/v1/namespaces/team-a/pods"


def test_a_tenant_name_too_long_for_a_configmap_gets_a_hashed_name() -> None:
    assert ledger_name("team-a") == "migslice-quota-team-a"
    long = "t" * 250
    name = ledger_name(long)
    assert len(name) == 253 and name != ledger_name("t" * 249 + "u")
