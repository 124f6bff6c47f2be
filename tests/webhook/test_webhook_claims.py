"""ResourceClaims through the webhook: charged in the same quota ledger as pods (compare-and-
swap over ConfigMaps, exact across replicas, settled when the claim cache sees the claim,
released when a list shows it was never created), usage counted over pods, claims and
kube-scheduler's extended-resource claims without counting twice, and migslice's templates."""

from __future__ import annotations

import base64
import copy
import json
import threading
from collections.abc import Iterator
from typing import Any

import jsonpatch
import pytest
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import dra_slices
from harness.builders import make_created_pod, make_node, make_policy, make_review
from migslice.admission import SliceUsage, usage_of
from migslice.admission.ledger import Ledger
from migslice.admission.usage import ZERO
from migslice.kube.ledger import ConfigMapLedgers
from migslice.objects.claim_templates import migslice_claim_template
from migslice.objects.device_classes import device_class_facts_from_raw
from migslice.objects.dra_products import slim_slice
from migslice.objects.resource_claims import claim_facts_from_raw
from migslice.status.charges import claim_charges
from tests.dra_objects import make_claim, make_claim_pod, migslice_classes
from tests.hostile import assert_clear_admission_answer, json_values
from tests.ledger_api import LedgerApi
from tests.local_api import local_api
from webhook.app import create_app
from webhook.quota import MemoryLedgers, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState
from webhook.templates import MemoryTemplates, TemplateKeeper

CLAIM_KIND = ("resource.k8s.io", "v1", "ResourceClaim")
TEMPLATE_KIND = ("resource.k8s.io", "v1", "ResourceClaimTemplate")


class Clock:
    def __init__(self) -> None:
        self.now_s = 1_746_100_000.0

    def __call__(self) -> float:
        return self.now_s

    def monotonic_s(self) -> float:
        return self.now_s


def tenant_state(clock: Clock | None = None, **policy: Any) -> ClusterState:
    state = ClusterState(clock=clock)
    state.upsert_policy(make_policy(**policy))
    state.upsert_node(make_node("gpu-1"))
    for raw in migslice_classes():
        state.upsert_device_class(raw)
    return state


class Replica:
    def __init__(self, store: ConfigMapLedgers, clock: Clock, **policy: Any) -> None:
        self.state = tenant_state(clock, **policy)
        self.keeper = QuotaKeeper(self.state, store, wall_clock=clock, hold_s=45.0)
        self.templates = MemoryTemplates()
        keeper = TemplateKeeper(self.state, self.templates)
        self.client: FlaskClient = create_app(
            WebhookSettings(), self.state, self.keeper, keeper
        ).test_client()

    def create(
        self, claim: dict[str, Any], uid: str, kind: tuple[str, str, str] = CLAIM_KIND
    ) -> Any:
        plural = "resourceclaims" if kind == CLAIM_KIND else "resourceclaimtemplates"
        reply = self.client.post(
            "/mutate", json=make_review(claim, uid=uid, kind=kind, resource=plural)
        )
        assert reply.status_code == 200, reply.get_data(as_text=True)
        answer = reply.get_json()["response"]
        if answer["allowed"] and "patch" in answer:
            answer["claim"] = jsonpatch.apply_patch(
                claim, json.loads(base64.b64decode(answer["patch"]))
            )
        return answer


@pytest.fixture
def cluster() -> Iterator[tuple[LedgerApi, ConfigMapLedgers, Clock]]:
    api = LedgerApi()
    with local_api(api.answer) as transport:
        yield api, ConfigMapLedgers(transport, "migslice-system", claims=True), Clock()


