"""One kernel's durable session: the run it is attached to, and how a %%durable cell runs."""

from __future__ import annotations

import atexit
import os
import reprlib
import time
import traceback
import weakref
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .._loop import run_sync
from ..engine.cells import CellOutcome, CellRun
from ..engine.decisions import decide, make_decision
from ..engine.gates import Suspend
from ..engine.namespace import NamespaceTracker
from ..engine.policy import AttemptPolicy, Attempts
from ..engine.scope import NodeScope, enter_scope, leave_scope
from ..engine.values import ValueCodec
from ..errors import GatePending
from ..model import CheckpointRecord, CommitResult, RunStatus, format_seconds
from ..store import Store, connect
from ..store.secret import load_secret
from .capture import Capture, close_restored_figures, is_quiet, open_figure_ids, replay
from .cellcode import CellCode, analyze
from .definitions import Definitions, unstored_advice
from .effects import set_attributes
from .execute import run_code
from .map_progress import MapProgress
from .notes import Notes
from .outcome import cell_outcome
from .settings import SettingsWatch, apply_changes

__all__ = ["CellOptions", "KernelSession", "session_for"]


@dataclass(slots=True)
class CellOptions:
    """How one %%durable cell runs."""

    retries: int = 0
    timeout: float | None = None
    rerun: bool = False
    exclude: frozenset[str] = frozenset()
    replay: bool = False


def _ago(checkpoint: CheckpointRecord) -> str:
    return datetime.fromtimestamp(checkpoint.created_at).strftime("%Y-%m-%d %H:%M:%S")


