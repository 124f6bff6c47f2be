"""The API server's side of the extender's steer loop, in process: DeviceTaintRules kept by
name, each write shown to the extender's index as the rules' watch would show it, and the
pending pods a list returns (``extender.steer.SteerApi``). The steer loop's tests and
``bench/dra/steer_cpu.py`` drive the loop against it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migslice.inventory import ClusterIndex
from migslice.objects.device_taint_rules import taint_rule_facts_from_raw
from migslice.scheduling import PreparedNode


class RulesApi:
    """Rules by name and every write in order (``("create" | "delete", name)``);
    ``pending``: what a list of pending pods returns."""

    def __init__(self, index: ClusterIndex[PreparedNode]) -> None:
        self.index = index
        self.rules: dict[str, Mapping[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.pending: list[dict[str, Any]] = []

    def create_rule(self, body: Mapping[str, Any]) -> bool:
        name = body["metadata"]["name"]
        self.writes.append(("create", name))
        if name in self.rules:
            return False
        facts = taint_rule_facts_from_raw(dict(body))
        if facts is None:
            raise ValueError(f"not a DeviceTaintRule: {body}")
        self.rules[name] = body
        self.index.upsert_rule(facts)
        return True

    def delete_rule(self, name: str) -> bool:
        self.writes.append(("delete", name))
        if self.rules.pop(name, None) is None:
            return False
        self.index.delete_rule(name)
        return True

    def edit(self, name: str, taint: Mapping[str, Any] = {}, device: str | None = None) -> None:
        """A rule changed by hand (``kubectl edit``): its taint's fields, or the device it
        selects; shown to the index as the watch shows it (not a write of the loop's)."""
        body = {**self.rules[name]}
        spec = {**body["spec"], "taint": {**body["spec"]["taint"], **taint}}
        if device is not None:
            spec["deviceSelector"] = {**spec["deviceSelector"], "device": device}
        body["spec"] = spec
        self.rules[name] = body
        facts = taint_rule_facts_from_raw(dict(body))
        if facts is None:
            self.index.delete_rule(name)
        else:
            self.index.upsert_rule(facts)

    def list_pending_pods(self) -> list[dict[str, Any]]:
        return self.pending