def test_claims_on_three_replicas_are_admitted_exactly_to_the_quota(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    _, store, clock = cluster
    replicas = [Replica(store, clock, quota={"computeSlices": 6}) for _ in range(3)]
    answers: list[dict[str, Any]] = []
    lock = threading.Lock()

    def send(i: int) -> None:
        claim = make_claim(f"c-{i}", device_class="migslice-mig-2g.20gb", profile=None)
        answer = replicas[i % 3].create(claim, f"uid-{i}")
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    admitted = [a for a in answers if a["allowed"]]
    assert len(admitted) == 3  # 3 x 2g.20gb = 6 compute slices
    denied = [a["status"]["message"] for a in answers if not a["allowed"]]
    assert all("(spec.quota.computeSlices)" in m and "for this claim" in m for m in denied)
    assert len(store.read("team-a").charges) == 3
    # kube-apiserver stores them; every replica's claim cache sees them: counted once, each.
    for answer in admitted:
        for replica in replicas:
            replica.state.upsert_claim(answer["claim"])
    for replica in replicas:
        assert replica.state.tenant_usage("team-a") == SliceUsage(3, 6, 6, (("2g.20gb", 3),))
        assert replica.state.pending_charges() == 0
    claim = make_claim("late", device_class="migslice-mig-1g.10gb", profile=None)
    assert not replicas[0].create(claim, "uid-late")["allowed"]


def test_a_claim_never_created_releases_its_charge_once_a_list_shows_it_is_not_there(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    replica = Replica(store, clock, quota={"instances": 1})
    first = replica.create(make_claim("c-1"), "uid-1")
    assert (
        first["allowed"]
        and first["claim"]["metadata"]["annotations"]["migslice.io/reservation"] == "uid-1"
    )
    assert not replica.create(make_claim("c-2"), "uid-2")["allowed"]
    clock.now_s += 46  # the create failed after admission: no claim was ever stored
    third = replica.create(make_claim("c-3"), "uid-3")
    assert third["allowed"]
    assert [c.uid for c in store.read("team-a").charges] == ["uid-3"]
    api.claims.append(third["claim"])  # stored, but not in this replica's cache yet
    clock.now_s += 46  # a stored claim's charge is never released by the list
    assert not replica.create(make_claim("c-5"), "uid-5")["allowed"]


def test_a_reinvoked_claim_create_is_charged_once_and_a_stored_claims_reservation_never_moves(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    """reinvocationPolicy IfNeeded: a later webhook changed the claim, and kube-apiserver calls
    again with a new request uid; the claim carries the first round's reservation. Its charge
    counted against the second round: the tenant's last slice was refused."""
    api, store, clock = cluster
    replica = Replica(store, clock, quota={"instances": 1})
    first = replica.create(make_claim("c-1"), "uid-1")
    assert first["allowed"]
    changed = copy.deepcopy(first["claim"])
    changed["metadata"].setdefault("labels", {})["team.example.com/owner"] = "alice"
    again = replica.create(changed, "uid-2")
    assert again["allowed"], again
    assert again["claim"]["metadata"]["annotations"]["migslice.io/reservation"] == "uid-2"
    assert [c.uid for c in store.read("team-a").charges] == ["uid-2"]
    api.claims.append(again["claim"])  # stored; this replica's cache has not seen it yet
    copied = copy.deepcopy(again["claim"])
    copied["metadata"]["name"] = "c-2"
    assert not replica.create(copied, "uid-3")["allowed"]
    assert [c.uid for c in store.read("team-a").charges] == ["uid-2"]


def test_kube_schedulers_claim_is_admitted_uncharged_and_counted_once(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    _, store, clock = cluster
    replica = Replica(store, clock, quota={"instances": 1})
    pod = make_claim_pod("p1", {}, mig={"1g.10gb": 1})
    pod["metadata"]["annotations"] = {"migslice.io/reservation": "uid-pod"}
    replica.state.upsert_pod(pod)
    special = make_claim(
        "p1-extended-resources-x7k2q",
        device_class="migslice-mig-1g.10gb",
        profile=None,
        owner="p1",
        extended_resource=True,
    )
    answer = replica.create(special, "uid-special")
    assert answer["allowed"] and "patch" not in answer
    replica.state.upsert_claim(special)
    assert replica.state.tenant_usage("team-a") == SliceUsage(1, 1, 1, (("1g.10gb", 1),))
    replica.state.delete_pod("team-a", "p1")  # the pod gone, its claim not yet: it counts
    assert replica.state.tenant_usage("team-a").instances == 1


def test_a_resource_claim_tenants_pod_names_a_template_that_exists_before_the_answer(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    _, store, clock = cluster
    replica = Replica(store, clock, deviceAPI="ResourceClaim")
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    reply = replica.client.post("/mutate", json=make_review(pod, uid="uid-pod"))
    assert reply.get_json()["response"]["allowed"]
    assert [t["metadata"]["name"] for t in replica.templates.created] == ["migslice-mig-1g.10gb"]
    assert replica.state.template("team-a", "migslice-mig-1g.10gb") is not None
    replica.client.post("/mutate", json=make_review(pod, uid="uid-pod-2"))
    assert len(replica.templates.created) == 1  # kept in the cache from then on
    assert store.read("team-a").charges == ()  # the pod is not charged: its claims will be


def test_a_foreign_template_under_migslices_name_denies_the_pod_with_what_to_do() -> None:
    state = tenant_state(deviceAPI="ResourceClaim")
    forged = migslice_claim_template("team-a", "1g.10gb")
    forged["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    state.upsert_template(forged)
    client = create_app(WebhookSettings(), state).test_client()
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    answer = client.post("/mutate", json=make_review(pod)).get_json()["response"]
    assert not answer["allowed"]
    assert (
        "ResourceClaimTemplate team-a/migslice-mig-1g.10gb is not migslice's"
        in (answer["status"]["message"])
    )


def test_the_template_loop_creates_every_missing_template_of_resource_claim_tenants() -> None:
    state = tenant_state(deviceAPI="ResourceClaim", allowedProfiles=["1g.10gb", "3g.40gb"])
    state.upsert_namespace({"metadata": {"name": "team-a"}})
    state.upsert_policy(make_policy("team-b", namespaces=["team-b"]))
    state.upsert_namespace({"metadata": {"name": "team-b"}})
    store = MemoryTemplates()
    keeper = TemplateKeeper(state, store)
    assert keeper.keep() == 2
    assert sorted(t["metadata"]["name"] for t in store.created) == [
        "migslice-mig-1g.10gb",
        "migslice-mig-3g.40gb",
    ]
    assert keeper.keep() == 0


def test_without_migslices_device_classes_a_claim_tenants_pod_is_told_how_to_fix_it() -> None:
    """With dra.deviceClasses off, the template could not be made and every try answered 503:
    kube-apiserver retried until its deadline and the user read only "context deadline
    exceeded"."""
    state = ClusterState()
    state.upsert_policy(make_policy(deviceAPI="ResourceClaim"))
    state.upsert_node(make_node("gpu-1"))  # and no DeviceClass
    store = MemoryTemplates()
    client = create_app(WebhookSettings(), state, templates=TemplateKeeper(state, store))
    pod = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    reply = client.test_client().post("/mutate", json=make_review(pod, uid="uid-pod"))
    assert reply.status_code == 200
    answer = reply.get_json()["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 403
    message = answer["status"]["message"]
    assert "DeviceClass migslice-mig-1g.10gb does not exist" in message
    assert "dra.deviceClasses.enabled: true" in message and "spec.deviceAPI" in message
    assert store.created == [] and TemplateKeeper(state, store).keep() == 0


def test_an_unknown_kind_is_a_malformed_review_and_a_claim_update_is_checked() -> None:
    state = tenant_state()
    client = create_app(WebhookSettings(), state).test_client()
    odd = client.post(
        "/mutate", json=make_review({"metadata": {}}, kind=("apps", "v1", "Deployment"))
    )
    assert odd.status_code == 400
    old, new = make_claim("c"), make_claim("c", owner="p1", extended_resource=True)
    review = make_review(new, kind=CLAIM_KIND, resource="resourceclaims", operation="UPDATE")
    review["request"]["oldObject"] = old
    answer = client.post("/mutate", json=review).get_json()["response"]
    assert not answer["allowed"] and "may not set" in answer["status"]["message"]


# -- usage over any mix, against a brute-force count ------------------------------------------

PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb")
MODELS = ("A100-80GB",)
pod_strategy = st.tuples(
    st.sampled_from(["p0", "p1", "p2"]),
    st.sampled_from(["uid-a", "uid-b"]),
    st.dictionaries(st.sampled_from(PROFILES), st.integers(0, 2), max_size=2),
)
claim_strategy = st.tuples(
    st.sampled_from(["c0", "c1", "c2", "c3"]),
    st.sampled_from(PROFILES),
    st.integers(1, 2),
    st.one_of(
        st.none(),
        st.tuples(st.sampled_from(["p0", "p1", "p2"]), st.sampled_from(["uid-a", "uid-b"])),
    ),
)
events = st.lists(
    st.one_of(
        st.tuples(st.just("pod"), pod_strategy),
        st.tuples(st.just("claim"), claim_strategy),
        st.tuples(st.just("delete-pod"), st.sampled_from(["p0", "p1", "p2"])),
        st.tuples(st.just("delete-claim"), st.sampled_from(["c0", "c1", "c2", "c3"])),
    ),
    max_size=25,
)


def _resource(profile: str) -> str:
    return "nvidia.com/mig-" + profile


def brute_usage(
    pods: dict[str, tuple[str, dict[str, int]]],
    claims: dict[str, tuple[str, int, tuple[str, str] | None]],
) -> SliceUsage:
    total = ZERO
    for _, requests in pods.values():
        total = total + usage_of({r: n for r, n in requests.items() if n}, MODELS)
    paid: dict[str, str] = {}
    for name in sorted(claims):
        profile, count, owner = claims[name]
        if owner is None or owner[0] not in pods or owner[0] in paid:
            continue
        uid, requests = pods[owner[0]]
        if uid == owner[1] and requests.get(_resource(profile), 0) >= count:
            paid[owner[0]] = name
    for name, (profile, count, _) in claims.items():
        if name not in paid.values():
            total = total + usage_of({_resource(profile): count}, MODELS)
    return total


@settings(max_examples=200, deadline=None)
@given(events)
def test_usage_over_pods_claims_and_extended_resource_claims_is_a_brute_force_count(
    steps: list[tuple[str, Any]],
) -> None:
    state = tenant_state()
    pods: dict[str, tuple[str, dict[str, int]]] = {}
    claims: dict[str, tuple[str, int, tuple[str, str] | None]] = {}
    for kind, value in steps:
        if kind == "pod":
            name, uid, mig = value
            raw = make_claim_pod(name, {}, mig={p: n for p, n in mig.items() if n} or None)
            raw["metadata"]["uid"] = uid
            state.upsert_pod(raw)
            requests = {_resource(p): n for p, n in mig.items() if n}
            if requests:
                pods[name] = (uid, requests)
            else:
                pods.pop(name, None)
        elif kind == "claim":
            name, profile, count, owner = value
            raw = make_claim(
                name,
                device_class="migslice-mig-" + profile,
                profile=None,
                count=count,
                owner=owner[0] if owner else None,
                extended_resource=owner is not None,
            )
            if owner is not None:
                raw["metadata"]["ownerReferences"][0]["uid"] = owner[1]
            state.upsert_claim(raw)
            claims[name] = (profile, count, owner)
        elif kind == "delete-pod":
            state.delete_pod("team-a", value)
            pods.pop(value, None)
        else:
            state.delete_claim(f"team-a/{value}")
            claims.pop(value, None)
    assert state.tenant_usage("team-a") == brute_usage(pods, claims)


class CreatingElsewhere:
    """A ledger store in which another replica has marked the tenant's epoch and creates its
    ledger while this replica looks: the first read finds it missing, the next finds it."""

    def __init__(self, store: ConfigMapLedgers, other: ConfigMapLedgers) -> None:
        self.store, self.other, self.reads = store, other, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def read(self, tenant: str) -> Ledger:
        self.reads += 1
        ledger = self.store.read(tenant)
        if self.reads == 1:  # marked and created just after this replica's read
            self.other.mark(tenant, "epoch-a")
            self.other.write(Ledger(tenant, epoch="epoch-a"))
        return ledger


def test_a_ledger_another_replica_is_creating_is_not_taken_for_lost(
    cluster: tuple[LedgerApi, ConfigMapLedgers, Clock],
) -> None:
    api, store, clock = cluster
    api.policies["team-a"] = {"metadata": {"name": "team-a"}, "status": {}}
    replica = Replica(store, clock)
    replica.keeper.mark_wait_s = 0.1
    replica.keeper.store = CreatingElsewhere(store, store)
    answer = replica.create(make_claim("c-1"), "uid-1")
    assert answer["allowed"], answer
    assert store.read("team-a").epoch == "epoch-a"  # its ledger, not a fence


def test_a_second_pod_naming_a_hardware_tenants_claim_is_denied_from_the_caches() -> None:
    state = tenant_state()
    state.upsert_claim(make_claim("shared"))
    first = make_claim_pod("first", {"gpu": "shared"})
    state.upsert_pod(first)
    client = create_app(WebhookSettings(), state).test_client()
    second = make_claim_pod("second", {"gpu": "shared"})
    del second["status"], second["spec"]["schedulerName"]
    answer = client.post("/mutate", json=make_review(second)).get_json()["response"]
    assert not answer["allowed"]
    assert "which pod team-a/first uses too" in answer["status"]["message"]
    state.delete_pod("team-a", "first")
    assert client.post("/mutate", json=make_review(second)).get_json()["response"]["allowed"]


def _pod_answer(
    client: FlaskClient, pod: dict[str, Any], uid: str, namespace: str = "team-a"
) -> dict[str, Any]:
    pod.pop("status", None)
    pod["spec"].pop("schedulerName", None)
    reply = client.post("/mutate", json=make_review(pod, uid=uid, namespace=namespace))
    assert reply.status_code == 200, reply.get_data(as_text=True)
    return dict(reply.get_json()["response"])


def test_a_claim_made_for_another_pod_is_that_pods_for_a_hardware_tenant() -> None:
    """Kubernetes checks who owns a claim only for resourceClaimTemplateName entries: a pod
    naming the claim the controller made from a template for another pod, or the claim
    kube-scheduler made for another pod's extended resources, would share its device."""
    state = tenant_state()
    state.upsert_claim(
        make_claim("a-gpu-x7k2q", owner="a", allocated=[("gpu-1", "gpu-0-mig-1g10gb-19-0")])
    )
    state.upsert_pod(make_claim_pod("a", {}, templates={"gpu": "a-gpu-x7k2q"}, node_name="gpu-1"))
    client = create_app(WebhookSettings(), state).test_client()
    answer = _pod_answer(client, make_claim_pod("b", {"gpu": "a-gpu-x7k2q"}), "uid-b")
    assert not answer["allowed"]
    assert "which pod team-a/a uses too" in answer["status"]["message"]
    state.delete_pod("team-a", "a")  # the pod gone: its claim is nobody's
    assert _pod_answer(client, make_claim_pod("b", {"gpu": "a-gpu-x7k2q"}), "uid-b")["allowed"]


def test_a_pod_created_before_its_claim_is_its_tenants() -> None:
    """A claim or template the caches have not seen may ask for GPUs: in a tenant's namespace
    the pod gets the tenant's node pool and scheduler, and a second pod naming the same claim
    is a second user of it (pods first, claim after, would otherwise share a device)."""
    state = tenant_state(nodeSelector={"pool": "team-a"})
    client = create_app(WebhookSettings(), state).test_client()
    first = make_claim_pod("a", {"gpu": "later"})
    answer = _pod_answer(client, first, "uid-a")
    assert answer["allowed"]
    patched = jsonpatch.apply_patch(first, json.loads(base64.b64decode(answer["patch"])))
    assert patched["spec"]["nodeSelector"] == {"pool": "team-a"}
    assert patched["spec"]["schedulerName"] == "migslice-scheduler"
    state.upsert_pod(patched)
    second = _pod_answer(client, make_claim_pod("b", {"gpu": "later"}), "uid-b")
    assert not second["allowed"]
    assert "which pod team-a/a uses too" in second["status"]["message"]
    template = _pod_answer(client, make_claim_pod("d", {}, templates={"gpu": None}), "uid-d")
    assert template["allowed"] and "patch" in template
    # outside any tenant's namespace nothing changes
    elsewhere = make_claim_pod("e", {"gpu": "later"}, namespace="other")
    assert "patch" not in _pod_answer(client, elsewhere, "uid-e")


def test_a_claim_marked_as_kube_schedulers_pays_only_for_the_pod_it_was_made_for() -> None:
    """A tenant may write kube-scheduler's mark (and an owner reference to its own pod) on a
    claim: one made for a pod already bound, or named by another pod, or made from a template
    carrying the mark, is not kube-scheduler's and is charged or refused (quota 1 instance,
    held by the running pod p on a device-plugin node)."""
    state = tenant_state(quota={"instances": 1}, isolation="process", tiers=["mig", "shared"])
    client = create_app(WebhookSettings(), state).test_client()
    running = make_claim_pod("p", {}, mig={"1g.10gb": 1}, node_name="gpu-1", phase="Running")
    running["metadata"]["annotations"] = {"migslice.io/reservation": "uid-p"}
    state.upsert_pod(running)

    def review(raw: dict[str, Any], uid: str, kind: tuple[str, str, str]) -> dict[str, Any]:
        plural = "resourceclaims" if kind == CLAIM_KIND else "resourceclaimtemplates"
        reply = client.post("/mutate", json=make_review(raw, uid=uid, kind=kind, resource=plural))
        return dict(reply.get_json()["response"])

    forged = make_claim(
        "free", device_class="migslice-mig-1g.10gb", profile=None, owner="p", extended_resource=True
    )
    answer = review(forged, "uid-forged", CLAIM_KIND)
    assert not answer["allowed"] and "quota" in answer["status"]["message"]
    # a marked claim in the cache (written while the webhook was away): no pod may name it
    state.upsert_claim(forged)
    named = _pod_answer(client, make_claim_pod("q", {"gpu": "free"}), "uid-q")
    assert not named["allowed"]
    assert "kube-scheduler's claim for a pod's extended resources" in named["status"]["message"]
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "marked", "namespace": "team-a"},
        "spec": {
            "metadata": {"annotations": {"resource.kubernetes.io/extended-resource-claim": "true"}},
            "spec": make_claim("x", device_class="migslice-mig-1g.10gb", profile=None)["spec"],
        },
    }
    answer = review(template, "uid-template", TEMPLATE_KIND)
    assert not answer["allowed"]
    assert (
        "spec.metadata.annotations sets resource.kubernetes.io/extended-resource-claim"
        in (answer["status"]["message"])
    )


def test_a_claim_another_pod_names_is_charged_when_the_cache_sees_it() -> None:
    """Named by a pod created before it (so the webhook could not refuse the pod), a marked
    claim is not paid by the pod it names as owner."""
    state = tenant_state(isolation="process", tiers=["mig", "shared"])
    pending = make_claim_pod("p", {}, mig={"1g.10gb": 1})
    pending["metadata"]["annotations"] = {"migslice.io/reservation": "uid-p"}
    state.upsert_pod(pending)
    state.upsert_pod(make_claim_pod("q", {"gpu": "free"}))
    marked = make_claim(
        "free", device_class="migslice-mig-1g.10gb", profile=None, owner="p", extended_resource=True
    )
    state.upsert_claim(marked)
    assert state.tenant_usage("team-a").instances == 2


def test_a_selector_too_long_or_too_deep_to_read_is_refused_at_once_and_shown_short() -> None:
    """A tenant's claim is read before kube-apiserver validates it: a selector longer than
    kube-apiserver's 10 KiB limit or nested past 16 parentheses is not parsed (parsing it
    recursed past Python's limit: a 500) and its denial repeats 200 characters of it."""
    state = tenant_state()
    client = create_app(WebhookSettings(), state).test_client()
    condition = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    for expression in (
        "(" * 5000 + condition + ")" * 5000,
        " && ".join([condition] * 2000),
        "(" * 80 + condition + ")" * 80,
    ):
        claim = make_claim("deep", profile=None)
        claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
            {"cel": {"expression": expression}}
        ]
        reply = client.post(
            "/mutate",
            json=make_review(claim, kind=CLAIM_KIND, resource="resourceclaims"),
        )
        assert reply.status_code == 200
        answer = reply.get_json()["response"]
        assert not answer["allowed"] and answer["status"]["code"] == 422
        assert len(answer["status"]["message"]) < 2000


def _with_count(value: Any) -> tuple[dict[str, Any], tuple[str, str, str], str]:
    claim = make_claim("big")
    claim["spec"]["devices"]["requests"][0]["exactly"]["count"] = value
    return claim, CLAIM_KIND, "resourceclaims"


def _with_sharing(value: Any) -> tuple[dict[str, Any], tuple[str, str, str], str]:
    claim = make_claim("big")
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}
    config = {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters | value}}
    claim["spec"]["devices"]["config"] = [config]
    return claim, CLAIM_KIND, "resourceclaims"


def _limited(value: str) -> tuple[dict[str, Any], tuple[str, str, str], str]:
    pod = make_created_pod(limits={"nvidia.com/mig-1g.10gb": value})
    return pod, ("", "v1", "Pod"), "pods"


def _sized(value: str) -> tuple[dict[str, Any], tuple[str, str, str], str]:
    pod = make_created_pod(annotations={"migslice.io/gpu-size": value})
    return pod, ("", "v1", "Pod"), "pods"


def _with_class(name: str) -> tuple[dict[str, Any], tuple[str, str, str], str]:
    claim = make_claim("big", device_class=name)
    return claim, CLAIM_KIND, "resourceclaims"


@pytest.mark.parametrize(
    ("made", "starts", "ends"),
    [
        (_with_class("x" * 1_000_000), "claim team-a/big: request mig: DeviceClass 'xxx", "ID"),
        (_sized("x" * 1_000_000), 'pod team-a/train-*: size "xxx', ""),
    ],
    ids=["class-name", "size"],
)
def test_a_denial_of_a_huge_value_repeats_the_start_and_end_of_its_message_only(
    made: tuple[dict[str, Any], tuple[str, str, str], str], starts: str, ends: str
) -> None:
    """A value the webhook reads before kube-apiserver validates it may run to megabytes: a
    denial repeated it whole (a 1 MB message from a 1 MB class name or size). The message
    keeps its start (the subject and the value's) and its end (what migslice reads), and says
    how much it leaves out."""
    raw, kind, plural = made
    state = tenant_state(isolation="process", tiers=["mig", "shared"])
    client = create_app(WebhookSettings(), state).test_client()
    reply = client.post("/mutate", json=make_review(raw, kind=kind, resource=plural))
    answer = reply.get_json()["response"]
    message = answer["status"]["message"]
    assert not answer["allowed"] and len(message) < 2100
    assert message.startswith(starts) and message.endswith(ends)
    assert "characters not shown" in message


@pytest.mark.parametrize(
    ("made", "said"),
    [
        (_with_count("DEEP"), "claim team-a/big: request mig: count [[[["),
        (_with_sharing({"sharing": "DEEP"}), "claim team-a/big asks for sharing strategy [[[["),
        (_limited("DEEP"), "resources.requests[nvidia.com/mig-1g.10gb]: [[[[...]]]] is not a"),
    ],
    ids=["count", "sharing", "extended-resource"],
)
def test_a_value_nested_past_pythons_recursion_limit_is_answered_not_a_500(
    made: tuple[dict[str, Any], tuple[str, str, str], str], said: str
) -> None:
    """The webhook parses a body nested up to 1,024 levels; a claim's count, its sharing
    config or a pod's GPU quantity nested 1,000 levels deep was shown in the answer by repr,
    which raised RecursionError: a 500 and a traceback for a tenant's malformed object. The
    claims are denied, the pod (a quantity that is no string) is a malformed review, each
    with the value's first levels."""
    raw, kind, plural = made
    state = tenant_state(isolation="process", tiers=["mig", "shared"])
    client = create_app(WebhookSettings(), state).test_client()
    body = json.dumps(make_review(raw, kind=kind, resource=plural))
    deep = "[" * 1000 + "1" + "]" * 1000
    reply = client.post(
        "/mutate", data=body.replace('"DEEP"', deep), content_type="application/json"
    )
    assert reply.status_code in (200, 400), reply.get_data(as_text=True)
    answer = reply.get_json()
    message = (
        answer["error"] if reply.status_code == 400 else answer["response"]["status"]["message"]
    )
    assert said in message and len(message) < 1000
    assert reply.status_code == 400 or not answer["response"]["allowed"]


@pytest.mark.parametrize(
    ("shape", "said"),
    [
        ("requests", "33 requests, more than kube-apiserver takes (32)"),
        ("selectors", "33 selectors in one request, more than kube-apiserver takes (32)"),
        ("alternatives", "9 firstAvailable sub-requests in one request, more than kube-apiserver"),
        ("configs", "33 config entries, more than kube-apiserver takes (32)"),
        ("text", "more than migslice reads (32768)"),
    ],
)
def test_a_claim_past_kube_apiservers_limits_or_too_long_to_read_is_not_parsed(
    shape: str, said: str
) -> None:
    """The webhook reads a claim before kube-apiserver validates it, under the lock every
    admission takes: 3 MB of nested selectors held it for seconds, 10 MB of firstAvailable
    sub-requests or of config entries for a second. Past the API's own limits, or 32 KiB of
    CEL, a tenant's claim is denied unread and another namespace's left alone."""
    condition = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    claim = make_claim("big", profile=None)
    request = claim["spec"]["devices"]["requests"][0]
    selector = {"cel": {"expression": condition}}
    if shape == "requests":
        claim["spec"]["devices"]["requests"] = [{**request, "name": f"r{i}"} for i in range(33)]
    elif shape == "selectors":
        request["exactly"]["selectors"] = [selector] * 33
    elif shape == "alternatives":
        sub = {"name": "a", "deviceClassName": "migslice-mig-1g.10gb", "count": 1}
        claim["spec"]["devices"]["requests"] = [{"name": "mig", "firstAvailable": [sub] * 9}]
    elif shape == "configs":
        parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}
        config = {
            "requests": ["mig"],
            "opaque": {"driver": "gpu.nvidia.com", "parameters": parameters},
        }
        claim["spec"]["devices"]["config"] = [config] * 33
    else:
        nested = {"cel": {"expression": "(" * 30 + condition + ")" * 30}}
        request["exactly"]["selectors"] = [nested] * 32
        claim["spec"]["devices"]["requests"] = [{**request, "name": f"r{i}"} for i in range(32)]
    client = create_app(WebhookSettings(), tenant_state()).test_client()
    for namespace, denied in (("team-a", True), ("other", False)):
        claim["metadata"]["namespace"] = namespace
        review = make_review(claim, kind=CLAIM_KIND, resource="resourceclaims", namespace=namespace)
        answer = client.post("/mutate", json=review).get_json()["response"]
        assert answer["allowed"] is not denied
        if denied:
            assert said in answer["status"]["message"] and answer["status"]["code"] == 422


# -- hostile claims and templates ------------------------------------------------------------

opaque_configs = st.fixed_dictionaries(
    {
        "opaque": st.fixed_dictionaries(
            {
                "driver": st.sampled_from(["gpu.nvidia.com", "other.example.com"]) | json_values,
                "parameters": st.fixed_dictionaries(
                    {
                        "apiVersion": st.sampled_from(["resource.nvidia.com/v1beta1", "x/v9"]),
                        "kind": st.sampled_from(["MigDeviceConfig", "GpuConfig", "Other"]),
                        "sharing": st.fixed_dictionaries(
                            {"strategy": st.sampled_from(["MPS", "TimeSlicing", "None", ""])}
                        )
                        | json_values,
                    }
                )
                | json_values,
            }
        ),
        "requests": st.lists(st.sampled_from(["mig", "gpu", ""]), max_size=2) | json_values,
    }
)
exactly_fields = st.dictionaries(
    st.sampled_from(
        [
            "deviceClassName",
            "allocationMode",
            "count",
            "selectors",
            "adminAccess",
            "capacity",
            "tolerations",
        ]
    ),
    st.sampled_from(
        [
            "mig.nvidia.com",
            "gpu.nvidia.com",
            "migslice-mig-1g.10gb",
            "migslice-mig-9g.1gb",
            "All",
            "ExactCount",
            True,
            0,
            -1,
            2**40,
            [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"}}],
            [{"cel": {"expression": 7}}],
            {"requests": {"memory": "5Gi"}},
        ]
    )
    | json_values,
    max_size=3,
)


@st.composite
def claim_reviews(draw: st.DrawFn) -> dict[str, Any]:
    claim = make_claim(
        "fuzzed",
        profile=draw(st.sampled_from(["1g.10gb", "3g.40gb", "7g.80gb", "1g.10gb+me", None])),
        device_class=draw(st.sampled_from(["mig.nvidia.com", "migslice-mig-2g.20gb", "x"])),
        count=draw(st.integers(-1, 9)),
    )
    devices = claim["spec"]["devices"]
    devices["requests"][0]["exactly"].update(draw(exactly_fields))
    if draw(st.booleans()):
        devices["requests"].append(
            {"name": "more", "firstAvailable": draw(st.lists(exactly_fields, max_size=2))}
        )
    if draw(st.booleans()):
        devices["config"] = draw(st.lists(opaque_configs, max_size=2))
    if draw(st.booleans()):  # any part of the object replaced by anything
        where = draw(st.sampled_from([claim, claim["metadata"], claim["spec"], devices]))
        where[draw(st.sampled_from([*where, "status"]))] = draw(json_values)
    kind = draw(st.sampled_from([CLAIM_KIND, TEMPLATE_KIND]))
    raw: Any = claim
    if kind == TEMPLATE_KIND:
        spec = claim.get("spec") if isinstance(claim, dict) else None
        raw = {**claim, "kind": "ResourceClaimTemplate", "spec": {"spec": spec}}
    plural = "resourceclaims" if kind == CLAIM_KIND else "resourceclaimtemplates"
    review = make_review(
        raw,
        kind=kind,
        resource=plural,
        namespace=draw(st.sampled_from(["team-a", "other", ""])),
        operation=draw(st.sampled_from(["CREATE", "CREATE", "UPDATE"])),
    )
    if review["request"]["operation"] == "UPDATE":
        review["request"]["oldObject"] = draw(st.sampled_from([None, make_claim("fuzzed")]))
    return review


@pytest.mark.parametrize(
    "policy",
    [
        {"quota": {"computeSlices": 2}},
        {"isolation": "process", "tiers": ["mig", "shared"], "allowedProfiles": ["1g.10gb"]},
    ],
    ids=["hardware-quota", "process-tiers"],
)
@settings(max_examples=120, deadline=None)
@given(review=claim_reviews())
def test_fuzzed_claims_and_templates_get_a_clear_answer_and_never_a_500(
    policy: dict[str, Any], review: dict[str, Any]
) -> None:
    state = tenant_state(**policy)
    client = create_app(
        WebhookSettings(), state, QuotaKeeper(state, MemoryLedgers(state))
    ).test_client()
    assert_clear_admission_answer(review, client.post("/mutate", json=review))


pod_claim_entries = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["gpu", "gpu", "nic", "", "migslice-gpu"])},
        optional={
            "resourceClaimName": st.sampled_from(["shared", "missing", "nic", ""]) | json_values,
            "resourceClaimTemplateName": st.sampled_from(
                ["migslice-mig-1g.10gb", "mine", "migslice-mig-9g.1gb"]
            )
            | json_values,
        },
    )
    | json_values,
    max_size=3,
)


