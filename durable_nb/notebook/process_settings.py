"""Python's own process state a cell can change: the environment, the working directory,
``sys.path``, warning filters, logger levels and ``random``'s state."""

from __future__ import annotations

import itertools
import logging
import operator
import os
import random
import sys
import warnings
from typing import Any

from .setting_changes import MISSING, Setting, changed_keys, put_changes, whole_reading

__all__ = ["PROCESS_SETTINGS"]


def _read_warnings() -> Any:
    return list(warnings.filters)


def _apply_warnings(filters: list[Any]) -> None:
    warnings.resetwarnings()
    for action, message, category, module, lineno in filters:
        if message is None and module is None:
            warnings.simplefilter(action, category, lineno, append=True)
        else:
            warnings.filterwarnings(action, _pattern(message), category, _pattern(module), lineno, append=True)


def _pattern(text: Any) -> str:
    # Filters hold compiled patterns, or plain strings when set from the command line.
    return "" if text is None else str(getattr(text, "pattern", text))


_LEVEL = operator.attrgetter("level")


def _read_loggers() -> Any:
    levels = {"": logging.getLogger().level}
    # Copied in one C call (another thread may add a logger meanwhile); the loggers, not the
    # placeholders between them, and their levels picked in C: a kernel holds dozens, read per cell.
    known = dict(logging.Logger.manager.loggerDict)
    loggers = dict(itertools.compress(known.items(), map(isinstance, known.values(), itertools.repeat(logging.Logger))))
    levels.update(zip(loggers, map(_LEVEL, loggers.values()), strict=True))
    return levels


def _apply_loggers(changed: dict[str, Any]) -> None:
    for name, level in changed.items():
        if level is not MISSING:
            logging.getLogger(name or None).setLevel(level)


def _read_environ() -> Any:
    # The encoded mapping os.environ keeps, copied in C: decoding every entry twice per cell cost more
    # than all other settings together. Only what changed is decoded (``_diff_environ``).
    data = getattr(os.environ, "_data", None)
    return dict(data) if isinstance(data, dict) else dict(os.environ)


def _diff_environ(before: dict[Any, Any], after: dict[Any, Any]) -> Any:
    changed = changed_keys(before, after)
    if changed is None:
        return None
    decode_key = getattr(os.environ, "decodekey", _same)
    decode_value = getattr(os.environ, "decodevalue", _same)
    return {decode_key(k): v if v is MISSING else decode_value(v) for k, v in changed.items()}


def _same(text: Any) -> Any:
    return text


def _apply_environ(changed: dict[str, Any]) -> None:
    put_changes(os.environ, changed)


def _apply_cwd(path: str) -> None:
    os.chdir(path)


def _read_path() -> Any:
    return list(sys.path)


def _diff_path(before: list[str], after: list[str]) -> Any:
    if before == after:
        return None
    added = [(index, entry) for index, entry in enumerate(after) if entry not in before]
    removed = [entry for entry in before if entry not in after]
    return {"added": added, "removed": removed}


def _apply_path(change: dict[str, Any]) -> None:
    for entry in change["removed"]:
        while entry in sys.path:
            sys.path.remove(entry)
    for index, entry in change["added"]:
        if entry not in sys.path:
            sys.path.insert(min(index, len(sys.path)), entry)


def _read_random() -> Any:
    return random.getstate()


PROCESS_SETTINGS: tuple[Setting, ...] = (
    Setting("os.environ", _read_environ, _diff_environ, _apply_environ, ("dotenv.load_dotenv",)),
    Setting("cwd", os.getcwd, whole_reading, _apply_cwd),
    Setting("sys.path", _read_path, _diff_path, _apply_path),
    Setting("warnings", _read_warnings, whole_reading, _apply_warnings),
    Setting("logging", _read_loggers, changed_keys, _apply_loggers, ("logging.Logger.setLevel",)),
    Setting("random", _read_random, whole_reading, random.setstate, ("random.seed", "random.setstate")),
)
