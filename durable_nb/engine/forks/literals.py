"""State overrides typed by a person (``name = python literal``), parsed safely, never eval'd."""

from __future__ import annotations

import ast
import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Number
from typing import Any

from ...errors import InvalidInput

__all__ = ["MAX_OVERRIDE_CHARS", "OverrideText", "fits_type", "parse_overrides", "parse_sweep"]

MAX_OVERRIDE_CHARS = 100_000
_MAX_LINE_CHARS = 10_000


def fits_type(old: Any, new: Any) -> bool:
    """Tell whether ``new`` may replace ``old`` in a fork: the same type, ints and floats mixing, None either way."""
    if old is None or new is None or type(old) is type(new):
        return True
    if isinstance(old, bool) or isinstance(new, bool):
        return False
    return isinstance(old, Number) and isinstance(new, Number)


@dataclass(frozen=True, slots=True)
class OverrideText:
    """Overrides as a person typed them (``name = literal`` lines), parsed; their types are checked
    against the values at the fork point by ``create_fork``, which reads those values once."""

    # (line number, name, value) of every override line, in the order typed.
    entries: tuple[tuple[int, str, Any], ...]

    @classmethod
    def parse(cls, text: str | Sequence[str]) -> OverrideText:
        """Parse ``name = literal`` lines; refuse code, huge input, bad names and missing '='."""
        lines = text.splitlines() if isinstance(text, str) else list(text)
        if sum(len(line) for line in lines) > MAX_OVERRIDE_CHARS:
            raise InvalidInput(f"Overrides are limited to {MAX_OVERRIDE_CHARS:,} characters; set large values in code.")
        return cls(tuple(entry for number, raw in enumerate(lines, start=1) if (entry := _parse_line(number, raw))))

    @property
    def values(self) -> dict[str, Any]:
        """The overrides as typed (a later line wins over an earlier one of the same name)."""
        return {name: value for _, name, value in self.entries}

    @property
    def names(self) -> list[str]:
        """The names whose value at the fork point has a type to keep (None fits any type)."""
        return [name for name, value in self.values.items() if value is not None]

    def typed(self, current: Mapping[str, Any]) -> dict[str, Any]:
        """Return the overrides, each checked against the type of its value in ``current``.

        An override must keep a value's type (ints and floats mix), since the rest of the run was
        written for it.
        """
        for number, name, value in self.entries:
            if name in current and not fits_type(current[name], value):
                raise InvalidInput(
                    f"Line {number}: {name} is {type(current[name]).__name__} at this checkpoint; "
                    f"{type(value).__name__} would not fit the rest of the run."
                )
        return self.values


def _parse_line(number: int, raw: str) -> tuple[int, str, Any] | None:
    line = raw.strip()
    if not line or line.startswith("#"):
        return None
    if len(line) > _MAX_LINE_CHARS:
        raise InvalidInput(f"Line {number} is longer than {_MAX_LINE_CHARS:,} characters; set large values in code.")
    name, sep, literal = line.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise InvalidInput(f"Line {number}: write name = python literal (e.g. rate = 0.5), not {line[:60]!r}.")
    if keyword.iskeyword(name) or name.startswith("__"):
        raise InvalidInput(f"Line {number}: {name!r} is reserved and cannot be overridden.")
    try:
        value = ast.literal_eval(literal.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InvalidInput(
            f"Line {number}: {literal.strip()[:60]!r} is not a Python literal (numbers, text, True/False/None, "
            "lists, tuples, dicts, sets). Code is never run."
        ) from None
    return number, name, value


def parse_overrides(text: str | Sequence[str], current: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Parse ``name = literal`` lines into a dict; refuse code, huge input and changed types.

    ``current`` holds the values at the fork point: an override must keep a value's type
    (ints and floats mix), since the rest of the run was written for it.
    """
    return OverrideText.parse(text).typed(current or {})


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """Parse ``name=v1,v2,…`` (Python literals, never code) into the name and its list of values."""
    line = text.strip()
    if len(line) > MAX_OVERRIDE_CHARS:
        raise InvalidInput(f"A sweep is limited to {MAX_OVERRIDE_CHARS:,} characters; sweep large values in code.")
    name, sep, literals = line.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("__"):
        raise InvalidInput(f"Write a sweep as name=value1,value2 (e.g. rate=0.1,0.01), not {line[:60]!r}.")
    try:
        # Read as the items of a list literal: "0.1,0.01" is two values, "(1, 2)" one tuple.
        values = ast.literal_eval(f"[{literals}]")
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InvalidInput(
            f"{literals.strip()[:60]!r} is not a list of Python literals separated by commas (e.g. 0.1,0.01 or "
            "'a','b'). Code is never run."
        ) from None
    if not isinstance(values, list):
        raise InvalidInput(f"Write a sweep as name=value1,value2 (e.g. rate=0.1,0.01), not {line[:60]!r}.")
    return name, values
