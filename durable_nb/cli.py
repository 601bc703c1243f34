"""The ``durable-nb`` command: each subcommand opens the store, makes one library call, prints.

Only commands that start runs create a store; the others refuse one that does not exist. A run is
named by its whole id or any start of it that no other run's id has.

Every error becomes one clean line on stderr (a JSON object with ``--json``) and an exit code:
1 for a failure of the operation (or any unexpected error), 2 for a start of an id several runs
share, 3 when the run is not in a state that allows it, 4 when it or its store does not exist,
130 when interrupted. Whatever comes from the store (names, errors, gate reasons) is printed with
its control characters escaped, so it cannot move the cursor, retitle the terminal or forge a line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn

import durable_nb as dnb

from ._loop import run_sync
from .engine.overrides import OverrideText
from .engine.run_ids import complete_run_id
from .errors import (
    AlreadyResumed,
    AmbiguousRunId,
    DurableError,
    InvalidInput,
    InvalidNotebookRun,
    NotCancellable,
    NotResumable,
    RunNotFound,
    RunOwnedElsewhere,
    StoreNotFound,
    UnknownGate,
)
from .store import Store
from .views.text import human_frame

__all__ = ["main", "printable"]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_STATE = 3
EXIT_NOT_FOUND = 4
EXIT_INTERRUPTED = 130

# C0 controls, DEL and C1 controls (Unicode category Cc): shown as Python-style escapes.
_SPECIAL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = {code: _SPECIAL.get(chr(code), f"\\x{code:02x}") for code in [*range(0x20), *range(0x7F, 0xA0)]}
# json.dumps escapes C0 itself; DEL and C1 only occur inside JSON strings, where \u escapes keep the text.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """Parse ``30d``, ``12h``, ``15m``, ``45s`` or ``2w``."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30d, 12h, 15m, 45s or 2w")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def parse_positive_int(text: str) -> int:
    """Parse a whole number of at least 1 (for ``--last``)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return number


def existing_store(args: argparse.Namespace) -> Store:
    """Return the store of ``--store`` (default: $DURABLE_NB_STORE, else .durable_nb/runs.db), which must exist.

    Only commands that start runs create a store: a mistyped URL is refused, not made.
    """
    return dnb.connect(args.store, create=False)


def run_id_of(store: Store, text: str) -> str:
    """Return the id of the run ``text`` names: its whole id or any start of it only one run's id has."""
    return run_sync(complete_run_id(store, text))


