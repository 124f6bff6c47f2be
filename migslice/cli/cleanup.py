"""``migslice cleanup``: remove what migslice's running components wrote, after an uninstall.

The Helm chart runs it as a post-delete hook Job (``cleanup.enabled``); an admin runs it by
hand after ``kubectl delete -k manifests``, or with the hook off, and with ``--dry-run`` to see
what it would do (docs/operate.md, "Uninstalling"). It deletes the DRA steer's DeviceTaintRules,
removes migslice's keys from Nodes and lists the pods left waiting for migslice, with the
command that deletes each (:mod:`migslice.kube.cleanup` says which, and what it never
touches). Run again, it finds nothing left; on a cluster with nothing to clean it says so.

It waits first for migslice's extender and agent pods to be gone (Helm runs a post-delete
hook once it has asked for the release's objects to be deleted, while their pods may still be
terminating), failing before any change if they do not go (``--writers-timeout-s``). After a
pass that removed something it looks again (``--settle-s``) and removes what was written
again, up to :data:`PASSES` passes; what keeps coming back fails it. Every request the API
server could not do is said, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from migslice import console
from migslice.console import CommandError

if TYPE_CHECKING:
    from migslice.kube.cleanup import Leftovers

WRITERS_TIMEOUT_S = 120.0
"""Four times the extender's and agent's termination grace period (30 s)."""
SETTLE_S = 5.0
PASSES = 5


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
    parser.add_argument(
        "--writers-timeout-s",
        type=console.seconds(),
        default=WRITERS_TIMEOUT_S,
        metavar="SECONDS",
        help=(
            "how long to wait for migslice's extender and agent pods to be gone before "
            "changing anything; still there then: exit 1, nothing changed (default "
            f"{WRITERS_TIMEOUT_S:.0f})"
        ),
    )
    parser.add_argument(
        "--settle-s",
        type=console.seconds(),
        default=SETTLE_S,
        metavar="SECONDS",
        help=(
            "after a pass that removed something, wait this long and look again; what was "
            f"written again is removed, up to {PASSES} passes (default {SETTLE_S:.0f})"
        ),
    )
    parser.set_defaults(handler=run_cleanup)


@dataclass
class Tally:
    """What a run did and could not do."""

    rules: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)
    failed: list[str] = field(default_factory=list)


def run_cleanup(args: argparse.Namespace) -> int:
    from migslice.kube import KubernetesTransport
    from migslice.kube.cleanup import Leftovers
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
    tally = Tally()
    _wait_for_writers(leftovers, args, tally)
    for round_ in range(1, PASSES + 1):
        if round_ > 1:
            time.sleep(args.settle_s)
        removed = _sweep(leftovers, args, tally, again=round_ > 1)
        if args.dry_run or not removed:
            break
    else:
        tally.failed.append(
            f"{', '.join(removed)} keep coming back after {PASSES} passes: something still "
            "writes them (a migslice extender or agent of another install, labelled "
            "otherwise?); stop it and run `migslice cleanup` again"
        )
    pods = _stranded(leftovers, tally)
    _report(args, tally, pods)
    return 0


def _wait_for_writers(leftovers: Leftovers, args: argparse.Namespace, tally: Tally) -> None:
    """Until no pod of migslice's extender or agent is left (one past its deletion time on a
    node that does not answer excepted, and said), or the timeout: then CommandError."""
    from migslice.kube.cleanup import CleanupError

    deadline = time.monotonic() + args.writers_timeout_s
    poll_s = min(2.0, max(0.05, args.writers_timeout_s / 20))
    said = False
    while True:
        try:
            writers = leftovers.writers()
        except CleanupError as error:
            tally.failed.append(f"{error} (to see whether migslice's extender and agent run)")
            return
        now = datetime.datetime.now(datetime.UTC)
        lost = [w for w in writers if w.is_lost(now)]
        running = [w for w in writers if not w.is_lost(now)]
        if not running:
            for writer in lost:
                print(
                    f"Pod {writer.describe()} is past its deletion time and still listed: its "
                    f"node {writer.node or '(none)'} does not answer; not waited for"
                )
            return
        names = ", ".join(w.describe() for w in running)
        if args.dry_run:
            print(f"migslice's extender and agent still run ({names}): they write these again")
            return
        if time.monotonic() >= deadline:
            raise CommandError(
                f"migslice's extender and agent still run after {args.writers_timeout_s:g}s "
                f"({names}): they would write their rules and node keys again, so nothing was "
                "changed; uninstall migslice first (helm uninstall, kubectl delete -k), or "
                "wait for these pods to stop, and run `migslice cleanup` again"
            )
        if not said:
            print(f"waiting for migslice's extender and agent to stop: {names}")
            said = True
        time.sleep(poll_s)


def _sweep(
    leftovers: Leftovers, args: argparse.Namespace, tally: Tally, *, again: bool
) -> list[str]:
    """One pass over the steer's rules and the node keys; what it removed (or would)."""
    from migslice.kube.cleanup import CleanupError

    delete, remove = ("would delete", "would remove") if args.dry_run else ("deleted", "removed")
    since = " (written again since the last pass)" if again else ""
    removed: list[str] = []
    try:
        rules = leftovers.steer_rules()
    except CleanupError as error:
        tally.failed.append(str(error))
        rules = []
    if rules is None and not again:
        print("DeviceTaintRules: not served by this cluster, so the steer wrote none")
    for rule in rules or ():
        try:
            gone = not args.dry_run and not leftovers.delete_rule(rule)
        except CleanupError as error:
            tally.failed.append(str(error))
            continue
        tally.rules.add(rule)
        removed.append(f"DeviceTaintRule {rule}")
        print(f"DeviceTaintRule {rule}: {'gone already' if gone else delete}{since}")

    try:
        nodes = leftovers.marked_nodes()
    except CleanupError as error:
        tally.failed.append(str(error))
        nodes = []
    answers: list[bool | CleanupError] = (
        [True] * len(nodes) if args.dry_run else leftovers.unmark_all(nodes)
    )
    for marks, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, CleanupError):
            tally.failed.append(str(answer))
            continue
        tally.nodes.add(marks.node)
        removed.append(f"Node {marks.node}")
        print(f"Node {marks.node}: {remove + ' ' + marks.describe() if answer else 'gone'}{since}")
    return removed


