"""Quota ledgers as ConfigMaps, against a real HTTP server answering as kube-apiserver does:
create, replace guarded by resourceVersion (409 Conflict), and a paged list of pods."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.builders import make_pod
from migslice import names
from migslice.admission.ledger import Charge, Ledger, LedgerConflictError, LedgerError
from migslice.admission.usage import SliceUsage
from migslice.kube.ledger import DATA_KEY, ConfigMapLedgers, ForeignWriteError, ledger_name
from migslice.kube.transport import ApiError
from tests.ledger_api import LedgerApi
from tests.local_api import Request, local_api

ONE = SliceUsage(1, 1, 1, (("1g.10gb", 1),))


ConfigMapApi = LedgerApi


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
    first = ledgers.write(Ledger("team-a", (Charge("u-1", "team-a", ONE, 1.0e9),), epoch="e1"))
    assert first.version == "101"
    stored = fake.objects[ledger_name("team-a")]
    assert stored["metadata"]["labels"]["migslice.io/ledger"] == "quota"
    assert stored["metadata"]["annotations"]["migslice.io/tenant"] == "team-a"
    assert '"uid":"u-1"' in stored["data"][DATA_KEY]
    assert ledgers.read("team-a") == first
    with pytest.raises(LedgerConflictError):
        ledgers.write(
            Ledger("team-a", epoch="e1")
        )  # a create, but another replica created it first
    with pytest.raises(LedgerConflictError):
        ledgers.write(Ledger("team-a", (), "100", epoch="e1"))  # read before someone else's write
    second = ledgers.write(first.without({"u-1"}))
    assert second.version == "102" and ledgers.read("team-a").charges == ()
    put = [r for r in fake.requests if r.method == "PUT"][-1]
    assert put.body["metadata"]["resourceVersion"] == "101"
    assert put.content_type == "application/json"


def test_a_ledger_deleted_meanwhile_is_a_conflict_and_reads_as_empty(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    stored = ledgers.write(Ledger("team-a", (Charge("u-1", "team-a", ONE, 1.0e9),), epoch="e1"))
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


def test_writes_name_the_webhook_as_field_manager_and_a_hand_edit_is_a_foreign_write(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    first = ledgers.write(Ledger("team-a", (Charge("u-1", "team-a", ONE, 1.0e9),), epoch="e1"))
    writes = [r for r in fake.requests if r.method in ("POST", "PUT")]
    assert {r.query.get("fieldManager") for r in writes} == {"migslice-webhook"}
    assert ledgers.read("team-a") == first
    fake.edit(
        ledger_name("team-a"),
        {DATA_KEY: '{"version":"v2","tenant":"team-a","epoch":"e1","seq":9,"charges":[]}'},
    )
    with pytest.raises(ForeignWriteError, match="written by kubectl-edit") as error:
        ledgers.read("team-a")
    assert "migslice-system/migslice-quota-team-a" in str(error.value)
    assert error.value.version == fake.objects[ledger_name("team-a")]["metadata"]["resourceVersion"]


def test_a_v1_ledger_of_an_earlier_release_is_read_and_a_v2_one_by_its_client_is_not(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    """Releases before field managers wrote v1 ledgers as python-urllib3 (urllib3's
    User-Agent): such a ledger still reads; the same client writing v2 is someone else."""
    fake, ledgers = api
    ledgers.write(Ledger("team-a", epoch="e1"))
    v1 = '{"version":"v1","tenant":"team-a","charges":[]}'
    fake.edit(ledger_name("team-a"), {DATA_KEY: v1}, manager="python-urllib3")
    assert ledgers.read("team-a").epoch == ""
    v2 = '{"version":"v2","tenant":"team-a","epoch":"e2","seq":1,"charges":[]}'
    fake.edit(ledger_name("team-a"), {DATA_KEY: v2}, manager="python-urllib3")
    with pytest.raises(ForeignWriteError):
        ledgers.read("team-a")


def test_an_unreadable_ledger_names_its_configmap_and_carries_its_version(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    ledgers.write(Ledger("team-a", epoch="e1"))
    fake.edit(ledger_name("team-a"), {DATA_KEY: "{oops"}, manager="migslice-webhook")
    with pytest.raises(LedgerError, match="not JSON") as error:
        ledgers.read("team-a")
    assert "ConfigMap migslice-system/migslice-quota-team-a" in str(error.value)
    assert error.value.version != ""


def test_the_mark_is_kept_in_the_tenant_policy_status_and_read_back_from_the_server(
    api: tuple[ConfigMapApi, ConfigMapLedgers],
) -> None:
    fake, ledgers = api
    assert ledgers.marked("team-a") == ""
    ledgers.mark("team-a", "e7")
    assert ledgers.marked("team-a") == "e7"
    patch = [r for r in fake.requests if r.method == "PATCH"][-1]
    assert patch.path == "/apis/migslice.io/v1alpha1/tenantpolicies/team-a/status"
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {
        "status": {
            "quotaLedger": {"epoch": "e7", "configMap": "migslice-system/migslice-quota-team-a"}
        }
    }


def test_marking_a_policy_gives_up_within_the_ledgers_budget() -> None:
    """The mark is written in an admission, under kube-apiserver's 5 s webhook timeout: an API
    server that reads but does not answer writes held it for 30 s (and the tenant's lock with
    it), so the caller met a context deadline instead of the webhook's clear 503."""
    fake = ConfigMapApi()

    def answer(request: Request) -> tuple[int, Any]:
        if request.method == "PATCH":
            time.sleep(3.0)  # longer than the budget below, far shorter than 30 s
        return fake.answer(request)

    with local_api(answer) as transport:
        ledgers = ConfigMapLedgers(transport, "migslice-system", timeout_s=0.5)
        with pytest.raises(ApiError, match="timed out"):
            ledgers.mark("team-a", "e1")


def test_reservations_in_lists_nothing_past_its_time() -> None:
    """The time given bounds the whole list, every page: none left, no request is made and the
    answer is an error (a quota denial's inline list has 1.5 s of the webhook's 5)."""
    asked: list[str] = []

    def answer(request: Request) -> tuple[int, Any]:
        asked.append(request.path)
        return 200, {"kind": "PodList", "items": [], "metadata": {}}

    with local_api(answer) as transport:
        store = ConfigMapLedgers(transport, "migslice-system")
        assert store.reservations_in("team-a", timeout_s=5.0) == frozenset()
        with pytest.raises(ApiError, match="not listed within its time"):
            store.reservations_in("team-a", timeout_s=0.0)
    assert asked == ["/api/v1/namespaces/team-a/pods"]
