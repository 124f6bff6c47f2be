"""With several extender replicas and no repartition controller, one Lease elects the replica
that writes the steer's rules (``--dra-steer-lease``): the others keep their caches and write
nothing, and a replica that stops gives the Lease up so another takes over at once.

Measured before: two replicas without a Lease each wrote; their stranding rules, kept from
what each had seen (the rule's hysteresis), differed, and each round one created the 3g.40gb
rules the other deleted (73 against 30 writes in 10 rounds)."""

from __future__ import annotations

import time

from extender.service import SteerLease
from migslice.kube import LeaderElector
from tests.kube.test_kube_repartition import ObjectStore
from tests.local_api import Request, local_api

LEASE = "/apis/coordination.k8s.io/v1/namespaces/migslice-system/leases/migslice-dra-steer"


def test_one_replica_writes_and_another_takes_over_when_it_stops() -> None:
    objects = ObjectStore()

    def answer(request: Request) -> tuple[int, object]:
        return objects.handle(request.method, request.path, request.query, request.body)

    with local_api(answer) as transport:

        def replica(identity: str) -> SteerLease:
            elector = LeaderElector(
                transport, "migslice-system", "migslice-dra-steer", identity, lease_duration_s=60
            )
            return SteerLease(elector, renew_s=0.05)

        a, b = replica("a"), replica("b")
        try:
            assert a.is_leader() and not b.is_leader()
            time.sleep(0.2)  # renewals: a keeps it, b waits
            assert a.is_leader() and not b.is_leader()
            assert objects.objects[LEASE]["spec"]["holderIdentity"] == "a"
            a.stop()  # released: b takes it at its next try, not after 60 s
            deadline = time.monotonic() + 5
            while not b.is_leader() and time.monotonic() < deadline:
                time.sleep(0.02)
            assert b.is_leader() and not a.is_leader()
            assert objects.objects[LEASE]["spec"]["holderIdentity"] == "b"
        finally:
            a.stop()
            b.stop()


def test_a_steer_leader_that_cannot_renew_stops_writing_at_its_renew_deadline() -> None:
    """The API server stops answering: the replica writes no rule from its renew deadline on
    (10 s of a 15 s lease), before another replica could take the Lease, without waiting
    for its next try to fail."""
    objects = ObjectStore()
    down = [False]

    def answer(request: Request) -> tuple[int, object]:
        if down[0]:
            return 503, {"kind": "Status", "message": "unavailable"}
        return objects.handle(request.method, request.path, request.query, request.body)

    clock = [1000.0]
    with local_api(answer) as transport:
        elector = LeaderElector(
            transport,
            "migslice-system",
            "migslice-dra-steer",
            "a",
            lease_duration_s=15,
            renew_deadline_s=10,
            clock=lambda: clock[0],
        )
        lease = SteerLease(elector, renew_s=3600)  # no try of its own in this test
        try:
            assert lease.is_leader()
            down[0] = True
            clock[0] += 9.9
            assert lease.is_leader()
            clock[0] += 0.1
            assert not lease.is_leader()
        finally:
            lease.stop()
