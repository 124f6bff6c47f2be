"""Checks of the GPU nodes: products the catalog knows, the node agent's layouts fresh, and
nodes in trouble (MIG Manager failed or stuck)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from migslice import names
from migslice.doctor.facts import Settings
from migslice.doctor.findings import Finding, Problem, Verdict, finding
from migslice.doctor.podspec import command_line, containers, flag_value, pod_spec
from migslice.mig import CATALOG
from migslice.objects import AgentReport, NodeFacts, node_facts_from_raw
from migslice.objects.json import JsonObject, items, mapping, text
from migslice.objects.times import parse_epoch_s

GPU_PRODUCTS_CHECK = "gpu-products"
AGENT_CHECK = "agent-layouts"
TROUBLE_CHECK = "nodes-in-trouble"
LISTED = 5  # nodes named per problem; the rest are counted


def is_mig_node(node: NodeFacts) -> bool:
    """GFD says MIG capable, or the device plugin advertises MIG slices."""
    return node.mig_capable is True or any(
        resource.startswith(names.MIG_RESOURCE_PREFIX) and count > 0
        for resource, count in node.allocatable
    )


def mig_nodes(raw_nodes: Sequence[JsonObject]) -> list[NodeFacts]:
    facts = (node_facts_from_raw(raw) for raw in raw_nodes)
    return sorted((n for n in facts if is_mig_node(n)), key=lambda n: n.name)


def listing(entries: Sequence[str]) -> str:
    shown = ", ".join(entries[:LISTED])
    return shown if len(entries) <= LISTED else f"{shown} and {len(entries) - LISTED} more"


@dataclass(frozen=True, slots=True)
class NodesFacts:
    nodes: Sequence[JsonObject]


# -- GPU products ------------------------------------------------------------------------------


def judge_gpu_products(facts: NodesFacts, settings: Settings) -> Finding:
    nodes = mig_nodes(facts.nodes)
    if not nodes:
        return finding(
            GPU_PRODUCTS_CHECK,
            [
                Problem(
                    Verdict.WARNING,
                    f"no MIG node (label {names.MIG_CAPABLE_LABEL}=true or "
                    f"{names.MIG_RESOURCE_PREFIX}* allocatable): migslice has nothing to slice",
                    f"kubectl get nodes -L {names.PRODUCT_LABEL},{names.MIG_CAPABLE_LABEL}",
                )
            ],
            "",
        )
    unknown = [
        f"{n.name} ({n.product})"
        for n in nodes
        if n.product is not None and CATALOG.by_product(n.product) is None
    ]
    unlabelled = [n.name for n in nodes if n.product is None]
    problems = []
    if unknown:
        problems.append(
            Problem(
                Verdict.FAILED,
                f"GPU product the catalog does not know on {listing(unknown)}: the webhook "
                "sizes no pod for it",
                "migslice models lists the known ones; keep these nodes out of the "
                "TenantPolicies (spec.allowedProducts, spec.nodeSelector) until the catalog "
                "has the model",
            )
        )
    if unlabelled:
        problems.append(
            Problem(
                Verdict.WARNING,
                f"no {names.PRODUCT_LABEL} label on {listing(unlabelled)} (GFD not running there?)",
                "kubectl -n gpu-operator get pods -l app=gpu-feature-discovery -o wide",
            )
        )
    products = Counter(n.product for n in nodes if n.product is not None)
    known = ", ".join(f"{p} ({c})" for p, c in sorted(products.items()))
    return finding(GPU_PRODUCTS_CHECK, problems, f"{len(nodes)} MIG node(s): {known}")


# -- the node agent's annotation ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AgentFacts:
    daemonset: JsonObject | None
    nodes: Sequence[JsonObject]


def agent_timing(raw_daemonset: JsonObject) -> tuple[float, float]:
    """(interval_s, heartbeat_s) of the agent's command line (its defaults: 30, 300)."""
    timing = [30.0, 300.0]
    for container in containers(pod_spec(raw_daemonset)):
        argv = command_line(container)
        for i, flag in enumerate(("--interval-s", "--heartbeat-s")):
            value = flag_value(argv, flag)
            try:
                timing[i] = float(value) if value is not None else timing[i]
            except ValueError:
                pass
    return timing[0], timing[1]