def _stranded(leftovers: Leftovers, tally: Tally) -> list[Any]:
    from migslice.kube.cleanup import CleanupError

    try:
        return leftovers.stranded_pods()
    except CleanupError as error:
        tally.failed.append(str(error))
        return []


def _report(args: argparse.Namespace, tally: Tally, pods: list[Any]) -> None:
    if pods:
        print(
            f"{len(pods)} {'pod waits' if len(pods) == 1 else 'pods wait'} for migslice and "
            "nothing will schedule them; migslice "
            "deletes none (a Deployment's or Job's pod is made again, through the default "
            "scheduler, once deleted). Delete each with:"
        )
    for pod in pods:
        print(f"  {pod.command()}    # {pod.reason}")
    if tally.rules or tally.nodes:
        verb = "would remove" if args.dry_run else "removed"
        print(
            f"{verb}: {len(tally.rules)} DeviceTaintRules, migslice's keys from "
            f"{len(tally.nodes)} Nodes"
        )
    if tally.failed:
        for line in dict.fromkeys(tally.failed):  # a request refused again in a later pass
            print(f"migslice cleanup: {line}", file=sys.stderr)
        raise CommandError(
            f"cleanup incomplete: {len(set(tally.failed))} API requests refused or failed "
            "(above); "
            "run `migslice cleanup` again with an account that may do them"
        )
    if not tally.rules and not tally.nodes and not pods:
        print("nothing to clean: no steer rule, no node key of migslice's, no pod waiting for it")