def load_workflow(spec: str) -> dnb.Workflow:
    """Import ``module:attribute`` and return the Workflow it names."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise InvalidInput(f"--workflow takes module:attribute (e.g. pipelines.triage:flow), not {spec!r}.")
    sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidInput(f"Cannot import {module_name!r} for --workflow: {error}.") from error
    flow = getattr(module, attribute, None)
    if not isinstance(flow, dnb.Workflow):
        raise InvalidInput(f"{spec} is not a durable_nb.Workflow (found {type(flow).__name__}).")
    return flow


# -- output ---------------------------------------------------------------------------------------


def printable(text: str) -> str:
    """Return ``text`` with control characters (newlines too) shown as escapes like ``\\x1b``."""
    return text.translate(_CONTROLS)


def _dumps(value: Any, indent: int | None = None) -> str:
    # Non-ASCII text stays readable; a C1 control (U+009B is a CSI to some terminals) does not.
    return json.dumps(value, indent=indent, ensure_ascii=False).translate(_JSON_CONTROLS)


def _printable_cell(value: Any) -> Any:
    return printable(value) if isinstance(value, str) else value


def _printable_frame(frame: Any) -> Any:
    # Text columns are object or string dtype; statuses are categoricals of fixed enum values.
    text = [c for c in frame.columns if frame[c].dtype == object or str(frame[c].dtype) == "string"]
    if not text:
        return frame
    return frame.assign(**{str(c): frame[c].map(_printable_cell, na_action="ignore") for c in text})


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    return str(value)


def _frame_records(frame: Any) -> list[dict[str, Any]]:
    return [_jsonable({k: (None if _missing(v) else v) for k, v in row.items()}) for row in frame.to_dict("records")]


def _missing(value: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(value)) if not isinstance(value, list | dict) else False
    except (TypeError, ValueError):
        return False


def _print_frame(frame: Any, args: argparse.Namespace, columns: list[str] | None = None) -> None:
    if args.json:
        print(_dumps(_frame_records(frame), indent=2))
        return
    print("(none)" if frame.empty else _table(frame, columns))


def _table(frame: Any, columns: list[str] | None = None) -> str:
    # Durations and times as the notebook shows them; whole ids, which people copy from here.
    return _printable_frame(human_frame(frame, columns)).to_string(index=False)


def _print_run(run: dnb.Run, args: argparse.Namespace, headline: str) -> None:
    if args.json:
        record = {
            "run_id": run.id,
            "name": run.name,
            "status": run.status,
            "error": run.error,
            "pending_interrupt": run.pending_interrupt,
            "parent_run_id": run.parent_run_id,
            "parent_checkpoint_id": run.parent_checkpoint_id,
        }
        print(_dumps(_jsonable(record), indent=2))
        return
    print(f"{headline}: run {printable(run.id)} ({printable(run.name)}) is {printable(run.status)}")
    if run.pending_interrupt:
        gate = run.pending_interrupt
        print(f"  waiting at gate {printable(repr(gate['reason']))} in node {printable(repr(gate['node_id']))}")
    if run.error:
        print(f"  error: {printable(run.error)}")


# -- commands ---------------------------------------------------------------------------------------


def cmd_runs(args: argparse.Namespace) -> None:
    frame = dnb.runs(args.name, store=existing_store(args))
    if args.status:
        frame = frame[frame["status"] == args.status]
    _print_frame(frame, args, ["run_id", "name", "kind", "status", "created_at", "checkpoints", "error"])


def cmd_show(args: argparse.Namespace) -> None:
    store = existing_store(args)
    run_id = run_id_of(store, args.run)
    status = dnb.status(run_id, store=store)
    frame = dnb.history(run_id, store=store).tail(args.last)
    if args.json:
        print(json.dumps(_jsonable({**status, "last_checkpoints": _frame_records(frame)}), indent=2))
        return
    run = dnb.get_run(run_id, store=store)
    _print_run(run, args, "show")
    counts = ", ".join(f"{k} {v}" for k, v in status["node_counts"].items() if v)
    print(f"  nodes: {counts or 'none yet'}")
    print(_table(frame, ["seq", "step", "status", "created_at", "duration"]))


def cmd_history(args: argparse.Namespace) -> None:
    store = existing_store(args)
    frame = dnb.history(run_id_of(store, args.run), store=store)
    _print_frame(frame, args, ["seq", "step", "status", "created_at", "duration", "attempts", "bytes_written", "error"])


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
    _print_run(run, args, "approved" if args.command == "approve" else "rejected")
    if not args.json:
        print("  the run continues when a process with its code resumes it (or its notebook cell runs again)")


def cmd_resume(args: argparse.Namespace) -> None:
    flow = load_workflow(args.workflow)
    if args.store is not None:
        flow = dnb.Workflow._bound_to(flow, existing_store(args))
    _print_run(flow.resume(run_id_of(flow.store, args.run)), args, "resumed")


def cmd_cancel(args: argparse.Namespace) -> None:
    store = existing_store(args)
    _print_run(dnb.cancel(run_id_of(store, args.run), store=store), args, "cancelled")


def cmd_fork(args: argparse.Namespace) -> None:
    store = existing_store(args)
    run_id = run_id_of(store, args.run)
    # Each --set value keeps the type it has at the fork point: the fork checks, and refuses.
    run = dnb.fork(run_id, args.at, OverrideText.parse(args.set), store=store)
    _print_run(run, args, "forked")
    if not args.json:
        print(
            f"  from {printable(run_id)}; run it with its workflow: "
            f"durable-nb resume {printable(run.id)} --workflow module:flow"
        )


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


def _parameter_value(text: str) -> Any:
    """A -p value as papermill reads it: True, False and None as written, an int, a float, else the text."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _parameter_pairs(argv: list[str]) -> list[str]:
    """Give each ``-p NAME VALUE`` of run-notebook as one ``--parameter-pair=["NAME", "VALUE"]`` (JSON).

    argparse would take a value starting with '-' (``-inf``, ``-v``) for an option; papermill's
    ``-p`` takes the two words after it as they are, and so does this. JSON keeps the two words
    apart whatever they hold (a NAME with '=' is then refused as a name, never split again).
    """
    if "run-notebook" not in argv:
        return argv
    joined = argv[: argv.index("run-notebook") + 1]
    rest = iter(argv[len(joined) :])
    for word in rest:
        if word not in ("-p", "--parameter"):
            joined.append(word)
            continue
        pair = [w for w in (next(rest, None), next(rest, None)) if w is not None]
        # A pair cut short stays as written: argparse then says what is missing.
        joined.extend([f"--parameter-pair={json.dumps(pair)}"] if len(pair) == 2 else [word, *pair])
    return joined