def freshness_bound_s(raw_daemonset: JsonObject) -> float:
    """How old a layout may be: one heartbeat missed, and a read interval."""
    interval_s, heartbeat_s = agent_timing(raw_daemonset)
    return 2 * heartbeat_s + interval_s


def _selected(raw_node: JsonObject, selector: JsonObject) -> bool:
    labels = mapping(mapping(raw_node.get("metadata")).get("labels"))
    return all(labels.get(key) == value for key, value in selector.items())


def judge_agent_layouts(facts: AgentFacts, settings: Settings) -> Finding:
    if facts.daemonset is None:
        return finding(
            AGENT_CHECK, [], f"DaemonSet {names.AGENT_DAEMONSET} not installed: nothing to check"
        )
    selector = mapping(pod_spec(facts.daemonset).get("nodeSelector"))
    selected = [n for n in facts.nodes if _selected(n, selector)]
    written = {
        text(mapping(raw.get("metadata")).get("name")) or "": _set_at(raw, names.LAYOUT_ANNOTATION)
        for raw in selected
    }
    nodes = mig_nodes(selected)
    bound_s = freshness_bound_s(facts.daemonset)
    missing, broken, undated, stale, ages = [], [], [], [], []
    unread, skewed, earlier = [], [], []
    for node in nodes:
        report = node.agent
        lost = [g for g in report.gpus if g.error] if report is not None else []
        if lost:
            unread.append(f"{node.name} (GPU {lost[0].index}: {lost[0].error})")
        if report is not None and _from_an_earlier_agent(report):
            earlier.append(node.name)
        observed = parse_epoch_s(report.observed_at) if report is not None else None
        # The API server's stamp of the write, where managedFields has it: observedAt is the
        # node's clock, and a node minutes off read as a stale layout or hid a dead agent.
        stamped = written.get(node.name)
        if stamped is not None and observed is not None and abs(observed - stamped) > SKEW_S:
            skewed.append(f"{node.name} ({_duration(abs(observed - stamped))})")
        if node.agent_error:
            broken.append(f"{node.name} ({node.agent_error})")
        elif report is None:
            missing.append(node.name)
        elif (when := stamped if stamped is not None else observed) is None:
            undated.append(node.name)
        elif (age := settings.now - when) > bound_s:
            stale.append(f"{node.name} (observed {_duration(age)} ago)")
        else:
            ages.append(age)
    ns = settings.namespace
    look = (
        f"kubectl -n {ns} get pods -l app.kubernetes.io/component=agent -o wide && "
        f"kubectl -n {ns} logs ds/{names.AGENT_DAEMONSET}"
    )
    key = names.LAYOUT_ANNOTATION
    rollout = (
        f"kubectl -n {ns} rollout status ds/{names.AGENT_DAEMONSET}; kubectl -n {ns} get pods "
        "-l app.kubernetes.io/component=agent -o wide (a pod left on the earlier image: "
        "delete it)"
    )
    problems = [
        Problem(Verdict.FAILED, f"no {key} on {listing(missing)}", look) if missing else None,
        Problem(Verdict.FAILED, f"{key} unreadable on {listing(broken)}", look) if broken else None,
        Problem(
            Verdict.FAILED,
            f"{key} stale on {listing(stale)}; the agent rewrites it every "
            f"{_duration(agent_timing(facts.daemonset)[1])}, bound {_duration(bound_s)}",
            look,
        )
        if stale
        else None,
        Problem(Verdict.WARNING, f"{key} without observedAt on {listing(undated)}", look)
        if undated
        else None,
        Problem(
            Verdict.WARNING,
            f"{key}'s observedAt is off the API server's stamp of its write on "
            f"{listing(skewed)}: the node's clock is off (judged by the API server's stamp)",
            "check NTP on those nodes (chronyc tracking, timedatectl)",
        )
        if skewed
        else None,
        Problem(
            Verdict.WARNING,
            f"{key} written by an agent of an earlier release on {listing(earlier)} (no GPU's "
            "own pciDeviceId): until it runs this release, re-partitioning takes a GPU of "
            "another model on such a node for one of the node's model",
            rollout,
        )
        if earlier
        else None,
        Problem(
            Verdict.FAILED,
            f"GPUs NVML cannot read on {listing(unread)}: migslice places nothing by those "
            "nodes' MIG layout until the agent reads every GPU again",
            "kubectl describe node <node> (the agent's Warning Event); on the node: "
            "nvidia-smi -q, and XID errors in the kernel log (a lost GPU needs a reset or a "
            "reboot)",
        )
        if unread
        else None,
    ]
    newest = ""
    if ages:
        low, high = _duration(max(min(ages), 0.0)), _duration(max(max(ages), 0.0))
        newest = f", observed {low} ago" if low == high else f", observed {low} to {high} ago"
    return finding(
        AGENT_CHECK,
        [p for p in problems if p is not None],
        f"{len(ages)} MIG node(s) with a fresh {key}{newest} (bound {_duration(bound_s)})",
    )


