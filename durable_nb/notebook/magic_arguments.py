"""The arguments of durable_nb's magics as typed: quotes taken off, names listed, a cell line parsed once."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.magic_arguments import MagicArgumentParser

__all__ = ["argument", "cell_arguments", "lazy_arguments", "names_in", "parser_of", "subcommand_arguments", "unquoted"]


# IPython's ArgDecorator and argument (IPython.core.magic_arguments), as they mark a magic and keep
# its arguments: that module loads where a parser is built, which most kernels never need (a node's
# name, a run's name and flags are read without one), not at %load_ext.
class _ArgDecorator:
    """Marks a magic as taking arguments (``has_arguments``) and joins its list of decorators."""

    def __call__(self, func: Any) -> Any:
        if not getattr(func, "has_arguments", False):
            func.has_arguments = True
            func.decorators = []
        func.decorators.append(self)
        return func

    def add_to_parser(self, parser: Any, group: Any) -> Any:
        """Add nothing (the mark alone)."""
        return None


class argument(_ArgDecorator):
    """``@argument(...)``: the arguments and keywords of one ``add_argument`` call of the magic's parser."""

    def __init__(self, *args: Any, **kwds: Any) -> None:
        self.args = args
        self.kwds = kwds

    def add_to_parser(self, parser: Any, group: Any) -> Any:
        """Add the argument (to ``group`` when one is given)."""
        (parser if group is None else group).add_argument(*self.args, **self.kwds)
        return None


class lazy_arguments(_ArgDecorator):
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
    from IPython.core.magic_arguments import MagicArgumentParser, real_name

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
    simple = _simple(spec, line)
    return simple if simple is not None else parser_of(spec).parse_argstring(line)


class _Declared:
    """What a stub's ``@argument`` lines declare, read without building its parser: each destination's
    default, the flags that take no value (``--all``) and the positional arguments in order."""

    __slots__ = ("defaults", "flags", "optional", "positionals", "simple")

    def __init__(self, func: Any) -> None:
        self.defaults: dict[str, Any] = {}
        self.flags: dict[str, str] = {}
        self.positionals: list[str] = []
        self.optional = 0  # how many positionals at the end may be left out (nargs="?")
        self.simple = True
        for decorator in func.decorators[::-1]:  # in the order they stand in the source
            if not isinstance(decorator, argument):
                continue
            names, kwds = decorator.args, decorator.kwds
            options = [name for name in names if name.startswith("-")]
            if options:
                long = next((name for name in options if name.startswith("--")), options[0])
                dest = kwds.get("dest", long.lstrip("-").replace("-", "_"))
                if kwds.get("required"):
                    self.simple = False  # argparse tells what is missing
            else:
                dest = kwds.get("dest", names[0])
                self.positionals.append(dest)
                self.optional = self.optional + 1 if kwds.get("nargs") == "?" else 0
                if kwds.get("nargs") not in (None, "?") or "type" in kwds or "choices" in kwds:
                    self.simple = False  # a word argparse would convert, check or gather: its own to read
            if kwds.get("action") == "store_true":
                self.defaults[dest] = kwds.get("default", False)
                self.flags.update(dict.fromkeys(options, dest))
            else:
                self.defaults[dest] = kwds.get("default")


def _declared(spec: Any) -> _Declared:
    func = getattr(spec, "__func__", spec)  # as parser_of: a bound method forwards reads, not writes
    found = getattr(func, "declared", None)
    if found is None:
        found = func.declared = _Declared(func)
    return found


def _simple(spec: Any, line: str) -> argparse.Namespace | None:
    """The arguments of a line of bare words and flags that take no value (``sales-report --all``),
    as argparse reads them, without building the parser (most of what attaching a kernel parsed);
    None for any other line, which argparse reads."""
    declared = _declared(spec)
    if not declared.simple:
        return None
    found = {dest: list(value) if type(value) is list else value for dest, value in declared.defaults.items()}
    words = []
    for token in line.split():
        if token in declared.flags:
            found[declared.flags[token]] = True
        elif _bare(token):
            words.append(token)
        else:
            return None
    given = len(words)
    if given > len(declared.positionals) or given < len(declared.positionals) - declared.optional:
        return None
    found.update(zip(declared.positionals, words, strict=False))  # those left out keep their defaults
    return argparse.Namespace(**found)


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
        # The node's name alone (as --all writes above every cell), or with flags that take no value,
        # is read without argparse: building the parser costs more than the rest of a first cell.
        args = _simple(magic, line)
        if args is None:
            args = parser_of(magic).parse_argstring(line)
        if len(_PARSED) >= _PARSED_KEPT:
            _PARSED.clear()
        _PARSED[line] = args
    return args


def _bare(word: str) -> bool:
    # A word argparse takes as the one positional: a letter or _ first, then letters, digits, _ . -
    # (no regex: compiling one would cost attaching more than the test).
    first = word[:1]
    return (first.isalpha() or first == "_") and word.replace(".", "_").replace("-", "_").isidentifier()


def names_in(text: str | None) -> frozenset[str]:
    """The names of a comma-separated list (``--exclude a,b``), blanks dropped."""
    return frozenset(n.strip() for n in (text or "").split(",") if n.strip())
