"""Commands that serve workflows to other programs: mcp (over stdio) and serve (over HTTP)."""

from __future__ import annotations

import argparse

from .common import Command, load_workflow, parse_positive_int

__all__ = ["COMMANDS", "add_arguments"]


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
        "--notebook-outputs",
        default=None,
        metavar="DIR",
        help="write executed notebooks and logs here (default DIR/.durable-nb-outputs)",
    )