@st.composite
def claim_pod_reviews(draw: st.DrawFn) -> dict[str, Any]:
    pod = make_created_pod(annotations=None)
    if draw(st.booleans()):
        pod["metadata"]["annotations"] = draw(
            st.dictionaries(
                st.sampled_from(["migslice.io/gpu-size", "migslice.io/gpu-count"]),
                st.sampled_from(["small", "medium", "huge", "2", "0", "-1", "1e9", ""]),
            )
        )
    pod["spec"]["resourceClaims"] = draw(pod_claim_entries)
    pod["spec"]["containers"][0]["resources"] = draw(
        st.sampled_from([{}, {"claims": [{"name": "gpu"}]}, {"limits": {"nvidia.com/gpu": 1}}])
        | st.dictionaries(st.sampled_from(["claims", "limits", "requests"]), json_values)
    )
    return make_review(pod)


@settings(max_examples=150, deadline=None)
@given(review=claim_pod_reviews(), tier=st.sampled_from(["hardware", "process"]))
def test_fuzzed_pods_of_a_resource_claim_tenant_get_a_clear_answer_and_never_a_500(
    review: dict[str, Any], tier: str
) -> None:
    policy: dict[str, Any] = {"deviceAPI": "ResourceClaim", "quota": {"computeSlices": 3}}
    if tier == "process":
        policy |= {"isolation": "process", "tiers": ["mig", "shared"]}
    state = tenant_state(**policy)
    state.upsert_claim(make_claim("shared", reserved_for=("first",)))
    state.upsert_claim(make_claim("nic", device_class="nic.example.com", profile=None))
    client = create_app(
        WebhookSettings(),
        state,
        QuotaKeeper(state, MemoryLedgers(state)),
        TemplateKeeper(state, MemoryTemplates()),
    ).test_client()
    assert_clear_admission_answer(review, client.post("/mutate", json=review))


