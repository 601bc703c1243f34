"""Commands that decide the gate a run waits at: approve, reject."""

from __future__ import annotations

import argparse
import json
from typing import Any

import durable_nb as dnb

from ..errors import InvalidInput
from .common import Command, add_run_argument, existing_store, run_id_of
from .output import print_run

__all__ = ["COMMANDS", "add_arguments"]


def _decision_value(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as error:  # not JSON, or a number too long to read
        raise InvalidInput(f"--value takes JSON (e.g. '{{\"limit\": 500}}' or '\"text\"'): {error}.") from None


def cmd_approve(args: argparse.Namespace) -> None:
    decide = dnb.approve if args.command == "approve" else dnb.reject
    store = existing_store(args)
    run = decide(
        run_id_of(store, args.run),
        node=args.node,
        comment=args.comment,
        by=args.by,
        value=_decision_value(args.value),
        store=store,
    )
    print_run(run, args, "approved" if args.command == "approve" else "rejected")
    if not args.json:
        print("  the run continues when a process with its code resumes it (or its notebook cell runs again)")


COMMANDS: list[Command] = [
    (
        "approve",
        cmd_approve,
        "Approve the gate a run waits at.",
        'durable-nb approve 0192f0c1-… --comment "ok" --by ana',
    ),
    (
        "reject",
        cmd_approve,
        "Reject the gate a run waits at.",
        'durable-nb reject 0192f0c1-… --comment "numbers wrong"',
    ),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    add_run_argument(sub)
    sub.add_argument("--node", default=None, help="the gated node (when several wait)")
    sub.add_argument("--comment", default=None, help="why")
    sub.add_argument("--by", default=None, help="who decides (default: your user name)")
    sub.add_argument("--value", default=None, help="a JSON value handed to the node")
