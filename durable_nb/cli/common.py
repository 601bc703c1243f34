"""What the commands share: the store they act on, the run a command names, workflows, argument types."""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from datetime import timedelta

import durable_nb as dnb

from .._loop import run_sync
from ..engine.runs.run_ids import complete_run_id
from ..errors import InvalidInput
from ..store import Store

__all__ = [
    "Command",
    "add_run_argument",
    "existing_store",
    "load_workflow",
    "parse_duration",
    "parse_positive_int",
    "run_id_of",
]

# A command: its name, its handler (an exit code, or None for 0), its summary and an example.
Command = tuple[str, Callable[[argparse.Namespace], int | None], str, str]

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


def add_run_argument(sub: argparse.ArgumentParser) -> None:
    """Add the positional ``run`` of a command that acts on one run."""
    sub.add_argument("run", help="the run's id, or any start of it that no other run's id has (see durable-nb runs)")


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
