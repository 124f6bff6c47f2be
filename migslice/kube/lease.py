"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's resource lock, simplified).

    elector = LeaderElector(transport, "migslice-system", "migslice-repartition", "pod-a-123")
    if elector.try_acquire_or_renew():   # call more often than lease_duration_s
        ...act as the leader...
    elector.release()                     # on shutdown: the next candidate need not wait

A candidate takes the Lease when it does not exist, when it has no holder, or when its record
has not changed for ``lease_duration_s`` as measured by this process's own clock (the
holder's ``renewTime`` is not compared with our clock: clocks differ). Every write carries the
``resourceVersion`` it read, so two candidates cannot both win (409 Conflict: not leader).
The holder is the leader (:attr:`LeaderElector.is_leader`) for ``lease_duration_s`` from the
start of its last successful round, no longer: another candidate may take the Lease one
duration after it saw that renewal, whether or not the holder's next round has come back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.objects.times import format_micro_time

log = logging.getLogger(__name__)


class LeaderElector:
    """One candidate for one Lease; :meth:`try_acquire_or_renew` is one round."""

    def __init__(
        self,
        transport: KubernetesTransport,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._transport = transport
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration_s = lease_duration_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leader = False
        self._held_until = 0.0

    @property
    def is_leader(self) -> bool:
        """Whether this candidate holds the Lease now: its last round took or renewed it, less
        than ``lease_duration_s`` ago as counted from that round's start (a renewal that has
        not come back by then may have been overtaken)."""
        return self._leader and self._clock() < self._held_until

    @property
    def _written_s(self) -> int:
        """The ``leaseDurationSeconds`` this candidate writes (whole seconds, at least 1)."""
        return max(1, round(self._duration_s))

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self._namespace}/leases"

    def try_acquire_or_renew(self) -> bool:
        """Take or keep the Lease; False (not leader) on any API error."""
        was = self._leader
        started = self._clock()
        try:
            leader = self._round()
            if leader:  # as long as another candidate waits: the duration written
                # (before the flag: another thread reading both never sees a stale time)
                self._held_until = started + min(self._duration_s, self._written_s)
            self._leader = leader
        except ApiError as error:
            log.warning(
                "lease=%s/%s round failed (%s); acting as follower until the next round",
                self._namespace,
                self._name,
                error,
            )
            self._leader = False
        if self._leader != was:
            log.info(
                "lease=%s/%s identity=%s %s",
                self._namespace,
                self._name,
                self.identity,
                "became leader" if self._leader else "is no longer leader",
            )
        return self._leader

    def _round(self) -> bool:
        now_s = self._wall_clock()
        try:
            lease = self._transport.get_json(f"{self._path}/{self._name}", {})
        except ApiError as error:
            if error.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self._name, "namespace": self._namespace},
                "spec": self._spec(now_s, now_s, 0),
            }
            try:
                self._transport.post_json(self._path, body)
            except ApiError as create_error:
                if create_error.status == 409:  # another candidate created it first
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        observed = (
            holder,
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseTransitions"),
        )
        if observed != self._observed:
            self._observed = observed
            self._observed_at = self._clock()
        duration = float(spec.get("leaseDurationSeconds") or self._duration_s)
        expired = self._observed_at + duration <= self._clock()
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            acquire = spec.get("acquireTime") or format_micro_time(now_s)
            new_spec = self._spec(now_s, None, transitions)
            new_spec["acquireTime"] = acquire
        else:
            new_spec = self._spec(now_s, now_s, transitions + 1)
        return self._write(lease, new_spec)

    def _spec(self, now_s: float, acquired_s: float | None, transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self._written_s,
            "renewTime": format_micro_time(now_s),
            "leaseTransitions": transitions,
        }
        if acquired_s is not None:
            spec["acquireTime"] = format_micro_time(acquired_s)
        return spec

    def _write(self, lease: RawObject, spec: dict[str, Any]) -> bool:
        metadata = lease.get("metadata") or {}
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self._name,
                "namespace": self._namespace,
                "resourceVersion": metadata.get("resourceVersion", ""),
            },
            "spec": spec,
        }
        try:
            self._transport.put_json(f"{self._path}/{self._name}", body)
        except ApiError as error:
            if error.status == 409:
                return False
            raise
        return True

    def release(self) -> None:
        """Give the Lease up (holder cleared), so a successor takes over at once."""
        if not self._leader:
            return
        self._leader = False
        try:
            lease = self._transport.get_json(f"{self._path}/{self._name}", {})
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            self._write(lease, spec)
            log.info("lease=%s/%s released by %s", self._namespace, self._name, self.identity)
        except ApiError as error:
            log.warning("lease=%s/%s not released (%s)", self._namespace, self._name, error)
