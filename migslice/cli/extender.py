"""``migslice extender``: the scheduler extender service, in a cluster or on a cluster file."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError
from migslice.clusterfile import ClusterFileError, load_cluster_text
from migslice.serving import ServeError, add_server_arguments, options_from_args, serve
from migslice.serving.reload import ReloadingApp

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    from extender.settings import DEFAULT_MIG_CONFIG_MAP, DEFAULT_PORT, ExtenderSettings

    parser = commands.add_parser(
        "extender",
        help="run the kube-scheduler extender (filter, prioritize) over HTTPS",
        description=(
            "Serves POST /filter and /prioritize for kube-scheduler, plus /healthz, /readyz "
            "and /metrics. In a cluster it watches Nodes, Pods and the mig-parted ConfigMap; "
            "with --cluster-file it answers from a fixed YAML stream of Node and Pod objects "
            "(a Pod with spec.nodeName is bound)."
        ),
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--cluster-file", metavar="FILE", help="serve this cluster, not a live one")
    source.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube)"
    )
    parser.add_argument(
        "--mig-config-map",
        default=DEFAULT_MIG_CONFIG_MAP,
        metavar="NAMESPACE/NAME",
        help=f"ConfigMap with the mig-parted config (default {DEFAULT_MIG_CONFIG_MAP})",
    )
    parser.add_argument(
        "--max-body-mib",
        type=int,
        default=ExtenderSettings().max_body_bytes >> 20,
        help="largest ExtenderArgs accepted on /filter and /prioritize (MiB); full Node "
        "objects (nodeCacheCapable: false) take about 22 KiB per candidate node",
    )
    parser.add_argument(
        "--max-staleness-s",
        type=float,
        default=180.0,
        help="readiness fails when a cache has not heard from the API server for this long",
    )
    parser.add_argument(
        "--log-level", default="info", choices=("debug", "info", "warning", "error")
    )
    _add_repartition_arguments(parser)
    add_server_arguments(parser, default_port=DEFAULT_PORT)
    parser.set_defaults(handler=run_extender)


def _add_repartition_arguments(parser: argparse.ArgumentParser) -> None:
    from extender.settings import DEFAULT_LEASE

    group = parser.add_argument_group(
        "repartition controller",
        "re-partition idle GPUs for pending pods through MIG Manager (in a cluster only; "
        "leader-elected, so every replica may run it)",
    )
    group.add_argument("--repartition", action="store_true", help="run the repartition controller")
    group.add_argument(
        "--repartition-dry-run",
        action="store_true",
        help="decide and log what would be re-partitioned; change nothing",
    )
    group.add_argument("--repartition-interval-s", type=float, default=15.0)
    group.add_argument(
        "--repartition-min-pending-s",
        type=float,
        default=30.0,
        help="a pod must be unschedulable this long before GPUs change for it",
    )
    group.add_argument(
        "--repartition-cooldown-s",
        type=float,
        default=600.0,
        help="a node re-partitioned this recently is left alone",
    )
    group.add_argument("--repartition-max-nodes-in-flight", type=int, default=1)
    group.add_argument(
        "--repartition-deadline-s",
        type=float,
        default=600.0,
        help="a node not at nvidia.com/mig.config.state=success this long after labelling fails",
    )
    group.add_argument(
        "--repartition-backoff-s",
        type=float,
        default=1800.0,
        help="a node whose re-partition failed is left alone this long",
    )
    group.add_argument(
        "--repartition-scheduler-name",
        default="migslice-scheduler",
        help="only pods of this scheduler count as pending demand",
    )
    group.add_argument(
        "--repartition-lease",
        default=DEFAULT_LEASE,
        metavar="NAMESPACE/NAME",
        help=f"coordination.k8s.io Lease for leader election (default {DEFAULT_LEASE})",
    )
    group.add_argument("--repartition-lease-s", type=float, default=60.0)


def _repartition_settings(args: argparse.Namespace) -> Any:
    from extender.settings import RepartitionSettings

    if args.repartition_dry_run and not args.repartition:
        raise CommandError("--repartition-dry-run needs --repartition")
    if args.repartition and args.cluster_file:
        raise CommandError(
            "--repartition needs a live cluster; a --cluster-file cannot be re-partitioned "
            "(use migslice plan --cluster-file to see what would happen)"
        )
    if args.repartition_interval_s <= 0 or args.repartition_max_nodes_in_flight < 1:
        raise CommandError(
            "--repartition-interval-s must be > 0 and --repartition-max-nodes-in-flight >= 1"
        )
    if args.repartition_lease_s < 2 * args.repartition_interval_s:
        raise CommandError(
            f"--repartition-lease-s {args.repartition_lease_s:g} must be at least twice "
            f"--repartition-interval-s {args.repartition_interval_s:g} (the Lease is renewed "
            "once a round)"
        )
    return RepartitionSettings(
        enabled=args.repartition,
        dry_run=args.repartition_dry_run,
        interval_s=args.repartition_interval_s,
        min_pending_s=args.repartition_min_pending_s,
        cooldown_s=args.repartition_cooldown_s,
        max_nodes_in_flight=args.repartition_max_nodes_in_flight,
        deadline_s=args.repartition_deadline_s,
        backoff_s=args.repartition_backoff_s,
        scheduler_name=args.repartition_scheduler_name,
        lease=args.repartition_lease,
        lease_duration_s=args.repartition_lease_s,
    )


def run_extender(args: argparse.Namespace) -> int:
    from extender.app import create_app
    from extender.settings import ExtenderSettings
    from extender.state import state_from_objects

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.max_body_mib < 1:
        raise CommandError(f"--max-body-mib {args.max_body_mib}: must be at least 1")
    settings = ExtenderSettings(
        max_body_bytes=args.max_body_mib << 20,
        max_staleness_s=args.max_staleness_s,
        mig_config_map=args.mig_config_map,
        repartition=_repartition_settings(args),
    )
    body_limits = {"/filter": settings.max_body_bytes, "/prioritize": settings.max_body_bytes}
    options = options_from_args(args, body_limits)
    try:
        options.check()
    except ValueError as error:
        raise CommandError(str(error)) from None
    if args.cluster_file:
        try:
            objects = load_cluster_text(Path(args.cluster_file).read_text())
        except (OSError, ClusterFileError) as error:
            raise CommandError(f"--cluster-file {args.cluster_file}: {error}") from None
        log.info(
            "serving cluster file=%s nodes=%d pods=%d",
            args.cluster_file,
            len(objects.nodes),
            len(objects.pods),
        )

        def build(path: Path) -> Any:
            return create_app(
                settings, state_from_objects(load_cluster_text(path.read_text()), settings)
            )

        def factory() -> Any:
            # Rebuilt from the file whenever it changes (see migslice.serving.reload).
            return ReloadingApp(Path(args.cluster_file), build)

    else:
        kubeconfig = args.kubeconfig

        def factory() -> Any:
            from extender.sources import start_cluster_state
            from migslice.kube import KubernetesTransport

            transport = KubernetesTransport.from_environment(kubeconfig)
            state = start_cluster_state(transport, settings)
            if settings.repartition.enabled:
                _start_repartition(transport, state, settings)
            return create_app(settings, state)

    try:
        serve(factory, options)
    except ServeError as error:
        raise CommandError(str(error)) from None
    return 0


def _start_repartition(transport: Any, state: Any, settings: Any) -> None:
    """The controller thread of this worker; its Lease is released when the process exits."""
    import atexit
    import os
    import socket

    from extender.repartition import start_repartition

    identity = f"{socket.gethostname()}-{os.getpid()}"
    controller = start_repartition(transport, state.index, settings, identity)
    state.repartition = controller.stats
    stop_caches = state.stop

    def stop() -> None:
        controller.stop()
        stop_caches()

    state.stop = stop
    atexit.register(controller.stop)
