"""What a finished %%durable cell hands to the engine, read from the shell it ran in."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..engine.cells.records import CellOutcome
from .capture import open_figure_ids
from .cellcode import CellCode
from .effects import attributes_set, shown_value, unrecorded_calls
from .settings import SettingsWatch

__all__ = ["cell_outcome", "ids_of"]

_HIDDEN_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "_", "__", "___"}


def ids_of(namespace: dict[str, Any]) -> dict[str, int]:
    """Each name's object's id: what tells, after a cell, the names it bound."""
    return dict(zip(namespace, map(id, namespace.values()), strict=True))


def hidden_name(shell: Any, name: str) -> bool:
    if name in _HIDDEN_NAMES or name in getattr(shell, "user_ns_hidden", {}):
        return True
    # IPython's history names: _i, _ii, _i7, _7 …
    return (name.startswith("_i") and name[2:].isdigit()) or (name.startswith("_") and name[1:].isdigit())


def _storable(shell: Any, exclude: frozenset[str], name: str) -> bool:
    return name not in exclude and not hidden_name(shell, name)


def cell_outcome(
    shell: Any,
    node: str,
    cell: CellCode,
    outputs: list[dict[str, Any]],
    before: dict[str, int],
    watch: SettingsWatch,
    value: Any,
    exclude: frozenset[str],
    replay: bool,
    recipe: Callable[[str], dict[str, Any] | None] | None = None,
) -> CellOutcome:
    """Gather what a finished cell hands to the engine: the names it bound or deleted, its settings,
    module attributes and shown value (the engine encodes them with the commit)."""
    namespace = shell.user_ns
    storable = functools.partial(_storable, shell, exclude)
    now = ids_of(namespace)
    # Compared as sets of (name, id) pairs, in C: a notebook's namespace holds hundreds of names.
    bound = frozenset(n for n, _ in now.items() - before.items() if storable(n))
    deleted = sorted(n for n in before.keys() - now.keys() if storable(n))
    extra: dict[str, Any] = {}
    unrecorded, called = unrecorded_calls(namespace, cell.setting_calls)
    settings = watch.changes(called)
    attributes, effects = attributes_set(namespace, cell.module_attributes)
    effects += unrecorded
    if effects and not replay:
        extra["effects"] = effects
    if cell.magics:
        extra["magics"] = [list(m) for m in cell.magics]
    if replay:
        extra["replay"] = True
    result_name, result = shown_value(cell, value)
    if result_name is not None:
        extra["result_name"] = result_name
    return CellOutcome(
        node,
        namespace,
        touched=cell.names | bound,
        storable=storable,
        deleted=deleted,
        outputs=outputs,
        source_hash=cell.source_hash,
        duration=0.0,
        bound=bound,
        open_figures=open_figure_ids(),
        extra=extra,
        recipe=recipe,
        settings={"settings": settings, "attributes": attributes} if settings or attributes else None,
        result=result,
    )