def _from_an_earlier_agent(report: AgentReport) -> bool:
    """The annotation lacks what this release's agent writes of every GPU it reads (its own
    ``pciDeviceId``): an agent of an earlier release wrote it."""
    return any(g.pci_device_id is None for g in report.gpus if not g.error)


SKEW_S = 120.0
"""How far a node's observedAt may be from the API server's stamp of the write before the
node's clock is said to be off (a write takes well under a second; NTP keeps clocks within
one)."""


def _set_at(raw_node: JsonObject, annotation: str) -> float | None:
    """When the API server last stamped a write of ``annotation``: ``managedFields[].time`` of
    an entry that owns that annotation and nothing else (None when no entry does). An entry's
    time is that of its manager's last write of any field it owns: the manager ``migslice``
    (the User-Agent's prefix) also writes the extender's labels and annotations and the carve
    journal, so its time says nothing of the layout; the agent names its own manager for the
    layout (:data:`migslice.kube.nodes.LAYOUT_FIELD_MANAGER`)."""
    found = None
    for entry in (
        mapping(e) for e in items(mapping(raw_node.get("metadata")).get("managedFields"))
    ):
        when = parse_epoch_s(entry.get("time"))
        if _owns_only(mapping(entry.get("fieldsV1")), annotation) and when is not None:
            found = when if found is None else max(found, when)
    return found


