"""The arguments of durable_nb's magics as typed: quotes taken off, names listed, a cell line parsed once."""

from __future__ import annotations

from typing import Any

from IPython.core.magic_arguments import parse_argstring

__all__ = ["cell_arguments", "names_in", "unquoted"]


def unquoted(text: str | None) -> str | None:
    """One argument as typed, without the quotes around it (IPython's splitting keeps them)."""
    if text is not None and len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


# A %%durable line's parsed arguments, by its text: argparse once per line, not once per run of the cell.
_PARSED: dict[str, Any] = {}
_PARSED_KEPT = 1024


def cell_arguments(magic: Any, line: str) -> Any:
    """The arguments of a %%durable line (read only: the same object comes back for the same line)."""
    args = _PARSED.get(line)
    if args is None:
        args = parse_argstring(magic, line)
        if len(_PARSED) >= _PARSED_KEPT:
            _PARSED.clear()
        _PARSED[line] = args
    return args


def names_in(text: str | None) -> frozenset[str]:
    """The names of a comma-separated list (``--exclude a,b``), blanks dropped."""
    return frozenset(n.strip() for n in (text or "").split(",") if n.strip())
