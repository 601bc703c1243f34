"""The commands that branch a run: fork, and replay (a notebook run's cells again, with other values)."""

from __future__ import annotations

import argparse

import durable_nb as dnb

from ..engine.forks.literals import OverrideText, parse_sweep
from .common import Command, add_run_argument, existing_store, run_id_of
from .output import dumps, jsonable, print_run, printable

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


def cmd_replay(args: argparse.Namespace) -> None:
    from ..engine.cells.replay_runs import start_replay

    store = existing_store(args)
    run_id = run_id_of(store, args.run)
    sweep = dict(parse_sweep(text) for text in args.sweep)
    started = start_replay(store, run_id, args.at, OverrideText.parse(args.set).values, sweep)
    if args.wait:
        started.wait()
    runs = started.runs()
    if args.json:
        print(
            dumps(
                jsonable(
                    [{"run_id": r.id, "status": r.status, "values": r.record.meta["replay"]["values"]} for r in runs]
                ),
                indent=2,
            )
        )
        return
    for run in runs:
        print_run(run, args, "replay")
    if not args.wait:
        print("  the forks run in background kernels; durable-nb runs shows how far they got")


COMMANDS: list[Command] = [
    (
        "fork",
        cmd_fork,
        "Branch a run from a checkpoint, with changed values.",
        "durable-nb fork 0192f0c1-… --set rate=0.5",
    ),
    (
        "replay",
        cmd_replay,
        "Run a notebook run's cells again from one cell, in background kernels, once per value.",
        "durable-nb replay 0192f0c1-… --at train --sweep rate=0.1,0.01 --wait",
    ),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    add_run_argument(sub)
    if name == "replay":
        sub.add_argument("--at", required=True, help="the cell to replay from (the forks branch just before it)")
        sub.add_argument("--set", action="append", default=[], metavar="NAME=LITERAL", help="a value every fork takes")
        sub.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2", help="one fork per value")
        sub.add_argument("--wait", action="store_true", help="wait until every fork finished or paused at a gate")
        return
    sub.add_argument("--at", default=None, help="checkpoint id (default: the latest)")
    sub.add_argument("--set", action="append", default=[], metavar="NAME=LITERAL", help="a value to change")
