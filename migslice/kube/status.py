"""Writes ``TenantPolicy.status``: usage in slice units, ``quotaSummary`` and conditions.

    writer = StatusWriter(source=state, patcher=KubernetesTransport.from_environment())
    state.add_listener(writer.poke)     # usage or a policy changed: sync soon
    writer.start()                      # a daemon thread; writer.stop() ends it

Every ``interval_s`` seconds, and ``settle_s`` after a poke (so a burst of events is one
sync), the writer asks its source for each policy's status as last seen by the watch cache
and as it should be now (``migslice.admission.status``), and PATCHes
``/apis/migslice.io/v1alpha1/tenantpolicies/<name>/status`` with a JSON merge patch
(RFC 7386) only where the two differ. A patch already sent is not sent again while the cache
has not caught up. Nothing is written before the source's caches have synced.

Failures never reach the webhook: 404 (the policy was deleted meanwhile) and 409 are logged
and retried at the next sync. A 422 (the CRD's schema or a validating admission policy refuses
that one status) is logged once and not sent again until the policy or its status changes: it
would be refused each time, and backing off for it would hold back every other policy's status.
Other API errors back off exponentially (``Backoff``).
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from migslice.admission.status import StatusUpdate
from migslice.kube.informer import Backoff
from migslice.kube.transport import ApiError, RawObject
from migslice.names import GROUP, VERSION
from migslice.names import POLICY_PLURAL as PLURAL

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class StatusSource(Protocol):
    """The webhook's state: whether its caches have synced, and every policy's status."""

    def is_ready(self) -> bool: ...

    def policy_statuses(self, now: datetime) -> Sequence[StatusUpdate]: ...


class Patcher(Protocol):
    """What the writer needs from the API server (``KubernetesTransport`` in production)."""

    def patch_json(self, path: str, patch: Mapping[str, Any], content_type: str) -> RawObject: ...


def status_path(name: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/{PLURAL}/{urllib.parse.quote(name, safe='')}/status"


def merge_patch(observed: Mapping[str, object], desired: Mapping[str, object]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns ``observed`` into ``desired``.

    Keys only in ``observed`` become ``None`` (removed); objects are patched key by key;
    anything else (lists included) is replaced whole when it differs.
    """
    patch: dict[str, Any] = {}
    for key in observed:
        if key not in desired:
            patch[key] = None
    for key, value in desired.items():
        old = observed.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = merge_patch(old, value)
            if inner:
                patch[key] = inner
        elif key not in observed or old != value:
            patch[key] = value
    return patch


@dataclass(frozen=True, slots=True)
class SyncResult:
    """What one sync did: patches sent, statuses already right, policies gone (404),
    conflicts (409), statuses refused (422, not retried while unchanged) and other failures."""

    patched: int = 0
    current: int = 0
    gone: int = 0
    conflicts: int = 0
    refused: int = 0
    failed: int = 0


@dataclass(slots=True)
class StatusStats:
    """Counters for metrics and tests."""

    syncs: int = 0
    patches: int = 0
    errors: int = 0
    last_error: str = ""


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class StatusWriter:
    """Keeps every TenantPolicy's ``.status`` current (see the module docstring)."""

    source: StatusSource
    patcher: Patcher
    interval_s: float = 10.0
    settle_s: float = 1.0
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, max_s=60.0))
    wall_clock: Callable[[], datetime] = _utc_now
    stats: StatusStats = field(default_factory=StatusStats)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _wake: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _sent: dict[str, tuple[dict[str, object], dict[str, object]]] = field(
        default_factory=dict, repr=False
    )
    _refused: dict[str, tuple[dict[str, object], dict[str, object]]] = field(
        default_factory=dict, repr=False
    )

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self.run, name="tenantpolicy-status", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def poke(self) -> None:
        """Something changed: sync after ``settle_s`` instead of at the next interval."""
        self._wake.set()

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> None:
        """Sync on every poke (after settling) and every ``interval_s``, until stopped."""
        failures = 0
        while not self._stop.is_set():
            if failures:
                if self._stop.wait(self.backoff.delay_s(failures)):
                    return
            else:
                self._wake.wait(self.interval_s)
                if self._stop.is_set():
                    return
                if self._wake.is_set():
                    self._wake.clear()
                    if self._stop.wait(self.settle_s):
                        return
            if not self.source.is_ready():
                self._wake.set()  # look again after settle_s, not a whole interval
                continue
            result = self.sync_once()
            failures = failures + 1 if result.failed else 0
            if result.failed:
                log.warning(
                    "TenantPolicy status sync failed=%d patched=%d; retrying in %.1fs",
                    result.failed,
                    result.patched,
                    self.backoff.delay_s(failures),
                )

    def sync_once(self) -> SyncResult:
        """Patch every status that differs from what the cache holds; never raises."""
        self.stats.syncs += 1
        try:
            updates = self.source.policy_statuses(self.wall_clock())
        except Exception as error:  # our own bug: log it, keep the webhook serving
            self._failed(error)
            log.exception("Computing TenantPolicy statuses failed; retrying later")
            return SyncResult(failed=1)
        outcomes = dict.fromkeys(("patched", "current", "gone", "conflicts", "refused"), 0)
        outcomes["failed"] = 0
        for update in updates:
            observed = dict(update.observed or {})
            desired = dict(update.desired)
            if self._refused.get(update.name) == (observed, desired):
                outcomes["refused"] += 1
                continue
            if update.is_current or self._sent.get(update.name) == (observed, desired):
                outcomes["current"] += 1
                continue
            outcome = self._patch(update.name, observed, desired)
            outcomes[outcome] += 1
            if outcome == "patched":
                self._sent[update.name] = (observed, desired)
            elif outcome == "refused":
                self._refused[update.name] = (observed, desired)
        names = {update.name for update in updates}
        for kept in (self._sent, self._refused):
            for name in [n for n in kept if n not in names]:
                del kept[name]
        return SyncResult(**outcomes)

    def _patch(
        self, name: str, observed: Mapping[str, object], desired: Mapping[str, object]
    ) -> str:
        path = status_path(name)
        try:
            self.patcher.patch_json(
                path, {"status": merge_patch(observed, desired)}, content_type=MERGE_PATCH
            )
        except ApiError as error:
            if error.status == 404:
                log.info("TenantPolicy tenant=%s is gone (404); not writing its status", name)
                return "gone"
            if error.status == 409:
                log.info(
                    "TenantPolicy tenant=%s status conflict (409); writing it at the next sync",
                    name,
                )
                return "conflicts"
            if error.status == 422:
                self._failed(error)
                log.warning(
                    "The API server refused the status of TenantPolicy tenant=%s (422): %s; "
                    "not sent again until it changes (a TenantPolicy CRD older than this release "
                    "refuses fields it does not know: helm upgrade installs the current one)",
                    name,
                    error,
                )
                return "refused"
            self._failed(error)
            log.warning("Writing status of TenantPolicy tenant=%s failed: %s", name, error)
            return "failed"
        except Exception as error:  # our own bug or an unexpected client error
            self._failed(error)
            log.exception("Writing status of TenantPolicy tenant=%s failed unexpectedly", name)
            return "failed"
        self.stats.patches += 1
        log.debug(
            "Wrote status of TenantPolicy tenant=%s quotaSummary=%s",
            name,
            desired.get("quotaSummary"),
        )
        return "patched"

    def _failed(self, error: Exception) -> None:
        self.stats.errors += 1
        self.stats.last_error = str(error)