def test_a_pod_naming_several_claims_is_held_to_max_slices_per_pod() -> None:
    """maxSlicesPerPod limits the GPU instances one pod (or one claim) may request: a pod
    naming two claims of one 1g.10gb each holds two instances, which a policy of one per pod
    refuses, as it refuses the same pod asking nvidia.com/mig-1g.10gb: 2."""
    state = tenant_state(maxSlicesPerPod=1)
    state.upsert_claim(make_claim("c-1"))
    state.upsert_claim(make_claim("c-2"))
    client = create_app(WebhookSettings(), state).test_client()
    alone = _pod_answer(client, make_claim_pod("one", {"gpu": "c-1"}), "uid-one")
    assert alone["allowed"]
    both = _pod_answer(client, make_claim_pod("two", {"a": "c-1", "b": "c-2"}), "uid-two")
    assert not both["allowed"]
    assert "(spec.maxSlicesPerPod)" in both["status"]["message"]
    # one claim named twice holds its devices once, as the allocator gives them
    twice = _pod_answer(client, make_claim_pod("twice", {"a": "c-1", "b": "c-1"}), "uid-twice")
    assert twice["allowed"], twice
    spec = make_claim("-", count=2)["spec"]
    state.upsert_template(
        {"metadata": {"name": "pair", "namespace": "team-a"}, "spec": {"spec": spec}}
    )
    pod = make_claim_pod("pair", {})
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "pair"}]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    paired = _pod_answer(client, pod, "uid-pair")
    assert not paired["allowed"] and "(spec.maxSlicesPerPod)" in paired["status"]["message"]


