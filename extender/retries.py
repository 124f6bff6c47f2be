"""Pods the extender turned away for a reason of its own that no cluster event ends, each
touched (:mod:`migslice.kube.pod_touch`) once that reason ends, so that kube-scheduler tries it
again then rather than on the next change in the cluster (in a quiet one, minutes away).

* **Held back by the large-job reserve** (``--dra-large-reserve``): the hold ends
  ``--dra-large-reserve-max-hold`` after the pod became unschedulable; it is touched a second
  after that (its ``PodScheduled`` condition's time is kept to the second).
* **Filtered while the caches were blind** (an ``Error``: the extender could not vouch for
  any node): touched once the caches are ready again.

Each worker keeps the pods it turned away; a pod another call lets through (it fits a node) is
forgotten. A touch the API refuses is tried again :data:`RETRY_AFTER_S` later, at most
:data:`MAX_TRIES` times; a pod gone or replaced by another of its name is forgotten. The
annotation :data:`migslice.names.RETRY_ANNOTATION` says why and when, and
``migslice_extender_pods_touched_total{reason}`` counts the touches
(``migslice_extender_pods_to_touch``: those waiting; ``migslice_extender_pod_touch_failures_total``
the refused, on which the alert ``MigsliceExtenderTouchFailing`` fires).

Port: ``touch(pod, annotations) -> bool`` (False: gone), ``ready() -> bool``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from migslice.names import RETRY_ANNOTATION
from migslice.objects.times import format_time

log = logging.getLogger(__name__)

HOLD_ENDED = "hold-ended"
CACHES_READY = "caches-ready"
REASONS = (HOLD_ENDED, CACHES_READY)
MARGIN_S = 1.0
"""Past the hold's end: ``lastTransitionTime`` is kept to the second."""
RETRY_AFTER_S = 5.0
MAX_TRIES = 5
MAX_PODS = 10_000
"""Pods kept at most (the oldest forgotten first): past that, a pod waits for a cluster event."""
INTERVAL_S = 1.0


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def of(cls, raw_pod: object) -> PodRef | None:
        """The pod of an ExtenderArgs' ``Pod``; None without a namespace and name."""
        meta = raw_pod.get("metadata") if isinstance(raw_pod, Mapping) else None
        if not isinstance(meta, Mapping):
            return None
        namespace, name, uid = (meta.get(k) for k in ("namespace", "name", "uid"))
        if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
            return None
        return cls(namespace, name, uid if isinstance(uid, str) else "")


@dataclass
class _Due:
    pod: PodRef
    reason: str
    at: float
    tries: int = 0


class Retries:
    """The pods to touch and when (see the module docstring). Thread-safe."""

    def __init__(
        self,
        touch: Callable[[PodRef, Mapping[str, str]], bool],
        ready: Callable[[], bool],
        *,
        clock: Callable[[], float] = time.time,
        max_pods: int = MAX_PODS,
    ) -> None:
        self._touch = touch
        self._ready = ready
        self._clock = clock
        self._max_pods = max_pods
        self.touched = dict.fromkeys(REASONS, 0)
        """Pods touched since start, by reason (``migslice_extender_pods_touched_total``)."""
        self.failures = 0
        """Touches the API refused or did not answer
        (``migslice_extender_pod_touch_failures_total``)."""
        self._due: dict[str, _Due] = {}
        self._lock = threading.Lock()

    def after_hold(self, pod: PodRef, ends_at: float) -> None:
        """``pod`` is held back until ``ends_at`` (epoch seconds)."""
        self._keep(_Due(pod, HOLD_ENDED, ends_at + MARGIN_S))

    def after_blind(self, pod: PodRef) -> None:
        """``pod`` was filtered while the caches were blind."""
        self._keep(_Due(pod, CACHES_READY, self._clock()))

    def forget(self, pod: PodRef) -> None:
        """``pod`` was let through: nothing to touch."""
        with self._lock:
            due = self._due.get(pod.key)
            if due is not None and due.pod == pod:
                del self._due[pod.key]

    def waiting(self) -> int:
        with self._lock:
            return len(self._due)

    def touch_due(self) -> list[PodRef]:
        """Touch every pod whose reason has ended; the pods touched."""
        now = self._clock()
        with self._lock:
            due = [d for d in self._due.values() if d.at <= now]
        if not due or not self._ready():
            return []
        touched: list[PodRef] = []
        stamp = format_time(now)
        for entry in due:
            try:
                kept = self._touch(entry.pod, {RETRY_ANNOTATION: f"{entry.reason} {stamp}"})
            except Exception as error:  # the API refused or went away: again later
                self._again(entry, error)
                continue
            self._done(entry)
            if kept:
                touched.append(entry.pod)
                with self._lock:
                    self.touched[entry.reason] += 1
                log.info(
                    "pod=%s touched (%s): kube-scheduler tries it again",
                    entry.pod.key,
                    entry.reason,
                )
        return touched

    def _keep(self, entry: _Due) -> None:
        with self._lock:
            self._due.pop(entry.pod.key, None)
            self._due[entry.pod.key] = entry
            while len(self._due) > self._max_pods:
                del self._due[next(iter(self._due))]

    def _done(self, entry: _Due) -> None:
        with self._lock:
            if self._due.get(entry.pod.key) is entry:
                del self._due[entry.pod.key]

    def _again(self, entry: _Due, error: Exception) -> None:
        with self._lock:
            self.failures += 1
            entry.tries += 1
            entry.at = self._clock() + RETRY_AFTER_S
        if entry.tries >= MAX_TRIES:
            self._done(entry)
            log.warning(
                "pod=%s not touched after %d tries (%s); kube-scheduler tries it on the next "
                "cluster event",
                entry.pod.key,
                entry.tries,
                error,
            )
            return
        log.warning("pod=%s not touched (%s); again in %.0fs", entry.pod.key, error, RETRY_AFTER_S)
