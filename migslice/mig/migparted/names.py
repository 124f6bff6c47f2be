"""MIG device names as mig-parted reads them (``1g.10gb``, ``1c.3g.20gb``, ``+me``...) and
the GPU instances a config's ``mig-devices`` create."""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from migslice.mig.migparted.common import CI_SIZES, RESOURCE_PREFIX, MigPartedError

# -- MIG device names ---------------------------------------------------------------------------

_DIGITS = re.compile(r"[0-9]+")
_NAME_HINT = (
    "expected <G>g.<GB>gb or <C>c.<G>g.<GB>gb, optionally with +attr or -attr "
    "(e.g. 3g.40gb, 1c.3g.40gb, 1g.10gb+me, 1g.24gb-me)"
)


@dataclass(frozen=True, slots=True)
class MigDeviceName:
    """A ``mig-devices`` key as go-nvlib parses it: C compute slices in a G-slice GPU instance.

    ``3g.40gb`` is C = G = 3. ``1c.3g.40gb`` is a 3g.40gb GPU instance holding a 1-slice compute
    instance. ``attributes`` follow ``+`` (``me``, ``me.all``, ``gfx``), ``negative_attributes``
    follow ``-`` (``me``); both sorted, as go-nvlib compares them.
    """

    compute_slices: int
    gpu_slices: int
    memory_gb: int
    attributes: tuple[str, ...] = ()
    negative_attributes: tuple[str, ...] = ()

    @property
    def _suffix(self) -> str:
        if self.negative_attributes:
            return "-" + ",".join(self.negative_attributes)
        return "+" + ",".join(self.attributes) if self.attributes else ""

    def __str__(self) -> str:
        """go-nvlib's ``MigProfileInfo.String``: the C prefix only when C differs from G."""
        if self.compute_slices == self.gpu_slices:
            return self.gpu_instance
        return f"{self.compute_slices}c.{self.gpu_instance}"

    @property
    def gpu_instance(self) -> str:
        """The GPU-instance profile it lives in (``1c.3g.40gb`` -> ``3g.40gb``)."""
        return f"{self.gpu_slices}g.{self.memory_gb}gb{self._suffix}"

    @property
    def is_compute_instance(self) -> bool:
        """A compute instance smaller than its GPU instance (``1c.3g.40gb``)."""
        return self.compute_slices != self.gpu_slices

    @property
    def resource(self) -> str | None:
        """The mixed-strategy resource the device plugin advertises for it, or None.

        k8s-device-plugin ``internal/rm/rm.go`` registers only profiles with C == G
        (``if info.C != info.G { return nil }``), as ``mig-<profile>`` with ``+`` -> ``.``.
        """
        if self.is_compute_instance:
            return None
        return RESOURCE_PREFIX + self.gpu_instance.replace("+", ".")


