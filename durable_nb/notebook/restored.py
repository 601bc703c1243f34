"""Showing a restored cell: its outputs replayed, what it set re-applied, and what could not come back."""

from __future__ import annotations

import reprlib
from datetime import datetime
from typing import Any

from ..engine.cells.records import HeldOverrides, Restorable
from ..model import format_seconds
from .capture import close_restored_figures, replay
from .definitions import Definitions, unstored_advice
from .effects import set_attributes
from .notes import Notes
from .settings import apply_changes

__all__ = ["say_held", "show_restored", "unstorable", "warn_shared"]


def show_restored(
    shell: Any,
    notes: Notes,
    definitions: Definitions,
    restored: Restorable,
    exclude: frozenset[str],
    figures: frozenset[int],
    *,
    quiet: bool,
) -> None:
    """Re-apply what a restored cell set, replay its outputs and say what came back (or did not)."""
    namespace = shell.user_ns
    committed = restored.checkpoint
    extra = committed.extra
    problems = []
    for magic, line in extra.get("magics", []):
        try:
            shell.run_line_magic(magic, line)
        except Exception as error:  # noqa: BLE001 - reported below, the restore goes on
            problems.append(f"%{magic} {line}: {type(error).__name__}: {error}")
    remade = definitions.remake(namespace, extra.get("remade", {}), exclude, shell.compile.cache)
    if extra.get("settings"):
        effects = restored.settings()
        problems += apply_changes(effects.get("settings", {}))
        problems += set_attributes(namespace, effects.get("attributes", {}))
    close_restored_figures(figures)
    result = None
    if extra.get("result_name"):
        result = namespace.get(extra["result_name"])
    elif extra.get("result"):
        result = restored.result()
        close_restored_figures(figures)
    replay(shell, restored.outputs, result, quiet=quiet)
    took = f", took {format_seconds(committed.duration)}" if committed.duration else ""
    kept = f"; {', '.join(restored.overridden)} as the fork set" if restored.overridden else ""
    ago = datetime.fromtimestamp(committed.created_at).strftime("%Y-%m-%d %H:%M:%S")
    notes.say(f"restored '{committed.node_id}' from checkpoint (committed {ago}{took}){kept}", "restored")
    if remade.note():
        notes.say(str(remade.note()), "remade")
    warn_shared(notes, restored.shared, f"in cell '{committed.node_id}'")
    accounted = {*remade.back, *remade.differ, *remade.failed}
    lost = {n: t for n, t in restored.unstored.items() if n not in accounted and n not in exclude}
    if lost:
        notes.warn(
            f"not restored, since they could not be stored: {unstorable(lost, restored.reasons)}. "
            + unstored_advice(list(lost.values())),
            "unstored",
        )
    if remade.warning(committed.node_id):
        notes.warn(str(remade.warning(committed.node_id)), "remade")
    if problems:
        notes.warn(
            "could not re-apply what this cell set: " + "; ".join(problems) + ". If later cells depend on it, "
            "add --replay to the cell's %%durable line so that it runs again on restore.",
            "settings",
        )
    if extra.get("effects"):
        notes.warn(
            f"cell '{committed.node_id}' ran {', '.join(extra['effects'])}, whose effect outside its "
            "variables durable_nb cannot restore. If later cells depend on it, add --replay to the "
            "cell's %%durable line so that it runs again on restore.",
            "effects",
        )


def say_held(notes: Notes, held: HeldOverrides, run_id: str, *, quiet: bool = False) -> None:
    """Say which of a fork's values were put in the kernel, and warn of those a plain cell changed."""
    if held.placed and not quiet:
        notes.say(
            f"set {_assignments(held.placed)} in this kernel: the value{_s(held.placed)} run {run_id} was forked with",
            "overrides",
        )
    if held.changed:
        names = ", ".join(sorted(held.changed))
        notes.warn(
            f"{names} in this kernel differ{'s' if len(held.changed) == 1 else ''} from what run "
            f"{run_id} was forked with ({_assignments(held.changed)}): a plain cell changed "
            f"{'it' if len(held.changed) == 1 else 'them'}. Durable cells use the kernel's value from here on "
            "and commit it; set it back to go on with the fork's.",
            "overrides",
        )


def warn_shared(notes: Notes, shared: dict[str, list[str]], where: str) -> None:
    """Warn that an override replaces one of several variables that shared objects (the others keep theirs)."""
    for name, others in shared.items():
        listed = ", ".join(others)
        notes.warn(
            f"{listed} shared objects with {name} {where}: the fork's value replaces {name} alone, and "
            f"{listed} keep{'s' if len(others) == 1 else ''} the old one (set "
            f"{'it' if len(others) == 1 else 'them'} in the fork too if the change should reach "
            f"{'it' if len(others) == 1 else 'them'})",
            "overrides",
        )


def unstorable(types: dict[str, str], reasons: dict[str, str]) -> str:
    """Name values that cannot be stored, each with its type and why pickling it failed."""
    return ", ".join(f"{n} ({t}: {reasons[n]})" if n in reasons else f"{n} ({t})" for n, t in sorted(types.items()))


def _s(items: dict[str, Any]) -> str:
    return "s" if len(items) != 1 else ""


def _assignments(values: dict[str, Any]) -> str:
    return ", ".join(f"{name} = {reprlib.repr(value)}" for name, value in sorted(values.items()))
