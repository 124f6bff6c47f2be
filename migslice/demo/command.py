"""``migslice demo``: walk a multi-tenant scenario against the real servers, locally."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from migslice.cli.common import CommandError


def register(commands: Any) -> None:
    demo = commands.add_parser(
        "demo",
        help="run the webhook and extender over HTTPS on an example cluster and walk a scenario",
        description=(
            "Starts `migslice webhook` and `migslice extender` (gunicorn, TLS) on a bundled "
            "example cluster and walks three tenants through admission, quota, scheduling and "
            "one re-partition, printing what happens. The demo plays kube-apiserver, "
            "kube-scheduler and MIG Manager; nothing leaves this machine."
        ),
    )
    demo.add_argument("--workdir", type=Path, help="keep certificates, cluster file and logs here")
    demo.add_argument("--pause-s", type=float, default=0.0, help="pause between steps")
    demo.set_defaults(handler=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from migslice.demo.scenario import DemoError, run

    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    try:
        return run(sys.stdout, args.workdir, args.pause_s)
    except DemoError as error:
        raise CommandError(str(error)) from None
