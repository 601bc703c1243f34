"""The arguments of durable_nb's magics as typed: quotes taken off, names listed, a cell line parsed once."""

from __future__ import annotations

import argparse
from typing import Any

from IPython.core.magic_arguments import ArgDecorator, MagicArgumentParser, real_name

__all__ = ["cell_arguments", "lazy_arguments", "names_in", "parser_of", "subcommand_arguments", "unquoted"]


class lazy_arguments(ArgDecorator):
    """``@magic_arguments()`` whose parser is built the first time it is used.

    IPython builds a parser (and formats its help) when the class is defined; for %durable's
    subcommands, and then for the %%durable cell magic, that was most of what
    ``%load_ext durable_nb`` cost. The help is formatted when asked: ``%%durable?`` calls the
    function's ``getdoc`` (IPython asks for it before the docstring).
    """

    def __call__(self, func: Any) -> Any:
        func = super().__call__(func)
        func.getdoc = lambda: parser_of(func).format_help()
        return func


def parser_of(spec: Any) -> MagicArgumentParser:
    """Return the parser of a subcommand's ``@lazy_arguments`` stub (built on first use)."""
    func = getattr(spec, "__func__", spec)  # a bound method forwards reads, not writes
    parser = getattr(func, "parser", None)
    if parser is None:
        parser = func.parser = _construct(func)
    return parser


def _construct(func: Any) -> MagicArgumentParser:
    # IPython's construct_parser without its last step, formatting the whole help into the stub's
    # docstring: nothing shows a subcommand stub's docstring, and formatting was half of the parser's
    # cost at a kernel's first %durable run (-h formats the help when asked).
    kwds = dict(getattr(func, "argcmd_kwds", {}))
    kwds.setdefault("description", func.__doc__)
    parser = MagicArgumentParser(real_name(func), **kwds)
    group = None
    for decorator in func.decorators[::-1]:  # in the order they stand in the source
        added = decorator.add_to_parser(parser, group)
        if added is not None:
            group = added
    return parser


def subcommand_arguments(spec: Any, line: str) -> Any:
    """Parse a subcommand's arguments with the parser of its ``@lazy_arguments`` stub."""
    return parser_of(spec).parse_argstring(line)


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
        word = line.strip()
        if _bare(word):
            # The node's name alone, as --all writes above every cell: the defaults with that name
            # (argparse would take it as the one positional; it costs more than the rest of a cell).
            args = argparse.Namespace(**{**vars(_defaults(magic)), "node": word})
        else:
            args = parser_of(magic).parse_argstring(line)
        if len(_PARSED) >= _PARSED_KEPT:
            _PARSED.clear()
        _PARSED[line] = args
    return args


def _defaults(magic: Any) -> argparse.Namespace:
    """The arguments of a line that names a node and nothing else (parsed once)."""
    func = getattr(magic, "__func__", magic)  # as parser_of: a bound method forwards reads, not writes
    found = getattr(func, "defaults", None)
    if found is None:
        found = func.defaults = parser_of(magic).parse_argstring("node")
    return found


def _bare(word: str) -> bool:
    # A word argparse takes as the one positional: a letter or _ first, then letters, digits, _ . -
    # (no regex: compiling one would cost attaching more than the test).
    first = word[:1]
    return (first.isalpha() or first == "_") and word.replace(".", "_").replace("-", "_").isidentifier()


def names_in(text: str | None) -> frozenset[str]:
    """The names of a comma-separated list (``--exclude a,b``), blanks dropped."""
    return frozenset(n.strip() for n in (text or "").split(",") if n.strip())