def test_claims_named_like_migslices_own_count_toward_max_slices_per_pod() -> None:
    """Only the claims migslice itself gives a sized pod (counted in its plan) are left out of
    the count of the claims a pod names: a tenant naming migslice's templates under
    migslice-gpu, migslice-gpu-1, ... itself holds every device they make."""
    state = tenant_state(maxSlicesPerPod=1, deviceAPI="ResourceClaim")
    state.upsert_template(migslice_claim_template("team-a", "1g.10gb"))
    client = create_app(WebhookSettings(), state).test_client()
    template = "migslice-mig-1g.10gb"
    plain = make_claim_pod("plain", {})
    plain["spec"]["resourceClaims"] = [
        {"name": "migslice-gpu", "resourceClaimTemplateName": template},
        {"name": "migslice-gpu-1", "resourceClaimTemplateName": template},
    ]
    plain["spec"]["containers"][0]["resources"] = {
        "claims": [{"name": "migslice-gpu"}, {"name": "migslice-gpu-1"}]
    }
    answer = _pod_answer(client, plain, "uid-plain")
    assert not answer["allowed"]
    assert "asks for 2 GPU slices (2 of them" in answer["status"]["message"]
    sized = make_created_pod(annotations={"migslice.io/gpu-size": "small"})
    sized["spec"]["resourceClaims"] = [
        {"name": "migslice-gpu-1", "resourceClaimTemplateName": template}
    ]
    answer = _pod_answer(client, sized, "uid-sized")
    assert not answer["allowed"]
    assert "asks for 2 GPU slices (1 of them" in answer["status"]["message"]
    # migslice's own claim, on reinvocation, is counted once (in the plan)
    del sized["spec"]["resourceClaims"]
    answer = _pod_answer(client, sized, "uid-sized")
    assert answer["allowed"], answer
    patched = jsonpatch.apply_patch(sized, json.loads(base64.b64decode(answer["patch"])))
    assert _pod_answer(client, patched, "uid-sized")["allowed"]


