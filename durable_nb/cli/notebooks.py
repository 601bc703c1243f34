"""The command that runs a notebook headless, every cell durable: run-notebook."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import Command
from .output import dumps, printable

__all__ = ["COMMANDS", "add_arguments", "add_parameter_option", "parameter_pairs", "parameter_value"]


def parameter_value(text: str) -> Any:
    """A -p value as papermill reads it: True, False and None as written, an int, a float, else the text."""
    if text in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[text]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parameter_pairs(argv: list[str]) -> list[str]:
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
    from ..headless import run_notebook
    from ..headless.inputs import read_parameters_file

    parameters: dict[str, Any] = {}
    if args.parameters_file:
        parameters.update(read_parameters_file(args.parameters_file))
    # main() gave every -p NAME VALUE as one --parameter-pair (see parameter_pairs).
    pairs = [json.loads(pair) for pair in args.parameter_pair]
    parameters.update({name: parameter_value(value) for name, value in pairs})
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
        key=args.key,
    )
    if args.json:
        print(dumps(outcome.as_json()), flush=True)
    return outcome.exit_code


COMMANDS: list[Command] = [
    (
        "run-notebook",
        cmd_run_notebook,
        "Run a notebook headless with every cell durable; run it again after a crash to resume.",
        "durable-nb run-notebook report.ipynb -o out.ipynb -p region EU",
    ),
]


def add_parameter_option(sub: argparse.ArgumentParser, help: str) -> None:
    """Add ``-p NAME VALUE`` (repeatable), read as papermill reads it (see ``parameter_pairs``)."""
    sub.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"), help=help)


def add_arguments(name: str, sub: argparse.ArgumentParser) -> None:
    """Add the arguments of command ``name`` of this module."""
    sub.add_argument("notebook", help="the notebook to run (it is not changed)")
    sub.add_argument("-o", "--output", default=None, help="write the executed notebook here, as cells finish")
    add_parameter_option(sub, "a parameter, injected after the cell tagged 'parameters' (repeatable)")
    sub.add_argument("--parameter-pair", action="append", default=[], help=argparse.SUPPRESS)
    sub.add_argument("-f", "--parameters-file", default=None, help="parameters from a YAML or JSON file")
    sub.add_argument("--run", default=None, help="the run's name (default: the notebook's)")
    # The service's schedules give each due time a run of its own, keyed by the schedule and the time.
    sub.add_argument("--key", default=None, help=argparse.SUPPRESS)
    sub.add_argument("--kernel", default="python3", help="the kernel to run it in (default python3)")
    sub.add_argument("--wait", action="store_true", help="at a gate, wait for the decision, then go on")
    sub.add_argument(
        "--fork",
        action="store_true",
        help="new parameters branch the notebook's last run at the parameters cell (the cells above are "
        "restored, not run again) instead of starting a new run from the top",
    )
