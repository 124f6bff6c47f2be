"""``migslice plan``: the repartition controller's decision on a cluster file, in dry run."""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from migslice import console, names
from migslice.console import CommandError, format_table, print_json
from migslice.inventory import NodeState
from migslice.mig import CATALOG
from migslice.mig.migparted import render_mig_parted
from migslice.mig.render import render_bar
from migslice.mig.stranding import (
    FillerMix,
    complete_rule,
    describe_complete,
    describe_mix,
    mix_json,
    strand_guard,
)
from migslice.objects import ClusterObjects
from migslice.objects.carve_handshake import gpus_json
from migslice.repartition import (
    CARVE_MIN_PENDING_S,
    CarvePlan,
    CarveSettings,
    CarveStep,
    ControllerSettings,
    PlanSettings,
    RepartitionPlan,
    Step,
    StepKind,
    held_mix,
    preview_round,
    snapshot_from_objects,
)
from migslice.repartition.carve.branch import describe
from migslice.repartition.modes import dra_exclusion
from migslice.serving import load_cluster_file

DEFAULT_CONFIG_MAP = f"{names.GPU_OPERATOR_NAMESPACE}/{names.MIG_CONFIG_MAP}"


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "plan",
        help="show what the repartition controller would do for a cluster (dry run)",
        description=(
            "Reads a cluster file (a YAML stream of Nodes, Pods and the mig-parted ConfigMap "
            "with its plan record) and runs the repartition controller's own decision on it, "
            "as its dry-run mode does: pending demand is every pod of --scheduler-name that "
            "kube-scheduler marked PodScheduled=False (Unschedulable). Prints the next step; "
            "for a new plan, the new layouts per GPU, the mig-parted config and the node "
            "labels MIG Manager would act on, and why the remaining pods stay pending."
        ),
    )
    parser.add_argument("--cluster-file", required=True, metavar="FILE", type=console.file_path)
    parser.add_argument(
        "--mig-config-map",
        default=DEFAULT_CONFIG_MAP,
        type=console.namespaced_name,
        metavar="NAMESPACE/NAME",
        help=f"the mig-parted ConfigMap (key {names.MIG_CONFIG_KEY}; default %(default)s)",
    )
    parser.add_argument(
        "--scheduler-name", default=names.SCHEDULER_NAME, type=console.dns_subdomain
    )
    defaults = PlanSettings()
    parser.add_argument(
        "--min-pending-s",
        type=console.seconds(),
        default=defaults.min_pending_s,
        help="demand must wait this long (from PodScheduled=False) before GPUs change "
        "(the controller's --repartition-min-pending-s)",
    )
    parser.add_argument(
        "--carve-min-pending-s",
        type=console.seconds(),
        default=CARVE_MIN_PENDING_S,
        help="the same for nodes in carve mode (the controller's "
        "--repartition-carve-min-pending-s; default %(default)s)",
    )
    parser.add_argument("--cooldown-s", type=console.seconds(), default=defaults.cooldown_s)
    parser.add_argument(
        "--max-nodes-in-flight",
        type=console.count(1, 100_000),
        default=defaults.max_nodes_in_flight,
    )
    carve = CarveSettings()
    parser.add_argument(
        "--carve-cooldown-s",
        type=console.seconds(),
        default=carve.cooldown_s,
        help="the cooldown of nodes in carve mode (the controller's "
        "--repartition-carve-cooldown-s; default %(default)s)",
    )
    parser.add_argument(
        "--carve-max-nodes-in-flight",
        type=console.count(1, 100_000),
        default=carve.max_nodes_in_flight,
        help="nodes carving at once (the controller's "
        "--repartition-carve-max-nodes-in-flight; default %(default)s)",
    )
    parser.add_argument(
        "--mode-default",
        choices=names.REPARTITION_MODES,
        default=names.MODE_MIG_MANAGER,
        help=f"the mode of nodes without {names.REPARTITION_MODE_LABEL} (as the controller's)",
    )
    parser.add_argument("-o", "--output", choices=("table", "json", "mig-parted"), default="table")
    parser.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    path: Path = args.cluster_file
    objects = load_cluster_file(path)
    namespace, _, name = args.mig_config_map.partition("/")
    now = time.time()
    snapshot = snapshot_from_objects(
        objects,
        config_map=(namespace, name),
        key=names.MIG_CONFIG_KEY,
        now_s=now,
        scheduler_name=args.scheduler_name,
    )
    _check_has_gpu_nodes(path, objects, snapshot.nodes)
    record = snapshot.file.record
    if record is None:
        raise CommandError(
            f"ConfigMap {args.mig_config_map}: {snapshot.file.problem}; the controller would "
            f"stop here too ({snapshot.file.record_fix})"
        )
    settings = ControllerSettings(
        plan=PlanSettings(
            min_pending_s=args.min_pending_s,
            cooldown_s=args.cooldown_s,
            max_nodes_in_flight=args.max_nodes_in_flight,
        ),
        carve=CarveSettings(
            min_pending_s=args.carve_min_pending_s,
            cooldown_s=args.carve_cooldown_s,
            max_nodes_in_flight=args.carve_max_nodes_in_flight,
            default_mode=args.mode_default,
        ),
    )
    # The controller's round: a step that changes only its record (a quarantine released, a
    # plan finished) is followed by the next decision in the same round.
    *before, step = preview_round(
        record,
        snapshot.nodes,
        snapshot.pending,
        file_configs=snapshot.file.names,
        now=now,
        settings=settings,
    )
    if snapshot.file.names is None and args.output == "table":
        print(f"ConfigMap {args.mig_config_map}: {snapshot.file.problem}")
    if args.output == "table":
        for earlier in before:
            print(f"first, the controller would {earlier.kind}: {earlier.reason}; then")
    mix = held_mix(snapshot.nodes)
    if step.carve_plan is not None:
        code = print_carve(
            step.carve_plan, list(snapshot.nodes), mix, json_output=args.output == "json"
        )
    else:
        code = print_step(
            step,
            list(snapshot.nodes),
            mix,
            output=args.output,
            config_map=args.mig_config_map,
            before=before,
        )
    said = rule_lines(mix)
    if said and args.output == "table":
        print("\n" + "\n".join(said))
    left = dra_nodes(snapshot.nodes)
    if left and args.output == "table":
        print("\nDRA nodes, left to NVIDIA's DRA driver:")
        for node, reason in left:
            print(f"  {node}: {reason}")
    return code