def parse_mig_device_name(text: str) -> MigDeviceName:
    """go-nvlib's ``parseMigProfile``; MigPartedError says what is wrong with ``text``."""

    def fail(reason: str) -> MigPartedError:
        return MigPartedError(f"{text!r} is not a MIG profile name: {reason}; {_NAME_HINT}")

    if not text:
        raise fail("empty")
    plus, minus = text.split("+", 1), text.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise fail("it has both + and - attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) not in (2, 3):
        raise fail("it needs 2 or 3 dot-separated fields")
    numbers = [
        _name_field(field, suffix, fail)
        for field, suffix in zip(fields, ("c", "g", "gb")[3 - len(fields) :], strict=True)
    ]
    compute, gpu, memory = numbers if len(numbers) == 3 else [numbers[0], *numbers]
    attributes = _name_attributes(parts[1], fail) if len(parts) == 2 else ()
    if len(minus) == 2:
        return MigDeviceName(compute, gpu, memory, (), attributes)
    return MigDeviceName(compute, gpu, memory, attributes)


def _name_field(field: str, suffix: str, fail: Callable[[str], MigPartedError]) -> int:
    if field.strip() != field:
        raise fail(f"spaces around '%d{suffix}'")
    number = field.removesuffix(suffix)
    if number == field or not _DIGITS.fullmatch(number) or int(number) >= 1 << 63:
        raise fail(f"'{field}' is not '<number>{suffix}'")
    return int(number)


def _name_attributes(text: str, fail: Callable[[str], MigPartedError]) -> tuple[str, ...]:
    attributes = text.split(",")
    if len(set(attributes)) != len(attributes):
        raise fail("an attribute is repeated")
    for attribute in attributes:
        allowed = string.ascii_letters + string.digits + "."
        if not attribute or not all(char in allowed for char in attribute):
            raise fail(f"attribute {attribute!r} is not letters, digits and dots")
        if attribute[0] in string.digits or "." in (attribute[0], attribute[-1]):
            raise fail(f"attribute {attribute!r} starts with a digit or starts or ends with a dot")
    return tuple(sorted(attributes))


@dataclass(frozen=True, slots=True)
class GpuInstance:
    """A GPU instance mig-parted creates and the compute instances it puts in it."""

    profile: str
    compute: tuple[str, ...]


def gpu_instances(mig_devices: Mapping[str, int]) -> tuple[GpuInstance, ...]:
    """The instances ``SetMigConfig`` creates for ``mig-devices`` in the first creation order
    it tries (:func:`creation_orders`; :func:`instances_in_order` says how an order is walked).
    So ``{"1c.3g.20gb": 4}`` is two 3g.20gb GPU instances, with 3 and 1 compute instances. When
    this order does not fit the GPU, mig-parted tries the others
    (``migslice.mig.migparted.apply.applied_instances``). MigPartedError for a compute size the
    GPU instance does not offer."""
    return instances_in_order(next(creation_orders(mig_devices), ()))


def creation_orders(mig_devices: Mapping[str, int]) -> Iterator[tuple[MigDeviceName, ...]]:
    """Every order in which mig-parted creates ``mig-devices``, first tried first.

    NVIDIA/mig-parted@bd7160f4: ``MigConfig.Flatten`` (pkg/types/mig_config.go:101-133)
    repeats each entry ``count`` times (one ``*MigProfile`` per key) and sorts by G, then C,
    descending, then by attributes descending; that is the first order. When creating it fails,
    ``iteratePermutationsUntilSuccess`` (pkg/mig/config/config.go:255-293) walks the swap
    permutations of that list depth first, and ``shouldSwap`` (:256-263) skips a swap that
    would bring an equal pointer (the same key) to a position already tried, so each distinct
    order is tried once: multinomial(n; counts) of them (the count its test asserts,
    pkg/mig/config/config_test.go:211-278). Each try starts from a cleared GPU (:126-149).
    """
    flat: list[tuple[str, MigDeviceName]] = []
    for text, count in sorted(mig_devices.items()):
        flat.extend([(text, parse_mig_device_name(text))] * max(count, 0))
    flat.sort(key=lambda item: ",".join(item[1].attributes), reverse=True)
    flat.sort(key=lambda item: (-item[1].gpu_slices, -item[1].compute_slices))

    def orders(i: int) -> Iterator[tuple[MigDeviceName, ...]]:
        if i >= len(flat):
            yield tuple(name for _, name in flat)
            return
        for j in range(i, len(flat)):
            if any(flat[k][0] == flat[j][0] for k in range(i, j)):
                continue  # shouldSwap: this key was already at position i
            flat[i], flat[j] = flat[j], flat[i]
            yield from orders(i + 1)
            flat[i], flat[j] = flat[j], flat[i]

    return orders(0)


def instances_in_order(order: Sequence[MigDeviceName]) -> tuple[GpuInstance, ...]:
    """The GPU instances one creation order makes, each holding its compute instances.

    NVIDIA/mig-parted@bd7160f4 pkg/mig/config/config.go:152-205: each device is one compute
    instance; it goes into the most recently created GPU instance when that one has the same
    GPU-instance profile (``reuseGI``, :162) and room for it, else into a new GPU instance
    (a failed reuse falls back to a new one, :173-201; a GPU instance that cannot be created
    ends the try, :166-170). An earlier GPU instance is never revisited.
    Room is counted in compute slices: a G-slice GPU instance holds compute instances whose
    C add up to at most G. MigPartedError for a compute size the GPU instance does not offer
    (every order fails on it).
    """
    made: list[tuple[str, int, list[str]]] = []  # (GPU instance, compute slices used, CIs)
    for name in order:
        full = name.compute_slices == name.gpu_slices
        if not full and name.compute_slices not in CI_SIZES.get(name.gpu_slices, ()):
            raise MigPartedError(
                f"{name} asks for a {name.compute_slices}-slice compute instance in a "
                f"{name.gpu_slices}-slice GPU instance, which offers {_sizes(name.gpu_slices)}"
            )
        if made and made[-1][0] == name.gpu_instance:
            profile, used, cis = made[-1]
            if used + name.compute_slices <= name.gpu_slices:
                made[-1] = (profile, used + name.compute_slices, [*cis, str(name)])
                continue
        made.append((name.gpu_instance, name.compute_slices, [str(name)]))
    return tuple(GpuInstance(profile, tuple(cis)) for profile, _, cis in made)


def _sizes(gpu_slices: int) -> str:
    sizes = CI_SIZES.get(gpu_slices, ())
    return ", ".join(f"{c}c" for c in sizes) if sizes else "none that mig-parted knows"
