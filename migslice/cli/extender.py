"""``migslice extender``: the scheduler extender service, in a cluster or on a cluster file."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError
from migslice.clusterfile import ClusterFileError, load_cluster_text
from migslice.serving import add_server_arguments, options_from_args, serve
from migslice.serving.reload import ReloadingApp

log = logging.getLogger(__name__)


def register(commands: Any) -> None:
    from extender.settings import DEFAULT_MIG_CONFIG_MAP, DEFAULT_PORT

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
        "--max-body-mib", type=int, default=64, help="largest request body accepted (MiB)"
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
    add_server_arguments(parser, default_port=DEFAULT_PORT)
    parser.set_defaults(handler=run_extender)


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
    )
    options = options_from_args(args)
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
            return create_app(settings, start_cluster_state(transport, settings))

    serve(factory, options)
    return 0