def rule_lines(mix: FillerMix) -> list[str]:
    """What the stranding and full-compute rules read and do, for people; none while no 3g
    is held (neither rule can apply)."""
    stranding, complete = describe_mix(mix), describe_complete(mix)
    if stranding is None or complete is None:
        return []
    if strand_guard(mix):
        stranding += (
            ": a 3g layout that fills a GPU's memory with a compute slice unused comes last "
            "(docs/repartition.md)"
        )
    else:
        stranding += ": too few small pods to fill beside a second 3g"
    if complete_rule(mix):
        complete += (
            ": carve mode puts a 2g where a 3g and a second 2g still fit beside it "
            "(docs/repartition.md)"
        )
    else:
        complete += ": carve mode keeps the 4g placement free"
    return [stranding, complete]


def dra_nodes(nodes: Sequence[NodeState]) -> list[tuple[str, str]]:
    """Every node whose GPUs NVIDIA's DRA driver publishes, and why no plan touches it."""
    found = []
    for node in nodes:
        why = dra_exclusion(node)
        if why is not None:
            found.append((node.name, why.message))
    return found


def _check_has_gpu_nodes(path: Path, objects: ClusterObjects, nodes: Sequence[NodeState]) -> None:
    """CommandError when the file holds no GPU node, so nothing could be re-partitioned: said
    as it is, before any word on the mig-parted ConfigMap (which such a file lacks too)."""
    if not any(getattr(objects, field.name) for field in dataclasses.fields(objects)):
        raise CommandError(
            f"--cluster-file {path}: it holds no Kubernetes objects; plan reads a cluster's "
            "Nodes, Pods and the mig-parted ConfigMap"
        )
    if not nodes:
        raise CommandError(
            f"--cluster-file {path}: it holds no Node; there is no GPU to re-partition"
        )
    if not any(n.model is not None or n.facts.product or n.facts.allocatable for n in nodes):
        which = "its one Node lacks" if len(nodes) == 1 else f"none of its {len(nodes)} Nodes has"
        raise CommandError(
            f"--cluster-file {path}: {which} an NVIDIA GPU (label {names.PRODUCT_LABEL} or "
            "nvidia.com/* allocatable); there is no GPU to re-partition"
        )


