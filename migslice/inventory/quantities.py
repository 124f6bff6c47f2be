"""Kubernetes resource quantities, as far as extended resources need them.

Extended resources (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``) are whole counts. The
API server stores a quantity in canonical form, so ``1000`` may come back as ``1k``. The
grammar is read by :mod:`migslice.quantity` (the one quantity reader, so that the webhook and
the extender never disagree on a value); this module adds the subject to the message and
the range an extended-resource count can have.
"""

from __future__ import annotations

from migslice.quantity import QuantityError, parse_quantity

MAX_COUNT = 1 << 31

__all__ = ["MAX_COUNT", "QuantityError", "parse_count"]


def parse_count(value: object, subject: str) -> int:
    """Parse ``value`` as a whole, non-negative count; QuantityError names ``subject``.

    ``2``, ``"2"``, ``"1k"`` and ``"2e0"`` are counts; ``"0.5"``, ``"500m"``, ``"abc"``,
    ``-1`` and ``true`` are not.
    """
    try:
        number = parse_quantity(value)
    except QuantityError:
        raise QuantityError(
            f"{subject}={value!r} is not a quantity; expected a whole count"
        ) from None
    if number.denominator != 1:
        raise QuantityError(
            f"{subject}={value!r} is not a whole count; extended resources are counted in units"
        )
    if number < 0 or number >= MAX_COUNT:
        raise QuantityError(f"{subject}={value!r} is out of range; expected 0 to {MAX_COUNT - 1}")
    return int(number)
