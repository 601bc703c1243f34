"""Commands that look after a store: prune old history, recover runs stranded by dead processes."""

from __future__ import annotations

import argparse
import json

import durable_nb as dnb

from .common import Command, existing_store, load_workflow, parse_duration
from .output import printable

__all__ = ["COMMANDS", "add_arguments"]


def cmd_prune(args: argparse.Namespace) -> None:
    report = dnb.prune(args.older_than, store=existing_store(args))
    fields = {
        "checkpoints": report.checkpoints,
        "events": report.events,
        "idempotency": report.idempotency,
        "blobs": report.blobs,
        "bytes_freed": report.bytes_freed,
    }
    if args.json:
        print(json.dumps(fields))
    else:
        print("pruned: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in fields.items()))


def cmd_recover(args: argparse.Namespace) -> None:
    flows = [load_workflow(spec) for spec in args.workflow]
    store = existing_store(args) if args.store is not None or not flows else flows[0].store
    if args.store is not None:
        flows = [dnb.Workflow._bound_to(flow, store) for flow in flows]
    report = dnb.recover(flows, store=store)
    summary = {
        "resumed": {r.id: r.status for r in report.resumed},
        "failed": report.failed,
        "left_alone": report.left_alone,
        "expired_gates": report.expired_gates,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return
    print(f"resumed {len(report.resumed)}, marked failed {len(report.failed)}, left alone {len(report.left_alone)}")
    for run in report.resumed:
        print(f"  {printable(run.id)}: {printable(run.status)}")


COMMANDS: list[Command] = [
    ("prune", cmd_prune, "Delete old history of finished runs.", "durable-nb prune --older-than 30d"),
    (
        "recover",
        cmd_recover,
        "Resume or fail runs stranded by dead processes.",
        "durable-nb recover --workflow app.flows:triage",
    ),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    if name == "prune":
        sub.add_argument("--older-than", type=parse_duration, required=True, help="e.g. 30d, 12h, 2w")
    else:
        sub.add_argument("--workflow", action="append", default=[], help="module:attribute (repeatable)")