def cmd_run_notebook(args: argparse.Namespace) -> int:
    from .headless import run_notebook
    from .headless.inputs import read_parameters_file

    parameters: dict[str, Any] = {}
    if args.parameters_file:
        parameters.update(read_parameters_file(args.parameters_file))
    # main() gave every -p NAME VALUE as one --parameter-pair (see _parameter_pairs).
    pairs = [json.loads(pair) for pair in args.parameter_pair]
    parameters.update({name: _parameter_value(value) for name, value in pairs})
    # With --json, stdout holds only the outcome: the progress and the messages go to stderr.
    said = sys.stderr if args.json else sys.stdout
    outcome = run_notebook(
        args.notebook,
        args.output,
        parameters=parameters,
        run=args.run,
        store=args.store,
        kernel=args.kernel,
        wait=args.wait,
        say=lambda line: print(printable(line), file=said, flush=True),
        progress=sys.stderr,
        fork=args.fork,
    )
    if args.json:
        print(_dumps(outcome.as_json()), flush=True)
    return outcome.exit_code


def cmd_mcp(args: argparse.Namespace) -> None:
    from .service.serve import serve_mcp

    serve_mcp([load_workflow(spec) for spec in args.workflow], store=args.store, scope=args.scope)


def cmd_serve(args: argparse.Namespace) -> None:
    from .service.serve import serve

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


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo.run import run_demo

    # With --json, the steps go to stderr and stdout carries only the summary.
    result = run_demo(args.folder, keep=args.keep, store=args.store, out=sys.stderr if args.json else sys.stdout)
    if args.json:
        summary = {
            "run_id": result.run_id,
            "status": result.status,
            "store": result.store,
            "seconds": round(result.seconds, 3),
            "history": _frame_records(result.history[["seq", "step", "status", "duration", "changed"]]),
        }
        print(_dumps(summary, indent=2))


# -- the parser ---------------------------------------------------------------------------------------