def _reserve(
    client: FlaskClient, claim: dict[str, Any], pods: tuple[str, ...], before: tuple[str, ...]
) -> Any:
    """kube-scheduler's status UPDATE of ``claim`` from reserved for ``before`` to ``pods``
    (its allocation on gpu-1's first MIG device), as kube-apiserver sends it to the webhook."""
    name = claim["metadata"]["name"]
    allocated = [("gpu-1", "gpu-0-mig-1g10gb-19-6")]
    old = make_claim(name, allocated=allocated, reserved_for=before)
    new = make_claim(name, allocated=allocated, reserved_for=pods)
    old["spec"] = new["spec"] = claim["spec"]
    review = make_review(
        new, uid=f"uid-{'-'.join(pods)}", kind=CLAIM_KIND, resource="resourceclaims"
    )
    review["request"] |= {"operation": "UPDATE", "oldObject": old, "subResource": "status"}
    reply = client.post("/mutate", json=review)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    return reply.get_json()["response"]


def test_two_pods_naming_a_hardware_tenants_claim_back_to_back_get_it_one_at_a_time() -> None:
    """A Deployment (or two `kubectl create`s) whose pods name one resourceClaimName: the
    ReplicaSet controller creates its pods in concurrent batches, so the second pod's admission
    comes before the first pod reaches the webhook's pod watch (or reaches another replica),
    and both are admitted. kube-scheduler then reserved the claim (one MIG device) for both: a
    hardware-isolation tenant's pods shared a GPU instance. The reservation is now judged
    (kube-apiserver admits each status update against the claim it replaces, so of two
    racing, one is refused): the second pod waits until the first has ended."""
    state = tenant_state()
    claim = make_claim("shared")
    state.upsert_claim(claim)
    client = create_app(WebhookSettings(), state).test_client()
    first = _pod_answer(client, make_claim_pod("first", {"gpu": "shared"}), "uid-first")
    second = _pod_answer(client, make_claim_pod("second", {"gpu": "shared"}), "uid-second")
    assert first["allowed"] and second["allowed"]  # the pod cache has seen neither yet
    assert _reserve(client, claim, ("first",), ())["allowed"]
    refused = _reserve(client, claim, ("first", "second"), ("first",))
    assert not refused["allowed"]
    message = refused["status"]["message"]
    assert "cannot be reserved for pod second" in message and "pod first" in message, message
    assert "isolation: hardware" in message
    assert _reserve(client, claim, ("second",), ())["allowed"]  # once the first has ended
    state.upsert_policy(make_policy(generation=2, isolation="process", tiers=["mig", "shared"]))
    assert _reserve(client, claim, ("first", "second"), ("first",))["allowed"]


