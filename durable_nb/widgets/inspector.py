"""The fork inspector: a run's fork tree and checkpoints; fork, switch, compare runs or cells, decide, resume, cancel.

It reads the store, never the kernel's variables, so it shows runs of any kernel or process.
While displayed it polls the store on the kernel's event loop (between cells, never blocking
one) and refreshes when another kernel, process or the command line changed the tree.
"""

from __future__ import annotations

import asyncio
import html
import traceback
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from .._loop import run_sync
from ..engine.forks.literals import OverrideText
from ..engine.gates.decisions import decide, make_decision
from ..engine.runs.calls import acancel, afork, aget_run
from ..errors import DurableError
from ..model import RunStatus
from ..store import resolve_store
from ..views import compare, compare_cells, forks, history
from ..views.render import COLOURS, checkpoint_labels, local_text
from .link import KernelLink

__all__ = ["Inspector"]


def _short(run_id: str) -> str:
    return run_id[-12:]


class Inspector(widgets.VBox):
    """Explore and branch the fork tree of a run."""

    def __init__(
        self, run: Any = None, *, store: Any = None, link: KernelLink | None = None, poll_seconds: float = 2.0
    ) -> None:
        self.store = resolve_store(store, existing=True)
        self.link = link
        self.poll_seconds = poll_seconds
        self.run_id = self._initial_run(run)
        self.tree = widgets.Select(description="Runs", rows=6, layout=widgets.Layout(width="100%"))
        self.checkpoints = widgets.Select(description="Checkpoints", rows=8, layout=widgets.Layout(width="100%"))
        self.overrides = widgets.Textarea(
            placeholder="name = python literal, one per line (e.g. rate = 0.5)",
            description="Overrides",
            layout=widgets.Layout(width="100%"),
        )
        self.compare_with = widgets.SelectMultiple(description="Compare", rows=4, layout=widgets.Layout(width="100%"))
        self.fork_button = widgets.Button(description="Fork here", icon="code-fork", button_style="primary")
        self.switch_button = widgets.Button(description="Switch kernel", icon="exchange")
        self.compare_button = widgets.Button(description="Compare", icon="table")
        self.compare_cells_button = widgets.Button(description="Compare cells", icon="columns")
        self.approve_button = widgets.Button(description="Approve", icon="check", button_style="success")
        self.reject_button = widgets.Button(description="Reject", icon="times", button_style="danger")
        self.resume_button = widgets.Button(description="Resume", icon="play")
        self.cancel_button = widgets.Button(description="Cancel", icon="stop")
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh")
        self.status = widgets.HTML()
        self.summary = widgets.HTML()
        self.comparison = widgets.Output()
        self.output = widgets.Output()
        for button, action in [
            (self.fork_button, self.fork),
            (self.switch_button, self.switch),
            (self.compare_button, self.show_comparison),
            (self.compare_cells_button, self.show_cell_comparison),
            (self.approve_button, lambda: self.decide(True)),
            (self.reject_button, lambda: self.decide(False)),
            (self.resume_button, self.resume),
            (self.cancel_button, self.cancel),
            (self.refresh_button, self.refresh),
        ]:
            button.on_click(self._guarded(action))
        self.tree.observe(self._on_select, names="value")
        super().__init__(
            [
                widgets.HTML("<b>durable_nb inspector</b>"),
                self.tree,
                self.summary,
                self.checkpoints,
                self.overrides,
                widgets.HBox([self.fork_button, self.switch_button, self.refresh_button]),
                widgets.HBox([self.approve_button, self.reject_button, self.resume_button, self.cancel_button]),
                self.compare_with,
                widgets.HBox([self.compare_button, self.compare_cells_button]),
                self.status,
                self.comparison,
                self.output,
            ],
            layout=widgets.Layout(border="1px solid #d1d5db", padding="8px", width="100%"),
        )
        self._signature: Any = None
        self._poller: asyncio.Task[None] | None = None
        self.refresh()
        self._start_polling()

    def __repr__(self) -> str:
        return f"<Inspector run {self.run_id!r}>"

    # -- helpers -----------------------------------------------------------------------------

    def _initial_run(self, run: Any) -> str:
        if run is not None:
            return str(getattr(run, "id", run))
        attached = self.link.attached_run_id if self.link is not None else None
        if attached is not None:
            return attached
        latest = run_sync(self.store.list_runs())
        if not latest:
            raise DurableError("The store has no runs yet to inspect; start one first.")
        return latest[0].run_id

    def _guarded(self, action: Callable[[], Any]) -> Callable[[Any], None]:
        # ipywidgets swallows callback exceptions and JupyterLab drops their output:
        # everything goes to the panel instead.
        def handler(_: Any) -> None:
            with self.output:
                try:
                    action()
                except DurableError as error:
                    self._say(str(error), error=True)
                except Exception:  # noqa: BLE001 - shown in the panel, never lost
                    self._say("That did not work; details below.", error=True)
                    traceback.print_exc()

        return handler

    def _say(self, text: str, error: bool = False) -> None:
        colour = "#dc2626" if error else "#111827"
        self.status.value = f"<span style='color:{colour}'>{html.escape(text)}</span>"

    @property
    def selected_run(self) -> str:
        return str(self.tree.value or self.run_id)

    # -- reading the store ---------------------------------------------------------------------

    def refresh(self) -> None:
        """Reload the fork tree and the selected run's checkpoints."""
        tree = forks(self.run_id, store=self.store)
        options = []
        for row in tree.itertuples():
            indent = "    " * int(row.depth) + ("└ " if row.depth else "")
            point = f" from {row.fork_step}" if isinstance(row.fork_step, str) else ""
            changed = f" {row.overrides}" if row.overrides else ""
            options.append((f"{indent}{_short(row.run_id)}  {row.status}{point}{changed}", row.run_id))
        selected = self.tree.value if self.tree.value in {v for _, v in options} else self.run_id
        self.tree.unobserve(self._on_select, names="value")
        self.tree.options = options
        self.tree.value = selected
        self.tree.observe(self._on_select, names="value")
        self.compare_with.options = options
        self._show_run(selected)
        self._signature = self._read_signature()

    def _show_run(self, run_id: str) -> None:
        run = run_sync(aget_run(run_id, store=self.store))
        colour = COLOURS.get(run.status, "inherit")
        waiting = (
            f" — waiting at gate <b>{html.escape(run.pending_interrupt['reason'])}</b>" if run.pending_interrupt else ""
        )
        self.summary.value = (
            f"<code>{html.escape(run.id)}</code> <b style='color:{colour}'>{run.status}</b>{waiting}"
            + (f"<br><span style='color:#dc2626'>{html.escape(run.error)}</span>" if run.error else "")
        )
        frame = history(run_id, store=self.store)
        # A gate's checkpoint reads as in the history view (waiting for a decision, decided), not as stored.
        self.checkpoints.options = [
            (f"{row.seq:>4}  {row.step:<28} {label:<22} {local_text(row.created_at)}", row.checkpoint_id)
            for row, label in zip(frame.itertuples(), checkpoint_labels(frame), strict=True)
        ]
        forkable = [c for c in frame.itertuples() if c.step != "run_end"]
        self.checkpoints.value = forkable[-1].checkpoint_id if forkable else None
        paused = run.status == RunStatus.PAUSED.value
        self.approve_button.disabled = self.reject_button.disabled = not paused
        self.cancel_button.disabled = run.status in ("completed", "failed", "cancelled")

    def _on_select(self, change: dict[str, Any]) -> None:
        with self.output:
            try:
                self._show_run(change["new"])
            except Exception:  # noqa: BLE001 - shown in the panel
                traceback.print_exc()

    def _read_signature(self) -> Any:
        tree = run_sync(self.store.fork_tree(self.run_id))
        return tuple((r.run_id, r.status.value, r.head_seq) for r, _ in tree)

    # -- watching the store without blocking the kernel ----------------------------------------

    def _start_polling(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not in a kernel: refresh by hand
        self._poller = loop.create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                tree = await self.store.fork_tree(self.run_id)
                signature = tuple((r.run_id, r.status.value, r.head_seq) for r, _ in tree)
                if signature != self._signature:
                    self.refresh()
            except Exception:  # noqa: BLE001 - a transient store error must not kill the watcher
                continue

    def close(self) -> None:
        """Stop watching the store and close the widgets."""
        if self._poller is not None:
            self._poller.cancel()
        super().close()

    # -- actions ---------------------------------------------------------------------------------

    def fork(self) -> None:
        """Fork the selected run at the selected checkpoint with the typed overrides."""
        checkpoint_id = self.checkpoints.value
        if checkpoint_id is None:
            raise DurableError("Select a checkpoint to fork at.")
        point = run_sync(self.store.get_checkpoint(self.selected_run, checkpoint_id))
        # Each value keeps the type it has at the fork point: the fork checks, and refuses.
        overrides = OverrideText.parse(self.overrides.value)
        created = run_sync(afork(self.selected_run, checkpoint_id, overrides, store=self.store))
        self.refresh()
        self.tree.value = created.id
        changed = ", ".join(f"{k} = {v!r}" for k, v in overrides.values.items()) or "no overrides"
        self._say(f"Created fork {created.id} at {point.step} ({changed}). Switch the kernel to it to continue.")

    def switch(self) -> None:
        """Attach this kernel to the selected run."""
        if self.link is None:
            raise DurableError("Switching needs a notebook kernel with %load_ext durable_nb.")
        run_id = self.selected_run
        self.link.switch_to(run_id)
        self._say(f"This kernel now works in run {run_id}; run its cells to restore or continue them.")

    def show_comparison(self) -> None:
        """Compare the chosen runs (or the whole tree) side by side."""
        chosen = list(self.compare_with.value) or [value for _, value in self.tree.options]
        self.comparison.clear_output()
        with self.comparison:
            from IPython.display import display

            display(compare(chosen, store=self.store))

    def show_cell_comparison(self) -> None:
        """Show the cells of the chosen runs side by side (default: the selected run and its forks)."""
        chosen = list(self.compare_with.value) or self.selected_run
        self.comparison.clear_output()
        with self.comparison:
            from IPython.display import display

            display(compare_cells(chosen, store=self.store))

    def decide(self, approved: bool) -> None:
        """Approve or reject the gate the selected run waits at (continuing its cell in this kernel)."""
        run_id = self.selected_run
        owner = self.link.owner_for(run_id) if self.link is not None else None
        result = run_sync(decide(self.store, run_id, make_decision(approved), continue_as=owner))
        if self.link is not None and self.link.attached_run_id == run_id:
            note = self.link.continue_after(result)
        else:
            note = "Decision recorded; the run continues where its code runs."
        self.refresh()
        self._say(note)

    def resume(self) -> None:
        """Resume the selected run: notebook runs continue in this kernel, workflows need their code."""
        run = run_sync(aget_run(self.selected_run, store=self.store))
        if run.record.kind.value == "notebook" and self.link is not None:
            self.switch()
            return
        self._say(
            f"Resume {run.id} where its workflow's code is: flow.resume({run.id!r}), or "
            f"`durable-nb resume {run.id} --workflow module:flow`."
        )

    def cancel(self) -> None:
        """Cancel the selected run."""
        run_sync(acancel(self.selected_run, store=self.store))
        self.refresh()
        self._say(f"Cancelled {self.selected_run}; it keeps its checkpoints and can be resumed.")