def _owns_only(fields: JsonObject, annotation: str) -> bool:
    """Whether ``fields`` (a FieldsV1 set) is the one annotation (a map's own "." aside)."""

    def keys(value: object) -> set[str]:
        return {str(k) for k in mapping(value) if k != "."}

    metadata = mapping(fields.get("f:metadata"))
    annotations = mapping(metadata.get("f:annotations"))
    return (
        keys(fields) == {"f:metadata"}
        and keys(metadata) == {"f:annotations"}
        and keys(annotations) == {f"f:{annotation}"}
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


# -- nodes in trouble ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a trouble detector reads of a Node: its labels, annotations and conditions, and
    when each label got its current value (from ``managedFields``: the last write by the
    manager that owns it; absent when unknown)."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    conditions: tuple[JsonObject, ...]
    label_set_at: Mapping[str, float]


def node_view(raw_node: JsonObject) -> NodeView:
    metadata = mapping(raw_node.get("metadata"))
    labels = {k: v for k, v in mapping(metadata.get("labels")).items() if isinstance(v, str)}
    annotations = {
        k: v for k, v in mapping(metadata.get("annotations")).items() if isinstance(v, str)
    }
    set_at: dict[str, float] = {}
    for entry in (mapping(e) for e in items(metadata.get("managedFields"))):
        when = parse_epoch_s(entry.get("time"))
        owned = mapping(mapping(mapping(entry.get("fieldsV1")).get("f:metadata")).get("f:labels"))
        if when is None:
            continue
        for field in owned:
            key = field.removeprefix("f:")
            set_at[key] = max(set_at.get(key, when), when)
    conditions = tuple(mapping(c) for c in items(mapping(raw_node.get("status")).get("conditions")))
    return NodeView(
        name=text(metadata.get("name")) or "",
        labels=labels,
        annotations=annotations,
        conditions=conditions,
        label_set_at=set_at,
    )


@dataclass(frozen=True, slots=True)
class Trouble:
    """One kind of trouble a node can be in: ``detect`` returns what is wrong with a node (a
    few words) or None; ``what`` names the kind, ``fix`` says what to do."""

    what: str
    verdict: Verdict
    fix: str
    detect: Callable[[NodeView, Settings], str | None]


def _mig_manager_failed(node: NodeView, settings: Settings) -> str | None:
    if node.labels.get(names.MIG_CONFIG_STATE_LABEL) != names.MIG_STATE_FAILED:
        return None
    return f"{node.name} ({names.MIG_CONFIG_LABEL}={node.labels.get(names.MIG_CONFIG_LABEL, '?')})"


def _mig_manager_stuck(node: NodeView, settings: Settings) -> str | None:
    if node.labels.get(names.MIG_CONFIG_STATE_LABEL) != names.MIG_STATE_PENDING:
        return None
    since = node.label_set_at.get(names.MIG_CONFIG_STATE_LABEL)
    if since is None or settings.now - since <= settings.pending_bound_s:
        return None
    return f"{node.name} (pending for {_duration(settings.now - since)})"


MIG_MANAGER_LOGS = (
    "kubectl -n gpu-operator logs -l app=nvidia-mig-manager --tail=50 (its pod on the node)"
)
TROUBLES: tuple[Trouble, ...] = (
    Trouble(
        f"MIG Manager failed ({names.MIG_CONFIG_STATE_LABEL}={names.MIG_STATE_FAILED})",
        Verdict.FAILED,
        f"{MIG_MANAGER_LOGS}, then set {names.MIG_CONFIG_LABEL} to a config that fits the "
        "node's GPUs (kubectl label node NODE nvidia.com/mig.config=CONFIG --overwrite)",
        _mig_manager_failed,
    ),
    Trouble(
        f"MIG Manager stuck ({names.MIG_CONFIG_STATE_LABEL}={names.MIG_STATE_PENDING})",
        Verdict.FAILED,
        f"{MIG_MANAGER_LOGS}; a config that needs a reboot waits for one",
        _mig_manager_stuck,
    ),
)
"""What counts as trouble, in order: add a :class:`Trouble` here (a condition or annotation
that quarantines a node, say) and the check reports it."""


def judge_nodes_in_trouble(
    facts: NodesFacts, settings: Settings, troubles: Sequence[Trouble] = TROUBLES
) -> Finding:
    views = sorted((node_view(raw) for raw in facts.nodes), key=lambda v: v.name)
    problems = []
    for trouble in troubles:
        found = [d for d in (trouble.detect(view, settings) for view in views) if d is not None]
        if found:
            problems.append(
                Problem(trouble.verdict, f"{trouble.what}: {listing(found)}", trouble.fix)
            )
    states = Counter(
        v.labels[names.MIG_CONFIG_STATE_LABEL]
        for v in views
        if names.MIG_CONFIG_STATE_LABEL in v.labels
    )
    summary = ", ".join(f"{count} {state}" for state, count in sorted(states.items()))
    return finding(
        TROUBLE_CHECK,
        problems,
        f"no node in trouble (MIG Manager state: {summary or 'no node labelled'}; pending "
        f"bound {_duration(settings.pending_bound_s)})",
    )