def test_a_time_sliced_claim_admitted_before_isolation_became_hardware_serves_no_new_pod() -> None:
    """A policy tightened to isolation: hardware (or narrowed profiles) after a tenant created
    a ResourceClaim with a TimeSlicing sharing config: a new pod naming that claim was placed
    and ran on a time-sliced device, though a new claim like it is refused. Its reservation
    for a new pod is judged against the policy as it is now; the pods running keep it."""
    state = tenant_state(isolation="process", tiers=["mig", "shared"])
    claim = make_claim("ts")
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig"}
    parameters["sharing"] = {"strategy": "TimeSlicing"}
    claim["spec"]["devices"]["config"] = [
        {"opaque": {"driver": "gpu.nvidia.com", "parameters": parameters}}
    ]
    client = create_app(WebhookSettings(), state).test_client()
    reply = client.post(
        "/mutate", json=make_review(claim, uid="uid-c", kind=CLAIM_KIND, resource="resourceclaims")
    )
    assert reply.get_json()["response"]["allowed"]
    state.upsert_claim(claim)
    assert _reserve(client, claim, ("old",), ())["allowed"]
    state.upsert_policy(make_policy(generation=2, isolation="hardware"))
    refused = _reserve(client, claim, ("p",), ())
    assert not refused["allowed"]
    message = refused["status"]["message"]
    assert "sharing strategy TimeSlicing" in message and "policy changed" in message, message
    state.upsert_policy(make_policy(generation=3, allowedProfiles=["2g.20gb"]))
    refused = _reserve(client, make_claim("plain"), ("p",), ())
    assert not refused["allowed"] and "(spec.allowedProfiles)" in refused["status"]["message"]


def test_a_reservation_that_adds_no_consumer_or_outside_a_tenant_is_not_judged() -> None:
    """Status updates that add no consumer (the driver's device status, the resourceclaim
    controller removing an ended pod) pass whatever the policy; so does any claim in a
    namespace no policy selects."""
    state = tenant_state(allowedProfiles=["2g.20gb"])
    claim = make_claim("c")  # 1g.10gb, which the policy no longer allows
    client = create_app(WebhookSettings(), state).test_client()
    assert _reserve(client, claim, ("a",), ("a",))["allowed"]
    assert _reserve(client, claim, (), ("a",))["allowed"]
    other = make_claim("c", namespace="elsewhere")
    review = make_review(other, uid="u", namespace="elsewhere", kind=CLAIM_KIND)
    review["request"] |= {"operation": "UPDATE", "subResource": "status"}
    review["request"]["object"] = make_claim(
        "c", namespace="elsewhere", allocated=[("gpu-1", "d")], reserved_for=("a", "b")
    )
    review["request"]["oldObject"] = other
    assert client.post("/mutate", json=review).get_json()["response"]["allowed"]


def test_a_pod_recreated_under_its_name_while_its_old_reservation_lingers_gets_an_answer() -> None:
    """A StatefulSet's pod (or any pod deleted and made again under its name) naming a hardware
    tenant's claim: kube-scheduler reserves the claim for the new pod (a new uid) before the
    resourceclaim controller has removed the old pod's entry (it removes an entry whose pod
    "got replaced with new instance", by uid). The two entries share the name; the webhook
    must answer (a denial naming the old instance), not fail with HTTP 500."""
    state = tenant_state()
    claim = make_claim("shared")
    state.upsert_claim(claim)
    client = create_app(WebhookSettings(), state).test_client()
    allocated = [("gpu-1", "gpu-0-mig-1g10gb-19-6")]
    old = make_claim("shared", allocated=allocated, reserved_for=("web-0",))
    new = make_claim("shared", allocated=allocated, reserved_for=("web-0",))
    new["status"]["reservedFor"].append({"resource": "pods", "name": "web-0", "uid": "uid-new"})
    review = make_review(new, uid="uid-r", kind=CLAIM_KIND, resource="resourceclaims")
    review["request"] |= {"operation": "UPDATE", "oldObject": old, "subResource": "status"}
    reply = client.post("/mutate", json=review)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    answer = reply.get_json()["response"]
    assert not answer["allowed"]
    assert "reserved for pod web-0" in answer["status"]["message"], answer


reserved_for_entries = st.lists(
    st.fixed_dictionaries(
        {
            "resource": st.sampled_from(["pods", "pods", "jobs", ""]) | json_values,
            "name": st.sampled_from(["a", "b", ""]) | json_values,
            "uid": st.sampled_from(["uid-a", "uid-b", "uid-c", ""]) | json_values,
        }
    )
    | json_values,
    max_size=3,
)


@st.composite
def reservation_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """kube-scheduler's claim status UPDATE, then anything in its place: reservedFor lists of
    any shape, a status or object replaced by any JSON value, no oldObject."""
    claim: Any = make_claim("c", allocated=[("gpu-1", "gpu-0-mig-1g10gb-19-6")])
    old: Any = copy.deepcopy(claim)
    claim["status"]["reservedFor"] = draw(reserved_for_entries)
    old["status"]["reservedFor"] = draw(reserved_for_entries)
    for target in (claim, old):
        if draw(st.booleans()):
            where = draw(st.sampled_from([target, target["status"], target["spec"]]))
            where[draw(st.sampled_from([*where, "status"]))] = draw(json_values)
    review = make_review(
        claim,
        kind=CLAIM_KIND,
        resource="resourceclaims",
        namespace=draw(st.sampled_from(["team-a", "other", ""])),
    )
    review["request"] |= {"operation": "UPDATE", "subResource": "status"}
    review["request"]["oldObject"] = draw(st.sampled_from([old, None]))
    return review


@settings(max_examples=200, deadline=None)
@given(review=reservation_reviews(), isolation=st.sampled_from(["hardware", "process"]))
def test_fuzzed_claim_reservations_get_a_clear_answer_and_never_a_500(
    review: dict[str, Any], isolation: str
) -> None:
    policy: dict[str, Any] = {"isolation": isolation}
    if isolation == "process":
        policy["tiers"] = ["mig", "shared"]
    state = tenant_state(**policy)
    client = create_app(WebhookSettings(), state).test_client()
    assert_clear_admission_answer(review, client.post("/mutate", json=review))