class KernelSession:
    """The durable state of one IPython shell: its store and the run it is attached to."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.store: Store | None = None
        self.cell_run: CellRun | None = None
        self.tracker: NamespaceTracker | None = None
        self._unstorable_warned: dict[str, int] = {}
        self.definitions = Definitions()
        self.notes = Notes(shell)
        shell.events.register("pre_run_cell", self.notes.new_cell)
        atexit.register(self._release_at_exit)

    # -- attaching -----------------------------------------------------------------------

    def _values(self) -> ValueCodec:
        assert self.store is not None
        return ValueCodec(self.store, load_secret())

    def attach(
        self,
        name: str,
        *,
        new: bool = False,
        run_id: str | None = None,
        key: str | None = None,
        store: str | None = None,
        quiet: bool = False,
    ) -> CellRun:
        """Attach the kernel to a run and print one line saying what can be restored.

        The kernel's variables stay as they are; the run's cells restore when they run.
        """
        if store is not None or self.store is None:
            self.store = connect(store)
            self.tracker = None
        if self.cell_run is not None and self.cell_run.run_id != run_id:
            run_sync(self.cell_run.release())
        values = self._values()
        if self.tracker is None:
            self.tracker = NamespaceTracker(values.secret)
        self.cell_run = run_sync(
            CellRun.attach(self.store, values, name, new=new, run_id=run_id, key=key, tracker=self.tracker)
        )
        if not quiet:
            self.notes.say(self.describe(), "attached")
        return self.cell_run

    def describe(self) -> str:
        """One line: the run, its status, what is restorable, where it waits."""
        cell_run = self.require()
        run = run_sync(cell_run.refresh())
        cells = cell_run.completed
        text = f"run {run.run_id} '{run.name}' — {run.status.value}"
        if cells:
            shown = ", ".join(cells[:8]) + (", …" if len(cells) > 8 else "")
            text += f"; {len(cells)} cell{'s' if len(cells) != 1 else ''} restorable ({shown})"
        else:
            text += "; nothing committed yet"
        if run.status is RunStatus.PAUSED:
            pending = run_sync(cell_run.store.pending_interrupts(run.run_id))
            if pending:
                text += f"; waiting at gate '{pending[0].reason}' in cell '{pending[0].node_id}'"
        if run.parent_run_id:
            text += f"; forked from {run.parent_run_id}"
        return text

    def require(self) -> CellRun:
        """Return the attached run, attaching to one named after the notebook if possible."""
        if self.cell_run is not None:
            return self.cell_run
        name = _notebook_name(self.shell)
        if name is None:
            from IPython.core.error import UsageError

            raise UsageError(
                "No durable run is attached to this kernel. Start with:  %durable run NAME  "
                "(it attaches to the latest unfinished run of that name, or starts one)."
            )
        return self.attach(name)

    def _release_at_exit(self) -> None:
        if self.cell_run is not None:
            try:
                run_sync(self.cell_run.release())
            except Exception:  # noqa: BLE001 - exiting anyway; liveness checks cover a missed release
                pass

    # -- a %%durable cell -------------------------------------------------------------------

    def run_cell(self, node: str, raw_source: str, options: CellOptions) -> Any:
        """Restore a committed cell, or run it and commit what it defined and displayed."""
        __tracebackhide__ = True
        cell_run = self.require()
        source = self.shell.transform_cell(raw_source)
        cell = analyze(source)
        run = run_sync(cell_run.refresh())
        committed = run_sync(cell_run.lookup(node))
        if (
            committed is not None
            and not options.rerun
            and committed.extra.get("source_hash")
            not in (
                None,
                cell.source_hash,
            )
        ):
            match = run_sync(cell_run.matching_run(node, cell.source_hash))
            if match is not None:
                cell_run, committed, run = self._return_to(cell_run, match, node)
        if committed is not None and not options.rerun:
            if committed.extra.get("source_hash") in (None, cell.source_hash):
                if options.replay:
                    return self._replay_cell(cell_run, committed, source, cell, options)
                # Restoring reads the store only: allowed whatever the run waits for.
                return self._restore(cell_run, committed, options, is_quiet(self.shell, source))
        if run.status is RunStatus.PAUSED:
            return self._while_paused(cell_run, node)
        # Completed in this run's lineage, yet nothing to restore: its checkpoint was pruned.
        lost = committed is None and node in cell_run.completed
        if committed is not None:
            cell_run = self._fork_for(cell_run, node, "re-run with --rerun" if options.rerun else "changed")
            run = cell_run.run
        run_sync(cell_run.take(run))
        return self._execute(cell_run, node, source, cell, options, lost=lost)

    def _return_to(self, current: CellRun, match: str, node: str) -> tuple[CellRun, CheckpointRecord | None, Any]:
        cell_run = self.attach(current.run.name, run_id=match, quiet=True)
        self.notes.say(
            f"cell '{node}' matches run {match} at this cell: continuing there "
            f"(switch back with %durable switch {current.run_id})",
            "switched",
        )
        return cell_run, run_sync(cell_run.lookup(node)), run_sync(cell_run.refresh())

    def _while_paused(self, cell_run: CellRun, node: str) -> Any:
        gates = run_sync(cell_run.store.pending_interrupts(cell_run.run_id))
        pending = next((p for p in gates if p.node_id == node), None)
        if pending is None:
            where = f"cell '{gates[0].node_id}'" if gates else "a gate"
            raise GatePending(
                f"Run {cell_run.run_id} waits for a decision at {where}; decide it there (or with "
                "%durable approve / durable_nb.approve) before running other cells.",
                run_id=cell_run.run_id,
                node_id=node,
            )
        self.show_gate(cell_run.run_id, node, pending.reason, pending.context, pending.checkpoint_id)
        raise GatePending(
            f"Waiting at gate '{pending.reason}': decide in the panel, then run this cell again.",
            run_id=cell_run.run_id,
            node_id=node,
        )

    def _restore(self, cell_run: CellRun, committed: CheckpointRecord, options: CellOptions, quiet: bool) -> None:
        namespace = self.shell.user_ns
        if committed.run_id == cell_run.run_id:
            self.hold_overrides(cell_run)
        figures = open_figure_ids()
        restored = run_sync(cell_run.restore(committed, namespace, options.exclude))
        extra = committed.extra
        problems = []
        for magic, line in extra.get("magics", []):
            try:
                self.shell.run_line_magic(magic, line)
            except Exception as error:  # noqa: BLE001 - reported below, the restore goes on
                problems.append(f"%{magic} {line}: {type(error).__name__}: {error}")
        remade = self.definitions.remake(namespace, extra.get("remade", {}), options.exclude, self.shell.compile.cache)
        if extra.get("settings"):
            effects = run_sync(cell_run.values.load_one(extra["settings"]))
            problems += apply_changes(effects.get("settings", {}))
            problems += set_attributes(namespace, effects.get("attributes", {}))
        close_restored_figures(figures)
        result = None
        if extra.get("result_name"):
            result = namespace.get(extra["result_name"])
        elif extra.get("result"):
            result = run_sync(cell_run.values.load_one(extra["result"]))
            close_restored_figures(figures)
        replay(self.shell, restored.outputs, result, quiet=quiet)
        took = f", took {format_seconds(committed.duration)}" if committed.duration else ""
        kept = f"; {', '.join(restored.overridden)} as the fork set" if restored.overridden else ""
        self.notes.say(
            f"restored '{committed.node_id}' from checkpoint (committed {_ago(committed)}{took}){kept}", "restored"
        )
        if remade.note():
            self.notes.say(str(remade.note()), "remade")
        self.warn_shared(restored.shared, f"in cell '{committed.node_id}'")
        accounted = {*remade.back, *remade.differ, *remade.failed}
        lost = {n: t for n, t in restored.unstored.items() if n not in accounted and n not in options.exclude}
        if lost:
            self.notes.warn(
                f"not restored, since they could not be stored: {_unstorable(lost, restored.reasons)}. "
                + unstored_advice(list(lost.values())),
                "unstored",
            )
        if remade.warning(committed.node_id):
            self.notes.warn(str(remade.warning(committed.node_id)), "remade")
        if problems:
            self.notes.warn(
                "could not re-apply what this cell set: " + "; ".join(problems) + ". If later cells depend on it, "
                "add --replay to the cell's %%durable line so that it runs again on restore.",
                "settings",
            )
        if extra.get("effects"):
            self.notes.warn(
                f"cell '{committed.node_id}' ran {', '.join(extra['effects'])}, whose effect outside its "
                "variables durable_nb cannot restore. If later cells depend on it, add --replay to the "
                "cell's %%durable line so that it runs again on restore.",
                "effects",
            )

    def _replay_cell(
        self, cell_run: CellRun, committed: CheckpointRecord, source: str, cell: CellCode, options: CellOptions
    ) -> Any:
        """Run a committed --replay cell again; commit it only if its values changed and the run can take it.

        What forks made after it set is put back once it ran: the cell restores, it is not live.
        """
        node = committed.node_id or ""
        run = run_sync(cell_run.refresh())
        if run.status is RunStatus.PAUSED:
            filename = self.shell.compile.cache(source)
            value = run_code(cell, self.shell.user_ns, filename, timeout=options.timeout, node=node)
            run_sync(cell_run.reapply_overrides(committed, self.shell.user_ns, options.exclude))
            self.notes.say(f"replayed '{node}' (not committed: the run waits at a gate)", "replayed")
            return None if is_quiet(self.shell, source) else _show_value(self.shell, value)
        run_sync(cell_run.take())
        self.notes.say(f"replaying '{node}' (--replay)", "replaying")
        return self._execute(cell_run, node, source, cell, options, only_if_changed=True, replayed=committed)

    def _fork_for(self, cell_run: CellRun, node: str, why: str) -> CellRun:
        forked = run_sync(cell_run.fork_before(node))
        self.cell_run = forked
        self.notes.say(
            f"cell '{node}' {why}: continuing in fork {forked.run_id} of run {cell_run.run_id} "
            f"(the original is kept; switch back with %durable switch {cell_run.run_id})",
            "forked",
        )
        return forked

    def _execute(
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
    ) -> Any:
        __tracebackhide__ = True
        self.hold_overrides(cell_run)
        filename = self.shell.compile.cache(source)
        flags = getattr(self.shell.compile, "flags", 0)
        started = time.perf_counter()
        attempts = Attempts(AttemptPolicy(options.retries, options.timeout), node)
        namespace = self.shell.user_ns
        quiet = is_quiet(self.shell, source)
        cell_run.tracker.baseline(namespace)
        for attempt in attempts:
            scope = NodeScope(
                run_id=cell_run.run_id,
                node_id=node,
                store=cell_run.store,
                secret=cell_run.values.secret,
                decisions=list(cell_run.resumes.get(node, [])),
                steps=cell_run.agent_steps(_show_turn),
            )
            scope.steps.progress = MapProgress(self.shell, self.notes.enabled)
            before = {name: id(value) for name, value in namespace.items()}
            watch = SettingsWatch()
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
                gate = run_sync(cell_run.pause_cell(node, suspend, source, cell.source_hash, took, attempts.events))
                self.show_gate(cell_run.run_id, node, suspend.reason, suspend.context, gate)
                raise GatePending(
                    f"Paused at gate '{suspend.reason}': decide in the panel above; the cell then continues.",
                    run_id=cell_run.run_id,
                    node_id=node,
                ) from None
            except KeyboardInterrupt:
                run_sync(cell_run.cancel_cell(node))
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
                run_sync(cell_run.fail_cell(node, error, trace, took, attempt, cell.source_hash, attempts.events))
                raise
            finally:
                leave_scope(token)
            if replayed is not None:
                run_sync(cell_run.reapply_overrides(replayed, namespace, options.exclude))
            if lost:
                changed = [name for name, value in namespace.items() if before.get(name) != id(value)]
                kept = run_sync(cell_run.reapply_in_force(namespace, changed))
                if kept:
                    self.notes.warn(
                        f"cell '{node}' ran before the fork point, but its checkpoint is gone (pruned), so it ran "
                        f"again; {', '.join(kept)} keep{'s' if len(kept) == 1 else ''} the value the fork set",
                        "overrides",
                    )
            shown = None if quiet else value  # a quiet cell's value is no Out[n] (nor _) to bring back
            recipe = self.definitions.recipe(cell, namespace, flags)
            outcome = cell_outcome(
                self.shell,
                cell_run,
                node,
                cell,
                capture.outputs,
                before,
                watch,
                shown,
                options.exclude,
                options.replay,
                recipe,
            )
            outcome.duration = time.perf_counter() - started
            outcome.attempts = attempt
            outcome.events = attempts.events
            self._commit(cell_run, outcome, only_if_changed=only_if_changed)
            return None
        raise AssertionError("unreachable")

    def _commit(self, cell_run: CellRun, outcome: CellOutcome, *, only_if_changed: bool = False) -> None:
        checkpoint = run_sync(cell_run.commit_cell(outcome, only_if_changed=only_if_changed))
        if checkpoint is None:
            return
        namespace = self.shell.user_ns
        extra = checkpoint.extra
        changed = self.definitions.committed(namespace, extra.get("remade", {}))
        if changed:
            self.notes.warn(
                f"'{outcome.node_id}' changed {', '.join(changed)}, which a restore makes again by running "
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
                f"{_unstorable(defined, reasons)} cannot be pickled: a restore makes "
                f"{'it' if len(defined) == 1 else 'them'} again by running the definition kept with "
                f"'{outcome.node_id}', decorators included.",
                "remade",
            )
        lost = {n: t for n, t in fresh.items() if n not in remade}
        if lost:
            self.notes.warn(
                f"committed '{outcome.node_id}' without {_unstorable(lost, reasons)}: "
                f"{'it' if len(lost) == 1 else 'they'} cannot be stored, so a restart will not bring "
                f"{'it' if len(lost) == 1 else 'them'} back. " + unstored_advice(list(lost.values())),
                "unstored",
            )

    # -- a fork's overrides ---------------------------------------------------------------------

    def hold_overrides(self, cell_run: CellRun, *, quiet: bool = False) -> dict[str, Any]:
        """Make sure the kernel holds what the run's forks set; say what was put in place or found changed."""
        held = run_sync(cell_run.hold_overrides(self.shell.user_ns))
        if held.placed and not quiet:
            self.notes.say(
                f"set {_assignments(held.placed)} in this kernel: the value{_s(held.placed)} run {cell_run.run_id} "
                "was forked with",
                "overrides",
            )
        if held.changed:
            names = ", ".join(sorted(held.changed))
            self.notes.warn(
                f"{names} in this kernel differ{'s' if len(held.changed) == 1 else ''} from what run "
                f"{cell_run.run_id} was forked with ({_assignments(held.changed)}): a plain cell changed "
                f"{'it' if len(held.changed) == 1 else 'them'}. Durable cells use the kernel's value from here on "
                "and commit it; set it back to go on with the fork's.",
                "overrides",
            )
        return held.placed

    def warn_shared(self, shared: dict[str, list[str]], where: str) -> None:
        """Warn that an override replaces one of several variables that shared objects (the others keep theirs)."""
        for name, others in shared.items():
            listed = ", ".join(others)
            self.notes.warn(
                f"{listed} shared objects with {name} {where}: the fork's value replaces {name} alone, and "
                f"{listed} keep{'s' if len(others) == 1 else ''} the old one (set "
                f"{'it' if len(others) == 1 else 'them'} in the fork too if the change should reach "
                f"{'it' if len(others) == 1 else 'them'})",
                "overrides",
            )

    # -- gates ----------------------------------------------------------------------------------

    def gate_panel(self, run_id: str, node: str, reason: str, context: Any, gate: str | None = None) -> Any:
        """Return the Approve / Reject panel of a cell's gate, continuing the cell in this kernel."""
        from ..widgets.gate_panel import GatePanel

        assert self.store is not None
        return GatePanel(self.store, run_id=run_id, node_id=node, reason=reason, context=context, gate=gate, link=self)

    def show_gate(self, run_id: str, node: str, reason: str, context: Any, gate: str | None = None) -> None:
        """Display the gate panel for a paused cell."""
        from IPython.display import display

        display(self.gate_panel(run_id, node, reason, context, gate))

    def decide(
        self, run_id: str, node: str | None, *, approved: bool, comment: str | None = None, by: str | None = None
    ) -> CommitResult:
        """Decide the gate a run waits at (atomically, once) and return what was written."""
        assert self.store is not None
        return run_sync(decide(self.store, run_id, make_decision(approved, None, comment, by), node))

    # -- what the widgets ask of this kernel -------------------------------------------------------

    @property
    def attached_run_id(self) -> str | None:
        """The run this kernel is attached to, if any."""
        return self.cell_run.run_id if self.cell_run is not None else None

    def switch_to(self, run_id: str) -> None:
        """Attach this kernel to another run (its cells restore from it when they run)."""
        assert self.store is not None
        run = run_sync(self.store.get_run(run_id))
        self.attach(run.name, run_id=run_id)

    def continue_after(self, decided: CommitResult) -> str:
        """Run a decided gate's cell again from its recorded source, in this kernel; return a note."""
        cell_run = self.cell_run
        run = decided.run
        if cell_run is None or cell_run.run_id != run.run_id or decided.claimed is None:
            return "Decision recorded. Run the cell again in the kernel attached to this run to continue."
        if run.status is not RunStatus.PENDING:
            return f"Decision recorded; the run is {run.status.value}. Run the cell again to continue."
        node = decided.claimed.node_id
        gate = run_sync(cell_run.store.get_checkpoint(run.run_id, decided.claimed.checkpoint_id))
        source = gate.extra.get("source") or ""
        if not source:
            return "Decision recorded. Run the cell again to continue."
        run_sync(cell_run.take(run, decided.checkpoints[-1]))
        self._execute(cell_run, node, source, analyze(source), CellOptions())
        return f"Decision recorded and cell '{node}' continued. Run the cells below (Run All restores the rest)."


