"""Commands that read runs and steer them: runs, show, history, resume, cancel."""

from __future__ import annotations

import argparse
import json

import durable_nb as dnb

from .common import Command, add_run_argument, existing_store, load_workflow, parse_positive_int, run_id_of
from .output import frame_records, jsonable, print_frame, print_run, table

__all__ = ["COMMANDS", "add_arguments"]


def cmd_runs(args: argparse.Namespace) -> None:
    frame = dnb.runs(args.name, store=existing_store(args))
    if args.status:
        frame = frame[frame["status"] == args.status]
    print_frame(frame, args, ["run_id", "name", "kind", "status", "created_at", "checkpoints", "error"])


def cmd_show(args: argparse.Namespace) -> None:
    store = existing_store(args)
    run_id = run_id_of(store, args.run)
    status = dnb.status(run_id, store=store)
    frame = dnb.history(run_id, store=store).tail(args.last)
    if args.json:
        print(json.dumps(jsonable({**status, "last_checkpoints": frame_records(frame)}), indent=2))
        return
    run = dnb.get_run(run_id, store=store)
    print_run(run, args, "show")
    counts = ", ".join(f"{k} {v}" for k, v in status["node_counts"].items() if v)
    print(f"  nodes: {counts or 'none yet'}")
    print(table(frame, ["seq", "step", "status", "created_at", "duration"]))


def cmd_history(args: argparse.Namespace) -> None:
    store = existing_store(args)
    frame = dnb.history(run_id_of(store, args.run), store=store)
    print_frame(frame, args, ["seq", "step", "status", "created_at", "duration", "attempts", "bytes_written", "error"])


def cmd_resume(args: argparse.Namespace) -> None:
    flow = load_workflow(args.workflow)
    if args.store is not None:
        flow = dnb.Workflow._bound_to(flow, existing_store(args))
    print_run(flow.resume(run_id_of(flow.store, args.run)), args, "resumed")


def cmd_cancel(args: argparse.Namespace) -> None:
    store = existing_store(args)
    print_run(dnb.cancel(run_id_of(store, args.run), store=store), args, "cancelled")


COMMANDS: list[Command] = [
    ("runs", cmd_runs, "List runs, newest first.", "durable-nb runs --name support-triage --status paused"),
    ("show", cmd_show, "Show a run's status and its last checkpoints.", "durable-nb show 0192f0c1-…"),
    ("history", cmd_history, "Show every checkpoint of a run.", "durable-nb history 0192f0c1-… --json"),
    (
        "resume",
        cmd_resume,
        "Resume a run with its workflow's code.",
        "durable-nb resume 0192f0c1-… --workflow app.flows:triage",
    ),
    ("cancel", cmd_cancel, "Cancel a pending, running or paused run.", "durable-nb cancel 0192f0c1-…"),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    if name == "runs":
        sub.add_argument("--name", default=None, help="only runs of this name")
        sub.add_argument("--status", default=None, choices=[s.value for s in dnb.RunStatus], help="only this status")
        return
    add_run_argument(sub)
    if name == "show":
        sub.add_argument("--last", type=parse_positive_int, default=5, help="how many recent checkpoints to list")
    elif name == "resume":
        sub.add_argument("--workflow", required=True, help="module:attribute of the Workflow")
