"""``migslice cleanup``: remove what migslice's running components wrote, after an uninstall.

The Helm chart runs it as a post-delete hook Job (``cleanup.enabled``); an admin runs it by
hand after ``kubectl delete -k manifests``, or with the hook off, and with ``--dry-run`` to see
what it would do (docs/operate.md, "Uninstalling"). It deletes the DRA steer's DeviceTaintRules,
removes migslice's keys from Nodes and lists the pods left waiting for migslice, with the
command that deletes each (:mod:`migslice.kube.cleanup` says which, and what it never
touches). Run again, it finds nothing left; on a cluster with nothing to clean it says so.

Run it only once the extender is gone: while it runs, its steer writes the rules again.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from migslice import console
from migslice.console import CommandError


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "cleanup",
        help="after an uninstall, remove the steer's DeviceTaintRules and migslice's node keys",
        description=(
            "Deletes the DRA steer's DeviceTaintRules (named migslice-steer-* and labelled "
            "app.kubernetes.io/managed-by=migslice; no other rule), removes the node label "
            "migslice.io/repartition-quarantine and the node annotations "
            "migslice.io/repartition-quarantine, migslice.io/carve, migslice.io/gpu-layout and "
            "migslice.io/carve-state (nothing of NVIDIA's or the admin's), and lists the pods "
            "not yet bound that wait behind the gate migslice.io/admission or for "
            "migslice-scheduler, with the kubectl command that deletes each (it deletes none). "
            "Run it after migslice is uninstalled: a running extender writes its rules again. "
            "The Helm chart runs it on helm uninstall (cleanup.enabled)."
        ),
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say what would be removed; change nothing"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=console.path_name,
        help="kubeconfig (default: in-cluster, then $KUBECONFIG, then ~/.kube/config)",
    )
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.set_defaults(handler=run_cleanup)


def run_cleanup(args: argparse.Namespace) -> int:
    from migslice.kube import KubernetesTransport
    from migslice.kube.cleanup import CleanupError, Leftovers
    from migslice.kube.transport import ApiError, KubeError, unanswered

    console.check_kubeconfig(args.kubeconfig)
    try:
        api = KubernetesTransport.from_environment(args.kubeconfig, context=args.context)
    except KubeError as error:  # no kubeconfig, or one that cannot be used: it says
        raise CommandError(str(error)) from None
    except Exception as error:  # the kubernetes client raises several kinds here
        raise CommandError(
            f"no access to a cluster ({error}); pass --kubeconfig, or set $KUBECONFIG"
        ) from None
    try:  # one line for a cluster it cannot read at all, not one per list and a wrong fix
        api.get_json("/version", {})
    except ApiError as error:
        raise CommandError(unanswered(error)) from None
    leftovers = Leftovers(api)
    delete, remove = ("would delete", "would remove") if args.dry_run else ("deleted", "removed")
    failed: list[str] = []
    changed = 0

    try:
        rules = leftovers.steer_rules()
    except CleanupError as error:
        failed.append(str(error))
        rules = []
    if rules is None:
        print("DeviceTaintRules: not served by this cluster, so the steer wrote none")
    for rule in rules or ():
        try:
            gone = not args.dry_run and not leftovers.delete_rule(rule)
        except CleanupError as error:
            failed.append(str(error))
            continue
        changed += 1
        print(f"DeviceTaintRule {rule}: {'gone already' if gone else delete}")

    try:
        nodes = leftovers.marked_nodes()
    except CleanupError as error:
        failed.append(str(error))
        nodes = []
    for marks in nodes:
        try:
            gone = not args.dry_run and not leftovers.unmark(marks)
        except CleanupError as error:
            failed.append(str(error))
            continue
        changed += 1
        print(f"Node {marks.node}: {'gone' if gone else remove + ' ' + marks.describe()}")

    try:
        pods = leftovers.stranded_pods()
    except CleanupError as error:
        failed.append(str(error))
        pods = []
    if pods:
        print(
            f"{len(pods)} {'pod waits' if len(pods) == 1 else 'pods wait'} for migslice and "
            "nothing will schedule them; migslice "
            "deletes none (a Deployment's or Job's pod is made again, through the default "
            "scheduler, once deleted). Delete each with:"
        )
    for pod in pods:
        print(f"  {pod.command()}    # {pod.reason}")

    if failed:
        for line in failed:
            print(f"migslice cleanup: {line}", file=sys.stderr)
        raise CommandError(
            f"cleanup incomplete: {len(failed)} API requests refused or failed (above); "
            "run `migslice cleanup` again with an account that may do them"
        )
    if not changed and not pods:
        print("nothing to clean: no steer rule, no node key of migslice's, no pod waiting for it")
    return 0
