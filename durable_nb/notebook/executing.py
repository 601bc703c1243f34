"""Running a %%durable cell's code in the shell, with its retries, and handing what it did to the engine."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from typing import Any

from .._loop import run_in_place, run_sync
from ..engine.cells.cell_run import CellRun
from ..engine.execution.policy import AttemptPolicy, Attempts
from ..engine.execution.scope import enter_scope, leave_scope
from ..engine.gates.gate import Suspend
from ..engine.tracing import GATE, event
from ..errors import GatePending
from ..model import CheckpointRecord
from .capture import Capture, is_quiet
from .cellcode import CellCode
from .definitions import Definitions, unstored_advice
from .execute import cache_cell, run_code
from .map_progress import MapProgress
from .notes import Notes
from .outcome import cell_outcome, ids_of
from .restored import unstorable
from .settings import SettingsReading, SettingsWatch

__all__ = ["CellExecutor", "CellOptions"]


class CellOptions:
    """How one %%durable cell runs."""

    retries: int
    timeout: float | None
    rerun: bool
    exclude: frozenset[str]
    replay: bool

    __slots__ = ("exclude", "replay", "rerun", "retries", "timeout")

    def __init__(
        self,
        retries: int = 0,
        timeout: float | None = None,
        rerun: bool = False,
        exclude: frozenset[str] = frozenset(),
        replay: bool = False,
    ) -> None:
        self.retries = retries
        self.timeout = timeout
        self.rerun = rerun
        self.exclude = exclude
        self.replay = replay

    def recorded(self) -> dict[str, Any]:
        """The options a replay runs the cell with again: those not at their default (``--rerun`` is no
        property of the cell, and ``--replay`` is kept on its own)."""
        found: dict[str, Any] = {}
        if self.retries:
            found["retries"] = self.retries
        if self.timeout is not None:
            found["timeout"] = self.timeout
        if self.exclude:
            found["exclude"] = sorted(self.exclude)
        return found


# Shows a paused cell's gate: run id, node, reason, context, the gate's checkpoint.
ShowGate = Callable[[str, str, str, Any, "str | None"], None]


class CellExecutor:
    """Runs cells' code in one shell and commits each finished cell with one engine call."""

    def __init__(self, shell: Any, notes: Notes, definitions: Definitions, show_gate: ShowGate) -> None:
        self.shell = shell
        self.notes = notes
        self.definitions = definitions
        self.show_gate = show_gate
        self._unstorable_warned: dict[str, int] = {}
        # The settings as the last cell run here left them, with its execution count.
        self._settings_end: tuple[int, SettingsReading] | None = None

    def run(
        self,
        cell_run: CellRun,
        node: str,
        source: str,
        cell: CellCode,
        options: CellOptions,
        *,
        only_if_changed: bool = False,
        replayed: CheckpointRecord | None = None,
        lost: bool = False,
    ) -> CheckpointRecord | None:
        """Run the cell's code (retrying as ``options`` say) and commit it; a gate pauses the run.

        Return the checkpoint written (None when ``only_if_changed`` found nothing changed)."""
        __tracebackhide__ = True
        # Numbered as the cell running it, so a traceback reads 'Cell In[n]' as for a plain cell.
        filename = cache_cell(self.shell, source, max(self.shell.execution_count - 1, 0))
        flags = getattr(self.shell.compile, "flags", 0)
        started = time.perf_counter()
        attempts = Attempts(AttemptPolicy(options.retries, options.timeout), node)
        namespace = self.shell.user_ns
        quiet = is_quiet(self.shell, source)
        cell_run.tracker.baseline(namespace)
        count = self.shell.execution_count
        ended, self._settings_end = self._settings_end, None
        # Read again unless the previous cell was this one's just before (no cell ran in between).
        start = ended[1] if ended is not None and ended[0] == count - 1 else None
        for attempt in attempts:
            scope = cell_run.scope(node, _show_turn)
            scope.steps.progress = MapProgress(self.shell, self.notes.enabled)
            before = ids_of(namespace)
            watch = SettingsWatch(start if attempt == 1 else None)
            token = enter_scope(scope)
            try:
                with Capture(self.shell, quiet) as capture:
                    value = run_code(
                        cell,
                        namespace,
                        filename,
                        timeout=options.timeout,
                        node=node,
                        after_statement=watch.after_statement,
                        flags=flags,
                    )
                    capture.finish(value)
            except Suspend as suspend:
                took = time.perf_counter() - started
                gate = run_sync(
                    cell_run.writer.pause_cell(node, suspend, source, cell.source_hash, took, attempts.events)
                )
                event(None, GATE, cell_run.run_id, gate, node=node, reason=suspend.reason, state="paused")
                self.show_gate(cell_run.run_id, node, suspend.reason, suspend.context, gate)
                raise GatePending(
                    f"Paused at gate '{suspend.reason}': decide in the panel above; the cell then continues.",
                    run_id=cell_run.run_id,
                    node_id=node,
                ) from None
            except KeyboardInterrupt:
                run_sync(cell_run.writer.cancel_cell(node))
                self.notes.warn(
                    f"cell '{node}' interrupted: run {cell_run.run_id} is cancelled; run the cell again to resume",
                    "interrupted",
                )
                raise
            except Exception as error:
                wait = attempts.failed(error)
                if wait is not None:
                    self.notes.warn(
                        f"cell '{node}' failed ({type(error).__name__}: {error}); retry {attempt} of {options.retries}",
                        "retrying",
                    )
                    time.sleep(wait)
                    continue
                trace = "".join(traceback.format_exception(error))
                took = time.perf_counter() - started
                run_sync(
                    cell_run.writer.fail_cell(node, error, trace, took, attempt, cell.source_hash, attempts.events)
                )
                raise
            finally:
                leave_scope(token)
            if replayed is not None:
                run_sync(cell_run.reapply_overrides(replayed, namespace, options.exclude))
            if lost:
                self._kept_overrides(cell_run, node, before)
            shown = None if quiet else value  # a quiet cell's value is no Out[n] (nor _) to bring back
            recipe = self.definitions.recipe(cell, namespace, flags)
            outcome = cell_outcome(
                self.shell, node, cell, capture.outputs, before, watch, shown, options.exclude, options.replay, recipe
            )
            # The code that ran, kept with its commit: a replay runs the cells from the store alone.
            outcome.extra["source"] = source
            if options.recorded():
                outcome.extra["options"] = options.recorded()  # and the options it ran with
            outcome.duration = time.perf_counter() - started
            outcome.attempts = attempt
            outcome.events = attempts.events
            checkpoint = run_in_place(cell_run.commit_cell(outcome, only_if_changed=only_if_changed))
            if watch.ending is not None:
                self._settings_end = (count, watch.ending)
            if checkpoint is not None:
                self._say_committed(node, checkpoint)
            return checkpoint
        raise AssertionError("unreachable")

    def _kept_overrides(self, cell_run: CellRun, node: str, before: dict[str, int]) -> None:
        namespace = self.shell.user_ns
        changed = [name for name, value in namespace.items() if before.get(name) != id(value)]
        kept = run_sync(cell_run.reapply_in_force(namespace, changed))
        if kept:
            self.notes.warn(
                f"cell '{node}' ran before the fork point, but its checkpoint is gone (pruned), so it ran "
                f"again; {', '.join(kept)} keep{'s' if len(kept) == 1 else ''} the value the fork set",
                "overrides",
            )

    def _say_committed(self, node: str, checkpoint: CheckpointRecord) -> None:
        extra = checkpoint.extra
        if not extra.get("remade") and not extra.get("unstored"):
            return  # most cells: no definition to remember, nothing left unstored to tell of
        namespace = self.shell.user_ns
        changed = self.definitions.committed(namespace, extra.get("remade", {}))
        if changed:
            self.notes.warn(
                f"'{node}' changed {', '.join(changed)}, which a restore makes again by running "
                f"{'its definition' if len(changed) == 1 else 'their definitions'}: the change will not come back "
                "after a restart. If later cells depend on it, add --replay to this cell's %%durable line so "
                "that it runs again on restore.",
                "remade",
            )
        remade = {n: r for n, r in extra.get("remade", {}).items() if "source" in r}
        unstored = extra.get("unstored", {})
        fresh = {n: t for n, t in unstored.items() if self._unstorable_warned.get(n) != id(namespace.get(n))}
        for name in fresh:
            self._unstorable_warned[name] = id(namespace.get(name))
        reasons = extra.get("reasons", {})
        defined = {n: t for n, t in fresh.items() if n in remade}
        if defined:
            self.notes.say(
                f"{unstorable(defined, reasons)} cannot be pickled: a restore makes "
                f"{'it' if len(defined) == 1 else 'them'} again by running the definition kept with "
                f"'{node}', decorators included.",
                "remade",
            )
        lost = {n: t for n, t in fresh.items() if n not in remade}
        if lost:
            self.notes.warn(
                f"committed '{node}' without {unstorable(lost, reasons)}: "
                f"{'it' if len(lost) == 1 else 'they'} cannot be stored, so a restart will not bring "
                f"{'it' if len(lost) == 1 else 'them'} back. " + unstored_advice(list(lost.values())),
                "unstored",
            )


def _show_turn(line: str) -> None:
    # An agent's turns, live, in the cell's output (captured and restored with it).
    print(line, flush=True)
