"""The tenancy index answers as comparing every policy with every namespace would."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from harness.builders import make_policy
from migslice.policy import FieldError, TenantPolicy, parse_tenant_policy
from migslice.policy.tenancy import Tenancy, default_labels

NAMESPACES = ["ns-a", "ns-b", "ns-c", "ns-d"]
POLICIES = ["p1", "p2", "p3"]


def brute_conflicts(
    policy: TenantPolicy, others: list[TenantPolicy], labels: Mapping[str, Mapping[str, str]]
) -> tuple[Any, ...]:
    """The definition, written out: every other policy, every namespace."""
    errors = []
    for other in sorted(others, key=lambda p: p.name):
        if other.name == policy.name:
            continue
        claimed = sorted(
            {
                ns
                for ns in policy.namespaces
                if other.selects(ns, labels.get(ns, default_labels(ns)))
            }
            | {
                ns
                for ns, lab in labels.items()
                if policy.selects(ns, lab) and other.selects(ns, lab)
            }
        )
        if claimed:
            field = (
                "spec.namespaces"
                if set(claimed) & set(policy.namespaces)
                else "spec.namespaceSelector"
            )
            errors.append((field, tuple(claimed), other.name))
    return tuple(errors)


def summary(errors: tuple[FieldError, ...]) -> tuple[Any, ...]:
    return tuple(
        (
            e.path,
            tuple(e.message.split(" already")[0].split(" ", 1)[1].split(", ")),
            e.message.split('"')[1],
        )
        for e in errors
    )


POLICY = st.builds(
    lambda name, listed, team: parse_tenant_policy(
        make_policy(
            name,
            namespaces=listed or None,
            **(
                {"namespaceSelector": {"matchLabels": {"team": team}}} if team or not listed else {}
            ),
        )
    ),
    st.sampled_from(POLICIES),
    st.lists(st.sampled_from(NAMESPACES), unique=True, max_size=2),
    st.sampled_from(["", "x", "y"]),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("policy"), POLICY),
        st.tuples(st.just("remove-policy"), st.sampled_from(POLICIES)),
        st.tuples(st.just("namespace"), st.sampled_from(NAMESPACES), st.sampled_from(["x", "y"])),
        st.tuples(st.just("remove-namespace"), st.sampled_from(NAMESPACES)),
        st.tuples(st.just("touch"), st.sampled_from(NAMESPACES)),
    ),
    max_size=14,
)


@settings(max_examples=300, deadline=None)
@given(OPS, POLICY)
def test_the_index_agrees_with_comparing_everything(
    ops: list[tuple[Any, ...]], candidate: TenantPolicy
) -> None:
    index = Tenancy()
    policies: dict[str, TenantPolicy] = {}
    objects: dict[str, Mapping[str, str]] = {}
    touched: set[str] = set()
    for op in ops:
        if op[0] == "policy":
            index.put_policy(op[1])
            policies[op[1].name] = op[1]
        elif op[0] == "remove-policy":
            index.remove_policy(op[1])
            policies.pop(op[1], None)
        elif op[0] == "namespace":
            index.put_namespace(op[1], {"team": op[2]})
            objects[op[1]] = {"team": op[2], "kubernetes.io/metadata.name": op[1]}
        elif op[0] == "remove-namespace":
            index.remove_namespace(op[1])
            objects.pop(op[1], None)
        else:
            index.touch_namespace(op[1])
            touched.add(op[1])
    labels = {ns: objects.get(ns, default_labels(ns)) for ns in NAMESPACES}
    for namespace in NAMESPACES:
        expected = [
            p.name
            for p in sorted(policies.values(), key=lambda p: p.name)
            if p.selects(namespace, labels[namespace])
        ]
        assert [p.name for p in index.selecting(namespace)] == expected
    known = {
        ns: labels[ns]
        for ns in NAMESPACES
        if ns in objects or ns in touched or any(ns in p.namespaces for p in policies.values())
    }
    for policy in [candidate, *policies.values()]:
        others = [p for p in policies.values() if p.name != policy.name]
        assert summary(index.conflicts(policy)) == brute_conflicts(policy, others, known)
