"""Functions and classes that cannot be pickled, made again on restore by running their definitions.

A function or class defined in a notebook is pickled with what it holds; one that holds what no
pickle can (a decorator's generator-based context manager, a lock in a class attribute) is made
again instead. The ``def`` or ``class`` statement the cell ran, decorators included, is kept with
the checkpoint and run in the notebook's namespace when the cell is restored, after the cell's
stored values are back, so that its decorators' arguments, defaults and base classes find them.

Decorators and class bodies run again. In a new kernel that is what the user had: what they
registered with a library is registered again, in a process where it was not. In the kernel
that made the object, an object still as the cell left it is kept, so nothing runs twice.

Running a definition again gives what the cell left unless something changed the object after
it, or the definition read values that changed after it: the object made is compared with the
one the cell left (``shape_of``), and a difference is named in a warning, never restored silently.
A later cell that uses the object is compared too: a change it made is named when it commits
(a restart will not bring it back) and again when it is restored.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from typing import Any

from .cellcode import CellCode, analyze
from .execute import run_code

__all__ = ["Definitions", "Remade", "unstored_advice"]


class Remade:
    """What a restore did with the definitions kept with a cell."""

    ran: list[str]  # definitions run again
    back: list[str]  # as the cell left them (run again or kept)
    failed: dict[str, str]  # name to the error its definition raised
    differ: list[str]  # not as the cell left them

    __slots__ = ("back", "differ", "failed", "ran")

    def __init__(
        self,
        ran: list[str] | None = None,
        back: list[str] | None = None,
        failed: dict[str, str] | None = None,
        differ: list[str] | None = None,
    ) -> None:
        self.ran = [] if ran is None else ran
        self.back = [] if back is None else back
        self.failed = {} if failed is None else failed
        self.differ = [] if differ is None else differ

    def note(self) -> str | None:
        """One line naming what came back by running definitions again, if anything did."""
        shown = [name for name in self.ran if name in self.back]
        if not shown:
            return None
        definitions = "its definition" if len(shown) == 1 else "their definitions"
        return f"made {', '.join(shown)} again by running {definitions} (cannot be pickled)"

    def warning(self, node: str) -> str | None:
        """What did not come back as cell ``node`` left it, and what to do, if anything."""
        parts = []
        if self.failed:
            errors = "; ".join(f"{name}: {error}" for name, error in self.failed.items())
            parts.append(
                f"could not make {', '.join(self.failed)} again by running {_their(list(self.failed))} "
                f"definition ({errors}). If later cells need {_them(list(self.failed))}, add --replay to "
                "this cell's %%durable line so that it runs again on restore."
            )
        if self.differ:
            names = self.differ
            parts.append(
                f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} not as cell '{node}' left {_them(names)}: "
                f"changed after {_their(names)} definition, which is all a restore can run again (or the "
                f"definition read values that changed since). If later cells depend on the change, add --replay "
                "to the %%durable line of the cell that made it so that it runs again on restore."
            )
        return " ".join(parts) or None


def _their(names: list[str]) -> str:
    return "its" if len(names) == 1 else "their"


def _them(names: list[str]) -> str:
    return "it" if len(names) == 1 else "them"


def unstored_advice(types: list[str]) -> str:
    """What to do about values that cannot be stored, for a message naming them."""
    advice = (
        "Add --replay to the cell's %%durable line so that it runs again on restore, create such objects "
        "in a plain cell, or leave them out with --exclude."
    )
    if any(kind in ("builtins.function", "builtins.type") for kind in types):
        advice += (
            " A function or class comes back when its def or class statement stands at the top level of a "
            "cell and nothing rebinds its name after it in that cell."
        )
    return advice


class Definitions:
    """The objects of one kernel that were made by a definition the store keeps instead of a pickle."""

    def __init__(self) -> None:
        # name -> (the object a definition made, its shape when last committed or restored)
        self._made: dict[str, tuple[Any, str]] = {}

    def recipe(self, cell: CellCode, namespace: dict[str, Any], flags: int) -> Callable[[str], dict[str, Any] | None]:
        """Return how to make a value of this cell again when it cannot be stored (None: no way)."""

        def recipe(name: str) -> dict[str, Any] | None:
            value = namespace.get(name)
            definition = cell.definitions.get(name)
            if definition is None and not (name in self._made and self._made[name][0] is value):
                return None
            # Imported here: attaching, and cells that keep no definition, never describe a value.
            from .shape import shape_of

            if definition is not None:
                return {"source": definition.source, "line": definition.line, "flags": flags, "shape": shape_of(value)}
            # Made by an earlier cell's definition: what this cell left is compared on restore.
            return {"shape": shape_of(value)}

        return recipe

    def committed(self, namespace: dict[str, Any], remade: dict[str, Any]) -> list[str]:
        """Remember the objects a committed cell's kept definitions made; return those made by an
        earlier cell's definition that this cell changed (a restart will not bring the change back)."""
        changed = []
        for name, recipe in remade.items():
            if name not in namespace:
                continue
            if "source" not in recipe and name in self._made and self._made[name][1] != recipe["shape"]:
                changed.append(name)
            self._made[name] = (namespace[name], recipe["shape"])
        return changed

    def remake(
        self,
        namespace: dict[str, Any],
        remade: dict[str, Any],
        exclude: frozenset[str],
        filename_for: Callable[[str], str],
    ) -> Remade:
        """Run the kept definitions of a restored cell in ``namespace``, in the cell's order; compare
        each object with what the cell left."""
        done = Remade()
        wanted = {name: recipe for name, recipe in remade.items() if name not in exclude}
        from .shape import shape_of  # a restore is rarer than attaching, which does not load it

        shapes: dict[str, str] = {}
        for name, recipe in sorted(wanted.items(), key=lambda item: item[1].get("line", 0)):
            if "source" not in recipe:
                continue
            if name in namespace:
                shapes[name] = shape_of(namespace[name])
                if shapes[name] == recipe["shape"]:
                    continue  # the kernel that made it holds it as it was: nothing runs twice
            try:
                self._run(namespace, name, recipe, filename_for)
            except Exception as error:  # noqa: BLE001 - reported to the user, the restore goes on
                done.failed[name] = f"{type(error).__name__}: {error}"
                continue
            done.ran.append(name)
            shapes.pop(name, None)
        for name, recipe in wanted.items():
            if name in done.failed or name not in namespace:
                continue
            shape = shapes.get(name) or shape_of(namespace[name])
            (done.back if shape == recipe["shape"] else done.differ).append(name)
            self._made[name] = (namespace[name], shape)
        return done

    @staticmethod
    def _run(namespace: dict[str, Any], name: str, recipe: dict[str, Any], filename_for: Callable[[str], str]) -> None:
        source = recipe["source"]
        # What the definition prints was printed when the cell ran, and is replayed with its outputs.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            run_code(analyze(source), namespace, filename_for(source), timeout=None, node=name, flags=recipe["flags"])