COMMANDS: list[tuple[str, Callable[[argparse.Namespace], None], str, str]] = [
    ("runs", cmd_runs, "List runs, newest first.", "durable-nb runs --name support-triage --status paused"),
    ("show", cmd_show, "Show a run's status and its last checkpoints.", "durable-nb show 0192f0c1-…"),
    ("history", cmd_history, "Show every checkpoint of a run.", "durable-nb history 0192f0c1-… --json"),
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
    (
        "resume",
        cmd_resume,
        "Resume a run with its workflow's code.",
        "durable-nb resume 0192f0c1-… --workflow app.flows:triage",
    ),
    ("cancel", cmd_cancel, "Cancel a pending, running or paused run.", "durable-nb cancel 0192f0c1-…"),
    (
        "fork",
        cmd_fork,
        "Branch a run from a checkpoint, with changed values.",
        "durable-nb fork 0192f0c1-… --set rate=0.5",
    ),
    ("prune", cmd_prune, "Delete old history of finished runs.", "durable-nb prune --older-than 30d"),
    (
        "recover",
        cmd_recover,
        "Resume or fail runs stranded by dead processes.",
        "durable-nb recover --workflow app.flows:triage",
    ),
    ("demo", cmd_demo, "Run the quickstart notebook: crash it, restore it, approve it.", "durable-nb demo"),
    (
        "run-notebook",
        cmd_run_notebook,
        "Run a notebook headless with every cell durable; run it again after a crash to resume.",
        "durable-nb run-notebook report.ipynb -o out.ipynb -p region EU",
    ),
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
        if name not in ("runs", "prune", "recover", "demo", "serve", "mcp", "run-notebook"):
            sub.add_argument(
                "run", help="the run's id, or any start of it that no other run's id has (see durable-nb runs)"
            )
        if name == "runs":
            sub.add_argument("--name", default=None, help="only runs of this name")
            sub.add_argument(
                "--status", default=None, choices=[s.value for s in dnb.RunStatus], help="only this status"
            )
        elif name == "show":
            sub.add_argument("--last", type=parse_positive_int, default=5, help="how many recent checkpoints to list")
        elif name in ("approve", "reject"):
            sub.add_argument("--node", default=None, help="the gated node (when several wait)")
            sub.add_argument("--comment", default=None, help="why")
            sub.add_argument("--by", default=None, help="who decides (default: your user name)")
            sub.add_argument("--value", default=None, help="a JSON value handed to the node")
        elif name == "resume":
            sub.add_argument("--workflow", required=True, help="module:attribute of the Workflow")
        elif name == "fork":
            sub.add_argument("--at", default=None, help="checkpoint id (default: the latest)")
            sub.add_argument("--set", action="append", default=[], metavar="NAME=LITERAL", help="a value to change")
        elif name == "prune":
            sub.add_argument("--older-than", type=parse_duration, required=True, help="e.g. 30d, 12h, 2w")
        elif name == "recover":
            sub.add_argument("--workflow", action="append", default=[], help="module:attribute (repeatable)")
        elif name == "demo":
            sub.add_argument("--folder", default=None, help="work here instead of a temporary folder")
            sub.add_argument("--keep", action="store_true", help="keep the temporary folder")
        elif name == "run-notebook":
            sub.add_argument("notebook", help="the notebook to run (it is not changed)")
            sub.add_argument("-o", "--output", default=None, help="write the executed notebook here, as cells finish")
            sub.add_argument(
                "-p",
                "--parameter",
                nargs=2,
                action="append",
                default=[],
                metavar=("NAME", "VALUE"),
                help="a parameter, injected after the cell tagged 'parameters' (repeatable)",
            )
            sub.add_argument("--parameter-pair", action="append", default=[], help=argparse.SUPPRESS)
            sub.add_argument("-f", "--parameters-file", default=None, help="parameters from a YAML or JSON file")
            sub.add_argument("--run", default=None, help="the run's name (default: the notebook's)")
            sub.add_argument("--kernel", default="python3", help="the kernel to run it in (default python3)")
            sub.add_argument("--wait", action="store_true", help="at a gate, wait for the decision, then go on")
            sub.add_argument(
                "--fork",
                action="store_true",
                help="new parameters branch the notebook's last run at the parameters cell (the cells above are "
                "restored, not run again) instead of starting a new run from the top",
            )
        elif name == "mcp":
            sub.add_argument("--workflow", action="append", default=[], help="module:attribute (repeatable)")
            sub.add_argument(
                "--scope", default="read", choices=["read", "decide", "admin"], help="what the tools may do (read)"
            )
        elif name == "serve":
            sub.add_argument("--workflow", action="append", default=[], help="module:attribute (repeatable)")
            sub.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
            sub.add_argument("--port", type=int, default=8000, help="port (default 8000)")
            sub.add_argument(
                "--tokens", default=None, help="file of 'name scope secret' lines ($DURABLE_NB_TOKENS too)"
            )
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
            sub.add_argument(
                "--recover-every", type=float, default=30.0, help="seconds between looks for stranded runs"
            )
            sub.add_argument(
                "--notebooks", default=None, metavar="DIR", help="run the notebooks in DIR (POST /api/notebooks/…)"
            )
            sub.add_argument(
                "--notebook-outputs",
                default=None,
                metavar="DIR",
                help="write executed notebooks and logs here (default DIR/.durable-nb-outputs)",
            )
    return parser


# -- errors ---------------------------------------------------------------------------------------


def _exit_code(error: BaseException) -> int:
    if isinstance(error, InvalidNotebookRun):
        return EXIT_USAGE  # refused before any kernel started, as argparse refuses bad usage
    if isinstance(error, RunNotFound | UnknownGate | StoreNotFound):
        return EXIT_NOT_FOUND
    if isinstance(error, AmbiguousRunId):
        return EXIT_USAGE
    if isinstance(error, AlreadyResumed | NotResumable | NotCancellable | RunOwnedElsewhere):
        return EXIT_STATE
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    return EXIT_FAILED


def _message(error: BaseException) -> str:
    if isinstance(error, KeyboardInterrupt):
        return "interrupted"
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the error itself
        text = ""
    return text or type(error).__name__


def _line(error: BaseException) -> str:
    message = _message(error)
    if isinstance(error, DurableError | KeyboardInterrupt) or message == type(error).__name__:
        return f"error: {printable(message)}"
    # An unexpected error names its type: "OSError: [Errno 28] ..." says more than the message.
    return f"error: {type(error).__name__}: {printable(message)}"


def _silence_stdout() -> None:
    # After EPIPE (``durable-nb runs | head``), the interpreter's final flush of stdout would
    # print a second error; point the descriptor at /dev/null instead.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _report(error: BaseException, as_json: bool) -> int:
    """Print ``error`` as one line on stderr (a JSON object with --json); return its exit code."""
    code = _exit_code(error)
    if isinstance(error, BrokenPipeError):
        _silence_stdout()
    if as_json:
        line = _dumps({"error": {"type": type(error).__name__, "message": _message(error), "exit_code": code}})
    else:
        line = _line(error)
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass  # stderr is gone too: the exit code is all that is left
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = build_parser()
    args = parser.parse_args(_parameter_pairs(list(sys.argv[1:] if argv is None else argv)))
    try:
        code = args.handler(args)
    except (Exception, KeyboardInterrupt) as error:  # noqa: BLE001 - every error is one line, never a traceback
        return _report(error, args.json)
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
