"""``migslice webhook``: the mutating/validating admission webhook over HTTPS (gunicorn)."""

from __future__ import annotations

import argparse
import gc
import logging
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError
from migslice.clusterfile import ClusterFileError, load_cluster_text
from migslice.serving import ServeError, add_server_arguments, options_from_args, serve
from migslice.serving.reload import ReloadingApp

log = logging.getLogger(__name__)

DEFAULT_PORT = 9443
DEFAULT_MAX_BODY_MIB = 10  # webhook.settings.MAX_BODY_BYTES: kube-apiserver's largest review


def register(commands: Any) -> None:
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
    webhook.add_argument(
        "--max-body-mib",
        type=int,
        default=DEFAULT_MAX_BODY_MIB,
        help="largest AdmissionReview accepted on /mutate and /validate (MiB; kube-apiserver "
        "limits a request to 3 MiB, and a review can carry the object and its old version)",
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
    if args.max_body_mib < 1:
        raise CommandError(f"--max-body-mib {args.max_body_mib}: must be at least 1")
    settings = WebhookSettings(
        max_body_bytes=args.max_body_mib << 20,
        admission=AdmissionSettings(
            scheduler_name=args.scheduler_name,
            unmatched_namespaces=Unmatched(args.unmatched_namespaces),
        ),
        reservation_ttl_s=args.reservation_ttl_s,
        status_interval_s=args.status_interval_s,
    )
    if args.status_interval_s < 0:
        raise CommandError("--status-interval-s must be 0 (no status writes) or more")
    body_limits = {"/mutate": settings.max_body_bytes, "/validate": settings.max_body_bytes}
    options = options_from_args(args, body_limits)
    try:
        options.check()
    except ValueError as error:
        raise CommandError(str(error)) from None
    if args.cluster_file:
        path = Path(args.cluster_file)
        if not path.is_file():
            raise CommandError(f"--cluster-file {path}: no such file")

        def factory() -> Any:
            # Rebuilt from the file whenever it changes (see migslice.serving.reload).
            return ReloadingApp(path, lambda p: _standalone_app(settings, p))

    else:
        kubeconfig = args.kubeconfig

        def factory() -> Any:
            return _in_cluster_app(settings, kubeconfig)

    try:
        serve(factory, options)
    except ServeError as error:
        raise CommandError(str(error)) from None
    return 0


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
