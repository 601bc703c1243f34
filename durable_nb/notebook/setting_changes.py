"""What a process-wide setting is (how it is read, compared and set again), and the comparisons
the settings share: a reading taken whole, the keys that changed, the entries replaced."""

# Annotations evaluated, not strings: the named tuples below keep them as their fields' types.

import operator
from collections.abc import Callable
from typing import Any

from .._tuples import Typed

__all__ = ["MISSING", "Setting", "changed_keys", "put_changes", "replaced_entries", "same", "whole_reading"]


class _Missing:
    """Stands for a key a cell removed."""

    def __reduce__(self) -> str:
        # Stored with the cell's changes: it must load as this very object, not as a new one.
        return "MISSING"

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class Setting(Typed):
    """One kind of process-wide state: how to read it, what changed, and how to set it again."""

    name: str
    read: Callable[[], Any]
    diff: Callable[[Any, Any], Any]
    apply: Callable[[Any], None]
    # Public names of the calls whose whole effect this setting reads (``numpy.random.seed``).
    calls: tuple[str, ...] = ()
    # Read only after a cell that called one of ``calls``: reading it at any other time would change it.
    on_call: bool = False


def whole_reading(before: Any, after: Any) -> Any:
    """Return the new reading when it differs from the old one, else None."""
    return None if same(before, after) else after


def same(a: Any, b: Any) -> bool:
    """Tell whether two readings are equal (by repr when they do not compare)."""
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that do not compare (arrays inside) are compared by repr
        return repr(a) == repr(b)


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any] | None:
    """Return the keys added or changed, and those removed (as MISSING); None when none."""
    try:
        # Most cells change nothing: one comparison in C (the same objects are equal at once).
        if before == after:
            return None
    except Exception:  # noqa: BLE001 - a value that does not compare (an array): key by key below
        pass
    changed = {k: v for k, v in after.items() if k not in before or not same(before[k], v)}
    removed = {k: MISSING for k in before if k not in after}
    return {**changed, **removed} or None


def replaced_entries(before: dict[Any, Any], after: dict[Any, Any]) -> dict[Any, Any] | None:
    """Return the entries that are not the same objects as before, and those removed; None when none."""
    # Entries that are replaced, not edited (a style, a unit converter): compared as objects.
    if tuple(before) == tuple(after) and all(map(operator.is_, before.values(), after.values())):
        return None  # most cells: the very same entries, told in C
    changed = {key: value for key, value in after.items() if before.get(key) is not value}
    changed.update({key: MISSING for key in before if key not in after})
    return changed or None


def put_changes(mapping: Any, changed: dict[Any, Any]) -> None:
    """Write changed entries into ``mapping``, removing those recorded as MISSING."""
    for key, value in changed.items():
        if value is MISSING:
            mapping.pop(key, None)
        else:
            mapping[key] = value
