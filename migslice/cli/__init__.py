"""The ``migslice`` command line: static dispatch to the commands each room defines.

The geometry engine's commands (``models``, ``profiles``, ``layouts``, ``fit``), ``certs``
and ``plan`` live here; the services define their own (``webhook``, ``extender``,
``agent``/``inspect``, ``demo``, ``simulate``, ``doctor``, ``status``/``why``) with their
flags and settings.
Nothing imports this package.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from agent.command import COMMANDS as AGENT_COMMANDS
from extender.command import COMMANDS as EXTENDER_COMMANDS
from migslice import __version__
from migslice.cli import certs, geometry, plan
from migslice.console import fail
from migslice.demo.command import COMMANDS as DEMO_COMMANDS
from migslice.doctor.command import COMMANDS as DOCTOR_COMMANDS
from migslice.errors import MigsliceError
from migslice.sim.command import COMMANDS as SIM_COMMANDS
from migslice.status.command import COMMANDS as STATUS_COMMANDS
from webhook.command import COMMANDS as WEBHOOK_COMMANDS

SERVICE_COMMANDS = (
    *WEBHOOK_COMMANDS,
    *EXTENDER_COMMANDS,
    *AGENT_COMMANDS,
    *DEMO_COMMANDS,
    *SIM_COMMANDS,
    *DOCTOR_COMMANDS,
    *STATUS_COMMANDS,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migslice",
        description="Multi-tenant GPU slicing on NVIDIA MIG for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"migslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    geometry.register(commands)
    certs.register(commands)
    plan.register(commands)
    for command in SERVICE_COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except MigsliceError as error:  # CommandError and any core error a command let through
        return fail(str(error))
    except BrokenPipeError:
        # The reader went away (``migslice layouts ... | head -1``): stop quietly, as a Unix
        # tool stopped by SIGPIPE does, and keep the interpreter from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:
        print("migslice: interrupted", file=sys.stderr)
        return 130
    return code
