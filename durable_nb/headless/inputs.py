"""What a headless run is asked for with, checked before any kernel starts.

The notebook and the parameters file must be regular files (a FIFO or a device would block the
read or never end), read without blocking. A run's name is one line of text. Parameters must be
something papermill's injection writes as a literal of the same value: names that Python can
assign to, values made of text, numbers, booleans, None, lists and mappings (a YAML file could
hold sets, bytes, dates or tagged objects, which papermill would paste into the cell as their
``str``). Anything else is refused with ``InvalidNotebookRun``, which the command line answers
with exit code 2.
"""

from __future__ import annotations

import keyword
import os
import stat
import unicodedata
from pathlib import Path
from typing import Any

from ..errors import ConfigurationError, InvalidNotebookRun

__all__ = [
    "check_output_path",
    "check_parameters",
    "check_run_name",
    "read_notebook",
    "read_parameters_file",
]

_SCALARS = (str, bool, int, float, type(None))
# Parameters files are written by people and schedulers, not generated without bound: a file that
# expands past these (YAML aliases can multiply a small file) is not a parameters file.
_MOST_VALUES = 100_000
_DEEPEST = 64
# Control and format characters, surrogates, line and paragraph separators: never in a run's name.
_UNPRINTABLE = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def _read_regular(path: str | Path, what: str) -> str:
    """The text of the regular file at ``path``; anything else (a FIFO, a device, a folder) is refused unopened."""
    try:
        found = os.stat(path)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or error
        raise InvalidNotebookRun(f"Cannot read the {what} {path}: {reason}.") from None
    if not stat.S_ISREG(found.st_mode):
        raise InvalidNotebookRun(f"The {what} {path} is {_kind(found.st_mode)}, not a file: give the path of a file.")
    try:
        # Non-blocking, then checked again: the path could have been swapped for a FIFO since.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise InvalidNotebookRun(f"Cannot read the {what} {path}: {error.strerror}.") from None
    with open(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise InvalidNotebookRun(f"The {what} {path} is not a file: give the path of a file.")
        data = file.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidNotebookRun(f"The {what} {path} is not UTF-8 text ({error.reason}).") from None


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_notebook(path: str | Path) -> Any:
    """Read the notebook at ``path`` (a regular file of nbformat JSON)."""
    import nbformat

    text = _read_regular(path, "notebook")
    try:
        return nbformat.reads(text, as_version=4)
    except Exception as error:  # noqa: BLE001 - nbformat raises JSON, schema, version and type errors alike
        raise InvalidNotebookRun(f"Cannot read the notebook {path}: {error}. Save it from Jupyter.") from None


def read_parameters_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file of parameters as papermill does (its dates stay text), refusing YAML's other types."""
    text = _read_regular(path, "parameters file")
    try:
        import yaml
        from papermill.iorw import NoDatesSafeLoader
    except ImportError as error:
        raise ConfigurationError(
            "Parameter files are read by papermill: pip install 'durable-nb[headless]'."
        ) from error
    try:
        found = yaml.load(text, Loader=NoDatesSafeLoader)  # papermill's loader: a SafeLoader without dates
    except (yaml.YAMLError, ValueError) as error:
        raise InvalidNotebookRun(
            f"The parameters file {path} is not plain YAML or JSON ({_first_line(error)}); write values as text, "
            "numbers, true/false, null, lists and mappings, without tags such as !!python."
        ) from None
    if not isinstance(found, dict):
        raise InvalidNotebookRun(f"The parameters file {path} must hold a mapping of names to values.")
    check_parameters(found, f"in {path}")
    return found


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def check_parameters(parameters: dict[Any, Any], where: str = "") -> None:
    """Refuse a parameter whose name Python cannot assign to or whose value papermill cannot write as a literal."""
    at = f" {where}" if where else ""
    for name, value in parameters.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__") or keyword.iskeyword(name):
            raise InvalidNotebookRun(
                f"The parameter name {name!r}{at} cannot be assigned to in Python: use a name of letters, digits and "
                "'_' that is not a keyword and does not start with a digit or '__' (e.g. -p region EU)."
            )
        problem = _unwritable(value)
        if problem is not None:
            raise InvalidNotebookRun(
                f"The parameter {name}{at} holds {problem}: a parameter is text, a number, true/false, null, "
                "or a list or mapping of those."
            )


def _unwritable(value: Any) -> str | None:
    """What in ``value`` papermill's injection cannot write as a literal of the same value, or None."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    seen = 0
    while pending:
        item, depth = pending.pop()
        seen += 1
        if seen > _MOST_VALUES or depth > _DEEPEST:
            return f"more than {_MOST_VALUES:,} values or {_DEEPEST} levels of nesting"
        if isinstance(item, str):
            if not _encodable(item):
                return "text that is not valid Unicode"
        elif isinstance(item, list):
            pending.extend((part, depth + 1) for part in item)
        elif isinstance(item, dict):
            for key, part in item.items():
                if not isinstance(key, _SCALARS) or (isinstance(key, str) and not _encodable(key)):
                    return f"a mapping key of type {type(key).__name__}"
                pending.append((part, depth + 1))
        elif not isinstance(item, _SCALARS):
            return f"a value of type {type(item).__name__}"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_run_name(name: str, fix: str) -> str:
    """Return ``name`` if it can name a run: one line of printable text; else say so, and ``fix``."""
    if not name.strip():
        raise InvalidNotebookRun(f"A run's name cannot be empty: {fix}.")
    if any(unicodedata.category(char) in _UNPRINTABLE for char in name):
        raise InvalidNotebookRun(
            f"The run name {name!r} holds line breaks or other control characters: {fix} (one line of text)."
        )
    return name


def check_output_path(path: str | Path) -> Path:
    """Return ``path`` if the output notebook can be written there: a file (or nothing yet) in a folder."""
    target = Path(path)
    try:
        found = os.stat(target)
    except FileNotFoundError:
        found = None
    except (OSError, ValueError) as error:
        raise InvalidNotebookRun(f"Cannot write the output notebook to {path}: {error}.") from None
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise InvalidNotebookRun(
            f"The output path {path} is {_kind(found.st_mode)}: give a file's path (or leave out -o to write none)."
        )
    if not target.absolute().parent.is_dir():
        raise InvalidNotebookRun(f"The folder of the output path {path} does not exist: create it first.")
    return target
