"""The CEL device selectors migslice reads, of DeviceClasses and of ResourceClaim requests.

A device matches a class and a request when every selector of both is true, so a class's and a
request's selectors together are one conjunction. migslice reads the conjunctions that NVIDIA's
classes and migslice's own use, each part one of::

    device.driver == 'gpu.nvidia.com'
    device.attributes['gpu.nvidia.com'].profile == '1g.10gb'      (or ['profile'], "...")
    'profile' in device.attributes['gpu.nvidia.com']               (a guard: implied)
    'memorySlice3' in device.capacity['gpu.nvidia.com']            (static MIG placement)

with the operands either way round and parentheses around a part. Anything else (``||``, a
negation, another operator or function) is kept as :attr:`DeviceSelection.unread`: the
selection then says less than CEL would, and its readers treat it as not understood, never as
a guess. CEL itself sees no device name, pool or counter (k8s.io/dynamic-resource-allocation
``cel/compile.go``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from migslice.names import DRA_DRIVER

_STRING = r"""(?:'([^'\\]*)'|"([^"\\]*)")"""
_DRIVER = re.compile(rf"device\.driver\s*==\s*{_STRING}")
_DRIVER_REVERSED = re.compile(rf"{_STRING}\s*==\s*device\.driver")
_ATTRIBUTE = rf"device\.attributes\[{_STRING}\](?:\.([A-Za-z_][A-Za-z0-9_]*)|\[{_STRING}\])"
_EQUAL = re.compile(rf"{_ATTRIBUTE}\s*==\s*{_STRING}")
_EQUAL_REVERSED = re.compile(rf"{_STRING}\s*==\s*{_ATTRIBUTE}")
_HAS = re.compile(rf"{_STRING}\s+in\s+device\.attributes\[{_STRING}\]")
_CAPACITY = re.compile(
    rf"'memorySlice([0-9]|[1-5][0-9]|6[0-3])'\s+in\s+device\.capacity\[{_STRING}\]"
)

TYPE = f"{DRA_DRIVER}/type"
PROFILE = f"{DRA_DRIVER}/profile"


@dataclass(frozen=True, slots=True)
class DeviceSelection:
    """What a conjunction of selectors asks of a device (see the module docstring).

    ``equal``: qualified attribute name (``gpu.nvidia.com/profile``) -> the value it must
    equal, sorted; ``slices``: memory slices the device must cover (``memorySlice<i>``
    capacities); ``conflict``: two parts ask one field for different values (no device can
    match)."""

    driver: str | None = None
    equal: tuple[tuple[str, str], ...] = ()
    slices: frozenset[int] = frozenset()
    unread: tuple[str, ...] = ()
    conflict: bool = False

    def value(self, key: str) -> str | None:
        for name, value in self.equal:
            if name == key:
                return value
        return None

    @property
    def device_type(self) -> str | None:
        return self.value(TYPE)

    @property
    def profile(self) -> str | None:
        return self.value(PROFILE)

    def both(self, other: DeviceSelection) -> DeviceSelection:
        """The conjunction of both selections."""
        conflict = self.conflict or other.conflict
        driver = self.driver
        if other.driver is not None:
            conflict |= driver is not None and driver != other.driver
            driver = other.driver
        equal = dict(self.equal)
        for key, value in other.equal:
            conflict |= equal.get(key, value) != value
            equal[key] = value
        return DeviceSelection(
            driver,
            tuple(sorted(equal.items())),
            self.slices | other.slices,
            self.unread + other.unread,
            conflict,
        )


@dataclass(slots=True)
class _Parts:
    driver: set[str] = field(default_factory=set)
    equal: dict[str, set[str]] = field(default_factory=dict)
    slices: set[int] = field(default_factory=set)
    unread: list[str] = field(default_factory=list)


MAX_EXPRESSION = 10 * 1024
"""kube-apiserver's limit on a CEL selector (``CELSelectorExpressionMaxLength``); the webhook
reads objects before that validation, so a longer one is never read (it is never stored)."""
MAX_NESTING = 16


