"""``migslice demo``: walk a multi-tenant scenario against the real servers, locally."""

from __future__ import annotations

import argparse
import sys

from migslice import console
from migslice.console import CommandError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workdir", type=console.file_path, help="keep certificates, cluster file and logs here"
    )
    parser.add_argument(
        "--pause-s", type=console.seconds(), default=0.0, help="pause between steps"
    )


def run_demo(args: argparse.Namespace) -> int:
    from migslice.demo.scenario import DemoError, run

    if args.workdir is not None:
        try:
            args.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise CommandError(f"--workdir {args.workdir}: {error}") from None
    try:
        return run(sys.stdout, args.workdir, args.pause_s)
    except DemoError as error:
        raise CommandError(str(error)) from None


COMMAND = console.Command(
    "demo",
    help="run the webhook and extender over HTTPS on an example cluster and walk a scenario",
    description=(
        "Starts `migslice webhook` and `migslice extender` (gunicorn, TLS) on a bundled "
        "example cluster and walks four tenants through admission, quota, scheduling and "
        "one re-partition, printing what happens. The demo plays kube-apiserver, "
        "kube-scheduler and MIG Manager; nothing leaves this machine."
    ),
    add_arguments=add_arguments,
    run=run_demo,
)
COMMANDS = (COMMAND,)
