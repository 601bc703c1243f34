"""What the service does, whoever asks: HTTP, MCP. Each operation is one library call, and runs
proceed in the background of the process that serves them (a notebook's, in a child process)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from .. import views
from ..engine.runs import calls
from ..engine.runs.ownership import release_on_interrupt
from ..engine.runs.recovery import arecover
from ..engine.workflows.workflow import Workflow
from ..errors import AlreadyResumed, DurableError, NotResumable, RunOwnedElsewhere, WorkflowNotFound
from ..model import RunKind, RunRecord, RunStatus
from ..store import Store
from .errors import NotebooksNotServed
from .notebook_runs import NotebookRuns
from .shapes import event_json, history_json, run_json

__all__ = ["Service"]

log = logging.getLogger("durable_nb.service")


class Service:
    """The workflows a process serves, its notebooks, its store, and the runs it drives in the background."""

    def __init__(self, workflows: list[Workflow], store: Store, notebooks: NotebookRuns | None = None) -> None:
        self.store = store
        self.flows = {flow.name: Workflow._bound_to(flow, store) for flow in workflows}
        self.notebooks = notebooks
        self.tasks: set[asyncio.Task[Any]] = set()

    def flow(self, name: str) -> Workflow:
        """Return a served workflow; raise WorkflowNotFound."""
        flow = self.flows.get(name)
        if flow is None:
            raise WorkflowNotFound(f"This server serves no workflow {name!r}; it serves {sorted(self.flows)}.")
        return flow

    # -- the operations ------------------------------------------------------------------------

    async def start(self, name: str, input: dict[str, Any], idempotency_key: str | None) -> dict[str, Any]:
        """Start a run (pending; this process runs it); a repeated key returns the first run."""
        flow = self.flow(name)
        run = await flow.astart(input, idempotency_key=idempotency_key)
        if run.status == "pending":
            self.drive(flow, run.id)
        return {"id": run.id, "status": run.status}

    async def start_notebook(self, path: str, parameters: dict[str, Any], run: str | None) -> dict[str, Any]:
        """Start (or find again) the run of a notebook in the notebooks folder with ``parameters``."""
        if self.notebooks is None:
            raise NotebooksNotServed(
                "This server runs no notebooks: start it with `durable-nb serve --notebooks DIR` "
                "(or create_app(..., notebooks=DIR)) to run the notebooks in DIR."
            )
        return await self.notebooks.start(path, parameters, run)

    async def status(self, run_id: str) -> dict[str, Any]:
        """``{run_id, status, node_counts, executions}``."""
        return await calls.astatus(run_id, store=self.store)

    async def list(self, name: str | None, status: RunStatus | None) -> list[dict[str, Any]]:
        """Runs, newest first, optionally of one workflow and one status."""
        return [run_json(r) for r in await self.store.list_runs(name, None if status is None else [status])]

    async def history(self, run_id: str) -> list[dict[str, Any]]:
        """Every checkpoint of a run."""
        return history_json(await views.ahistory(run_id, store=self.store))

    async def events(self, run_id: str, after: int) -> list[dict[str, Any]]:
        """A run's events after sequence number ``after``."""
        await self.store.get_run(run_id)
        return [event_json(e) for e in await self.store.list_events(run_id, after)]

    async def decide(
        self, run_id: str, approved: bool, comment: str | None, value: Any, node: str | None, by: str
    ) -> dict[str, Any]:
        """Decide a run's gate (one decision wins); this process continues the run."""
        decided = await calls.aapprove(
            run_id, node=node, value=value, comment=comment, by=by, store=self.store, approved=approved
        )
        if decided.status == "pending" and decided.record.kind is RunKind.NOTEBOOK:
            await self._continue_notebook(decided.record)
        elif decided.status == "pending" and decided.name in self.flows:
            self.drive(self.flows[decided.name], run_id)
        return {"id": run_id, "status": decided.status, "approved": approved}

    async def _continue_notebook(self, run: RunRecord) -> None:
        if self.notebooks is None:
            return  # a kernel or `durable-nb run-notebook` continues it
        try:
            await self.notebooks.resume(run)
        except DurableError as error:  # the decision stands; the run waits for a server that can run it
            log.warning("run %s was decided but its notebook cannot start again: %s", run.run_id, error)

    async def resume(self, run_id: str) -> dict[str, Any]:
        """Continue a failed or cancelled run (a paused one is decided instead)."""
        run = await calls.aget_run(run_id, store=self.store)
        if run.status == "paused":
            raise NotResumable(f"Run {run_id} waits at a gate: approve or reject it (POST /api/runs/{run_id}/approve).")
        if run.status not in ("failed", "cancelled"):
            raise NotResumable(f"Run {run_id} is {run.status}; only failed or cancelled runs are resumed.")
        if self.notebooks is not None and await self.notebooks.resume(run.record):
            return {"id": run_id, "status": run.status}
        if await self.store.resume_point(run_id) is None:
            raise NotResumable(f"Run {run_id} has no checkpoint to resume from; start a new run.")
        self.drive(self.flow(run.name), run_id)
        return {"id": run_id, "status": run.status}

    async def cancel(self, run_id: str) -> dict[str, Any]:
        """Stop a running run mid-node, or settle a paused or pending one."""
        return {"id": run_id, "status": (await calls.acancel(run_id, store=self.store)).status}

    async def fork(self, run_id: str, checkpoint_id: str | None, state: dict[str, Any]) -> dict[str, Any]:
        """Branch a run at a checkpoint with state overrides; this process runs the fork."""
        fork = await calls.afork(run_id, checkpoint_id, state, store=self.store)
        flow = self.flows.get(fork.name)
        if flow is not None:
            self.drive(flow, fork.id)
        return {"id": fork.id, "status": fork.status, "parent_run_id": run_id}

    # -- running in the background ------------------------------------------------------------

    def drive(self, flow: Workflow, run_id: str) -> None:
        """Continue a run in the background (a run someone else continues meanwhile is left to them)."""
        task = asyncio.get_running_loop().create_task(self._continue(flow, run_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _continue(self, flow: Workflow, run_id: str) -> None:
        release_on_interrupt.set(True)  # stopping the server hands its runs to the next one
        try:
            await flow.aresume(run_id)
        except (AlreadyResumed, RunOwnedElsewhere, NotResumable):
            pass
        except Exception:  # the run records its own failure; the server goes on
            log.exception("run %s stopped in the server", run_id)

    async def recover(self) -> None:
        """Take over stranded runs of the served workflows and notebooks; fail the others' (never a live owner's)."""
        if self.notebooks is not None:
            try:  # first: the workflows' recovery would fail the stranded notebook runs it cannot continue
                await self.notebooks.recover()
            except Exception:
                log.exception("recovering notebook runs failed; trying again later")
        store = self.store if self.notebooks is None else self.notebooks.recovery_view()
        try:
            await arecover(list(self.flows.values()), store=store, resume=self._take)
        except Exception:  # a failing store now must not stop the next attempt
            log.exception("recovery failed; trying again later")

    async def _take(self, flow: Workflow, run_id: str) -> None:
        self.drive(self.flows.get(flow.name, flow), run_id)  # the served flow, on the store itself

    async def stop(self) -> None:
        """Stop the runs this process drives; each is handed back, pending, for the next process."""
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.notebooks is not None:
            await self.notebooks.stop()
