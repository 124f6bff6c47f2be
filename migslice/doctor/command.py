"""``migslice doctor``: is migslice installed and wired up right on this cluster?"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from migslice import console, names
from migslice.console import CommandError

VIA = ("auto", "service", "api-proxy")
CHECK_NAMES = (
    "tenantpolicy-crd",
    "webhook-reachable",
    "webhook-ca-bundle",
    "webhook-client-auth",
    "scheduler",
    "extender-reachable",
    "extender-trusted",
    "extender-client-auth",
    "network-policies",
    "gpu-operator",
    "mig-strategy",
    "mig-manager-config",
    "gpu-products",
    "agent-layouts",
    "tenant-policies",
    "outage-modes",
    "nodes-in-trouble",
    "dra-api",
    "dra-nodes",
    "dra-device-classes",
    "dra-steer",
)
"""The checks in the order they run (``migslice.doctor.registry.CHECKS``; kept here so that
building the command line imports no check)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )
    parser.add_argument("--context", metavar="NAME", help="the kubeconfig context to use")
    parser.add_argument(
        "-n",
        "--namespace",
        type=console.dns_label,
        default=names.SYSTEM_NAMESPACE,
        help=f"where migslice is installed (default {names.SYSTEM_NAMESPACE})",
    )
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument(
        "--timeout-s",
        type=console.seconds(allow_zero=False),
        default=10.0,
        help="time each check may take, its API reads and probes included (default 10)",
    )
    parser.add_argument(
        "--via",
        choices=VIA,
        default="auto",
        help="how to reach the webhook and the extender: 'service' (their Service DNS names, "
        "from a pod), 'api-proxy' (the API server's service proxy, from outside); 'auto' "
        "picks by where doctor runs",
    )
    parser.add_argument(
        "--pending-bound-s",
        type=console.seconds(allow_zero=False),
        default=600.0,
        help="a node at nvidia.com/mig.config.state=pending longer than this is stuck "
        "(default 600, the repartition controller's deadline)",
    )
    parser.add_argument(
        "--check",
        action="append",
        choices=CHECK_NAMES,
        metavar="NAME",
        help="run only this check (repeatable); default all",
    )
    console.add_log_level(parser, default="warning")


def run(args: argparse.Namespace) -> int:
    from migslice.doctor.facts import Settings
    from migslice.doctor.findings import Verdict
    from migslice.doctor.gather import release_elsewhere
    from migslice.doctor.reading import ClusterReader
    from migslice.doctor.registry import CHECKS
    from migslice.doctor.report import render_json, render_table
    from migslice.doctor.run import run_checks
    from migslice.kube.transport import ApiError, KubeconfigError, KubernetesTransport, unanswered

    console.setup_logging(args.log_level)
    logging.getLogger("urllib3").setLevel(logging.ERROR)
    console.check_kubeconfig(args.kubeconfig)
    try:
        # A read may run a little past its check's time: the check's own timeout says so first.
        transport = KubernetesTransport.from_environment(
            args.kubeconfig, timeout_s=args.timeout_s * 1.5, context=args.context
        )
    except KubeconfigError as error:  # no kubeconfig, or one that cannot be used: it says
        raise CommandError(str(error)) from None
    except Exception as error:  # the kubernetes client raises several kinds here
        raise CommandError(
            f"no access to a cluster ({error}); pass --kubeconfig, or set $KUBECONFIG"
        ) from None
    try:
        transport.get_json("/version", {})
    except ApiError as error:
        raise CommandError(unanswered(error)) from None
    direct = args.via == "service" or (args.via == "auto" and transport.in_cluster)
    settings = Settings(
        namespace=args.namespace,
        now=time.time(),
        pending_bound_s=args.pending_bound_s,
    )
    reader = ClusterReader(transport, direct=direct, timeout_s=args.timeout_s)
    checks = [c for c in CHECKS if not args.check or c.name in args.check]
    findings = run_checks(checks, reader, settings, args.timeout_s)
    via = "service" if direct else "api-proxy"
    if args.output == "json":
        console.print_json(render_json(findings, checks, namespace=args.namespace, via=via))
    else:
        print(render_table(findings))
    sys.stdout.flush()
    elsewhere = release_elsewhere(reader, settings)
    if elsewhere:
        print(f"migslice: note: {elsewhere}", file=sys.stderr)
    return 1 if any(f.verdict is Verdict.FAILED for f in findings) else 0


COMMAND = console.Command(
    "doctor",
    help="check an installed migslice: CRD, webhook, scheduler, extender, GPU Operator, nodes",
    description=(
        "Reads the cluster (kubeconfig or in-cluster) and prints one line per check, ok, "
        "warning or failed, with the fix on the same line: the TenantPolicy CRD, the "
        "webhook's Service and caBundle, migslice-scheduler and its Lease, the extender and "
        "the scheduler's trust in it, the GPU Operator's ClusterPolicy (MIG strategy mixed, "
        "MIG Manager reading migslice's ConfigMap), GPU products, the node agent's "
        "layouts, the TenantPolicies, and nodes in trouble. Exit status 1 when a check "
        "failed. docs/doctor.md lists every check."
    ),
    add_arguments=add_arguments,
    run=run,
)
COMMANDS = (COMMAND,)
