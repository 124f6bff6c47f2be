"""Whether a service may decide on its watch caches: every cache synced and following the API.

A service that decides blind admits past quota or binds onto a node MIG Manager is changing.
:func:`blindness` says which caches keep it from deciding: one that has not listed once, or
one that has not followed the API server (:meth:`migslice.kube.Informer.blind_s`) for longer
than ``max_blind_s``. A short blip (a watch that broke and re-listed at once) stays under the
limit; readiness and the fail-closed answers of the webhook and the extender read the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol


class CacheHealth(Protocol):
    """A watch cache as readiness sees it (:class:`migslice.kube.Informer` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def synced(self) -> bool: ...

    def blind_s(self) -> float | None: ...


def blindness(caches: Iterable[CacheHealth], *, max_blind_s: float) -> list[str]:
    """Why the caches cannot be decided on (empty: they can), one short sentence each."""
    problems: list[str] = []
    for cache in caches:
        blind = cache.blind_s()
        if not cache.synced or blind is None:
            problems.append(f"cache {cache.name} has not listed once yet")
        elif blind > max_blind_s:
            problems.append(
                f"cache {cache.name} lost the API server {blind:.0f}s ago (limit {max_blind_s:g}s)"
            )
    return problems
