"""The quota ledger: what pending charges add, when a charge may leave, and its text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from migslice.admission.ledger import (
    Charge,
    Ledger,
    LedgerError,
    SeenFor,
    failed_charges,
    parse_ledger,
    render_ledger,
)
from migslice.admission.usage import SliceUsage

ONE = SliceUsage(1, 1, 1, (("1g.10gb", 1),))
TWO = SliceUsage(1, 2, 2, (("2g.20gb", 1),))
NOW = 1_746_100_000.0
HOLD = 45.0


def nothing_seen(uid: str, namespace: str) -> float | None:
    return None


def seen_only(*pairs: tuple[str, str], for_s: float = 1.0) -> SeenFor:
    """Seen: these (uid, namespace) pairs, each for ``for_s`` seconds."""
    known = set(pairs)
    return lambda uid, namespace: for_s if (uid, namespace) in known else None


def ledger(*charges: Charge) -> Ledger:
    return Ledger("team-a", charges, "7")


def test_pending_charges_are_those_whose_pod_the_cache_has_not_seen() -> None:
    book = ledger(Charge("a", "ns", ONE, NOW), Charge("b", "ns", TWO, NOW))
    assert book.pending(nothing_seen) == ONE + TWO
    assert book.pending(seen_only(("a", "ns"))) == TWO
    assert book.pending(nothing_seen, exclude="b") == ONE


def test_a_pod_seen_in_another_namespace_does_not_settle_a_charge() -> None:
    book = ledger(Charge("a", "team-a", ONE, NOW))
    assert book.pending(seen_only(("a", "team-b"))) == ONE


def test_charging_replaces_the_same_uid_and_drops_only_charges_seen_long_enough() -> None:
    """A charge leaves once the writer's cache has held its pod for settle_after_s, however
    old the admission (a pod stored late is seen late)."""
    settled = Charge("settled", "ns", ONE, NOW - 100)
    unseen = Charge("unseen", "ns", ONE, NOW - HOLD - 1)
    just_seen = Charge("late", "ns", ONE, NOW - HOLD - 1)
    retried = Charge("retry", "ns", ONE, NOW - 2)
    book = ledger(settled, unseen, just_seen, retried)

    def seen_for(uid: str, namespace: str) -> float | None:
        return {"settled": 15.0, "late": 1.0}.get(uid)

    again = Charge("retry", "ns", TWO, NOW)
    after = book.with_charge(again, seen_for=seen_for, settle_after_s=15.0)
    assert [c.uid for c in after.charges] == ["unseen", "late", "retry"]
    assert after.charges[-1] == again
    assert after.version == "7"  # the compare-and-swap expects the version it was read at


def test_overdue_charges_are_released_only_when_a_fresh_list_lacks_their_pod() -> None:
    gone = Charge("gone", "ns-1", ONE, NOW - HOLD - 5)
    late = Charge("late", "ns-1", ONE, NOW - HOLD - 5)  # stored late: listed, not yet cached
    unlisted = Charge("other", "ns-2", ONE, NOW - HOLD - 5)  # its namespace was not listed
    young = Charge("young", "ns-1", ONE, NOW - 1)
    book = ledger(gone, late, unlisted, young)
    known = {"young": 1.0}
    overdue = book.overdue(
        nothing_seen, known_for=lambda c: known.get(c.uid, HOLD + 5), hold_s=HOLD
    )
    assert [c.uid for c in overdue] == ["gone", "late", "other"]
    assert failed_charges(overdue, {"ns-1": {"late"}}) == {"gone"}
    assert [c.uid for c in book.without({"gone"}).charges] == ["late", "other", "young"]


def test_the_text_round_trips_with_microsecond_times() -> None:
    book = Ledger("team-a", (Charge("u-1", "team-a", TWO, NOW + 0.25),), "", epoch="e1", seq=4)
    text = render_ledger(book)
    assert '"at":"2025-05-01T11:46:40.250000Z"' in text
    assert parse_ledger("team-a", text, "12") == Ledger(
        "team-a", book.charges, "12", epoch="e1", seq=4
    )
    assert parse_ledger("team-a", None, "3") == Ledger("team-a", (), "3")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{", "is not JSON"),
        ("[" * 5000 + "]" * 5000, "nests too deep"),
        ('{"version": "v0", "charges": []}', "version 'v0'; this migslice reads v2 or v1"),
        ('{"version": "v3", "charges": []}', "another release of migslice wrote it"),
        ('{"charges": []}', "has no version"),
        ('{"version": "v1", "charges": {}}', "charges must be a list"),
        ('{"version": "v1", "charges": [{"uid": "", "namespace": "n"}]}', "charges[0]"),
        (
            '{"version": "v1", "charges": [{"uid": "u", "namespace": "n", "at": "today"}]}',
            "charges[0].at",
        ),
        (
            '{"version": "v1", "charges": [{"uid": "u", "namespace": "n", '
            '"at": "2025-05-01T00:00:00Z", "instances": -1}]}',
            "must be counts",
        ),
    ],
    ids=[
        "not-json",
        "deep",
        "version",
        "newer",
        "no-version",
        "charges-not-list",
        "empty-uid",
        "bad-time",
        "negative",
    ],
)
def test_an_unreadable_ledger_names_the_tenant_and_the_field(text: str, where: str) -> None:
    with pytest.raises(LedgerError, match="tenant 'team-a'") as error:
        parse_ledger("team-a", text)
    assert where in str(error.value)


usages = st.builds(
    lambda i, c, m: SliceUsage(i, c, m, (("1g.10gb", i),) if i else ()),
    st.integers(0, 3),
    st.integers(0, 7),
    st.integers(0, 8),
)
charges = st.lists(
    st.builds(
        Charge,
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["ns-1", "ns-2"]),
        usages,
        st.floats(NOW - 100, NOW),
    ),
    max_size=6,
    unique_by=lambda c: c.uid,
)


@given(charges, st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(0, 60)), usages)
def test_charging_never_hides_an_unseen_charge_and_always_adds_the_new_one(
    given_charges: list[Charge], seen: dict[str, float], usage: SliceUsage
) -> None:
    """What a replica counts after a write is what it counted before plus the new charge,
    whatever the write pruned (only seen charges may leave)."""
    book = ledger(*given_charges)

    def seen_for(uid: str, namespace: str) -> float | None:
        return seen.get(uid)

    new = Charge("e", "ns-1", usage, NOW)
    after = book.with_charge(new, seen_for=seen_for, settle_after_s=15.0).with_epoch("e1")
    assert after.pending(seen_for) == book.pending(seen_for) + usage
    assert after.seq == book.seq + 1
    text = render_ledger(after)
    assert render_ledger(parse_ledger("team-a", text, "7")) == text
