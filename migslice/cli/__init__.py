"""The ``migslice`` command line.

Each command module has ``register(subparsers)``, which adds its commands and sets
``handler`` (``args -> exit status``) on them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from migslice import __version__
from migslice.cli.common import CommandError

COMMAND_MODULES = (
    "migslice.cli.geometry",
    "migslice.cli.certs",
    "migslice.cli.extender",
    "migslice.cli.webhook",
    "migslice.cli.agent",
    "migslice.cli.plan",
    "migslice.cli.demo",
    "migslice.cli.simulate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migslice",
        description="Multi-tenant GPU slicing on NVIDIA MIG for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"migslice {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except CommandError as error:
        print(f"migslice: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("migslice: interrupted", file=sys.stderr)
        return 130
    return code
