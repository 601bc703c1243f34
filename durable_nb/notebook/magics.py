"""The %durable line magic and the %%durable cell magic, written the IPython way."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

from ..errors import DurableError, GatePending
from .cell_names import is_node_name
from .magic_arguments import argument, cell_arguments, lazy_arguments, names_in, subcommand_arguments, unquoted
from .notebook_tags import notebook_path

if TYPE_CHECKING:
    from .session import KernelSession

__all__ = ["DurableMagics"]


def session_for(shell: Any) -> KernelSession:
    """Return the shell's session, importing the engine on the first magic that needs it.

    ``%load_ext durable_nb`` only registers the magics: the engine and the store load with
    the first cell or subcommand.
    """
    from .session import session_for as session_of

    return session_of(shell)


SUBCOMMANDS = (
    "run",
    "status",
    "history",
    "runs",
    "forks",
    "end",
    "fork",
    "replay",
    "switch",
    "inspect",
    "approve",
    "reject",
    "notes",
    "off",
)


@magics_class
class DurableMagics(Magics):
    """%durable … (runs, views, forks, decisions) and %%durable NODE (a committed cell)."""

    @lazy_arguments()  # built at the first %%durable cell; %%durable? formats its help
    @argument("node", help="The cell's node name: how the run knows this cell (e.g. load, train).")
    @argument("--retries", type=int, default=0, help="Extra attempts after a failure (backoff 1, 2, 4 … s).")
    @argument("--timeout", type=float, default=None, help="Hard limit in seconds for each attempt.")
    @argument("--rerun", action="store_true", help="Run it again even if committed: forks the run at this cell.")
    @argument("--exclude", default=None, help="Comma-separated names never to store, e.g. --exclude conn,lock.")
    @argument(
        "--replay",
        action="store_true",
        help="On restore, run the cell again instead of loading it (for set-up whose effect lives outside "
        "its variables).",
    )
    @cell_magic
    def durable(self, line: str, cell: str) -> Any:
        """Run the cell durably: commit what it defines and shows; restore it when run again.

        Examples::

            %%durable load
            df = pd.read_parquet("sales.parquet")

            %%durable train --retries 2 --timeout 600
            model = fit(df)

            %%durable setup --replay
            tf.random.set_seed(0)
        """
        __tracebackhide__ = True
        args = cell_arguments(self.durable, line)
        if not is_node_name(args.node):
            raise UsageError(f"A cell's node name is a short word like 'load' or 'train', not {args.node!r}.")
        if args.retries < 0:
            raise UsageError("--retries takes a whole number >= 0.")
        if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
            raise UsageError("--timeout takes a number of seconds > 0.")
        from .executing import CellOptions

        options = CellOptions(
            retries=args.retries,
            timeout=args.timeout,
            rerun=args.rerun,
            exclude=names_in(args.exclude),
            replay=args.replay,
        )
        session = session_for(self.shell)
        try:
            return session.run_cell(args.node, cell, options)
        except GatePending:
            raise  # shown as a note, not a traceback
        except (Exception, KeyboardInterrupt) as error:
            plain = session.all_cells.plain_error(args.node, error)
            if plain is not None:
                raise plain from None
            raise

    @line_magic("durable")
    def durable_line(self, line: str) -> Any:
        """Runs, history, forks and decisions from the notebook.

        Usage::

            %durable run NAME [--all] [--new] [--id RUN] [--key K] [--store URL]
            %durable off            (stop --all: later cells run as written)
            %durable status | history | runs | forks | end
            %durable fork [--at NODE] [--set name=literal ...]
            %durable replay --at NODE [--set name=literal ...] [--sweep name=v1,v2 ...] [--wait]
            %durable switch RUN
            %durable inspect
            %durable approve [--node N] [--comment T] [--by NAME]
            %durable reject  [--node N] [--comment T] [--by NAME]
            %durable notes on | off
        """
        words = line.split(None, 1)
        if not words or words[0] not in SUBCOMMANDS:
            raise UsageError(f"%durable takes one of: {', '.join(SUBCOMMANDS)}. See %durable? for examples.")
        handler = getattr(self, f"_{words[0]}")
        try:
            return handler(words[1] if len(words) > 1 else "")
        except DurableError as error:
            raise UsageError(str(error)) from None

    @lazy_arguments()
    @argument("name", nargs="?", default=None, help="The run's name (usually the notebook's).")
    @argument("--new", action="store_true", help="Always start a new run.")
    @argument("--id", dest="run_id", default=None, help="Attach to this run (e.g. a fork).")
    @argument("--key", default=None, help="Idempotency key: a repeated key attaches to the same run.")
    @argument("--store", default=None, help="Store URL (default: $DURABLE_NB_STORE or .durable_nb/runs.db).")
    @argument(
        "--all",
        dest="all_cells",
        action="store_true",
        help="Make every later code cell durable without a %%%%durable line (named by its tag, else its cell id, "
        "else its position); cells tagged not-durable, empty cells and other cell magics run as written.",
    )
    @argument(
        "--from-env",
        action="store_true",
        # The handover's variable, spelled out: its module loads only for --from-env (a test keeps them equal).
        help="Take the name, key and store from $DURABLE_NB_ATTACH (set by run-notebook for its kernels).",
    )
    def _run_args(self, line: str) -> None:
        """%durable run NAME: attach to the latest unfinished run of NAME, or start one.

        Examples: %durable run sales-report
                  %durable run sales-report --all   (every later cell durable; %durable off stops)
        """

    def _run(self, rest: str) -> None:
        args = subcommand_arguments(self._run_args, rest)
        if args.from_env:
            if any(given is not None for given in (args.name, args.key, args.store, args.run_id)) or args.new:
                raise UsageError("%durable run --from-env takes the name, key and store from the environment only.")
            if args.all_cells:
                raise UsageError("%durable run --from-env runs cells that carry their own %%durable lines; drop --all.")
            from .handover import Handover  # a kernel run-notebook started: not every attach

            handover = Handover.take()
            session = session_for(self.shell)
            session.attach(handover.name, key=handover.key, store=handover.store, claim=handover.claim)
            session.handed_over = True
            return
        if args.name is None:
            example = "%durable run sales-report" + (" --all" if args.all_cells else "")
            raise UsageError(f"%durable run needs the run's name, e.g. {example}.")
        name = str(unquoted(args.name))
        if not name.strip() or not name.isprintable():
            raise UsageError(
                f"{name!r} cannot name a run: give one line of text, e.g. %durable run sales-report"
                + (" --all." if args.all_cells else ".")
            )
        session = session_for(self.shell)
        if session.handed_over:
            # The notebook's own attach line, met in a kernel run-notebook started: its cells carry their names.
            session.notes.say(
                f"run-notebook attached this kernel to run {session.require().run_id} already", "attached"
            )
            return
        session.attach(
            name,
            new=args.new,
            run_id=unquoted(args.run_id),
            key=unquoted(args.key),
            store=unquoted(args.store),
            new_key=self._notebook_key() if args.all_cells else None,
        )
        if args.all_cells:
            already = session.all_cells.enabled
            session.all_cells.start()
            if not already:
                session.notes.say(
                    "every code cell from here on runs durably, no %%durable line needed "
                    "(tag a cell not-durable to run it as written; %durable off stops)",
                    "all",
                )

    def _notebook_key(self) -> str | None:
        """The key run-notebook finds this kernel's notebook file by (no parameters), so that it continues the run."""
        path = notebook_path(self.shell.user_ns)
        from .handover import run_key

        return run_key(path.resolve(), {}) if path is not None else None

    def _off(self, rest: str) -> None:
        """%durable off: stop --all (later cells run as written); the kernel stays attached."""
        if rest.strip():
            raise UsageError("%durable off takes nothing after it.")
        session = session_for(self.shell)
        if not session.all_cells.enabled:
            raise UsageError(
                "%durable off stops what %durable run NAME --all started, and it is not on in this kernel. "
                "Cells run durably only with a %%durable NODE line."
            )
        session.all_cells.stop()
        session.notes.say("cells from here on run as written (%durable run NAME --all makes them durable again)", "off")

    def _status(self, rest: str) -> dict[str, Any]:
        from ..engine.runs.calls import status

        session = session_for(self.shell)
        cell_run = session.require()
        session.notes.say(session.describe(), "status")
        return status(cell_run.run_id, store=cell_run.store)

    def _history(self, rest: str) -> Any:
        from ..views import history, styled

        cell_run = session_for(self.shell).require()
        run_id = unquoted(rest.strip()) or cell_run.run_id
        return styled(history(run_id, store=cell_run.store), f"History of run {run_id}")

    def _runs(self, rest: str) -> Any:
        from ..views import runs, styled

        session = session_for(self.shell)
        return styled(runs(unquoted(rest.strip()) or None, store=session.store), "Runs")

    def _forks(self, rest: str) -> Any:
        from ..views import forks, styled

        cell_run = session_for(self.shell).require()
        run_id = unquoted(rest.strip()) or cell_run.run_id
        return styled(forks(run_id, store=cell_run.store), f"Forks of run {run_id}")

    def _end(self, rest: str) -> None:
        from .._loop import run_sync
        from ..model import RunStatus

        session = session_for(self.shell)
        if session.cell_run is None and session.handed_over:
            return  # run-notebook's own last line, after the notebook's %durable end completed the run
        cell_run = session.require()
        session.all_cells.stop()  # no run to commit later cells to
        if run_sync(cell_run.refresh()).status is RunStatus.COMPLETED:
            # Run All of a finished notebook restores every cell and reaches this line again.
            session.notes.say(f"run {cell_run.run_id} '{cell_run.run.name}' is already completed", "completed")
            session.cell_run = None
            return
        run_sync(cell_run.end())
        session.notes.say(f"run {cell_run.run_id} '{cell_run.run.name}' completed", "completed")
        session.cell_run = None

    @lazy_arguments()
    @argument("--at", default=None, help="Fork just before this cell was committed (default: the latest state).")
    @argument("--set", dest="overrides", action="append", default=[], help="name=python_literal to change.")
    def _fork_args(self, line: str) -> None:
        """%durable fork: branch the run, switch this kernel to the branch.

        Example: %durable fork --at train --set learning_rate=0.01
        """

    def _fork(self, rest: str) -> None:
        from .._loop import run_sync
        from ..engine.forks.lineage_values import shared_with
        from ..engine.forks.literals import OverrideText
        from ..engine.runs.calls import fork

        args = subcommand_arguments(self._fork_args, rest)
        session = session_for(self.shell)
        cell_run = session.require()
        try:
            overrides = OverrideText.parse([str(unquoted(text)) for text in args.overrides])
            shared = shared_with(run_sync(cell_run.manifest_before(args.at)), overrides.values)
            # Each value keeps the type it has where the fork starts: the fork checks, and refuses.
            if args.at:
                run_id = run_sync(cell_run.fork_before(args.at, overrides)).run_id
            else:
                run_id = fork(cell_run.run_id, state=overrides, store=cell_run.store).id
        except DurableError as error:
            raise UsageError(str(error)) from None
        attached = session.attach(cell_run.run.name, run_id=run_id, quiet=True)
        # The fork's values (its own and those it carries from the forks above it) are this kernel's now.
        placed = session.hold_overrides(attached, quiet=True)
        session.notes.say(
            f"forked run {cell_run.run_id} into {run_id}"
            + (f" with {', '.join(sorted(placed))} set" if placed else "")
            + f"; this kernel now works in the fork (switch back with %durable switch {cell_run.run_id})",
            "forked",
        )
        session.warn_shared(shared, "at the fork point")

    @lazy_arguments()
    @argument("--at", required=True, help="The cell to replay from: the forks branch just before it.")
    @argument("--set", dest="overrides", action="append", default=[], help="name=python_literal every fork takes.")
    @argument(
        "--sweep", dest="sweeps", action="append", default=[], help="name=v1,v2,…: one fork per value (combined)."
    )
    @argument("--wait", action="store_true", help="Wait here until every fork finished or paused at a gate.")
    def _replay_args(self, line: str) -> None:
        """%durable replay: fork the run before a cell with other values; replay the rest in background kernels.

        This kernel stays where it is. The same command again returns the same forks (and continues
        any a crash stopped).

        Example: %durable replay --at train --sweep learning_rate=0.1,0.01,0.001
        """

    def _replay(self, rest: str) -> None:
        from ..engine.forks.literals import OverrideText, parse_sweep
        from .replays import replay

        args = subcommand_arguments(self._replay_args, rest)
        session = session_for(self.shell)
        cell_run = session.require()
        try:
            overrides = OverrideText.parse([str(unquoted(text)) for text in args.overrides]).values
            sweep = dict(parse_sweep(str(unquoted(text))) for text in args.sweeps)
            runs = replay(str(unquoted(args.at)), overrides, sweep, cell_run.run_id, args.wait, store=cell_run.store)
        except DurableError as error:
            raise UsageError(str(error)) from None
        shown = ", ".join(f"{run.id} ({run.status})" for run in runs)
        forks = f"{len(runs)} fork{'s' if len(runs) != 1 else ''}"
        session.notes.say(
            f"replaying run {cell_run.run_id} from cell '{args.at}' in {forks}: {shown}; "
            f"this kernel stays in run {cell_run.run_id}",
            "replay",
        )

    def _switch(self, rest: str) -> None:
        run_id = unquoted(rest.strip())
        if not run_id:
            raise UsageError("%durable switch RUN: give the run id to attach to (see %durable runs).")
        session = session_for(self.shell)
        current = session.require()
        session.attach(current.run.name, run_id=run_id)

    def _inspect(self, rest: str) -> Any:
        from IPython.display import display

        from ..widgets.inspector import Inspector

        session = session_for(self.shell)
        cell_run = session.require()
        display(Inspector(unquoted(rest.strip()) or cell_run.run_id, store=cell_run.store, link=session))

    @lazy_arguments()
    @argument("--node", default=None, help="The paused cell (needed when several wait).")
    @argument("--comment", default=None, help="Why.")
    @argument("--by", default=None, help="Who decides (default: your user name).")
    def _decision_args(self, line: str) -> None:
        """%durable approve|reject: decide the gate the run waits at, and continue that cell here.

        Example: %durable approve --comment "numbers checked"
        """

    def _approve(self, rest: str, approved: bool = True) -> None:
        from .._loop import run_sync
        from ..model import RunStatus

        args = subcommand_arguments(self._decision_args, rest)
        session = session_for(self.shell)
        cell_run = session.require()
        if run_sync(cell_run.refresh()).status is not RunStatus.PAUSED:
            # Run All after a click on the panel reaches this line with nothing left to decide.
            session.notes.say(f"run {cell_run.run_id} waits at no gate (already decided); nothing to do", "decided")
            return
        decided = session.decide(
            cell_run.run_id,
            unquoted(args.node),
            approved=approved,
            comment=unquoted(args.comment),
            by=unquoted(args.by),
        )
        node = decided.checkpoints[-1].node_id
        session.notes.say(f"{'approved' if approved else 'rejected'} the gate of cell '{node}'", "decided")
        session.notes.say(session.continue_after(decided), "continued")

    def _reject(self, rest: str) -> None:
        self._approve(rest, approved=False)

    def _notes(self, rest: str) -> None:
        """%durable notes on|off: show or silence durable_nb's notes (warnings always show)."""
        choice = rest.strip().lower()
        if choice not in ("on", "off"):
            raise UsageError("%durable notes takes on or off, e.g. %durable notes off.")
        session_for(self.shell).notes.enabled = choice == "on"