def print_step(
    step: Step,
    nodes: list[NodeState],
    mix: FillerMix,
    *,
    output: str,
    config_map: str,
    before: Sequence[Step] = (),
) -> int:
    """The decided step as the chosen output: a table, JSON, or the mig-parted configs;
    ``before``: the steps of the round that come first (JSON names them; a table has said
    them)."""
    result = step.plan if step.kind is StepKind.START else None
    configs = {c.config_name: c.entries for c in result.changes} if result else {}
    if output == "mig-parted":
        if configs:
            print(render_mig_parted(configs), end="")
        return 0
    if output == "json":
        left = [{"node": n, "reason": r} for n, r in dra_nodes(nodes)]
        print_json(
            {
                "step": str(step.kind),
                "reason": step.reason,
                "first": [{"step": str(b.kind), "reason": b.reason} for b in before],
                **plan_json(step.plan),
                "draNodes": left,
                "strandingRule": mix_json(mix),
            }
        )
        return 0
    if step.kind is not StepKind.START and not (step.plan and step.plan.unserved):
        print(f"the controller would {step.kind}: {step.reason}")
        return 0
    print_plan(step.plan or RepartitionPlan(), nodes)
    if configs and result is not None:
        print(f"\nmig-parted configs (the controller merges them into {config_map}):")
        print("  " + render_mig_parted(configs).rstrip().replace("\n", "\n  "))
        print(
            "\nthen, once MIG Manager's copy of the ConfigMap has them "
            "(--repartition-config-propagation-s later), selects them (MIG Manager applies on "
            "the label change):"
        )
        for change in result.changes:
            label = f"{names.MIG_CONFIG_LABEL}={change.config_name}"
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


def print_carve(
    result: CarvePlan, nodes: list[NodeState], mix: FillerMix, *, json_output: bool
) -> int:
    """A carve plan: per GPU before and after, and what the node agent would be asked."""
    if json_output:
        changes = [
            {"node": c.node, "serves": list(c.serves), "gpus": gpus_json([g.step for g in c.gpus])}
            for c in result.changes
        ]
        pending = [{"pod": pod, "reason": reason} for pod, reason in result.unserved]
        document = {"step": "start", "mode": names.MODE_CARVE, "changes": changes}
        print_json({**document, "pending": pending, "strandingRule": mix_json(mix)})
        return 0
    models = {n.name: n.model for n in nodes}
    rows: list[tuple[str, str, str, str]] = []
    for change in result.changes:
        model = models[change.node]
        assert model is not None  # the carve planner takes only nodes of a known model
        for gpu in change.gpus:
            rows.append(
                (
                    change.node,
                    str(gpu.index),
                    render_bar(model, gpu.old, cell=7),
                    render_bar(model, gpu.new, cell=7),
                )
            )
        step = CarveStep(change.node, tuple(g.step for g in change.gpus), change.serves)
        rows.append(("", "", f"carve: {describe(step)}", ""))
        rows.append(("", "", f"serves: {', '.join(change.serves)}", ""))
    print(format_table(("node", "gpu", "before", "after"), rows))
    print(f"\nthe node agents are asked through the annotation {names.CARVE_ANNOTATION}")
    if result.unserved:
        print("\nstill pending:")
        for pod, reason in result.unserved:
            print(f"  {pod}: {reason}")
    return 0


def plan_json(result: RepartitionPlan | None) -> dict[str, Any]:
    if result is None:
        return {"changes": [], "pending": [], "skippedNodes": []}
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
