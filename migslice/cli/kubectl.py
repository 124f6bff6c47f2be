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
    (``--context c status`` -> ``status --context c``); the value of a flag is never taken
    for the name (``-n status why p``: namespace ``status``)."""
    names = {command.name for command in COMMANDS}
    valued = _flags_with_a_value()
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in names:
            return [arg, *args[:index], *args[index + 1 :]]
        index += 2 if arg in valued else 1
    return args


def _flags_with_a_value() -> set[str]:
    """Every option string of the commands that takes a value as the next argument."""
    found: set[str] = set()
    for command in COMMANDS:
        parser = argparse.ArgumentParser(add_help=False)
        command.add_arguments(parser)
        for action in parser._actions:  # argparse keeps no public list of them
            if action.option_strings and action.nargs != 0:
                found.update(action.option_strings)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(command_first(sys.argv[1:] if argv is None else argv))
    return run_handler(args)