def test_a_claims_product_is_named_as_nvidias_dra_driver_publishes_it() -> None:
    """kube-scheduler compares a claim's productName selector with the devices' attribute
    exactly, and NVIDIA's DRA driver publishes NVML's name (NVIDIA A100-SXM4-80GB). A claim
    naming the GFD label (as spec.allowedProducts lists it, and as the webhook's own hint
    said to name one) or the catalog key was admitted and charged, and never allocated."""
    state = ClusterState()
    state.upsert_policy(make_policy(allowedProducts=["NVIDIA-A100-SXM4-80GB"]))
    state.upsert_node(make_node("dra-1", product=None, gpu_count=None))
    for raw in dra_slices.node_slices("dra-1", "uid-dra-1", [dra_slices.a100(0)]):
        slim = slim_slice(raw)
        assert slim is not None
        state.upsert_slice(slim)
    for raw in migslice_classes():
        state.upsert_device_class(raw)
    client = create_app(WebhookSettings(), state).test_client()

    def answer(claim: dict[str, Any]) -> dict[str, Any]:
        reply = client.post(
            "/mutate",
            json=make_review(claim, uid="uid-1", kind=CLAIM_KIND, resource="resourceclaims"),
        )
        assert reply.status_code == 200, reply.get_data(as_text=True)
        found: dict[str, Any] = reply.get_json()["response"]
        return found

    def named(product: str | None) -> dict[str, Any]:
        claim = make_claim("train-1", device_class="migslice-mig-1g.10gb", profile=None)
        if product is not None:
            claim["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
                {
                    "cel": {
                        "expression": "device.attributes['gpu.nvidia.com'].productName == "
                        f"'{product}'"
                    }
                }
            ]
        return claim

    for wrong in ("NVIDIA-A100-SXM4-80GB", "A100-80GB"):
        refused = answer(named(wrong))
        assert not refused["allowed"], wrong
        message = refused["status"]["message"]
        assert f'productName "{wrong}"' in message
        assert "'NVIDIA A100-SXM4-80GB'" in message
    assert answer(named("NVIDIA A100-SXM4-80GB"))["allowed"]
    hint = answer(named(None))["status"]["message"]
    assert "productName == '<product>' naming one" in hint
    assert "'NVIDIA A100-SXM4-80GB'" in hint


NIC_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "nic.example.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'nic.example.com'"}}]},
}


def test_another_drivers_claim_that_migslice_would_not_read_is_no_gpu_claim() -> None:
    """Measured before: a claim of another driver's class asking for every device
    (allocationMode: All), a consumable share (capacity), adminAccess, or firstAvailable
    sub-requests of its classes was taken by the claim and template caches for a GPU claim
    migslice cannot read: a pod naming it in a namespace no policy selects was refused
    (no-policy), and a hardware tenant's second pod sharing it was refused (isolation), though
    the claim itself was admitted untouched as asking no GPU."""
    state = tenant_state()
    state.upsert_device_class(NIC_CLASS)
    nic = {"deviceClassName": "nic.example.com"}
    shapes: dict[str, dict[str, Any]] = {
        "all": {"name": "nic", "exactly": {**nic, "allocationMode": "All"}},
        "capacity": {
            "name": "nic",
            "exactly": {
                **nic,
                "allocationMode": "ExactCount",
                "count": 1,
                "capacity": {"requests": {"bandwidth": "1G"}},
            },
        },
        "admin": {
            "name": "nic",
            "exactly": {**nic, "allocationMode": "ExactCount", "count": 1, "adminAccess": True},
        },
        "first": {"name": "nic", "firstAvailable": [{"name": "a", **nic}]},
    }
    client = create_app(WebhookSettings(), state).test_client()
    for shape, request in shapes.items():
        for namespace in ("team-a", "other"):
            claim = make_claim(f"nic-{shape}", namespace=namespace, requests=[request])
            review = make_review(
                claim, namespace=namespace, kind=CLAIM_KIND, resource="resourceclaims"
            )
            reply = client.post("/mutate", json=review)
            assert reply.get_json()["response"]["allowed"], (shape, namespace)
            assert "patch" not in reply.get_json()["response"], (shape, namespace)
            state.upsert_claim(claim)
        elsewhere = make_claim_pod("e", {"nic": f"nic-{shape}"}, namespace="other")
        answer = _pod_answer(client, elsewhere, f"uid-e-{shape}", "other")
        assert answer["allowed"] and "patch" not in answer, (shape, answer)
        state.upsert_pod(make_claim_pod(f"a-{shape}", {"nic": f"nic-{shape}"}))
        second = _pod_answer(client, make_claim_pod("b", {"nic": f"nic-{shape}"}), f"uid-{shape}")
        assert second["allowed"] and "patch" not in second, (shape, second)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "nic-template", "namespace": "other"},
        "spec": {"spec": {"devices": {"requests": [shapes["all"]]}}},
    }
    state.upsert_template(template)
    pod = make_claim_pod("t", {}, namespace="other", templates={"nic": None})
    answer = _pod_answer(client, pod, "uid-t", "other")
    assert answer["allowed"] and "patch" not in answer, answer


def test_a_marked_claim_its_owner_names_is_charged() -> None:
    """Measured before: a pending pod asking nvidia.com/mig-1g.10gb (charged) and naming a
    claim by resourceClaimName, that claim then created with kube-scheduler's mark and the
    pod as its controller, was admitted uncharged past a quota of 1 instance and counted
    nothing: the pod held its extended resource and the claim's device for one charge.
    kube-scheduler's claim for a pod's extended resources is never in its spec.resourceClaims."""
    state = tenant_state(quota={"instances": 1}, isolation="process", tiers=["mig", "shared"])
    client = create_app(WebhookSettings(), state).test_client()
    pod = make_claim_pod("p", {"gpu": "free"}, mig={"1g.10gb": 1})
    assert _pod_answer(client, copy.deepcopy(pod), "uid-p")["allowed"]
    pod["metadata"]["annotations"] = {"migslice.io/reservation": "uid-p"}
    state.upsert_pod(pod)
    forged = make_claim(
        "free", device_class="migslice-mig-1g.10gb", profile=None, owner="p", extended_resource=True
    )
    review = make_review(forged, uid="uid-free", kind=CLAIM_KIND, resource="resourceclaims")
    answer = client.post("/mutate", json=review).get_json()["response"]
    assert not answer["allowed"], answer
    assert "quota" in answer["status"]["message"]
    state.upsert_claim(forged)  # written while the webhook was away: the cache charges it
    assert state.tenant_usage("team-a").instances == 2
    facts = claim_facts_from_raw(forged)
    assert facts is not None
    charged = claim_charges(
        [pod],
        {facts.key: facts},
        {facts.key: ("p", "uid-p")},
        {c.name: c for c in map(device_class_facts_from_raw, migslice_classes()) if c},
        {"team-a/p": ((("nvidia.com/mig-1g.10gb", 1),), "uid-p")},
        pricing=({}, MODELS),
    )
    assert charged[facts.key].instances == 1  # migslice status counts it as the webhook does
