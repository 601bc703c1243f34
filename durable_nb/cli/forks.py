"""The command that branches a run: fork."""

from __future__ import annotations

import argparse

import durable_nb as dnb

from ..engine.forks.literals import OverrideText
from .common import Command, add_run_argument, existing_store, run_id_of
from .output import print_run, printable

__all__ = ["COMMANDS", "add_arguments"]


def cmd_fork(args: argparse.Namespace) -> None:
    store = existing_store(args)
    run_id = run_id_of(store, args.run)
    # Each --set value keeps the type it has at the fork point: the fork checks, and refuses.
    run = dnb.fork(run_id, args.at, OverrideText.parse(args.set), store=store)
    print_run(run, args, "forked")
    if not args.json:
        print(
            f"  from {printable(run_id)}; run it with its workflow: "
            f"durable-nb resume {printable(run.id)} --workflow module:flow"
        )


COMMANDS: list[Command] = [
    (
        "fork",
        cmd_fork,
        "Branch a run from a checkpoint, with changed values.",
        "durable-nb fork 0192f0c1-… --set rate=0.5",
    ),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    add_run_argument(sub)
    sub.add_argument("--at", default=None, help="checkpoint id (default: the latest)")
    sub.add_argument("--set", action="append", default=[], metavar="NAME=LITERAL", help="a value to change")
