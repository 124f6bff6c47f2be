"""DeviceTaintRules (``resource.k8s.io/v1``, KEP-5055, GA in Kubernetes 1.37): the devices a rule
keeps the allocator off, and which rules are migslice's own steer.

A rule taints every device its ``spec.deviceSelector`` matches (``driver``, ``pool``,
``device``, each optional: unset matches any; a rule with no selector matches no device);
kube-scheduler's allocator gives a device with a ``NoSchedule`` or ``NoExecute`` taint to no
claim that does not tolerate it (effect ``None`` only informs). migslice's steer rules
(``migslice.scheduling.dra_steer``) each taint one device of one pool, with key
:data:`migslice.names.STEER_TAINT_KEY`, and are named by :func:`steer_rule_name`;
:func:`steer_rule` is the object the steer writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from migslice.names import DRA_DRIVER, STEER_RULE_PREFIX, STEER_TAINT_KEY
from migslice.objects.dra_pool import DraPool
from migslice.objects.json import JsonObject, mapping, text

KEEPS_OFF = ("NoSchedule", "NoExecute")
MANAGED_BY = ("app.kubernetes.io/managed-by", "migslice")
STEER_RULE_SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
"""The label selector of the steer's rules; their names start with
:data:`migslice.names.STEER_RULE_PREFIX` too."""


@dataclass(frozen=True, slots=True)
class TaintRuleFacts:
    """One rule that keeps the allocator off ``gpu.nvidia.com`` devices, or one under a steer
    rule's name whatever it says: its name, the pool and device it selects (None: any),
    whether it is migslice's steer (by name), and whether it is the steer's rule exactly as
    :func:`steer_rule` writes it (``exact``: a rule edited by hand is not, and is written
    again)."""

    name: str
    pool: str | None
    device: str | None
    steer: bool = False
    keeps_off: bool = True
    """Its taint keeps the allocator off NVIDIA's devices (effect NoSchedule or NoExecute, of
    driver ``gpu.nvidia.com`` or any)."""
    exact: bool = True

    def taints(self, pool: str, device: str) -> bool:
        return (
            self.keeps_off
            and (self.pool is None or self.pool == pool)
            and (self.device is None or self.device == device)
        )


def taint_rule_facts_from_raw(raw_rule: JsonObject) -> TaintRuleFacts | None:
    """Project a raw DeviceTaintRule; None for a rule that keeps no NVIDIA GPU device off
    (another driver's, effect ``None``, or no name) and is not named as a steer rule."""
    name = text(mapping(raw_rule.get("metadata")).get("name"))
    if not name:
        return None
    spec = mapping(raw_rule.get("spec"))
    taint = mapping(spec.get("taint"))
    raw_selector = spec.get("deviceSelector")
    selector = mapping(raw_selector)
    driver = text(selector.get("driver"))
    # An empty selector matches every device, none (absent or null) matches no device
    # (resource.k8s.io/v1 DeviceTaintRuleSpec; kube-scheduler's slice tracker skips the rule).
    keeps_off = (
        isinstance(raw_selector, Mapping)
        and taint.get("effect") in KEEPS_OFF
        and driver in (None, DRA_DRIVER)
    )
    steer = name.startswith(STEER_RULE_PREFIX)
    if not keeps_off and not steer:
        return None
    pool = text(selector.get("pool"))
    device = text(selector.get("device"))
    exact = (
        steer
        and driver == DRA_DRIVER
        and pool is not None
        and device is not None
        and name == steer_rule_name(pool, device)
        and taint.get("key") == STEER_TAINT_KEY
        and taint.get("effect") == "NoSchedule"
    )
    return TaintRuleFacts(
        sys.intern(name),
        sys.intern(pool) if pool is not None else None,
        sys.intern(device) if device is not None else None,
        steer,
        keeps_off,
        exact,
    )


def is_steer_rule(raw_rule: Mapping[str, object]) -> bool:
    """The rule is one the steer wrote: its name and its label are the steer's."""
    metadata = raw_rule.get("metadata")
    if not isinstance(metadata, Mapping):
        return False
    name = metadata.get("name")
    labels = metadata.get("labels")
    return (
        isinstance(name, str)
        and name.startswith(STEER_RULE_PREFIX)
        and isinstance(labels, Mapping)
        and labels.get(MANAGED_BY[0]) == MANAGED_BY[1]
    )


def steer_rule_name(pool: str, device: str) -> str:
    """The name of the steer rule of one device: ``migslice-steer-<pool>-<device>``, or, when
    that is longer than an object name may be, the pool part replaced by its hash. One name
    per device makes a create by two writers one rule."""
    name = f"{STEER_RULE_PREFIX}{pool}-{device}"
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(pool.encode()).hexdigest()[:16]
    return f"{STEER_RULE_PREFIX}{digest}-{device}"


def steer_rule(pool: str, device: str, profile: str) -> JsonObject:
    """The steer rule that keeps new claims off ``device`` of ``pool`` (``NoSchedule``: claims
    already allocated keep it). The taint's value names the profile as the device plugin's
    resource does (``1g.10gb+me`` -> ``1g.10gb.me``): kube-apiserver takes only a label value."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {
            "name": steer_rule_name(pool, device),
            "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
        },
        "spec": {
            "deviceSelector": {"driver": DRA_DRIVER, "pool": pool, "device": device},
            "taint": {
                "key": STEER_TAINT_KEY,
                "value": profile.replace("+", "."),
                "effect": "NoSchedule",
            },
        },
    }


def with_rules(
    pool: DraPool,
    own: Mapping[str, TaintRuleFacts] | None,
    any_pool: Mapping[str, TaintRuleFacts] | None = None,
) -> DraPool:
    """The pool with the devices the rules taint: migslice's steer rules as
    :attr:`DraPool.steered`, the others added to :attr:`DraPool.tainted`. ``own``: the rules
    that select this pool; ``any_pool``: those that select no pool."""
    rules = [*(own or {}).values(), *(any_pool or {}).values()]
    if not rules:
        return pool
    names = [device.name(gpu.minor) for gpu in pool.gpus for device in gpu.devices]
    published = frozenset(names)
    tainted = set(pool.tainted)
    steered: set[str] = set()
    for rule in rules:
        if rule.device is not None:
            if rule.device in published and rule.taints(pool.node, rule.device):
                (steered if rule.steer else tainted).add(rule.device)
        elif rule.taints(pool.node, ""):
            tainted.update(names)
    return dataclasses.replace(pool, tainted=frozenset(tainted), steered=frozenset(steered))
