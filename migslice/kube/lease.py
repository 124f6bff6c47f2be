"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's leaderelection, simplified).

    elector = LeaderElector(transport, "migslice-system", "migslice-repartition", "pod-a-123")
    if elector.try_acquire_or_renew():   # call more often than renew_deadline_s
        ...act as the leader, asking elector.is_leader before each write...
    elector.release()                     # on shutdown: the next candidate need not wait

A candidate takes the Lease when it does not exist, when it has no holder, or when its record
has not changed for ``lease_duration_s`` as measured by this process's own clock (the
holder's ``renewTime`` is not compared with our clock: clocks differ). Every write carries the
``resourceVersion`` it read, so two candidates cannot both win (409 Conflict: not leader).

A leader leads until ``renew_deadline_s`` after the start of its last successful round (client-go's
RenewDeadline; shorter than the lease): past it :attr:`LeaderElector.is_leader` is False at
once, whatever the round in progress does, and every API call of a round is bounded by what is
left of it, so a renewal that hangs cannot outlast it. Another candidate starts its
``lease_duration_s`` only once it sees that renewal, which the API server stored after the
round began: the old leader has stopped ``lease_duration_s - renew_deadline_s`` before the
new one can take the Lease (the margin for API latency and for clocks that run at different
rates).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from migslice.kube.transport import ApiError, KubernetesTransport, RawObject
from migslice.objects.times import format_micro_time

log = logging.getLogger(__name__)

RENEW_DEADLINE_SHARE = 2 / 3
"""The renew deadline as a share of the lease when none is given (client-go's core
components: 10 s of 15 s)."""


def default_renew_deadline_s(lease_duration_s: float) -> float:
    """The renew deadline of a lease held ``lease_duration_s`` when none is given."""
    return lease_duration_s * RENEW_DEADLINE_SHARE


class LeaseDeadlineError(ApiError):
    """A round found no time left before the renew deadline for its next API call."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message)


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
        renew_deadline_s: float | None = None,
    ) -> None:
        if renew_deadline_s is None:
            renew_deadline_s = default_renew_deadline_s(lease_duration_s)
        if not 0 < renew_deadline_s < lease_duration_s:
            raise ValueError(
                f"renew deadline {renew_deadline_s:g}s must be > 0 and shorter than the lease "
                f"duration {lease_duration_s:g}s"
            )
        self._transport = transport
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self._clock = clock
        self._wall_clock = wall_clock
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._leader = False
        self._renewed_at = 0.0  # this clock when the last successful round began
        self._budget_until = 0.0  # the end of the round in progress: its calls' timeouts

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads now: its last round took or kept the Lease, and began
        less than ``renew_deadline_s`` ago."""
        return self._leader and self._clock() - self._renewed_at < self.renew_deadline_s

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self._namespace}/leases"

    def try_acquire_or_renew(self) -> bool:
        """Take or keep the Lease; False (not leader) on any API error. Its calls share
        what is left of the renew deadline (all of it for a round that does not lead), so
        the round ends by then whatever the API server does."""
        started = self._clock()
        was = self.is_leader
        lapsed = self._leader and not was
        self._budget_until = (self._renewed_at if was else started) + self.renew_deadline_s
        try:
            leader = self._round()
        except ApiError as error:
            log.warning(
                "lease=%s/%s round failed (%s); acting as follower until the next round",
                self._namespace,
                self._name,
                error,
            )
            leader = False
        if leader:
            self._renewed_at = started
        self._leader = leader
        if lapsed:
            log.warning(
                "lease=%s/%s identity=%s stopped leading: not renewed within the renew "
                "deadline of %gs",
                self._namespace,
                self._name,
                self.identity,
                self.renew_deadline_s,
            )
        now = self.is_leader
        if now != was:
            log.info(
                "lease=%s/%s identity=%s %s",
                self._namespace,
                self._name,
                self.identity,
                "became leader" if now else "is no longer leader",
            )
        return now

    def _left_s(self) -> float:
        """Seconds left of the round's budget for the next call; an error when none is."""
        left_s = self._budget_until - self._clock()
        if left_s <= 0:
            raise LeaseDeadlineError(
                f"no time left within the renew deadline of {self.renew_deadline_s:g}s"
            )
        return left_s

    def _round(self) -> bool:
        now_s = self._wall_clock()
        try:
            lease = self._transport.get_json(
                f"{self._path}/{self._name}", {}, timeout_s=self._left_s()
            )
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
                self._transport.post_json(self._path, body, timeout_s=self._left_s())
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
            "leaseDurationSeconds": max(1, round(self._duration_s)),
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
            self._transport.put_json(f"{self._path}/{self._name}", body, timeout_s=self._left_s())
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
        self._budget_until = self._clock() + self.renew_deadline_s
        try:
            lease = self._transport.get_json(
                f"{self._path}/{self._name}", {}, timeout_s=self._left_s()
            )
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec["holderIdentity"] = ""
            spec["leaseDurationSeconds"] = 1
            self._write(lease, spec)
            log.info("lease=%s/%s released by %s", self._namespace, self._name, self.identity)
        except ApiError as error:
            log.warning("lease=%s/%s not released (%s)", self._namespace, self._name, error)
