"""One kernel's durable session: the run it is attached to, and how a %%durable cell runs."""

from __future__ import annotations

import atexit
import os
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._loop import run_in_place, run_sync
from ..engine import tracing
from ..engine.cells.cell_run import CellRun
from ..engine.cells.namespace import NamespaceTracker
from ..errors import GatePending, StoreError
from ..model import CommitResult, RunStatus
from ..store import Store, connect
from .all_cells import AllCells
from .definitions import Definitions
from .frontend import FrontendLink
from .kernel_lease import KernelLease
from .notes import Notes

if TYPE_CHECKING:
    from ..engine.cells.plan import CellPlan
    from .cellcode import CellCode
    from .executing import CellExecutor, CellOptions

# Running a cell (its code, settings, outputs, what it restores) is imported at the first cell:
# attaching a kernel does not load it. Where a method below imports, that is why.

__all__ = ["KernelSession", "session_for"]


class KernelSession:
    """The durable state of one IPython shell: its store and the run it is attached to."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.store: Store | None = None
        self.frontend = FrontendLink(shell, self)
        self._cell_run: CellRun | None = None
        self.tracker: NamespaceTracker | None = None
        self.definitions = Definitions()
        self.notes = Notes(shell)
        self._executor: CellExecutor | None = None
        self.all_cells = AllCells(shell)
        self.handed_over = False  # attached by run-notebook (%durable run --from-env): the notebook's own line waits
        self.lease = KernelLease()
        shell.events.register("pre_run_cell", self.notes.new_cell)
        atexit.register(self._release_at_exit)

    @property
    def executor(self) -> CellExecutor:
        """What runs a cell's code and commits it (made at the first cell)."""
        if self._executor is None:
            from .executing import CellExecutor

            # Looked up at each pause: a test or an extension may replace how this session shows gates.
            self._executor = CellExecutor(self.shell, self.notes, self.definitions, lambda *gate: self._pause(*gate))
        return self._executor

    @property
    def cell_run(self) -> CellRun | None:
        """The run this kernel works in (None before the first attach and after the end)."""
        return self._cell_run

    @cell_run.setter
    def cell_run(self, cell_run: CellRun | None) -> None:
        # Every attach, switch, fork and end passes here: the one place front ends hear of it.
        self._cell_run = cell_run
        self.lease.follow(cell_run)
        self.frontend.run_changed(cell_run)

    # -- attaching -----------------------------------------------------------------------

    def attach(
        self,
        name: str,
        *,
        new: bool = False,
        run_id: str | None = None,
        key: str | None = None,
        store: str | None = None,
        quiet: bool = False,
        new_key: str | None = None,
        claim: str | None = None,
    ) -> CellRun:
        """Attach the kernel to a run and print one line saying what can be restored.

        The kernel's variables stay as they are; the run's cells restore when they run. ``new_key``:
        with no unfinished run of ``name``, the run of that key (as ``CellRun.attach`` says).
        """
        if store is not None or self.store is None:
            self.store = connect(store)
            self.tracker = None
        if self.cell_run is not None and self.cell_run.run_id != run_id:
            self._let_go(self.cell_run)
        # The kernel's namespace as the store holds it follows the kernel from run to run (same store).
        values = self.cell_run.values if self.cell_run is not None and self.tracker is not None else None
        # Store calls only, as a cell's: on this thread, the kernel's loop set aside (no background loop
        # to start, no hand-off to it).
        self.cell_run = run_in_place(
            CellRun.attach(
                self.store,
                values,
                name,
                new=new,
                run_id=run_id,
                key=key,
                tracker=self.tracker,
                new_key=new_key,
                claim=claim,
            )
        )
        self.tracker = self.cell_run.tracker
        if not quiet:
            self.notes.say(self.describe(), "attached")
        return self.cell_run

    def _let_go(self, cell_run: CellRun) -> None:
        """Give up the run this kernel leaves for another; a store that fails to answer does not
        keep the kernel from attaching elsewhere (the run's lease then lapses on its own)."""
        try:
            run_sync(cell_run.release())
        except StoreError as error:
            self.notes.warn(
                f"Could not hand back run {cell_run.run_id} ({error}); any kernel can continue it once its "
                "lease runs out.",
                "detached",
            )

    def describe(self) -> str:
        """One line: the run, its status, what is restorable, where it waits."""
        cell_run = self.require()
        run = run_in_place(cell_run.refresh())
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

    def note_cell_info(self, cell_id: str, tags: list[str]) -> None:
        """Remember a notebook cell's tags, sent by the front end just before the cell runs.

        In ``--all`` mode a cell's first tag that is a name names it, and ``not-durable`` runs it as written.
        """
        self.all_cells.note_cell_info(cell_id, tags)

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
        from ..engine.cells.plan import CellAction, open_cell
        from .capture import is_quiet, open_figure_ids
        from .cellcode import analyze
        from .execute import transform_cell
        from .restored import say_held, show_restored

        cell_run = self.require()
        source = transform_cell(self.shell, raw_source)
        self.all_cells.transformed(node, source)
        cell = analyze(source)
        figures = open_figure_ids()
        plan = run_in_place(
            open_cell(
                cell_run,
                node,
                cell.source_hash,
                self.shell.user_ns,
                rerun=options.rerun,
                replay=options.replay,
                exclude=options.exclude,
            )
        )
        self._moved(plan, node)
        say_held(self.notes, plan.held, plan.cell_run.run_id, quiet=False)
        if plan.action is CellAction.RESTORE:
            assert plan.restored is not None
            quiet = is_quiet(self.shell, source)
            show_restored(
                self.shell, self.notes, self.definitions, plan.restored, options.exclude, figures, quiet=quiet
            )
            self.frontend.restored(plan.cell_run.run_id, node, plan.restored.checkpoint)
            return None
        if plan.action is CellAction.PAUSED:
            return self._while_paused(plan, node)
        if plan.action is CellAction.REPLAY:
            return self._replay_cell(plan, node, source, cell, options)
        self._execute(plan.cell_run, node, source, cell, options, lost=plan.lost)
        return None

    def _execute(
        self, cell_run: CellRun, node: str, source: str, cell: CellCode, options: CellOptions, **how: Any
    ) -> None:
        """Run the cell's code and commit it, telling the front ends when it starts and how it ends."""
        __tracebackhide__ = True
        self.frontend.started(cell_run.run_id, node)
        started = time.perf_counter()
        span = tracing.start(tracing.CELL, cell_run.run_id, node)
        try:
            with tracing.current(span):
                checkpoint = self.executor.run(cell_run, node, source, cell, options, **how)
        except GatePending:
            tracing.finish(span)
            raise  # the front ends heard of the pause from _pause
        except BaseException as error:
            tracing.finish(span, error=error if isinstance(error, Exception) else None)
            self.frontend.failed(cell_run.run_id, node, time.perf_counter() - started)
            raise
        tracing.finish(span, checkpoint.checkpoint_id if checkpoint is not None else None)
        self.frontend.finished(cell_run, node, checkpoint)

    def _pause(self, run_id: str, node: str, reason: str, context: Any, gate: str | None = None) -> None:
        self.frontend.paused(run_id, node, reason)
        self.show_gate(run_id, node, reason, context, gate)

    def _moved(self, plan: CellPlan, node: str) -> None:
        """Follow the plan to another run (a fork, or back to where this code ran) and say so."""
        if plan.cell_run is self.cell_run:
            return
        self.cell_run = plan.cell_run
        if plan.returned_from is not None:
            self.notes.say(
                f"cell '{node}' matches run {plan.cell_run.run_id} at this cell: continuing there "
                f"(switch back with %durable switch {plan.returned_from})",
                "switched",
            )
        if plan.forked_from is not None:
            self.notes.say(
                f"cell '{node}' {plan.why}: continuing in fork {plan.cell_run.run_id} of run {plan.forked_from} "
                f"(the original is kept; switch back with %durable switch {plan.forked_from})",
                "forked",
            )

    def _while_paused(self, plan: CellPlan, node: str) -> Any:
        run_id = plan.cell_run.run_id
        if plan.gate is None:
            where = f"cell '{plan.waiting[0].node_id}'" if plan.waiting else "a gate"
            raise GatePending(
                f"Run {run_id} waits for a decision at {where}; decide it there (or with "
                "%durable approve / durable_nb.approve) before running other cells.",
                run_id=run_id,
                node_id=node,
            )
        gate = plan.gate
        self._pause(run_id, node, gate.reason, gate.context, gate.checkpoint_id)
        raise GatePending(
            f"Waiting at gate '{gate.reason}': decide in the panel, then run this cell again.",
            run_id=run_id,
            node_id=node,
        )

    def _replay_cell(self, plan: CellPlan, node: str, source: str, cell: CellCode, options: CellOptions) -> Any:
        """Run a committed --replay cell again; commit it only if its values changed and the run can take it.

        What forks made after it set is put back once it ran: the cell restores, it is not live.
        """
        from .capture import is_quiet
        from .execute import run_code

        cell_run, committed = plan.cell_run, plan.committed
        assert committed is not None
        if plan.paused:
            filename = self.shell.compile.cache(source)
            value = run_code(cell, self.shell.user_ns, filename, timeout=options.timeout, node=node)
            run_sync(cell_run.reapply_overrides(committed, self.shell.user_ns, options.exclude))
            self.notes.say(f"replayed '{node}' (not committed: the run waits at a gate)", "replayed")
            self.frontend.restored(cell_run.run_id, node, committed)
            if value is not None and not is_quiet(self.shell, source):
                self.shell.displayhook(value)
            return None
        self.notes.say(f"replaying '{node}' (--replay)", "replaying")
        self._execute(cell_run, node, source, cell, options, only_if_changed=True, replayed=committed)
        return None

    # -- a fork's overrides ---------------------------------------------------------------------

    def hold_overrides(self, cell_run: CellRun, *, quiet: bool = False) -> dict[str, Any]:
        """Make sure the kernel holds what the run's forks set; say what was put in place or found changed."""
        from .restored import say_held

        held = run_sync(cell_run.hold_overrides(self.shell.user_ns))
        say_held(self.notes, held, cell_run.run_id, quiet=quiet)
        return held.placed

    def warn_shared(self, shared: dict[str, list[str]], where: str) -> None:
        """Warn that an override replaces one of several variables that shared objects (the others keep theirs)."""
        from .restored import warn_shared

        warn_shared(self.notes, shared, where)

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
        self,
        run_id: str,
        node: str | None,
        *,
        approved: bool,
        comment: str | None = None,
        by: str | None = None,
        gate: str | None = None,
    ) -> CommitResult:
        """Decide the gate a run waits at (atomically, once) and return what was written; a run this
        kernel is attached to is handed to it in the decision's own commit."""
        assert self.store is not None
        from ..engine.gates.decisions import decide, make_decision  # deciding is rarer than attaching

        decision = make_decision(approved, None, comment, by)
        return run_sync(decide(self.store, run_id, decision, node, gate=gate, continue_as=self.owner_for(run_id)))

    # -- what the widgets ask of this kernel -------------------------------------------------------

    @property
    def attached_run_id(self) -> str | None:
        """The run this kernel is attached to, if any."""
        return self.cell_run.run_id if self.cell_run is not None else None

    def owner_for(self, run_id: str) -> str | None:
        """The owner a decision of ``run_id`` hands the run to: this kernel, when attached to it."""
        cell_run = self.cell_run
        return cell_run.owner if cell_run is not None and cell_run.run_id == run_id else None

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
        from ..engine.cells.plan import continue_cell
        from .cellcode import analyze
        from .executing import CellOptions
        from .restored import say_held

        plan = run_sync(continue_cell(cell_run, decided, self.shell.user_ns))
        if plan is None:
            return f"Decision recorded; the run is {run.status.value}. Run the cell again to continue."
        if not plan.source:
            return "Decision recorded. Run the cell again to continue."
        node = decided.claimed.node_id
        say_held(self.notes, plan.held, cell_run.run_id)
        self._execute(cell_run, node, plan.source, analyze(plan.source), CellOptions())
        return f"Decision recorded and cell '{node}' continued. Run the cells below (Run All restores the rest)."


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
