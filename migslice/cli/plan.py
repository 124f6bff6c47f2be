"""``migslice plan``: what re-partitioning would do for a cluster, without doing it."""

from __future__ import annotations

import argparse
import datetime
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError, format_table, print_json
from migslice.clusterfile import ClusterFileError, ClusterObjects, load_cluster_text
from migslice.inventory import ClusterIndex, NodeState, node_facts_from_raw, pod_facts_from_raw
from migslice.mig import CATALOG
from migslice.mig.migparted import MigPartedError, parse_mig_parted, render_mig_parted
from migslice.mig.render import render_bar
from migslice.planning import PendingPod, PlanSettings, RepartitionPlan, plan
from migslice.scheduling.demand import demand_of


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="show how idle GPUs would be re-partitioned for pending pods (dry run)",
        description=(
            "Reads a cluster file (a YAML stream of Nodes, Pods and the mig-parted ConfigMap), "
            "takes every unbound pod with a MIG request as pending, and prints the "
            "re-partition plan: new layouts per GPU, the mig-parted config and the node labels "
            "MIG Manager would act on, and why the remaining pods stay pending."
        ),
    )
    parser.add_argument("--cluster-file", required=True, metavar="FILE")
    parser.add_argument(
        "--mig-config-map",
        default="migslice-mig-config",
        metavar="NAME",
        help="name of the ConfigMap with the current mig-parted config (key config.yaml)",
    )
    parser.add_argument(
        "--min-pending-s",
        type=float,
        default=30.0,
        help="demand must wait this long (from PodScheduled=False) before GPUs change",
    )
    parser.add_argument("--max-nodes-in-flight", type=int, default=1)
    parser.add_argument("-o", "--output", choices=("table", "json", "mig-parted"), default="table")
    parser.set_defaults(handler=run_plan)


def _pending_s(raw_pod: Mapping[str, Any], now: datetime.datetime, default: float) -> float:
    for condition in (raw_pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            stamp = condition.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    since = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
                except ValueError:
                    break
                return (now - since.replace(tzinfo=datetime.UTC)).total_seconds()
    return default


def cluster_states(objects: ClusterObjects, config_map_name: str) -> list[NodeState]:
    index: ClusterIndex[NodeState] = ClusterIndex(lambda state: state, CATALOG)
    for config_map in objects.config_maps:
        if (config_map.get("metadata") or {}).get("name") != config_map_name:
            continue
        text = (config_map.get("data") or {}).get("config.yaml")
        if isinstance(text, str):
            try:
                index.set_mig_configs(parse_mig_parted(text))
            except MigPartedError as error:
                raise CommandError(f"ConfigMap {config_map_name}: {error}") from None
    index.replace_nodes(node_facts_from_raw(raw) for raw in objects.nodes)
    index.replace_pods(p for p in (pod_facts_from_raw(raw) for raw in objects.pods) if p)
    return [s for s in (index.state_of(n) for n in index.node_names()) if s is not None]


def pending_pods(
    raw_pods: Iterable[Mapping[str, Any]], now: datetime.datetime, default_s: float
) -> list[PendingPod]:
    found = []
    for raw in raw_pods:
        if (raw.get("spec") or {}).get("nodeName"):
            continue
        if (raw.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        demand = demand_of(raw)
        if demand.wants_gpu:
            found.append(PendingPod(demand, _pending_s(raw, now, default_s)))
    return found


def run_plan(args: argparse.Namespace) -> int:
    try:
        objects = load_cluster_text(Path(args.cluster_file).read_text())
    except OSError as error:
        raise CommandError(f"cannot read --cluster-file {args.cluster_file}: {error}") from None
    except ClusterFileError as error:
        raise CommandError(f"{args.cluster_file}: {error}") from None
    if args.max_nodes_in_flight < 1:
        raise CommandError("--max-nodes-in-flight must be at least 1")
    now = datetime.datetime.now(datetime.UTC)
    nodes = cluster_states(objects, args.mig_config_map)
    pending = pending_pods(objects.pods, now, args.min_pending_s)
    settings = PlanSettings(
        min_pending_s=args.min_pending_s, max_nodes_in_flight=args.max_nodes_in_flight
    )
    result = plan(nodes, pending, settings=settings)
    configs = {c.config_name: c.entries for c in result.changes}
    if args.output == "mig-parted":
        if configs:
            print(render_mig_parted(configs), end="")
        return 0
    if args.output == "json":
        print_json(plan_json(result))
        return 0
    print_plan(result, nodes)
    if configs:
        print("\nmig-parted configs (add to the MIG Manager ConfigMap):")
        print("  " + render_mig_parted(configs).rstrip().replace("\n", "\n  "))
        print("\nthen select them (MIG Manager applies on the label change):")
        for change in result.changes:
            label = f"nvidia.com/mig.config={change.config_name}"
            print(f"  kubectl label node {change.node} {label} --overwrite")
    return 0


def print_plan(result: RepartitionPlan, nodes: list[NodeState]) -> None:
    models = {n.name: n.model for n in nodes}
    if result.is_empty:
        print("no re-partition needed")
    else:
        rows: list[tuple[str, str, str, str]] = []
        for change in result.changes:
            model = models[change.node] or CATALOG.get(change.model_key)
            for gpu in change.gpus:
                rows.append(
                    (
                        change.node,
                        str(gpu.index),
                        render_bar(model, gpu.old, cell=7),
                        render_bar(model, gpu.new, cell=7),
                    )
                )
            rows.append(("", "", f"serves: {', '.join(change.serves)}", ""))
        print(format_table(("node", "gpu", "before", "after"), rows))
    if result.unserved:
        print("\nstill pending:")
        for pod, reason in result.unserved:
            print(f"  {pod}: {reason}")
    if result.skipped_nodes:
        print("\nnodes left alone:")
        for node, reason in result.skipped_nodes:
            print(f"  {node}: {reason}")


def plan_json(result: RepartitionPlan) -> dict[str, Any]:
    return {
        "changes": [
            {
                "node": c.node,
                "model": c.model_key,
                "configName": c.config_name,
                "previousConfig": c.previous_config,
                "serves": list(c.serves),
                "gpus": [
                    {
                        "index": g.index,
                        "before": [p.as_dict() for p in g.old],
                        "after": [p.as_dict() for p in g.new],
                    }
                    for g in c.gpus
                ],
            }
            for c in result.changes
        ],
        "pending": [{"pod": pod, "reason": reason} for pod, reason in result.unserved],
        "skippedNodes": [{"node": n, "reason": r} for n, r in result.skipped_nodes],
    }
