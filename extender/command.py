"""``migslice extender``: the scheduler extender service, in a cluster or on a cluster file."""

from __future__ import annotations

import argparse

from extender.settings import (
    BUDGET_SCOPES,
    DEFAULT_LEASE,
    DEFAULT_MIG_CONFIG_MAP,
    DEFAULT_PORT,
    ExtenderSettings,
    RepartitionSettings,
)
from migslice import console, names
from migslice.repartition import CARVE_MIN_PENDING_S
from migslice.serving import add_server_arguments, options_from_args

MAX_NODES_IN_FLIGHT = 100_000
"""The most nodes a budget lets change at once (no cluster is larger)."""
VERBS = ("/filter", "/filter-best-fit", "/prioritize")
"""The paths that take ExtenderArgs, under --max-body-mib."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--cluster-file",
        metavar="FILE",
        type=console.file_path,
        help="serve this cluster, not a live one",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )
    parser.add_argument(
        "--mig-config-map",
        default=DEFAULT_MIG_CONFIG_MAP,
        type=console.namespaced_name,
        metavar="NAMESPACE/NAME",
        help=f"ConfigMap with the mig-parted config (default {DEFAULT_MIG_CONFIG_MAP})",
    )
    parser.add_argument(
        "--max-body-mib",
        type=console.count(1, 1024),
        default=ExtenderSettings().max_body_bytes >> 20,
        help="largest ExtenderArgs accepted on the filter and prioritize verbs (MiB; default "
        "%(default)s); full Node objects (nodeCacheCapable: false) take about 22 KiB per "
        "candidate node",
    )
    parser.add_argument(
        "--max-blind-s",
        type=console.seconds(),
        default=5.0,
        help="a watch cache that has not followed the API server for this long makes filter "
        "answer an Error (retried by kube-scheduler) and fails /readyz (default %(default)s)",
    )
    parser.add_argument(
        "--no-dra-steer",
        dest="dra_steer",
        action="store_false",
        help="do not keep the DeviceTaintRules that steer kube-scheduler's first fit to the "
        "placement migslice prefers on DynamicMIG nodes (docs/dra.md), and delete those an "
        "earlier run left; on by default where the API server serves DeviceTaintRules",
    )
    parser.add_argument(
        "--dra-steer-max-rules",
        type=console.count(0, 1_000_000),
        default=ExtenderSettings().dra_steer_max_rules,
        help="the most steer rules kept at once; past it, nodes in use keep theirs first and "
        "idle ones are left to first fit (kube-scheduler's work per ResourceSlice grows with the "
        "rules in the cluster; default %(default)s)",
    )
    parser.add_argument(
        "--dra-steer-lease",
        default="",
        metavar="NAMESPACE/NAME",
        help="with several replicas and no --repartition: the Lease that elects the one that "
        "writes the steer's rules (with --repartition, the controller's Lease does); unset, "
        "every replica writes them",
    )
    parser.add_argument(
        "--dra-large-reserve",
        action="store_true",
        help="keep idle DynamicMIG GPUs whole for 7g and multi-GPU pods, as many as their share "
        "of the GPU demand arriving asks for: a smaller pod goes beside others, else waits "
        "(docs/dra.md; needs the steer)",
    )
    parser.add_argument(
        "--dra-large-reserve-max-hold",
        type=console.seconds(allow_zero=False),
        default=ExtenderSettings().dra_large_reserve_max_hold_s,
        metavar="SECONDS",
        help="how long the reserve holds a smaller pod back at most: once kube-scheduler has "
        "found no node for it that long, it may take an idle GPU (default %(default)gs)",
    )
    console.add_log_level(parser)
    _add_repartition_arguments(parser)
    add_server_arguments(parser, default_port=DEFAULT_PORT)


def _add_repartition_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "repartition controller",
        "re-shape GPUs for pending pods: idle GPUs through MIG Manager, or GPUs in use in "
        "carve mode (in a cluster only; leader-elected, so every replica may run it)",
    )
    group.add_argument("--repartition", action="store_true", help="run the repartition controller")
    group.add_argument(
        "--repartition-dry-run",
        action="store_true",
        help="decide and log what would be re-partitioned; change nothing",
    )
    positive = console.seconds(allow_zero=False)
    group.add_argument("--repartition-interval-s", type=positive, default=15.0)
    group.add_argument(
        "--repartition-min-pending-s",
        type=console.seconds(),
        default=30.0,
        help="a pod must be unschedulable this long before GPUs change for it",
    )
    group.add_argument(
        "--repartition-cooldown-s",
        type=console.seconds(),
        default=600.0,
        help="a node re-partitioned this recently is left alone",
    )
    group.add_argument(
        "--repartition-max-nodes-in-flight",
        type=console.count(1, MAX_NODES_IN_FLIGHT),
        default=1,
        help="nodes MIG Manager may re-partition at once, per budget scope (default 1)",
    )
    group.add_argument(
        "--repartition-budget-scope",
        choices=BUDGET_SCOPES,
        default="pool",
        help="the in-flight budget holds per GPU product pool (nvidia.com/gpu.product; default) "
        "or for the whole cluster",
    )
    group.add_argument(
        "--repartition-deadline-s",
        type=positive,
        default=600.0,
        help="a node not at nvidia.com/mig.config.state=success this long after labelling is "
        "quarantined (label migslice.io/repartition-quarantine) until MIG Manager reports "
        "success or an admin removes the label",
    )
    group.add_argument(
        "--repartition-backoff-s",
        type=console.seconds(),
        default=1800.0,
        help="a node whose re-partition failed, or whose label someone else changed mid-plan, "
        "is left alone this long",
    )
    group.add_argument(
        "--repartition-config-propagation-s",
        type=console.seconds(),
        default=90.0,
        help="a node is labelled this long after its config is written into the mig-parted "
        "ConfigMap: MIG Manager reads the kubelet's copy of it (refreshed about once a "
        "minute) when its label changes, and fails a config it does not find yet "
        "(default: %(default)s)",
    )
    _add_leader_and_mode_arguments(group)


def _add_leader_and_mode_arguments(group: argparse._ArgumentGroup) -> None:
    """Whose pods count, leader election, and which nodes are carved."""
    group.add_argument(
        "--repartition-scheduler-name",
        default=names.SCHEDULER_NAME,
        type=console.dns_subdomain,
        help="only pods of this scheduler count as pending demand",
    )
    group.add_argument(
        "--repartition-lease",
        default=DEFAULT_LEASE,
        type=console.namespaced_name,
        metavar="NAMESPACE/NAME",
        help=f"coordination.k8s.io Lease for leader election (default {DEFAULT_LEASE})",
    )
    group.add_argument(
        "--repartition-lease-s", type=console.seconds(allow_zero=False), default=60.0
    )
    group.add_argument(
        "--repartition-renew-deadline-s",
        type=console.seconds(allow_zero=False),
        default=None,
        help="a leader that has not renewed the Lease for this long stops leading at once "
        "(no plan step, steer rule or Event more), before another replica may take it; "
        "shorter than --repartition-lease-s, longer than --repartition-interval-s "
        "(default: two thirds of --repartition-lease-s)",
    )
    group.add_argument(
        "--repartition-mode-default",
        choices=names.REPARTITION_MODES,
        default=names.MODE_MIG_MANAGER,
        help=(
            f"how nodes without the {names.REPARTITION_MODE_LABEL} label are re-shaped: "
            "mig-manager (idle GPUs, through MIG Manager) or carve (the node agent creates "
            "and destroys instances around running ones; needs the agent's --carve)"
        ),
    )
    group.add_argument(
        "--repartition-carve-min-pending-s",
        type=console.seconds(),
        default=CARVE_MIN_PENDING_S,
        help=(
            "carve mode's own --repartition-min-pending-s: a carve leaves running instances "
            "alone, so it waits only past kube-scheduler's own retry"
        ),
    )
    group.add_argument(
        "--repartition-carve-cooldown-s",
        type=console.seconds(),
        default=60.0,
        help="a node carved this recently is not carved again",
    )
    group.add_argument(
        "--repartition-carve-max-nodes-in-flight",
        type=console.count(1, MAX_NODES_IN_FLIGHT),
        default=4,
        help="nodes carving at once",
    )


def settings_from_args(args: argparse.Namespace) -> ExtenderSettings:
    body = args.max_body_mib << 20
    return ExtenderSettings(
        max_body_bytes=body,
        max_blind_s=args.max_blind_s,
        mig_config_map=args.mig_config_map,
        dra_steer=args.dra_steer,
        dra_steer_max_rules=args.dra_steer_max_rules,
        dra_steer_lease=args.dra_steer_lease,
        dra_large_reserve=args.dra_large_reserve,
        dra_large_reserve_max_hold_s=args.dra_large_reserve_max_hold,
        repartition=RepartitionSettings(
            enabled=args.repartition,
            dry_run=args.repartition_dry_run,
            interval_s=args.repartition_interval_s,
            min_pending_s=args.repartition_min_pending_s,
            cooldown_s=args.repartition_cooldown_s,
            max_nodes_in_flight=args.repartition_max_nodes_in_flight,
            budget_scope=args.repartition_budget_scope,
            deadline_s=args.repartition_deadline_s,
            backoff_s=args.repartition_backoff_s,
            config_propagation_s=args.repartition_config_propagation_s,
            scheduler_name=args.repartition_scheduler_name,
            lease=args.repartition_lease,
            lease_duration_s=args.repartition_lease_s,
            renew_deadline_s=args.repartition_renew_deadline_s,
            mode_default=args.repartition_mode_default,
            carve_min_pending_s=args.repartition_carve_min_pending_s,
            carve_cooldown_s=args.repartition_carve_cooldown_s,
            carve_max_nodes_in_flight=args.repartition_carve_max_nodes_in_flight,
        ),
        cluster_file=args.cluster_file,
        kubeconfig=args.kubeconfig,
        server=options_from_args(args, dict.fromkeys(VERBS, body), inline_paths=VERBS),
        log_level=args.log_level,
        log_format=args.log_format,
    )


def run(args: argparse.Namespace) -> int:
    from extender.service import serve_extender

    console.check_kubeconfig(args.kubeconfig)
    return serve_extender(settings_from_args(args))


COMMAND = console.Command(
    "extender",
    help="run the kube-scheduler extender (filter, prioritize) over HTTPS",
    description=(
        "Serves POST /filter-best-fit (the shipped filterVerb: only the nodes the pod fits "
        "best), /filter and /prioritize for kube-scheduler, plus /healthz, /readyz "
        "and /metrics. In a cluster it watches Nodes, Pods and the mig-parted ConfigMap; "
        "with --cluster-file it answers from a fixed YAML stream of Node and Pod objects "
        "(a Pod with spec.nodeName is bound)."
    ),
    add_arguments=add_arguments,
    run=run,
)
COMMANDS = (COMMAND,)
