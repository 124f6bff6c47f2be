"""JSON Patch (RFC 6902) operations that apply to the pod exactly as the apiserver sent it.

Every builder looks at the object first: a missing or ``null`` parent is created whole
(``/metadata/annotations`` for a pod with no annotations map), an existing one gets member
``add`` ops. Path tokens escape ``~`` as ``~0`` and ``/`` as ``~1`` (RFC 6901). Builders are
idempotent: reinvocation of the webhook on an already-patched pod adds nothing twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


@dataclass(frozen=True, slots=True)
class PatchOp:
    op: str
    path: str
    value: JsonValue = None

    def to_json(self) -> dict[str, JsonValue]:
        if self.op == "remove":
            return {"op": self.op, "path": self.path}
        return {"op": self.op, "path": self.path, "value": self.value}


def escape(token: str) -> str:
    """One JSON-Pointer token: ``nvidia.com/mig-1g.10gb`` -> ``nvidia.com~1mig-1g.10gb``."""
    return token.replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    return "".join("/" + escape(str(t)) for t in tokens)


def set_members(
    raw_parent: object, tokens: Sequence[str | int], members: Mapping[str, str]
) -> list[PatchOp]:
    """Set string members of the map at ``tokens``, creating the map if absent or null."""
    if not members:
        return []
    if not isinstance(raw_parent, Mapping):
        return [PatchOp("add", pointer(*tokens), dict(members))]
    return [
        PatchOp("add", pointer(*tokens, key), value)
        for key, value in members.items()
        if raw_parent.get(key) != value
    ]


def set_annotations(raw_pod: Mapping[str, object], annotations: Mapping[str, str]) -> list[PatchOp]:
    metadata = raw_pod.get("metadata")
    if not isinstance(metadata, Mapping):
        return [PatchOp("add", "/metadata", {"annotations": dict(annotations)})]
    return set_members(metadata.get("annotations"), ("metadata", "annotations"), annotations)


def set_container_resource(
    raw_pod: Mapping[str, object], field: str, index: int, *, resource: str, count: int
) -> list[PatchOp]:
    """Set ``resource: count`` in both limits and requests of one container."""
    container = _get(raw_pod, "spec", field, index)
    value = str(count)
    base: tuple[str | int, ...] = ("spec", field, index, "resources")
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return [
            PatchOp(
                "add", pointer(*base), {"limits": {resource: value}, "requests": {resource: value}}
            )
        ]
    ops: list[PatchOp] = []
    for section in ("limits", "requests"):
        ops += set_members(resources.get(section), (*base, section), {resource: value})
    return ops


def set_node_selector(raw_pod: Mapping[str, object], selector: Mapping[str, str]) -> list[PatchOp]:
    spec = raw_pod.get("spec")
    current = spec.get("nodeSelector") if isinstance(spec, Mapping) else None
    return set_members(current, ("spec", "nodeSelector"), selector)


def set_scheduler_name(raw_pod: Mapping[str, object], name: str) -> list[PatchOp]:
    """Point the pod at our scheduler unless it already names a scheduler other than the default."""
    spec = raw_pod.get("spec")
    current = spec.get("schedulerName") if isinstance(spec, Mapping) else None
    if current in (None, "", "default-scheduler"):
        return [PatchOp("add", "/spec/schedulerName", name)]
    return []


def remove_scheduling_gate(raw_pod: Mapping[str, object], name: str) -> list[PatchOp]:
    """Remove every ``spec.schedulingGates`` entry named ``name`` (highest index first, so
    each path still points at its entry when it is applied); nothing when there is none."""
    spec = raw_pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, Mapping) else None
    if not isinstance(gates, list):
        return []
    return [
        PatchOp("remove", f"/spec/schedulingGates/{index}")
        for index in range(len(gates) - 1, -1, -1)
        if isinstance(gates[index], Mapping) and gates[index].get("name") == name
    ]


def require_node_labels(
    raw_pod: Mapping[str, object],
    requirements: Sequence[tuple[str, Sequence[str]]],
    *,
    or_unlabelled: str | None = None,
) -> list[PatchOp]:
    """AND each ``key In values`` into the pod's required node affinity (every OR-ed term).

    ``or_unlabelled``: a key of ``requirements`` that a node may also lack; each term then
    has a twin with ``key DoesNotExist`` in place of ``key In values`` (appended as new terms),
    so a node without that label (a DRA node without GPU Feature Discovery) still matches."""
    if not requirements:
        return []
    wanted: list[JsonValue] = [
        {"key": key, "operator": "In", "values": list(values)} for key, values in requirements
    ]
    twin: list[JsonValue] = (
        [
            {"key": key, "operator": "DoesNotExist"} if key == or_unlabelled else want
            for (key, _), want in zip(requirements, wanted, strict=True)
        ]
        if or_unlabelled is not None and any(key == or_unlabelled for key, _ in requirements)
        else []
    )
    fresh: list[JsonValue] = [{"matchExpressions": wanted}]
    if twin:
        fresh.append({"matchExpressions": twin})
    spec = raw_pod.get("spec")
    affinity = spec.get("affinity") if isinstance(spec, Mapping) else None
    if not isinstance(affinity, Mapping):
        return [
            PatchOp(
                "add",
                "/spec/affinity",
                {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": fresh
                        }
                    }
                },
            )
        ]
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, Mapping):
        return [
            PatchOp(
                "add",
                "/spec/affinity/nodeAffinity",
                {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": fresh}},
            )
        ]
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution"
    if not isinstance(required, Mapping):
        return [PatchOp("add", base, {"nodeSelectorTerms": fresh})]
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        return [PatchOp("add", f"{base}/nodeSelectorTerms", fresh)]
    ops: list[PatchOp] = []
    twins: list[PatchOp] = []
    for i, existing in enumerate(terms):
        where = f"{base}/nodeSelectorTerms/{i}"
        expressions = existing.get("matchExpressions") if isinstance(existing, Mapping) else None
        if not isinstance(existing, Mapping):
            ops.append(PatchOp("replace", where, {"matchExpressions": wanted}))
            if twin:
                twins.append(
                    PatchOp("add", f"{base}/nodeSelectorTerms/-", {"matchExpressions": twin})
                )
            continue
        present = expressions if isinstance(expressions, list) else []
        if all(r in present for r in wanted) or (twin and all(r in present for r in twin)):
            continue
        if twin:
            copy = {k: v for k, v in existing.items() if isinstance(k, str)}
            copy["matchExpressions"] = [*present, *(r for r in twin if r not in present)]
            twins.append(PatchOp("add", f"{base}/nodeSelectorTerms/-", _json(copy)))
        if not isinstance(expressions, list):
            ops.append(PatchOp("add", f"{where}/matchExpressions", list(wanted)))
        else:
            ops += [
                PatchOp("add", f"{where}/matchExpressions/-", requirement)
                for requirement in wanted
                if requirement not in expressions
            ]
    return ops + twins


def set_pod_claims(
    raw_pod: Mapping[str, object], field: str, index: int, claims: Mapping[str, str]
) -> list[PatchOp]:
    """Give the pod the claims ``claims`` (name -> ResourceClaimTemplate) in
    ``spec.resourceClaims`` and in the container's ``resources.claims``; idempotent."""
    spec = raw_pod.get("spec")
    listed = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    have = {
        entry.get("name")
        for entry in (listed if isinstance(listed, list) else [])
        if isinstance(entry, Mapping)
    }
    entries: list[JsonValue] = [
        {"name": name, "resourceClaimTemplateName": template}
        for name, template in claims.items()
        if name not in have
    ]
    ops: list[PatchOp] = []
    if not isinstance(listed, list):
        ops.append(PatchOp("add", "/spec/resourceClaims", entries))
    else:
        ops += [PatchOp("add", "/spec/resourceClaims/-", entry) for entry in entries]
    container = _get(raw_pod, "spec", field, index)
    base: tuple[str | int, ...] = ("spec", field, index, "resources")
    resources = container.get("resources") if isinstance(container, Mapping) else None
    uses: list[JsonValue] = [{"name": name} for name in claims]
    if not isinstance(resources, Mapping):
        return [*ops, PatchOp("add", pointer(*base), {"claims": uses})]
    current = resources.get("claims")
    if not isinstance(current, list):
        return [*ops, PatchOp("add", pointer(*base, "claims"), uses)]
    named = {c.get("name") for c in current if isinstance(c, Mapping)}
    return ops + [
        PatchOp("add", pointer(*base, "claims", "-"), {"name": name})
        for name in claims
        if name not in named
    ]


def _json(value: object) -> JsonValue:
    """``value`` (an object as decoded from JSON) typed as a JSON value."""
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def _get(raw: object, *tokens: str | int) -> object:
    for token in tokens:
        if isinstance(token, int):
            if not isinstance(raw, list) or token >= len(raw):
                return None
            raw = raw[token]
        else:
            if not isinstance(raw, Mapping):
                return None
            raw = raw.get(token)
    return raw
