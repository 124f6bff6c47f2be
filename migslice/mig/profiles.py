"""MIG profile names and the Kubernetes resource names derived from them.

A MIG GPU-instance profile is written ``<G>g.<M>gb`` with optional attributes: ``+me`` (one
media-extension instance), ``+me.all`` (all media engines), ``+gfx`` (graphics capable),
``-me`` (no media engines). The NVIDIA device plugin's mixed strategy advertises a profile as
the extended resource ``nvidia.com/mig-<profile>`` with every ``+`` replaced by ``.``
(``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from migslice.errors import InvalidInputError
from migslice.names import MIG_RESOURCE_PREFIX, SHARED_GPU_RESOURCE, WHOLE_GPU_RESOURCE

__all__ = [
    "MIG_RESOURCE_PREFIX",
    "SHARED_GPU_RESOURCE",
    "WHOLE_GPU_RESOURCE",
    "ProfileName",
    "ProfileNameError",
    "parse_profile_name",
    "profile_from_resource",
    "resource_name",
]

_ATTRIBUTES = ("+me.all", "+me", "+gfx", "-me")
_NAME_RE = re.compile(r"^(?P<c>[1-9])g\.(?P<m>[0-9]{1,4})gb(?P<attr>(\+me\.all|\+me|\+gfx|-me)?)$")
_RESOURCE_RE = re.compile(
    r"^(?P<c>[1-9])g\.(?P<m>[0-9]{1,4})gb(?P<attr>(\.me\.all|\.me|\.gfx|-me)?)$"
)


class ProfileNameError(InvalidInputError):
    """A string that is not a MIG profile name."""


@dataclass(frozen=True, slots=True, order=True)
class ProfileName:
    """A parsed profile name such as ``3g.40gb`` or ``1g.10gb+me``."""

    compute_slices: int
    memory_gb: int
    attribute: str = ""

    def __str__(self) -> str:
        return f"{self.compute_slices}g.{self.memory_gb}gb{self.attribute}"

    @property
    def resource_name(self) -> str:
        """The mixed-strategy extended resource name, e.g. ``nvidia.com/mig-1g.10gb.me``."""
        return MIG_RESOURCE_PREFIX + str(self).replace("+", ".")

    @property
    def has_media_extension(self) -> bool:
        return self.attribute == "+me"

    @property
    def has_all_media(self) -> bool:
        return self.attribute == "+me.all"

    @property
    def has_no_media(self) -> bool:
        return self.attribute == "-me"


@functools.lru_cache(maxsize=1024)
def parse_profile_name(text: str) -> ProfileName:
    """Parse ``"1g.10gb+me"`` into a :class:`ProfileName`; raise ProfileNameError otherwise.

    Remembered per name (a few dozen exist): layouts and scores ask for the same names
    thousands of times per node list."""
    match = _NAME_RE.match(text.strip())
    if match is None:
        raise ProfileNameError(
            f"{text!r} is not a MIG profile name; expected <G>g.<M>gb with an optional "
            f"attribute {', '.join(_ATTRIBUTES)} (e.g. 3g.40gb, 1g.10gb+me)"
        )
    return ProfileName(int(match["c"]), int(match["m"]), match["attr"])


@functools.lru_cache(maxsize=1024)
def profile_from_resource(resource: str) -> ProfileName | None:
    """Map ``nvidia.com/mig-1g.10gb.me`` back to ``1g.10gb+me``; None for non-MIG resources."""
    if not resource.startswith(MIG_RESOURCE_PREFIX):
        return None
    match = _RESOURCE_RE.match(resource[len(MIG_RESOURCE_PREFIX) :])
    if match is None:
        return None
    return ProfileName(int(match["c"]), int(match["m"]), match["attr"].replace(".", "+", 1))


def resource_name(profile: str) -> str:
    """The extended resource name for a profile name string."""
    return parse_profile_name(profile).resource_name
