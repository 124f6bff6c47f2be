"""Kubernetes resource quantities (``20Gi``, ``500M``, ``1``, ``250m``, ``1e3``), parsed exactly.

The grammar is the API machinery's (``k8s.io/apimachinery/pkg/api/resource``)::

    <quantity> ::= <sign>? <digits> ( "." <digits>? )? <suffix> | <sign>? "." <digits> <suffix>
    <suffix>   ::= Ki | Mi | Gi | Ti | Pi | Ei | n | u | m | "" | k | M | G | T | P | E
                 | ( e | E ) <sign>? <digits>

Values are :class:`fractions.Fraction`, so ``0.1Gi`` and ``100m`` stay exact. Surrounding
whitespace is ignored, as ``resource.Quantity.UnmarshalJSON`` ignores it; whitespace inside a
quantity is not. A string that does not match raises :class:`QuantityError` with a message
saying what a quantity looks like. This is the one quantity reader: every count (extended
resources, annotations) goes through :func:`parse_count`.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from migslice.errors import InvalidInputError, shown

MIB = 1024 * 1024

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<exp>[eE][+-]?[0-9]{1,3})|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)"
)
_MAX_LENGTH = 64


class QuantityError(InvalidInputError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: object) -> Fraction:
    """The exact value of a quantity: ``"20Gi"`` -> 21474836480, ``"250m"`` -> 1/4."""
    if isinstance(text, bool):
        raise QuantityError(f"{shown(text)} is not a quantity")
    if isinstance(text, int):
        return Fraction(text)
    if not isinstance(text, str):
        raise QuantityError(f"{shown(text)} is not a quantity (expected a string such as 20Gi)")
    return _parse_text(text)


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Fraction:
    """:func:`parse_quantity` of a string, remembered: a cluster's pods repeat a handful of
    quantities (``1``, ``8Gi``), and each pod read on a hot path (an extender call, an
    admission) parses every GPU quantity of its containers. Fractions are immutable, and an
    error is raised again each time (lru_cache keeps only values)."""
    match = _QUANTITY_RE.fullmatch(text.strip()) if len(text) <= _MAX_LENGTH else None
    if match is None:
        raise QuantityError(
            f"{text[:_MAX_LENGTH]!r} is not a Kubernetes quantity; expected a number with an "
            "optional suffix such as 20Gi, 500M, 1 or 250m"
        )
    value = Fraction(match["number"])
    if match["exp"] is not None:
        value *= Fraction(10) ** int(match["exp"][1:])
    else:
        suffix = match["suffix"] or ""
        value *= _BINARY.get(suffix) or _DECIMAL[suffix]
    return -value if match["sign"] == "-" else value


def parse_memory_mib(text: object) -> int:
    """A memory quantity in whole MiB, rounded up (``20Gi`` -> 20480, ``10G`` -> 9537)."""
    value = parse_quantity(text)
    if value <= 0:
        raise QuantityError(f"memory {text!r} must be positive")
    return math.ceil(value / MIB)


MAX_COUNT = 1 << 31


def parse_count(value: object, subject: str = "") -> int:
    """A whole count from 0 to 2**31 - 1 (``2``, ``"2"``, ``"1k"``, ``"2e0"``); else a
    QuantityError that names ``subject`` (the field) when given.

    Extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``) and annotation counts
    are read with it. The API server stores a quantity in canonical form, so ``1000`` may come
    back as ``1k``.
    """
    where = f"{subject}={shown(value)}" if subject else shown(value)
    try:
        number = parse_quantity(value)
    except QuantityError:
        raise QuantityError(f"{where} is not a quantity; expected a whole count") from None
    if number.denominator != 1:
        raise QuantityError(
            f"{where} is not a whole count; extended resources are counted in units"
        )
    if number < 0 or number >= MAX_COUNT:
        raise QuantityError(
            f"{where} is out of range; expected a whole count from 0 to {MAX_COUNT - 1}"
        )
    return int(number)


def format_mib(mib: int) -> str:
    """``20480`` -> ``20Gi``; ``9728`` -> ``9728Mi``."""
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"
