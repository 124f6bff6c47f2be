"""Kubernetes quantities: exact values, MiB rounding, and clear errors for malformed input."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migslice.quantity import (
    QuantityError,
    format_mib,
    parse_count,
    parse_memory_mib,
    parse_quantity,
)
from migslice.quantity import QuantityError as InventoryQuantityError
from migslice.quantity import parse_count as inventory_parse_count

CASES = [
    ("20Gi", Fraction(20 * 2**30)),
    ("500M", Fraction(500 * 10**6)),
    ("1", Fraction(1)),
    ("250m", Fraction(1, 4)),
    ("1.5Gi", Fraction(3 * 2**29)),
    (".5", Fraction(1, 2)),
    ("1e3", Fraction(1000)),
    ("-2k", Fraction(-2000)),
    ("+3Ki", Fraction(3072)),
    (7, Fraction(7)),
]


@pytest.mark.parametrize(("text", "value"), CASES, ids=[str(c[0]) for c in CASES])
def test_quantities_parse_to_their_exact_value(text: str | int, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "lots", "20GB", "1.2.3", "Gi", "1 Gi", "0x10", "1e", True, None, 1.5]
)
def test_malformed_quantities_raise_an_error_that_shows_the_expected_form(text: object) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def test_memory_is_rounded_up_to_whole_mib() -> None:
    assert parse_memory_mib("20Gi") == 20480
    assert parse_memory_mib("10G") == 9537
    assert parse_memory_mib("1") == 1


def test_memory_must_be_positive() -> None:
    with pytest.raises(QuantityError, match="positive"):
        parse_memory_mib("0")


def test_counts_must_be_whole_and_non_negative() -> None:
    assert parse_count("2") == 2
    for text in ("1.5", "-1", "500m"):
        with pytest.raises(QuantityError, match="whole"):
            parse_count(text)


def test_mib_format_prefers_gi() -> None:
    assert format_mib(20480) == "20Gi"
    assert format_mib(9728) == "9728Mi"


@settings(max_examples=60, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["", "Ki", "Mi", "Gi", "k", "M", "G"]),
)
def test_every_integer_with_a_suffix_parses(number: int, suffix: str) -> None:
    assert parse_quantity(f"{number}{suffix}") >= 0


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=30))
def test_any_text_either_parses_or_raises_quantity_error(text: str) -> None:
    try:
        parse_quantity(text)
    except QuantityError:
        pass


# Kubernetes trims surrounding whitespace when it decodes a quantity from JSON
# (apimachinery resource.Quantity.UnmarshalJSON), but not whitespace inside one.
AGREED = [
    (" 2 ", 2),
    ("2\n", 2),
    ("1Ki", 1024),
    ("1k", 1000),
    ("1e3", 1000),
    ("+3", 3),
    ("2000000000n", 2),
    ("0", 0),
    ("1.0000000000000000000000000001Ki", None),
    ("1 Ki", None),
    ("0.5", None),
    ("500m", None),
    ("-1", None),
    ("", None),
    ("1e", None),
]


@pytest.mark.parametrize(("text", "count"), AGREED, ids=[repr(c[0]) for c in AGREED])
def test_the_core_and_the_inventory_read_a_count_the_same_way(text: str, count: int | None) -> None:
    if count is None:
        with pytest.raises(QuantityError):
            parse_count(text)
        with pytest.raises(QuantityError):
            inventory_parse_count(text, "limits[nvidia.com/gpu]")
    else:
        assert parse_count(text) == count
        assert inventory_parse_count(text, "limits[nvidia.com/gpu]") == count


def test_the_inventory_raises_the_core_quantity_error() -> None:
    assert InventoryQuantityError is QuantityError


@settings(max_examples=200, deadline=None)
@given(
    st.from_regex(
        r"\A[ +-]?[0-9]{0,12}(\.[0-9]{0,30})?(Ki|Mi|Gi|n|u|m|k|M|G|e[0-9]{1,2}|E-?[0-9])? ?\Z"
    )
)
def test_both_count_readers_agree_on_generated_quantities(text: str) -> None:
    def read(parse: Callable[[str], int]) -> int | None:
        try:
            return parse(text)
        except QuantityError:
            return None

    core = read(parse_count)
    assert read(lambda t: inventory_parse_count(t, "x")) == (
        core if core is None or core < 2**31 else None
    )
