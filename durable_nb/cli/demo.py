"""The command that shows durable_nb at work on the quickstart notebook: demo."""

from __future__ import annotations

import argparse
import sys

from .common import Command
from .output import dumps, frame_records

__all__ = ["COMMANDS", "add_arguments"]


def cmd_demo(args: argparse.Namespace) -> None:
    from ..demo.run import run_demo

    # With --json, the steps go to stderr and stdout carries only the summary.
    result = run_demo(args.folder, keep=args.keep, store=args.store, out=sys.stderr if args.json else sys.stdout)
    if args.json:
        summary = {
            "run_id": result.run_id,
            "status": result.status,
            "store": result.store,
            "seconds": round(result.seconds, 3),
            "history": frame_records(result.history[["seq", "step", "status", "duration", "changed"]]),
        }
        print(dumps(summary, indent=2))


COMMANDS: list[Command] = [
    ("demo", cmd_demo, "Run the quickstart notebook: crash it, restore it, approve it.", "durable-nb demo"),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    sub.add_argument("--folder", default=None, help="work here instead of a temporary folder")
    sub.add_argument("--keep", action="store_true", help="keep the temporary folder")