def read_selectors(expressions: Iterable[str]) -> DeviceSelection:
    """The selection of CEL ``expressions`` that must all hold."""
    parts = _Parts()
    for expression in expressions:
        too_deep = len(expression) > MAX_EXPRESSION or _nesting(expression) > MAX_NESTING
        conjuncts = None if too_deep else _conjuncts(expression)
        if conjuncts is None:
            parts.unread.append(_shown(expression.strip()))
            continue
        for conjunct in conjuncts:
            _read_part(conjunct, parts)
    conflict = len(parts.driver) > 1 or any(len(v) > 1 for v in parts.equal.values())
    return DeviceSelection(
        driver=min(parts.driver) if parts.driver else None,
        equal=tuple(sorted((key, min(values)) for key, values in parts.equal.items())),
        slices=frozenset(parts.slices),
        unread=tuple(parts.unread),
        conflict=conflict,
    )


SHOWN = 200
"""The most of an unread expression a message repeats."""


def _shown(expression: str) -> str:
    if len(expression) <= SHOWN:
        return expression
    return f"{expression[:SHOWN]}... ({len(expression)} characters)"


def _read_part(part: str, parts: _Parts) -> None:
    for pattern in (_DRIVER, _DRIVER_REVERSED):
        match = pattern.fullmatch(part)
        if match is not None:
            parts.driver.add(_string(match, 1))
            return
    match = _EQUAL.fullmatch(part)
    if match is not None:
        key = f"{_string(match, 1)}/{match[3] or _string(match, 4)}"
        parts.equal.setdefault(key, set()).add(_string(match, 6))
        return
    match = _EQUAL_REVERSED.fullmatch(part)
    if match is not None:
        key = f"{_string(match, 3)}/{match[5] or _string(match, 6)}"
        parts.equal.setdefault(key, set()).add(_string(match, 1))
        return
    if _HAS.fullmatch(part) is not None:
        return  # a guard for a key an equality reads; implied by it
    match = _CAPACITY.fullmatch(part)
    if match is not None and _string(match, 2) == DRA_DRIVER:
        parts.slices.add(int(match[1]))
        return
    parts.unread.append(_shown(part))


def _string(match: re.Match[str], first: int) -> str:
    """The string literal whose single- and double-quoted groups are ``first`` and next."""
    single, double = match[first], match[first + 1]
    return single if single is not None else double or ""


def _conjuncts(expression: str) -> list[str] | None:
    """The parts of a top-level ``&&`` chain, outer parentheses removed; None when the
    expression is not one (a top-level ``||`` or ``?``, unbalanced, or escapes in strings)."""
    if "\\" in expression:
        return None
    text = _unwrap(expression.strip())
    if text is None:
        return None
    parts: list[str] = []
    depth = 0
    quote = ""
    start = 0
    i = 0
    while i < len(text):
        char = text[i]
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0 and text.startswith("&&", i):
            parts.append(text[start:i])
            start = i + 2
            i += 1
        elif depth == 0 and (text.startswith("||", i) or char == "?"):
            return None
        i += 1
    if quote or depth:
        return None
    parts.append(text[start:])
    unwrapped = [_unwrap(part.strip()) for part in parts]
    if any(part is None or not part for part in unwrapped):
        return None
    flat: list[str] = []
    for part in unwrapped:
        assert part is not None
        inner = _conjuncts(part) if part != text else None
        flat.extend(inner if inner is not None and len(inner) > 1 else [part])
    return flat


def _nesting(text: str) -> int:
    """The deepest bracket nesting of ``text`` (quotes not considered: an upper bound)."""
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth -= 1
    return deepest


def _unwrap(text: str) -> str | None:
    """``text`` without parentheses around all of it; None if its parentheses do not pair."""
    while text.startswith("(") and text.endswith(")"):
        depth = 0
        quote = ""
        for i, char in enumerate(text):
            if quote:
                quote = "" if char == quote else quote
            elif char in "'\"":
                quote = char
            elif char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0 and i < len(text) - 1:
                    return text  # the first parenthesis closes before the end
        if depth:
            return None
        text = text[1:-1].strip()
    return text
