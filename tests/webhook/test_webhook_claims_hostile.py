"""ResourceClaims, ResourceClaimTemplates and the pods that name them, as a fuzzer sends them to
/mutate: well-formed objects with one to three places (any level of the claim spec: requests,
exactly, firstAvailable, selectors and their CEL, count, allocationMode, config parameters,
constraints; the pod's resourceClaims, containers and extended resources) replaced by a wrong
type, null, unicode, a huge number, a deep nesting or removed, under CREATE, UPDATE, DELETE and
CONNECT, with and without dryRun, of the object or its status (a value nested 990 levels deep
is sent as such and checked as a string: the patch touches only the metadata).

Whatever it is sent, the webhook answers 200 with a patch that applies or a denial that says
why, or 400 for a review that is not one; never a 500. Only an allowed CREATE that is not a
dry run charges the tenant's ledger, and what it charges is what the caches count once they
see the object as stored."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.builders import make_created_pod, make_node, make_policy, make_review
from tests.dra_objects import make_claim, make_claim_pod, migslice_classes
from tests.hostile import assert_clear_admission_answer, json_values
from webhook.app import create_app
from webhook.quota import MemoryLedgers, QuotaKeeper
from webhook.settings import WebhookSettings
from webhook.state import ClusterState
from webhook.templates import MemoryTemplates, TemplateKeeper

CLAIM_KIND = ("resource.k8s.io", "v1", "ResourceClaim")
TEMPLATE_KIND = ("resource.k8s.io", "v1", "ResourceClaimTemplate")
POD_KIND = ("", "v1", "Pod")
POLICIES = {
    "hardware-quota": {"quota": {"computeSlices": 8}},
    "process-tiers": {"isolation": "process", "tiers": ["mig", "shared"]},
    "claims-only": {"deviceAPI": "ResourceClaim", "quota": {"computeSlices": 6}},
}
DEEP = "nested 990 levels deep"
"""Sent as a list nested 990 levels deep (the body is parsed to 1,024 levels; Python's repr
and json.dumps stop near 1,000)."""
SOMETIMES = st.sampled_from([False, False, False, True])
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"


def _nested(levels: int) -> Any:
    value: Any = "x"
    for level in range(levels):
        value = {"a": value} if level % 2 else [value]
    return value


SELECTORS = [
    {"cel": {"expression": PROFILE}},
    {"cel": {"expression": f"{PROFILE} || true"}},
    {"cel": {"expression": "(" * 40 + PROFILE + ")" * 40}},
    {
        "cel": {
            "expression": f"{PROFILE} && device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"
        }
    },
    {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb\u200b'"}},
    {"cel": {"expression": f"{PROFILE} // '\n|| true //'"}},
    {
        "cel": {
            "expression": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('1Gi')) > 0"
        }
    },
    {"cel": {"expression": 7}},
    {"cel": None},
]
HOSTILE = (
    st.sampled_from(
        [
            None,
            "",
            "\u0000",
            "\u202e1g.10gb",
            "\u210c\U0001d522\U0001d529 \U0001f600",
            "x" * 5000,
            0,
            -1,
            2,
            33,
            2**31,
            2**63 - 1,
            2**64 - 1,
            1.5,
            1e300,
            True,
            [],
            {},
            [None],
            "All",
            "ExactCount",
            "mig.nvidia.com",
            "gpu.nvidia.com",
            "migslice-mig-1g.10gb",
            "migslice-mig-7g.80gb",
            "MPS",
            "TimeSlicing",
            *SELECTORS,
            [{"key": "gpu.nvidia.com/xid", "operator": "Exists"}],
            {"requests": {"memory": "10Gi"}},
            {
                "opaque": {
                    "driver": "gpu.nvidia.com",
                    "parameters": {"sharing": {"strategy": "MPS"}},
                }
            },
            {"requests": ["mig"], "matchAttribute": "gpu.nvidia.com/parentUUID"},
        ]
    ).map(copy.deepcopy)
    | st.builds(_nested, st.sampled_from([40, 200]))
    | st.just(DEEP)
    | json_values
)


def _claim(draw: st.DrawFn) -> dict[str, Any]:
    profile = draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb", "1g.10gb+me"]))
    asked = draw(
        st.sampled_from(
            [
                (profile, "mig.nvidia.com"),
                (None, "migslice-mig-" + profile.replace("+", ".")),
                (None, "gpu.nvidia.com"),
                (profile, "migslice-mig-2g.20gb"),
                (None, "x"),
            ]
        )
    )
    claim = make_claim(
        "fuzzed", profile=asked[0], device_class=asked[1], count=draw(st.integers(1, 3))
    )
    devices = claim["spec"]["devices"]
    exactly = devices["requests"][0]["exactly"]
    if draw(SOMETIMES):
        exactly.setdefault("selectors", []).append(copy.deepcopy(draw(st.sampled_from(SELECTORS))))
    if draw(SOMETIMES):
        devices["requests"].append(
            {
                "name": "either",
                "firstAvailable": [
                    {"name": "small", "deviceClassName": "migslice-mig-1g.10gb", "count": 1},
                    {"name": "whole", "deviceClassName": "gpu.nvidia.com", "count": 1},
                ],
            }
        )
    if draw(SOMETIMES):
        strategy = draw(st.sampled_from(["MPS", "TimeSlicing"]))
        devices["config"] = [
            {
                "requests": ["mig"],
                "opaque": {
                    "driver": "gpu.nvidia.com",
                    "parameters": {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "MigDeviceConfig",
                        "sharing": {"strategy": strategy},
                    },
                },
            }
        ]
    if draw(SOMETIMES):
        devices["constraints"] = [
            {"requests": ["mig"], "matchAttribute": "gpu.nvidia.com/parentUUID"}
        ]
    return claim


def _pod(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        pod = make_claim_pod(
            "fuzzed",
            draw(st.dictionaries(st.sampled_from(["gpu", "nic"]), st.sampled_from(["held", "x"]))),
            templates=draw(st.sampled_from([None, {"mine": None}])),
        )
        pod["spec"]["resourceClaims"] += draw(
            st.lists(
                st.fixed_dictionaries(
                    {
                        "name": st.sampled_from(["mig", "gpu"]),
                        "resourceClaimTemplateName": st.sampled_from(
                            ["migslice-mig-1g.10gb", "migslice-mig-9g.1gb", "mine"]
                        ),
                    }
                ),
                max_size=2,
            )
        )
        return pod
    resource = draw(
        st.sampled_from(["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/gpu"])
    )
    return make_created_pod(limits={resource: draw(st.sampled_from(["1", "2"]))})


def _places(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value but the value itself (at most 12 items of a list)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += [(*here, key), *_places(inner, (*here, key))]
    elif isinstance(value, list):
        for index, inner in enumerate(value[:12]):
            found += [(*here, index), *_places(inner, (*here, index))]
    return found


class Fuzzed:
    """An AdmissionReview and what it was made of (its repr: the kind, operation and the
    places changed; the object may run to kilobytes)."""

    def __init__(self, review: dict[str, Any], what: str, changed: list[str]) -> None:
        self.review, self.what, self.changed = review, what, changed

    def __repr__(self) -> str:
        request = self.review["request"]
        return (
            f"Fuzzed({self.what} {request['operation']} dryRun={request['dryRun']} "
            f"subResource={request.get('subResource', '')!r} changed={self.changed})"
        )


@st.composite
def fuzzed_reviews(draw: st.DrawFn) -> Fuzzed:
    what = draw(st.sampled_from(["claim", "claim", "claim", "template", "pod", "pod"]))
    raw: dict[str, Any] = _pod(draw) if what == "pod" else _claim(draw)
    kind, plural = (POD_KIND, "pods") if what == "pod" else (CLAIM_KIND, "resourceclaims")
    if what == "template":
        raw = {**raw, "kind": "ResourceClaimTemplate", "spec": {"spec": raw["spec"]}}
        kind, plural = TEMPLATE_KIND, "resourceclaimtemplates"
    stored = copy.deepcopy(raw)
    changed = []
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 2, 3]))):
        places = _places(raw)
        *parents, last = draw(st.sampled_from(places))
        holder: Any = raw
        for step in parents:
            holder = holder[step]
        if isinstance(holder, dict) and draw(st.booleans()):
            del holder[last]
            changed.append(f"-{'.'.join(map(str, (*parents, last)))}")
        else:
            holder[last] = draw(HOSTILE)
            changed.append(".".join(map(str, (*parents, last))))
    operation = draw(st.sampled_from(["CREATE"] * 5 + ["UPDATE", "DELETE", "CONNECT"]))
    review = make_review(
        None if operation == "DELETE" else raw,
        kind=kind,
        resource=plural,
        namespace=draw(st.sampled_from(["team-a", "team-a", "team-a", "other", ""])),
        operation=operation,
        dry_run=draw(SOMETIMES),
    )
    if operation in ("UPDATE", "DELETE"):
        review["request"]["oldObject"] = draw(st.sampled_from([stored, None]))
    if draw(st.booleans()):
        review["request"]["subResource"] = draw(st.sampled_from(["status", "binding", ""]))
    return Fuzzed(review, what, changed)


def _cluster(policy: dict[str, Any]) -> tuple[ClusterState, MemoryLedgers, Any]:
    state = ClusterState()
    state.upsert_policy(make_policy(**policy))
    state.upsert_node(make_node("gpu-1"))
    for raw in migslice_classes():
        state.upsert_device_class(raw)
    state.upsert_claim(make_claim("held", reserved_for=("first",)))
    state.upsert_claim(make_claim("nic", device_class="nic.example.com", profile=None))
    ledgers = MemoryLedgers(state)
    app = create_app(
        WebhookSettings(),
        state,
        QuotaKeeper(state, ledgers),
        TemplateKeeper(state, MemoryTemplates()),
    )
    return state, ledgers, app.test_client()


def _as_stored(review: dict[str, Any], patch: str | None) -> dict[str, Any] | None:
    """The object as kube-apiserver stores it after the answer (patched, named from its
    generateName, namespaced), or None for one it refuses (no metadata, a name that is no
    string): its charge is released once a list shows it is not there."""
    stored = copy.deepcopy(review["request"]["object"])
    if patch is not None:
        stored = jsonpatch.apply_patch(stored, json.loads(base64.b64decode(patch)))
    metadata = stored.get("metadata")
    if not isinstance(metadata, dict):
        return None
    name, generate = metadata.get("name"), metadata.get("generateName")
    if "name" not in metadata and isinstance(generate, str) and generate:
        name = metadata["name"] = f"{generate}x7k2p"
    if not isinstance(name, str) or not name:
        return None
    metadata["namespace"] = review["request"].get("namespace") or "team-a"
    return stored


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(fuzzed=fuzzed_reviews(), policy=st.sampled_from(sorted(POLICIES)))
def test_fuzzed_claims_and_their_pods_are_answered_and_charged_only_as_admitted(
    fuzzed: Fuzzed, policy: str
) -> None:
    state, ledgers, client = _cluster(POLICIES[policy])
    review = fuzzed.review
    request = review["request"]
    before = ledgers.read("team-a").charges
    body = json.dumps(review).replace(f'"{DEEP}"', "[" * 990 + "1" + "]" * 990)
    reply = client.post("/mutate", data=body, content_type="application/json")
    assert_clear_admission_answer(review, reply)
    answer = reply.get_json().get("response", {}) if reply.status_code == 200 else {}
    admitted = answer.get("allowed") is True
    if not (admitted and request["operation"] == "CREATE" and not request["dryRun"]):
        assert ledgers.read("team-a").charges == before, reply.get_json()
        return
    stored = _as_stored(review, answer.get("patch"))
    if fuzzed.what == "template" or stored is None:
        return  # a template is never charged; kube-apiserver stores no such object
    charged = state.tenant_usage("team-a")
    if fuzzed.what == "pod":
        state.upsert_pod(stored)
    else:
        state.upsert_claim(stored)
    assert state.tenant_usage("team-a", exclude_reservation=request["uid"]) == charged
