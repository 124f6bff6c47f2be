"""migslice's ResourceClaimTemplates: one per MIG profile a ``deviceAPI: ResourceClaim``
tenant may use, in each of its namespaces (``migslice-mig-<profile>``, asking for one device
of migslice's DeviceClass of that profile).

Who keeps them: every replica, idempotently. Before the webhook answers a pod it points at a
template, :meth:`TemplateKeeper.ensure` makes sure the template is there (created now when
the cache does not hold it: the one API write, the first time a namespace uses a profile);
:meth:`TemplateKeeper.keep_every` creates, every few seconds, the missing templates of every
such tenant's namespaces and of the profiles the policy allows on the cluster's models (so a
template deleted by hand, which a pending pod's claim would wait for, comes back). A template
of that name that is not migslice's (made while the webhook did not see its namespace, since
the webhook refuses such a CREATE) is never replaced (a template's spec is immutable, and
migslice has no delete right): the pod is denied with what to do, and the loop logs it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, Protocol

from migslice import names
from migslice.errors import MigsliceError
from migslice.kube.transport import RawObject
from migslice.mig import CATALOG
from migslice.objects.claim_templates import migslice_claim_template
from migslice.policy import DeviceApi
from webhook.state import ClusterState

log = logging.getLogger(__name__)


class TemplateStore(Protocol):
    def create(self, template: Mapping[str, Any]) -> RawObject:
        """Create ``template``; the stored object (the existing one if it is there)."""
        ...


class MemoryTemplates:
    """Templates that exist only in the state (a cluster file, tests)."""

    def __init__(self) -> None:
        self.created: list[Mapping[str, Any]] = []

    def create(self, template: Mapping[str, Any]) -> RawObject:
        self.created.append(template)
        return dict(template)


class TemplateUnavailableError(MigsliceError):
    """The template could not be created now (answered 503, retried)."""


class TemplateKeeper:
    """Keeps migslice's templates (see the module docstring)."""

    def __init__(self, state: ClusterState, store: TemplateStore) -> None:
        self.state = state
        self.store = store
        self._foreign: set[str] = set()

    def ensure(self, namespace: str, profile: str) -> str | None:
        """Make sure migslice's template of ``profile`` is in ``namespace``; a denial message
        when one of that name is there that is not migslice's."""
        name = names.mig_claim_template(profile)
        found = self.state.template(namespace, name)
        device_class = names.mig_device_class(profile)
        if found is None and device_class not in self.state.device_classes():
            return (
                f"migslice's DeviceClass {device_class} does not exist, so its claim template "
                f"{namespace}/{name} cannot be made; install migslice's DeviceClasses (chart "
                "value dra.deviceClasses.enabled: true, or manifests/base), or give the policy "
                "deviceAPI: ExtendedResource (spec.deviceAPI)"
            )
        if found is None:
            try:
                stored = self.store.create(migslice_claim_template(namespace, profile))
            except MigsliceError as error:
                raise TemplateUnavailableError(
                    f"cannot create ResourceClaimTemplate {namespace}/{name}: {error}"
                ) from None
            self.state.upsert_template(stored)
            found = self.state.template(namespace, name)
        if found is not None and found.migslice_profile == profile:
            return None
        return (
            f"ResourceClaimTemplate {namespace}/{name} is not migslice's (its claims do not "
            f"ask for exactly one device of DeviceClass {names.mig_device_class(profile)}); "
            "a template's spec cannot change: delete it, and migslice creates its own"
        )

    def keep(self) -> int:
        """Create the missing templates of every ResourceClaim tenant; how many were made."""
        made = 0
        for namespace, profile in self.wanted():
            name = names.mig_claim_template(profile)
            if names.mig_device_class(profile) not in self.state.device_classes():
                continue  # nothing to make it of: a pod asking for it is told so
            if self.state.template(namespace, name) is not None:
                problem = self.ensure(namespace, profile)
                key = f"{namespace}/{name}"
                if problem is not None and key not in self._foreign:
                    self._foreign.add(key)
                    log.warning("Leaving template=%s alone: %s", key, problem)
                continue
            try:
                self.ensure(namespace, profile)
                made += 1
            except TemplateUnavailableError as error:
                log.warning("%s; retrying at the next round", error)
        return made

    def wanted(self) -> list[tuple[str, str]]:
        """(namespace, profile) of every template migslice keeps now."""
        models = {o.model.key for o in self.state.offers()}
        existing = self.state.known_namespaces()
        found: list[tuple[str, str]] = []
        for policy in self.state.policies():
            if policy.device_api is not DeviceApi.RESOURCE_CLAIM:
                continue
            profiles = sorted(
                {
                    p.name
                    for m in CATALOG.models
                    if m.key in models
                    for p in m.profiles
                    if policy.allows_profile(p.name)
                }
            )
            for namespace in sorted(self.state.tenant_namespaces(policy.name) & set(existing)):
                found += [(namespace, p) for p in profiles]
        return found

    def keep_every(self, interval_s: float, stop: threading.Event, max_blind_s: float) -> None:
        """:meth:`keep` every ``interval_s`` while the caches can be trusted, until ``stop``."""
        while not stop.wait(interval_s):
            if self.state.blindness(max_blind_s):
                continue
            try:
                self.keep()
            except Exception:  # the loop must outlive any one failure
                log.exception("Keeping migslice's ResourceClaimTemplates failed")
