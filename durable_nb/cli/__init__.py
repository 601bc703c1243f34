"""The ``durable-nb`` command: each subcommand opens the store, makes one library call, prints.

Only commands that start runs create a store; the others refuse one that does not exist. A run is
named by its whole id or any start of it that no other run's id has.

Every error becomes one clean line on stderr (a JSON object with ``--json``) and an exit code:
1 for a failure of the operation (or any unexpected error), 2 for a start of an id several runs
share, 3 when the run is not in a state that allows it, 4 when it or its store does not exist,
130 when interrupted. Whatever comes from the store (names, errors, gate reasons) is printed with
its control characters escaped, so it cannot move the cursor, retitle the terminal or forge a line.

One module a group of commands (``runs``, ``gates``, ``forks``, ``upkeep``, ``demo``,
``notebooks``, ``serve``), each with its commands' handlers, help and arguments; this one puts
them in the order ``durable-nb --help`` lists them and runs the one asked for.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

import durable_nb as dnb

from . import demo, forks, gates, notebooks, runs, serve, upkeep
from .common import Command
from .failures import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_STATE, EXIT_USAGE, report
from .output import printable

__all__ = [
    "COMMANDS",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_FOUND",
    "EXIT_STATE",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "printable",
]

_GROUPS = (runs, gates, forks, upkeep, demo, notebooks, serve)
# Each command's group, which adds its arguments.
_ARGUMENTS: dict[str, Callable[[str, argparse.ArgumentParser], None]] = {
    name: group.add_arguments for group in _GROUPS for name, *_ in group.COMMANDS
}
_BY_NAME: dict[str, Command] = {command[0]: command for group in _GROUPS for command in group.COMMANDS}
# The order of ``durable-nb --help``: reading runs, deciding and steering them, then the rest.
_ORDER = (
    "runs",
    "show",
    "history",
    "approve",
    "reject",
    "resume",
    "cancel",
    "fork",
    "replay",
    "prune",
    "recover",
    "demo",
    "run-notebook",
    "mcp",
    "serve",
)
COMMANDS: list[Command] = [_BY_NAME[name] for name in _ORDER]


class _Parser(argparse.ArgumentParser):
    """argparse, with the command line's text escaped in its error line."""

    def error(self, message: str) -> NoReturn:
        """Print usage and the escaped error, then exit 2 (as argparse does)."""
        super().error(printable(message))


def build_parser() -> argparse.ArgumentParser:
    """Return the parser of every subcommand (each with help and an example)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=None, help="store URL (default: $DURABLE_NB_STORE or .durable_nb/runs.db)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    parser = _Parser(
        prog="durable-nb",
        description="Inspect and steer durable_nb runs from the command line.",
        epilog="Run 'durable-nb COMMAND --help' for a command's options and an example.",
    )
    parser.add_argument("--version", action="version", version=f"durable-nb {dnb.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, handler, summary, example in COMMANDS:
        sub = commands.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary,
            epilog=f"example:\n  {example}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.set_defaults(handler=handler)
        _ARGUMENTS[name](name, sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    words = notebooks.parameter_pairs(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(serve.schedule_groups(words))
    try:
        code = args.handler(args)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - every error is one line, never a traceback
        return report(error, args.json)
    return code if isinstance(code, int) else 0
