"""How the commands print: tables as the notebook shows them, JSON, runs; store text escaped."""

from __future__ import annotations

import argparse
import json
from typing import Any

import durable_nb as dnb

from ..views.text import human_frame

__all__ = ["dumps", "frame_records", "jsonable", "print_frame", "print_run", "printable", "table"]

# C0 controls, DEL and C1 controls (Unicode category Cc): shown as Python-style escapes.
_SPECIAL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROLS = {code: _SPECIAL.get(chr(code), f"\\x{code:02x}") for code in [*range(0x20), *range(0x7F, 0xA0)]}
# json.dumps escapes C0 itself; DEL and C1 only occur inside JSON strings, where \u escapes keep the text.
_JSON_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}


def printable(text: str) -> str:
    """Return ``text`` with control characters (newlines too) shown as escapes like ``\\x1b``."""
    return text.translate(_CONTROLS)


def dumps(value: Any, indent: int | None = None) -> str:
    """Return ``value`` as JSON, its C1 controls escaped."""
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


def jsonable(value: Any) -> Any:
    """Return ``value`` with only JSON's types: times as ISO text, durations as seconds."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "total_seconds"):
        return value.total_seconds()
    return str(value)


def frame_records(frame: Any) -> list[dict[str, Any]]:
    """Return a DataFrame's rows as JSON-ready dicts (missing values as None)."""
    return [jsonable({k: (None if _missing(v) else v) for k, v in row.items()}) for row in frame.to_dict("records")]


def _missing(value: Any) -> bool:
    try:
        import pandas as pd

        return bool(pd.isna(value)) if not isinstance(value, list | dict) else False
    except (TypeError, ValueError):
        return False


def print_frame(frame: Any, args: argparse.Namespace, columns: list[str] | None = None) -> None:
    """Print a DataFrame as a table of ``columns``, or as JSON records with ``--json``."""
    if args.json:
        print(dumps(frame_records(frame), indent=2))
        return
    print("(none)" if frame.empty else table(frame, columns))


def table(frame: Any, columns: list[str] | None = None) -> str:
    """Return a DataFrame as text, its durations and times as the notebook shows them."""
    # Whole ids, which people copy from here.
    return _printable_frame(human_frame(frame, columns)).to_string(index=False)


def print_run(run: dnb.Run, args: argparse.Namespace, headline: str) -> None:
    """Print what a command did to a run: its status, gate and error (a JSON object with ``--json``)."""
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
        print(dumps(jsonable(record), indent=2))
        return
    print(f"{headline}: run {printable(run.id)} ({printable(run.name)}) is {printable(run.status)}")
    if run.pending_interrupt:
        gate = run.pending_interrupt
        print(f"  waiting at gate {printable(repr(gate['reason']))} in node {printable(repr(gate['node_id']))}")
    if run.error:
        print(f"  error: {printable(run.error)}")
