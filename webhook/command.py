"""``migslice webhook``: the mutating/validating admission webhook over HTTPS."""

from __future__ import annotations

import argparse

from migslice import console, names
from migslice.admission import AdmissionSettings, Unmatched
from migslice.serving import add_server_arguments, options_from_args
from webhook.settings import (
    DEFAULT_EXCLUDED_NAMESPACES,
    DEFAULT_PORT,
    MAX_BODY_BYTES,
    GateSettings,
    WebhookSettings,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--cluster-file",
        metavar="FILE",
        type=console.file_path,
        help="serve this cluster (YAML stream) instead of the API",
    )
    source.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )
    parser.add_argument(
        "--unmatched-namespaces",
        choices=("deny", "allow"),
        default="deny",
        help="GPU pods in a namespace no TenantPolicy selects: deny (default) or allow untouched",
    )
    parser.add_argument(
        "--exclude-namespaces",
        metavar="NS[,NS...]",
        type=console.name_list,
        default=",".join(sorted(DEFAULT_EXCLUDED_NAMESPACES)),
        help="pods in these namespaces are admitted unchanged, even when a webhook "
        "configuration sends them ('' excludes none; default: %(default)s)",
    )
    parser.add_argument(
        "--scheduler-name",
        default=names.SCHEDULER_NAME,
        type=console.dns_subdomain_or_empty,
        help="schedulerName set on GPU pods that use the default scheduler ('' leaves it alone)",
    )
    _add_consistency_arguments(parser)
    _add_gate_arguments(parser)
    parser.add_argument(
        "--status-interval-s",
        type=console.seconds(),
        default=10.0,
        help="how often TenantPolicy.status (usage, quota, conditions) is refreshed in-cluster, "
        "besides on every change; 0 writes no status (--cluster-file never writes)",
    )
    parser.add_argument(
        "--max-body-mib",
        type=console.count(1, 1024),
        default=MAX_BODY_BYTES >> 20,
        help="largest AdmissionReview accepted on /mutate and /validate (MiB; kube-apiserver "
        "limits a request to 3 MiB, and a review can carry the object and its old version; "
        "default %(default)s)",
    )
    console.add_log_level(parser)
    add_server_arguments(parser, default_port=DEFAULT_PORT)


def _add_consistency_arguments(parser: argparse.ArgumentParser) -> None:
    """How quota stays exact across replicas, restarts and API server outages."""
    parser.add_argument(
        "--quota-hold-s",
        type=console.seconds(allow_zero=False),
        default=45.0,
        help="how long an admission's charge is held before a pod never created may release it "
        "(keep it above kube-apiserver's 34 s create timeout; default %(default)s)",
    )
    parser.add_argument(
        "--max-blind-s",
        type=console.seconds(),
        default=5.0,
        help="how long a watch cache may not follow the API server before admissions are "
        "answered 503 (retried by kube-apiserver) and /readyz fails (default %(default)s)",
    )
    parser.add_argument(
        "--ledger-namespace",
        default=names.SYSTEM_NAMESPACE,
        type=console.dns_label,
        help="namespace of the tenants' quota ledgers, ConfigMaps migslice-quota-<tenant> "
        "(default %(default)s; the chart sets its release namespace)",
    )


def _add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate reconciler: GPU pods fail-open namespaces created while the webhook was down."""
    parser.add_argument(
        "--gate-interval-s",
        type=console.seconds(),
        default=2.0,
        help="how often the leader decides the pods behind the admission gate "
        "(migslice.io/admission; docs/outages.md; 0: no gate reconciler, for clusters "
        "without fail-open namespaces; default %(default)s)",
    )
    parser.add_argument(
        "--gate-batch",
        type=console.count(1, 10000),
        default=20,
        help="gated pods admitted per round at most (default %(default)s)",
    )
    parser.add_argument(
        "--gate-lease",
        default=f"{names.SYSTEM_NAMESPACE}/{names.GATE_LEASE_NAME}",
        type=console.namespaced_name,
        metavar="NAMESPACE/NAME",
        help="coordination.k8s.io Lease NAMESPACE/NAME of the gate reconciler's leader "
        "(default %(default)s; the chart: its release namespace)",
    )
    parser.add_argument(
        "--gate-lease-s",
        type=console.seconds(allow_zero=False),
        default=15.0,
        help="how long the gate's Lease holds without renewal: the time a new leader waits "
        "after the old one died (default %(default)s)",
    )
    parser.add_argument(
        "--gate-renew-deadline-s",
        type=console.seconds(allow_zero=False),
        default=None,
        help="a leader that has not renewed the gate's Lease for this long stops admitting at "
        "once, before another replica may take it; shorter than --gate-lease-s, longer than "
        "--gate-interval-s (default: two thirds of --gate-lease-s)",
    )


def settings_from_args(args: argparse.Namespace) -> WebhookSettings:
    body = args.max_body_mib << 20
    return WebhookSettings(
        max_body_bytes=body,
        admission=AdmissionSettings(
            scheduler_name=args.scheduler_name,
            unmatched_namespaces=Unmatched(args.unmatched_namespaces),
        ),
        quota_hold_s=args.quota_hold_s,
        max_blind_s=args.max_blind_s,
        ledger_namespace=args.ledger_namespace,
        status_interval_s=args.status_interval_s,
        gate=GateSettings(
            interval_s=args.gate_interval_s,
            batch=args.gate_batch,
            lease=args.gate_lease,
            lease_s=args.gate_lease_s,
            renew_deadline_s=args.gate_renew_deadline_s,
        ),
        exclude_namespaces=frozenset(args.exclude_namespaces),
        cluster_file=args.cluster_file,
        kubeconfig=args.kubeconfig,
        server=options_from_args(args, {"/mutate": body, "/validate": body}),
        log_level=args.log_level,
        log_format=args.log_format,
    )


def run(args: argparse.Namespace) -> int:
    from webhook.service import serve_webhook

    console.check_kubeconfig(args.kubeconfig)
    return serve_webhook(settings_from_args(args))


COMMAND = console.Command(
    "webhook",
    help="run the admission webhook (pods: sizes -> MIG resources; TenantPolicy checks)",
    description=(
        "Serves POST /mutate (pod, ResourceClaim and ResourceClaimTemplate CREATE) and "
        "/validate (TenantPolicy), plus /healthz, /readyz and /metrics. In-cluster by default: "
        "watch caches of TenantPolicies, Namespaces, Nodes and Pods (and, with DRA, "
        "ResourceClaims, DeviceClasses, templates and ResourceSlices). With --cluster-file, a "
        "fixed cluster from a YAML file."
    ),
    add_arguments=add_arguments,
    run=run,
)
COMMANDS = (COMMAND,)
