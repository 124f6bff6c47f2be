"""``kubectl migslice``: the kubectl plugin (the console script ``kubectl-migslice``).

kubectl runs an executable named ``kubectl-migslice`` found on ``PATH`` for ``kubectl
migslice ...``, with every argument after the plugin's name. It runs ``status`` and ``why``
exactly as ``migslice status`` and ``migslice why`` do, with kubectl's flags: ``--kubeconfig``,
``--context``, ``-n``/``--namespace`` (and ``$KUBECONFIG``, as kubectl reads it), given
before or after the command's name.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from migslice import __version__
from migslice.console import run_handler
from migslice.status.command import COMMANDS

PROG = "kubectl migslice"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="migslice's view of a cluster, as a kubectl plugin."
    )
    parser.add_argument("--version", action="version", version=f"kubectl-migslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(sub)
        sub.set_defaults(handler=command.run)
    return parser


def command_first(argv: Sequence[str]) -> list[str]:
    """``argv`` with the command's name moved before kubectl-style flags given ahead of it
    (``--context c status`` -> ``status --context c``)."""
    names = {command.name for command in COMMANDS}
    args = list(argv)
    for index, arg in enumerate(args):
        if arg in names:
            return [arg, *args[:index], *args[index + 1 :]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(command_first(sys.argv[1:] if argv is None else argv))
    return run_handler(args)
