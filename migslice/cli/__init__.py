"""The ``migslice`` command line: static dispatch to the commands each room defines.

The geometry engine's commands (``models``, ``profiles``, ``layouts``, ``fit``), ``certs``,
``plan`` and ``cleanup`` live here; the services define their own (``webhook``, ``extender``,
``agent``/``inspect``, ``demo``, ``simulate``, ``doctor``, ``status``/``why``) with their
flags and settings.
Nothing imports this package.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from migslice import __version__
from migslice.cli import certs, cleanup, geometry, plan
from migslice.console import Command, run_handler

SERVICE_MODULES = (
    "webhook.command",
    "extender.command",
    "agent.command",
    "migslice.demo.command",
    "migslice.sim.command",
    "migslice.doctor.command",
    "migslice.status.command",
)
"""The modules whose ``COMMANDS`` the program runs, in the order ``--help`` lists them."""
MODULE_OF = {
    "webhook": "webhook.command",
    "extender": "extender.command",
    "agent": "agent.command",
    "inspect": "agent.command",
    "demo": "migslice.demo.command",
    "simulate": "migslice.sim.command",
    "doctor": "migslice.doctor.command",
    "status": "migslice.status.command",
    "why": "migslice.status.command",
}
"""Which module defines a command: a run imports only its own command's module (``status``
does not load the servers' web stack); any other argument list loads them all."""


def service_commands(argv: Sequence[str] | None = None) -> tuple[Command, ...]:
    """The service commands to offer for ``argv``: the named command's module alone when
    the first argument names one (:data:`MODULE_OF`), else every module's."""
    first = next((a for a in argv or () if not a.startswith("-")), None)
    modules = (MODULE_OF[first],) if first in MODULE_OF else SERVICE_MODULES
    found: list[Command] = []
    for module in modules:
        found += importlib.import_module(module).COMMANDS
    return tuple(found)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migslice",
        description="Multi-tenant GPU slicing on NVIDIA MIG for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"migslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    geometry.register(commands)
    certs.register(commands)
    plan.register(commands)
    cleanup.register(commands)
    for command in service_commands(argv):
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    return run_handler(parser.parse_args(argv))
