"""Which TenantPolicy selects which namespace: an index kept current one change at a time.

A policy selects a namespace by name (``spec.namespaces``) or by its labels
(``spec.namespaceSelector``). Admission asks "which policies select this namespace?" for every
GPU pod, the status writer "which namespaces does this policy select, and does another policy
select one of them?" for every policy; answering either by comparing every policy with every
namespace grows with their product (a status computation took 1.3 s at 100 policies). The
index answers both by lookups, and a change costs what it touches: a policy change the
namespaces known (only if it has a selector), a namespace change the policies with selectors.

Known namespaces are those with a Namespace object, those a policy lists by name and those
where a pod lives (``touch_namespace``); one without a Namespace object has only the label
``kubernetes.io/metadata.name``, as the API server would give it.
"""

from __future__ import annotations

from collections.abc import Mapping

from migslice.policy.errors import FieldError
from migslice.policy.types import TenantPolicy

NAME_LABEL = "kubernetes.io/metadata.name"


def default_labels(namespace: str) -> Mapping[str, str]:
    return {NAME_LABEL: namespace}


class Tenancy:
    """The index (see the module docstring). Not thread-safe: callers hold their own lock."""

    def __init__(self) -> None:
        self._policies: dict[str, TenantPolicy] = {}
        self._sorted: tuple[TenantPolicy, ...] = ()
        self._with_selector: set[str] = set()
        self._listed: dict[str, set[str]] = {}  # namespace -> policies listing it by name
        self._labels: dict[str, Mapping[str, str]] = {}
        self._objects: set[str] = set()  # namespaces with a Namespace object
        self._selected: dict[str, frozenset[str]] = {}
        self._selecting: dict[str, set[str]] = {}

    # -- reads ---------------------------------------------------------------------------------

    def policies(self) -> tuple[TenantPolicy, ...]:
        """Every policy, sorted by name."""
        return self._sorted

    def policy(self, name: str) -> TenantPolicy | None:
        return self._policies.get(name)

    def labels_of(self, namespace: str) -> Mapping[str, str]:
        return self._labels.get(namespace) or default_labels(namespace)

    def known_namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return dict(self._labels)

    def selecting(self, namespace: str) -> tuple[TenantPolicy, ...]:
        """The policies that select ``namespace`` (sorted by name; two is a conflict)."""
        names = self._selecting.get(namespace)
        if names is None:
            labels = default_labels(namespace)
            return tuple(p for p in self._sorted if p.selects(namespace, labels))
        return tuple(self._policies[name] for name in sorted(names))

    def namespaces_of(self, policy_name: str) -> frozenset[str]:
        return self._selected.get(policy_name, frozenset())

    def conflicts(self, policy: TenantPolicy) -> tuple[FieldError, ...]:
        """Namespaces ``policy`` selects that another policy of the index selects too, one
        error per other policy. ``policy`` need not be in the index (a policy being
        validated); its own stored version never conflicts with it."""
        selected = self._selected.get(policy.name)
        stored = self._policies.get(policy.name)
        if stored is None or stored != policy or selected is None:
            selected = self._selection(policy)
        claimed: dict[str, list[str]] = {}
        for namespace in selected:
            if namespace in self._labels:
                holders: set[str] = self._selecting.get(namespace, set())
            else:  # a namespace only the candidate names: who would select it by its name label
                labels = default_labels(namespace)
                holders = {
                    name
                    for name in self._listed.get(namespace, set()) | self._with_selector
                    if self._policies[name].selects(namespace, labels)
                }
            for other in holders:
                if other != policy.name:
                    claimed.setdefault(other, []).append(namespace)
        return tuple(
            _conflict(policy, other, sorted(namespaces))
            for other, namespaces in sorted(claimed.items())
        )

    # -- changes (each returns what it touched, so callers can mark statuses dirty) ----------

    def put_policy(self, policy: TenantPolicy) -> set[str]:
        """Add or replace ``policy``; the names of the policies whose conflicts may change."""
        touched = self.remove_policy(policy.name)
        for namespace in policy.namespaces:
            self._know(namespace)
        selected = self._selection(policy)
        self._policies[policy.name] = policy
        self._sorted = tuple(sorted(self._policies.values(), key=lambda p: p.name))
        if policy.namespace_selector is not None:
            self._with_selector.add(policy.name)
        for namespace in policy.namespaces:
            self._listed.setdefault(namespace, set()).add(policy.name)
        self._selected[policy.name] = selected
        for namespace in selected:
            self._selecting.setdefault(namespace, set()).add(policy.name)
        touched.add(policy.name)
        for namespace in selected:
            touched |= self._selecting[namespace]
        return touched

    def remove_policy(self, name: str) -> set[str]:
        touched: set[str] = set()
        removed = self._policies.pop(name, None)
        if removed is None:
            return touched
        self._sorted = tuple(sorted(self._policies.values(), key=lambda p: p.name))
        self._with_selector.discard(name)
        for namespace in removed.namespaces:
            listing = self._listed.get(namespace)
            if listing is not None:
                listing.discard(name)
                if not listing:
                    del self._listed[namespace]
        for namespace in self._selected.pop(name, frozenset()):
            holders = self._selecting.get(namespace)
            if holders is not None:
                holders.discard(name)
                touched |= holders
        return touched

    def put_namespace(self, name: str, labels: Mapping[str, str]) -> set[str]:
        """A Namespace object's labels; the names of the policies whose selection changed."""
        self._objects.add(name)
        clean = dict(labels)
        clean.setdefault(NAME_LABEL, name)
        if self._labels.get(name) == clean:
            return set()
        self._labels[name] = clean
        return self._reselect(name)

    def remove_namespace(self, name: str) -> set[str]:
        """A Namespace object is gone (a namespace a policy lists by name stays known)."""
        self._objects.discard(name)
        if name not in self._labels:
            return set()
        if name in self._listed:
            self._labels[name] = default_labels(name)
        else:
            del self._labels[name]
        return self._reselect(name)

    def touch_namespace(self, name: str) -> set[str]:
        """A namespace seen elsewhere (a pod lives there): known from now on."""
        if name in self._labels:
            return set()
        return self._know(name)

    # -- internals -----------------------------------------------------------------------------

    def _know(self, name: str) -> set[str]:
        if name in self._labels:
            return set()
        self._labels[name] = default_labels(name)
        return self._reselect(name)

    def _selection(self, policy: TenantPolicy) -> frozenset[str]:
        selected = set(policy.namespaces)
        if policy.namespace_selector is not None:
            selected |= {ns for ns, labels in self._labels.items() if policy.selects(ns, labels)}
        return frozenset(selected)

    def _reselect(self, namespace: str) -> set[str]:
        labels = self._labels.get(namespace)
        before = set(self._selecting.get(namespace, ()))
        after = {
            name
            for name in self._listed.get(namespace, set()) | self._with_selector
            if labels is not None and self._policies[name].selects(namespace, labels)
        }
        for name in before - after:
            self._selected[name] = self._selected[name] - {namespace}
        for name in after - before:
            self._selected[name] = self._selected.get(name, frozenset()) | {namespace}
        if after:
            self._selecting[namespace] = after
        else:
            self._selecting.pop(namespace, None)
        return before | after


CONFLICTS_LISTED = 20
"""Namespaces a conflict names; the rest are counted (a status condition's message has a
limit, and thousands of selected namespaces would pass it)."""


def _conflict(policy: TenantPolicy, other: str, claimed: list[str]) -> FieldError:
    plural = len(claimed) > 1
    listed = ", ".join(claimed[:CONFLICTS_LISTED])
    if len(claimed) > CONFLICTS_LISTED:
        listed += f" and {len(claimed) - CONFLICTS_LISTED} more"
    return FieldError(
        "spec.namespaces" if set(claimed) & set(policy.namespaces) else "spec.namespaceSelector",
        f"namespace{'s' if plural else ''} {listed} "
        f'already belong{"" if plural else "s"} to TenantPolicy "{other}"; '
        "a namespace can have only one tenant",
    )
