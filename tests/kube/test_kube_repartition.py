"""The repartition controller's API calls and the Lease elector against a real HTTP server that
keeps objects with resourceVersions like the API server (409 on a stale write)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from migslice.kube import KubeRepartitionApi, KubernetesTransport, LeaderElector
from tests.local_api import Request, local_api

CM_PATH = "/api/v1/namespaces/gpu-operator/configmaps/migslice-mig-config"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/migslice-system/leases"


class ObjectStore:
    """Objects by path; every write bumps resourceVersion; a PUT with an old one gets 409."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 100
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.conflicts_to_inject = 0
        self.lock = threading.Lock()

    def _stamp(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        return body

    def put(self, path: str, body: dict[str, Any]) -> None:
        self.objects[path] = self._stamp(body)

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self.lock:
            self.requests.append((method, path, query, copy.deepcopy(body)))
            if method == "GET":
                if path in self.objects:
                    return 200, self.objects[path]
                if path == "/api/v1/pods":
                    return 200, {"metadata": {"resourceVersion": "1"}, "items": []}
                return 404, {"kind": "Status", "message": f"{path} not found"}
            if method == "POST":
                name = body["metadata"]["name"]
                target = f"{path}/{name}"
                if target in self.objects:
                    return 409, {"kind": "Status", "message": "already exists"}
                self.objects[target] = self._stamp(body)
                return 201, body
            if method == "PUT":
                current = self.objects.get(path)
                if current is None:
                    return 404, {"kind": "Status", "message": "not found"}
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if self.conflicts_to_inject:
                    self.conflicts_to_inject -= 1
                    self.objects[path] = self._stamp(current)
                    return 409, {"kind": "Status", "message": "the object has been modified"}
                if sent and sent != current["metadata"]["resourceVersion"]:
                    return 409, {"kind": "Status", "message": "the object has been modified"}
                self.objects[path] = self._stamp(body)
                return 200, self.objects[path]
            if method == "PATCH":
                current = self.objects.get(path)
                if current is None:
                    return 404, {"kind": "Status", "message": "not found"}
                for field in ("labels", "annotations"):
                    merged = current.setdefault("metadata", {}).setdefault(field, {})
                    for key, value in (body["metadata"].get(field) or {}).items():
                        if value is None:
                            merged.pop(key, None)
                        else:
                            merged[key] = value
                self._stamp(current)
                return 200, current
            return 405, {}


@pytest.fixture
def store() -> Iterator[tuple[ObjectStore, KubernetesTransport]]:
    objects = ObjectStore()

    def answer(request: Request) -> tuple[int, Any]:
        return objects.handle(request.method, request.path, request.query, request.body)

    with local_api(answer) as transport:
        yield objects, transport


def make_api(transport: KubernetesTransport) -> KubeRepartitionApi:
    return KubeRepartitionApi(transport, "gpu-operator", "migslice-mig-config")


def config_map(text: str = "version: v1\n") -> dict[str, Any]:
    return {"metadata": {"name": "migslice-mig-config"}, "data": {"config.yaml": text}}


def test_a_missing_config_map_reads_as_none_and_is_not_created(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    api = make_api(transport)
    assert api.read_config_map() is None
    assert api.update_config_map(lambda cm: cm) is None
    assert [r[0] for r in objects.requests] == ["GET", "GET"]


def test_a_config_map_update_sends_the_version_it_read(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    objects.put(CM_PATH, config_map())
    read_version = objects.objects[CM_PATH]["metadata"]["resourceVersion"]

    def mutate(cm: dict[str, Any]) -> dict[str, Any]:
        cm["data"]["config.yaml"] = "version: v1\nmig-configs: {}\n"
        return cm

    stored = make_api(transport).update_config_map(mutate)
    assert stored is not None
    assert stored["data"]["config.yaml"].endswith("mig-configs: {}\n")
    (put,) = [r for r in objects.requests if r[0] == "PUT"]
    assert put[3]["metadata"]["resourceVersion"] == read_version


def test_a_conflict_re_reads_and_mutates_the_newer_object(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    objects.put(CM_PATH, config_map())
    objects.conflicts_to_inject = 2
    seen: list[str] = []

    def mutate(cm: dict[str, Any]) -> dict[str, Any]:
        seen.append(cm["metadata"]["resourceVersion"])
        cm.setdefault("metadata", {}).setdefault("annotations", {})["k"] = "v"
        return cm

    stored = make_api(transport).update_config_map(mutate)
    assert stored is not None and stored["metadata"]["annotations"] == {"k": "v"}
    assert len(seen) == 3 and len(set(seen)) == 3


def test_a_mutation_that_gives_up_writes_nothing(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    objects.put(CM_PATH, config_map())
    assert make_api(transport).update_config_map(lambda cm: None) is None
    assert not [r for r in objects.requests if r[0] == "PUT"]


def test_labels_are_merge_patched_and_events_posted_on_the_node(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    objects.put("/api/v1/nodes/gpu-a", {"metadata": {"name": "gpu-a", "labels": {"x": "1"}}})
    api = make_api(transport)
    api.set_node_labels(
        "gpu-a",
        {"nvidia.com/mig.config": "migslice-gpu-a-1", "nvidia.com/mig.config.state": "pending"},
    )
    labels = objects.objects["/api/v1/nodes/gpu-a"]["metadata"]["labels"]
    assert labels == {
        "x": "1",
        "nvidia.com/mig.config": "migslice-gpu-a-1",
        "nvidia.com/mig.config.state": "pending",
    }
    api.record_event("gpu-a", "MigRepartitionFailed", "config failed", warning=True)
    (post,) = [r for r in objects.requests if r[0] == "POST"]
    assert post[1] == "/api/v1/namespaces/default/events"
    event = post[3]
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["name"] == "gpu-a"
    assert (event["reason"], event["type"]) == ("MigRepartitionFailed", "Warning")


def test_a_served_pod_is_touched_with_an_annotation_and_a_gone_one_is_no_error(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    path = "/api/v1/namespaces/team-a/pods/train"
    objects.put(path, {"metadata": {"name": "train", "annotations": {"a": "b"}}})
    api = make_api(transport)
    assert api.touch_pod("team-a/train", {"migslice.io/repartitioned": "migslice-gpu-a-1"})
    assert objects.objects[path]["metadata"]["annotations"] == {
        "a": "b",
        "migslice.io/repartitioned": "migslice-gpu-a-1",
    }
    (patch,) = [r for r in objects.requests if r[0] == "PATCH"]
    assert patch[3] == {
        "metadata": {"annotations": {"migslice.io/repartitioned": "migslice-gpu-a-1"}}
    }
    assert not api.touch_pod("team-a/gone", {"migslice.io/repartitioned": "x"})


def test_pending_pods_are_listed_with_field_selectors(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    api = make_api(transport)
    assert api.list_pending_pods("migslice-scheduler") == []
    assert api.list_pods_on_node("gpu-a") == []
    selectors = [r[2]["fieldSelector"] for r in objects.requests]
    assert selectors == [
        "spec.nodeName=,spec.schedulerName=migslice-scheduler,status.phase=Pending",
        "spec.nodeName=gpu-a,status.phase!=Succeeded,status.phase!=Failed",
    ]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(transport: KubernetesTransport, identity: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        transport,
        "migslice-system",
        "migslice-repartition",
        identity,
        lease_duration_s=15,
        clock=clock,
        wall_clock=clock,
    )


def test_the_first_candidate_creates_the_lease_and_the_second_waits_for_it_to_expire(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    clock = Clock()
    a, b = elector(transport, "a", clock), elector(transport, "b", clock)
    assert a.try_acquire_or_renew()
    assert objects.objects[f"{LEASES}/migslice-repartition"]["spec"]["holderIdentity"] == "a"
    assert not b.try_acquire_or_renew()
    clock.now += 10
    assert a.try_acquire_or_renew()  # renewed: b's observation starts again
    assert not b.try_acquire_or_renew()
    clock.now += 14
    assert not b.try_acquire_or_renew()
    clock.now += 2  # a stopped renewing 16 s ago (> 15 s)
    assert b.try_acquire_or_renew()
    spec = objects.objects[f"{LEASES}/migslice-repartition"]["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    assert not a.try_acquire_or_renew()


def test_a_leader_that_has_not_renewed_for_a_lease_duration_is_leader_no_more(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    """A renewal that hangs (an API server that does not answer within its read timeout, a
    round that runs long) kept ``is_leader`` true: another candidate takes the Lease one
    duration after it saw the last renewal, and both acted as the leader (the steer's rules
    written by two replicas) until the hung call returned, up to a minute later."""
    _, transport = store
    clock = Clock()
    a, b = elector(transport, "a", clock), elector(transport, "b", clock)
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew()
    clock.now += 9.9
    assert a.is_leader  # renewed 9.9 s ago: inside its renew deadline (10 s of 15)
    clock.now += 0.1  # past the renew deadline: a stops before b may take the Lease
    assert not a.is_leader
    clock.now += 4.9
    assert not b.try_acquire_or_renew()  # 14.9 s: not yet expired for b
    clock.now += 0.1
    assert b.try_acquire_or_renew() and b.is_leader
    assert not a.try_acquire_or_renew() and not a.is_leader


def test_a_released_lease_is_taken_at_once(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    _, transport = store
    clock = Clock()
    a, b = elector(transport, "a", clock), elector(transport, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()


def test_a_lost_race_for_the_lease_is_not_leadership(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    objects, transport = store
    clock = Clock()
    a = elector(transport, "a", clock)
    assert a.try_acquire_or_renew()
    objects.conflicts_to_inject = 1
    assert not a.try_acquire_or_renew()
    assert a.try_acquire_or_renew()


def test_a_pod_name_with_a_slash_is_one_path_segment_not_a_subresource(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    """A name no pod can have (a hostile or broken caller's) stays inside the pod's own path
    segment: ``x/status`` was sent as the pod x's status subresource."""
    objects, transport = store
    objects.put("/api/v1/namespaces/team-a/pods/x/status", {"metadata": {"name": "x"}})
    api = make_api(transport)
    assert not api.touch_pod("team-a/x/status", {"migslice.io/retry": "1"})
    (patch,) = [r for r in objects.requests if r[0] == "PATCH"]
    assert patch[1] == "/api/v1/namespaces/team-a/pods/x%2Fstatus"


def test_a_leader_that_cannot_renew_stops_leading_before_another_can_take_the_lease(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    """Lease 15 s, renew deadline 10 s: a leader whose renewals do not happen (the API server
    unreachable, its round stuck) leads no more 10 s after its last renewal began, with no
    call of its own, and b takes the Lease only once it has seen no change for 15 s."""
    _, transport = store
    clock = Clock()
    a, b = elector(transport, "a", clock), elector(transport, "b", clock)
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew()
    a_stopped_at = b_took_at = None
    for _ in range(40):
        clock.now += 0.5
        if a_stopped_at is None and not a.is_leader:
            a_stopped_at = clock.now
        if b.try_acquire_or_renew():
            b_took_at = clock.now
            break
        assert not b.is_leader
    assert (a_stopped_at, b_took_at) == (1010.0, 1015.0)
    assert not (a.is_leader and b.is_leader)
    assert not a.try_acquire_or_renew()


def test_a_renewal_whose_read_outlasts_the_renew_deadline_writes_nothing_and_does_not_lead(
    store: tuple[ObjectStore, KubernetesTransport],
) -> None:
    """The round's calls share what is left of the renew deadline: a GET that the API server
    answers after it leaves no time for the PUT, which is not sent."""
    objects, transport = store
    clock = Clock()
    a = elector(transport, "a", clock)
    assert a.try_acquire_or_renew()
    clock.now += 4
    slow = ObjectStore.handle

    def handle(method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        clock.now += 7  # the answer comes 7 s later: 11 s after the last renewal began
        return slow(objects, method, path, query, body)

    objects.handle = handle  # type: ignore[method-assign]
    del objects.requests[:]
    assert not a.try_acquire_or_renew() and not a.is_leader
    assert [r[0] for r in objects.requests] == ["GET"]


def test_a_renewal_the_api_server_never_answers_ends_at_the_renew_deadline() -> None:
    """A leader's renewal is bounded by the time left of its renew deadline (here 0.3 s),
    not by the transport's own timeouts (60 s for a GET)."""
    objects = ObjectStore()
    hang = threading.Event()
    release = threading.Event()

    def answer(request: Request) -> tuple[int, Any]:
        if hang.is_set():
            release.wait(30)
        return objects.handle(request.method, request.path, request.query, request.body)

    with local_api(answer) as transport:
        a = LeaderElector(
            transport,
            "migslice-system",
            "migslice-repartition",
            "a",
            lease_duration_s=0.5,
            renew_deadline_s=0.3,
        )
        try:
            assert a.try_acquire_or_renew()
            hang.set()
            started = time.monotonic()
            assert not a.try_acquire_or_renew()
            assert time.monotonic() - started < 2.0
        finally:
            release.set()