def _unstorable(types: dict[str, str], reasons: dict[str, str]) -> str:
    """Name values that cannot be stored, each with its type and why pickling it failed."""
    return ", ".join(f"{n} ({t}: {reasons[n]})" if n in reasons else f"{n} ({t})" for n, t in sorted(types.items()))


def _s(items: dict[str, Any]) -> str:
    return "s" if len(items) != 1 else ""


def _assignments(values: dict[str, Any]) -> str:
    return ", ".join(f"{name} = {reprlib.repr(value)}" for name, value in sorted(values.items()))


def _show_turn(line: str) -> None:
    # An agent's turns, live, in the cell's output (captured and restored with it).
    print(line, flush=True)


def _show_value(shell: Any, value: Any) -> None:
    if value is not None:
        shell.displayhook(value)


def _notebook_name(shell: Any) -> str | None:
    path = shell.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    if not path or not str(path).endswith(".ipynb"):
        return None
    return Path(str(path)).stem


_sessions: weakref.WeakKeyDictionary[Any, KernelSession] = weakref.WeakKeyDictionary()


def session_for(shell: Any) -> KernelSession:
    """Return the durable session of a shell, creating it on first use."""
    session = _sessions.get(shell)
    if session is None:
        session = _sessions[shell] = KernelSession(shell)
    return session
