"""Kubernetes resource quantities, as far as extended resources need them.

Extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``) are whole counts. The
API server stores a quantity in canonical form, so ``1000`` may come back as ``1k``; this
module accepts the decimal-SI, binary-SI and exponent forms and insists on a whole number.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_QUANTITY_RE = re.compile(
    r"^(?P<number>[+]?[0-9]+(\.[0-9]*)?|[+]?\.[0-9]+)"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
MAX_COUNT = 1 << 31


class QuantityError(ValueError):
    """A resource quantity that is not a whole count."""


def parse_count(value: object, subject: str) -> int:
    """Parse ``value`` as a whole, non-negative count; QuantityError names ``subject``.

    ``2``, ``"2"``, ``"1k"`` and ``"2e0"`` are counts; ``"0.5"``, ``"500m"``, ``"abc"``,
    ``-1`` and ``true`` are not.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{subject}={value!r} is not a quantity; expected a whole count")
    if isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        match = _QUANTITY_RE.match(value.strip())
        if match is None:
            raise QuantityError(f"{subject}={value!r} is not a quantity; expected a whole count")
        try:
            number = Decimal(match["number"])
        except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
            raise QuantityError(f"{subject}={value!r} is not a quantity") from None
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            number *= Decimal(1024) ** _BINARY[suffix]
        elif suffix in _DECIMAL:
            number = number.scaleb(_DECIMAL[suffix])
        elif suffix:
            number = number.scaleb(int(suffix[1:]))
    else:
        raise QuantityError(f"{subject}={value!r} is not a quantity; expected a whole count")
    if number != number.to_integral_value():
        raise QuantityError(
            f"{subject}={value!r} is not a whole count; extended resources are counted in units"
        )
    if number < 0 or number >= MAX_COUNT:
        raise QuantityError(f"{subject}={value!r} is out of range; expected 0 to {MAX_COUNT - 1}")
    return int(number)
