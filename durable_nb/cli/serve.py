"""Commands that serve workflows to other programs: mcp (over stdio) and serve (over HTTP)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import ConfigurationError
from .common import Command, load_workflow, parse_positive_int
from .notebooks import add_parameter_option, parameter_value

__all__ = ["COMMANDS", "add_arguments", "schedule_groups"]

_PARAMETER = ("-p", "--parameter")


def schedule_groups(argv: list[str]) -> list[str]:
    """Give each ``--schedule CRON TARGET [-p NAME VALUE]…`` of serve as one ``--schedule-spec=JSON``.

    A ``-p`` belongs to the ``--schedule`` before it, which argparse alone cannot say; the words are
    taken as they are (a VALUE may start with '-'). A group cut short stays as written, for argparse
    to say what is missing.
    """
    if "serve" not in argv:
        return argv
    joined = argv[: argv.index("serve") + 1]
    rest = argv[len(joined) :]
    at = 0
    while at < len(rest):
        if rest[at] != "--schedule" or len(rest) - at < 3:
            joined.append(rest[at])
            at += 1
            continue
        cron, target = rest[at + 1], rest[at + 2]
        at += 3
        pairs = []
        while at < len(rest) and rest[at] in _PARAMETER and len(rest) - at >= 3:
            pairs.append([rest[at + 1], rest[at + 2]])
            at += 3
        joined.append(f"--schedule-spec={json.dumps([cron, target, pairs])}")
    return joined


def _planned(args: argparse.Namespace) -> list[Any]:
    from ..service.schedules import Planned

    if args.parameter:
        raise ConfigurationError("-p NAME VALUE goes right after the --schedule CRON TARGET it belongs to.")
    planned = []
    for spec in args.schedule_spec:
        cron, target, pairs = json.loads(spec)
        parameters = {name: parameter_value(value) for name, value in pairs}
        planned.append(Planned(cron, target, parameters, args.missed, args.schedule_timezone))
    return planned


def cmd_mcp(args: argparse.Namespace) -> None:
    from ..service.serve import serve_mcp

    serve_mcp([load_workflow(spec) for spec in args.workflow], store=args.store, scope=args.scope)


def cmd_serve(args: argparse.Namespace) -> None:
    from ..service.serve import serve

    serve(
        [load_workflow(spec) for spec in args.workflow],
        store=args.store,
        host=args.host,
        port=args.port,
        tokens=args.tokens,
        no_auth=args.no_auth,
        recover_every=args.recover_every,
        notebooks=args.notebooks,
        notebook_outputs=args.notebook_outputs,
        allowed_host=args.allowed_host,
        max_body=args.max_body,
        schedules=_planned(args),
        max_notebooks=args.max_notebooks,
    )


COMMANDS: list[Command] = [
    (
        "mcp",
        cmd_mcp,
        "Serve the MCP tools (run_get, run_list, run_start, run_approve, …) over stdio.",
        "durable-nb mcp --workflow app.flows:triage --scope decide",
    ),
    (
        "serve",
        cmd_serve,
        "Serve workflows over HTTP: start, watch, decide and steer runs; recover stranded ones.",
        "durable-nb serve --workflow app.flows:triage --tokens tokens.txt --port 8000",
    ),
]


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    sub.add_argument("--workflow", action="append", default=[], help="module:attribute (repeatable)")
    if name == "mcp":
        sub.add_argument(
            "--scope", default="read", choices=["read", "decide", "admin"], help="what the tools may do (read)"
        )
        return
    sub.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sub.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    sub.add_argument("--tokens", default=None, help="file of 'name scope secret' lines ($DURABLE_NB_TOKENS too)")
    sub.add_argument("--no-auth", action="store_true", help="no tokens needed (only on a loopback address)")
    sub.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests naming this host (repeatable; loopback names and --host always)",
    )
    sub.add_argument(
        "--max-body",
        type=parse_positive_int,
        default=None,
        metavar="BYTES",
        help="refuse request bodies larger than this (default 1048576, 1 MiB)",
    )
    sub.add_argument("--recover-every", type=float, default=30.0, help="seconds between looks for stranded runs")
    sub.add_argument(
        "--notebooks", default=None, metavar="DIR", help="run the notebooks in DIR (POST /api/notebooks/…)"
    )
    sub.add_argument(
        "--schedule",
        nargs=2,
        action="append",
        default=[],
        metavar=("CRON", "TARGET"),
        help="start the workflow or notebook TARGET at each time of CRON, e.g. '0 6 * * *' (repeatable; "
        "-p NAME VALUE after it gives it a parameter); kept in the store until deleted (DELETE /api/schedules/ID)",
    )
    sub.add_argument("--schedule-spec", action="append", default=[], help=argparse.SUPPRESS)
    add_parameter_option(sub, "an input value or parameter of the --schedule before it (repeatable)")
    sub.add_argument(
        "--missed",
        choices=["run-once", "skip"],
        default="run-once",
        help="times of the --schedule(s) passed while no server ran: one run for them (run-once, the default) "
        "or none (skip)",
    )
    sub.add_argument(
        "--schedule-timezone",
        default="UTC",
        metavar="ZONE",
        help="the IANA time zone the --schedule times are in (default UTC), e.g. Europe/Paris",
    )
    sub.add_argument(
        "--max-notebooks",
        type=int,
        default=None,
        metavar="N",
        help="run at most N notebook processes at once here; more wait, pending, for this or another server "
        "(default: twice the usable cores, at least 4)",
    )
    sub.add_argument(
        "--notebook-outputs",
        default=None,
        metavar="DIR",
        help="write executed notebooks and logs here (default DIR/.durable-nb-outputs)",
    )
