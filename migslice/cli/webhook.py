"""``migslice webhook``: the mutating/validating admission webhook over HTTPS (gunicorn)."""

from __future__ import annotations

import argparse
import gc
import logging
import re
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError
from migslice.clusterfile import ClusterFileError, load_cluster_text
from migslice.serving import add_server_arguments, options_from_args, serve
from migslice.serving.reload import ReloadingApp

log = logging.getLogger(__name__)

DEFAULT_PORT = 9443
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def register(commands: Any) -> None:
    from webhook.settings import DEFAULT_EXCLUDED_NAMESPACES

    webhook = commands.add_parser(
        "webhook",
        help="run the admission webhook (pods: sizes -> MIG resources; TenantPolicy checks)",
        description=(
            "Serves POST /mutate (pod CREATE) and /validate (TenantPolicy), plus /healthz, "
            "/readyz and /metrics. In-cluster by default: watch caches of TenantPolicies, "
            "Namespaces, Nodes and Pods. With --cluster-file, a fixed cluster from a YAML file."
        ),
    )
    webhook.add_argument(
        "--cluster-file", metavar="FILE", help="serve this cluster (YAML stream) instead of the API"
    )
    webhook.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube)"
    )
    webhook.add_argument(
        "--unmatched-namespaces",
        choices=("deny", "allow"),
        default="deny",
        help="GPU pods in a namespace no TenantPolicy selects: deny (default) or allow untouched",
    )
    webhook.add_argument(
        "--exclude-namespaces",
        metavar="NS[,NS...]",
        default=",".join(sorted(DEFAULT_EXCLUDED_NAMESPACES)),
        help="pods in these namespaces are admitted unchanged, even when a webhook "
        "configuration sends them ('' excludes none; default: %(default)s)",
    )
    webhook.add_argument(
        "--scheduler-name",
        default="migslice-scheduler",
        help="schedulerName set on GPU pods that use the default scheduler ('' leaves it alone)",
    )
    webhook.add_argument(
        "--reservation-ttl-s",
        type=float,
        default=30.0,
        help="how long an admitted pod's quota is held until the pod shows up in the cache",
    )
    webhook.add_argument(
        "--status-interval-s",
        type=float,
        default=10.0,
        help="how often TenantPolicy.status (usage, quota, conditions) is refreshed in-cluster, "
        "besides on every change; 0 writes no status (--cluster-file never writes)",
    )
    webhook.add_argument("--log-level", default="info", choices=("debug", "info", "warning"))
    add_server_arguments(webhook, default_port=DEFAULT_PORT)
    webhook.set_defaults(handler=run_webhook)


def run_webhook(args: argparse.Namespace) -> int:
    from migslice.admission import AdmissionSettings, Unmatched
    from webhook.settings import WebhookSettings

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    settings = WebhookSettings(
        admission=AdmissionSettings(
            scheduler_name=args.scheduler_name,
            unmatched_namespaces=Unmatched(args.unmatched_namespaces),
        ),
        reservation_ttl_s=args.reservation_ttl_s,
        status_interval_s=args.status_interval_s,
        exclude_namespaces=parse_namespaces(args.exclude_namespaces),
    )
    if args.status_interval_s < 0:
        raise CommandError("--status-interval-s must be 0 (no status writes) or more")
    options = options_from_args(args)
    try:
        options.check()
    except ValueError as error:
        raise CommandError(str(error)) from None
    if args.cluster_file:
        path = Path(args.cluster_file)
        if not path.is_file():
            raise CommandError(f"--cluster-file {path}: no such file")
        # Rebuilt from the file whenever it changes (see migslice.serving.reload).
        serve(lambda: ReloadingApp(path, lambda p: _standalone_app(settings, p)), options)
    else:
        kubeconfig = args.kubeconfig
        serve(lambda: _in_cluster_app(settings, kubeconfig), options)
    return 0


def parse_namespaces(text: str) -> frozenset[str]:
    """``a,b,c`` as a set of namespace names; CommandError naming the flag for a bad one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if not _NAMESPACE.match(name):
            raise CommandError(
                f"--exclude-namespaces: {name!r} is not a namespace name (lower-case letters, "
                "digits and '-', at most 63); separate names with commas"
            )
    return frozenset(names)


def _standalone_app(settings: Any, path: Path) -> Any:
    """Built inside the gunicorn worker: the raw objects are dropped once the state is filled."""
    from webhook.app import create_app
    from webhook.state import ClusterState

    try:
        objects = load_cluster_text(path.read_text())
    except (OSError, ClusterFileError) as error:
        raise CommandError(f"--cluster-file {path}: {error}") from None
    state = ClusterState(reservation_ttl_s=settings.reservation_ttl_s)
    state.load(objects)
    log.info(
        "Serving cluster file=%s nodes=%d pods=%d policies=%d invalid_policies=%d",
        path,
        len(objects.nodes),
        len(objects.pods),
        len(state.policies()),
        len(state.invalid_policies),
    )
    del objects
    gc.collect()
    return create_app(settings, state)


def _in_cluster_app(settings: Any, kubeconfig: str | None) -> Any:
    from migslice.kube import KubernetesTransport
    from migslice.kube.policies import admission_informers
    from migslice.kube.status import StatusWriter
    from webhook.app import create_app
    from webhook.state import ClusterState

    state = ClusterState(reservation_ttl_s=settings.reservation_ttl_s)
    transport = KubernetesTransport.from_environment(kubeconfig)
    if settings.status_interval_s > 0:
        interval_s = settings.status_interval_s
        writer = StatusWriter(state, transport, interval_s, settle_s=min(1.0, interval_s))
        state.add_listener(writer.poke)
        writer.start()
        log.info(
            "Writing TenantPolicy status on changes and every interval_s=%s",
            settings.status_interval_s,
        )
    for informer in admission_informers(state, transport):
        informer.start()
    log.info("Watching TenantPolicies, Namespaces, Nodes and Pods; /readyz turns 200 once synced")
    return create_app(settings, state)
