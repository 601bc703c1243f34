"""The HTTP service: start, watch, decide and steer runs; the server continues them, and recovers on start.

Every endpoint is one library call; runs proceed in the server's background, so each answer
comes at once. When it starts, and every ``recover_every`` seconds after, the server takes over
the runs that dead processes left of the workflows it serves and marks the others failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, StrictBool

from .. import views
from ..engine import calls
from ..engine.ownership import release_on_interrupt
from ..engine.recovery import arecover
from ..engine.workflow import Workflow
from ..errors import AlreadyResumed, DurableError, NotResumable, RunOwnedElsewhere, WorkflowNotFound
from ..model import RunStatus
from ..store import Store, resolve_store
from .auth import Auth, Token
from .errors import error_body, status_of
from .shapes import event_json, history_json, run_json

__all__ = ["Service", "create_app"]

log = logging.getLogger("durable_nb.service")


class StartBody(BaseModel):
    """``POST /api/workflows/{name}/runs``."""

    input: dict[str, Any] = {}


class DecisionBody(BaseModel):
    """``POST /api/runs/{id}/approve``."""

    approved: StrictBool = True
    comment: str | None = None
    value: Any = None
    node: str | None = None


class ForkBody(BaseModel):
    """``POST /api/runs/{id}/fork``."""

    checkpoint_id: str | None = None
    state: dict[str, Any] = {}


class Service:
    """The workflows a server serves, its store, and the runs it drives in the background."""

    def __init__(self, workflows: list[Workflow], store: Store, auth: Auth) -> None:
        self.store = store
        self.auth = auth
        self.flows = {flow.name: Workflow._bound_to(flow, store) for flow in workflows}
        self.tasks: set[asyncio.Task[Any]] = set()

    def flow(self, name: str) -> Workflow:
        """Return a served workflow; raise WorkflowNotFound."""
        flow = self.flows.get(name)
        if flow is None:
            raise WorkflowNotFound(f"This server serves no workflow {name!r}; it serves {sorted(self.flows)}.")
        return flow

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
        """Take over stranded runs of the served workflows; fail the others' (never a live owner's)."""
        try:
            await arecover(list(self.flows.values()), store=self.store, resume=self._take)
        except Exception:  # a failing store now must not stop the next attempt
            log.exception("recovery failed; trying again later")

    async def _take(self, flow: Workflow, run_id: str) -> None:
        self.drive(flow, run_id)
        return None

    def caller(self, needed: str) -> Any:
        """A dependency that checks the request's token for ``needed`` and returns its Token."""

        async def check(authorization: Annotated[str | None, Header()] = None) -> Token:
            return self.auth.check(authorization, needed)

        return Depends(check)


def create_app(workflows: list[Workflow], *, store: Any = None, auth: Auth, recover_every: float = 30.0) -> FastAPI:
    """Return the ASGI app serving ``workflows`` on ``store`` (default: the first workflow's)."""
    resolved = resolve_store(store) if store is not None or not workflows else workflows[0].store
    service = Service(workflows, resolved, auth)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def every() -> None:
            while True:
                await service.recover()
                await asyncio.sleep(recover_every)

        recovering = asyncio.get_running_loop().create_task(every())
        try:
            yield
        finally:
            recovering.cancel()
            for task in list(service.tasks):
                task.cancel()
            await asyncio.gather(recovering, *service.tasks, return_exceptions=True)

    app = FastAPI(
        title="durable_nb",
        summary="Start, watch, decide and steer durable runs.",
        version="1",
        lifespan=lifespan,
    )
    app.state.service = service
    read, decide, admin = service.caller("read"), service.caller("decide"), service.caller("admin")

    @app.exception_handler(DurableError)
    async def library_error(request: Request, error: DurableError) -> JSONResponse:
        return JSONResponse(error_body(error), status_code=status_of(error))

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors())
        return JSONResponse({"error": "InvalidRequest", "message": problems}, status_code=422)

    @app.post("/api/workflows/{name}/runs", status_code=202)
    async def start_run(
        name: str,
        body: StartBody,
        idempotency_key: Annotated[str | None, Header()] = None,
        token: Token = admin,
    ) -> dict[str, Any]:
        """Start a run (pending; the server runs it). A repeated Idempotency-Key returns the first run."""
        flow = service.flow(name)
        run = await flow.astart(body.input, idempotency_key=idempotency_key)
        if run.status == "pending":
            service.drive(flow, run.id)
        return {"id": run.id, "status": run.status}

    @app.get("/api/runs")
    async def list_runs(
        name: str | None = None, status: RunStatus | None = None, token: Token = read
    ) -> list[dict[str, Any]]:
        """List runs, newest first, optionally of one workflow and one status."""
        found = await resolved.list_runs(name, None if status is None else [status])
        return [run_json(r) for r in found]

    @app.get("/api/runs/{run_id}")
    async def get_run(run_id: str, token: Token = read) -> dict[str, Any]:
        """A run's status: ``{run_id, status, node_counts, executions}``."""
        return await calls.astatus(run_id, store=resolved)

    @app.get("/api/runs/{run_id}/history")
    async def get_history(run_id: str, token: Token = read) -> list[dict[str, Any]]:
        """Every checkpoint of a run, in order."""
        return history_json(await views.ahistory(run_id, store=resolved))

    @app.get("/api/runs/{run_id}/events")
    async def get_events(run_id: str, after: int = 0, token: Token = read) -> list[dict[str, Any]]:
        """A run's events after sequence number ``after`` (poll with the last one seen)."""
        await resolved.get_run(run_id)
        return [event_json(e) for e in await resolved.list_events(run_id, after)]

    @app.post("/api/runs/{run_id}/resume", status_code=202)
    async def resume_run(run_id: str, token: Token = admin) -> dict[str, Any]:
        """Continue a failed or cancelled run from its last checkpoint (a paused one is approved instead)."""
        run = await calls.aget_run(run_id, store=resolved)
        if run.status == "paused":
            raise NotResumable(f"Run {run_id} waits at a gate: POST /api/runs/{run_id}/approve to decide it.")
        if run.status not in ("failed", "cancelled"):
            raise NotResumable(f"Run {run_id} is {run.status}; only failed or cancelled runs are resumed.")
        if await resolved.resume_point(run_id) is None:
            raise NotResumable(f"Run {run_id} has no checkpoint to resume from; start a new run.")
        service.drive(service.flow(run.name), run_id)
        return {"id": run_id, "status": run.status}

    @app.post("/api/runs/{run_id}/approve", status_code=202)
    async def approve_run(run_id: str, body: DecisionBody, token: Token = decide) -> dict[str, Any]:
        """Decide the gate a run waits at (one decision wins; the others get 409); the server continues it."""
        decided = await calls.aapprove(
            run_id,
            node=body.node,
            value=body.value,
            comment=body.comment,
            by=token.name,
            store=resolved,
            approved=body.approved,
        )
        flow = service.flows.get(decided.name)
        if flow is not None and decided.status == "pending":
            service.drive(flow, run_id)
        return {"id": run_id, "status": decided.status, "approved": body.approved}

    @app.post("/api/runs/{run_id}/cancel")
    async def cancel_run(run_id: str, token: Token = admin) -> dict[str, Any]:
        """Stop a running run mid-node, or settle a paused or pending one."""
        run = await calls.acancel(run_id, store=resolved)
        return {"id": run_id, "status": run.status}

    @app.post("/api/runs/{run_id}/fork", status_code=202)
    async def fork_run(run_id: str, body: ForkBody, token: Token = admin) -> dict[str, Any]:
        """Branch a run from a checkpoint (default: its latest) with state overrides; the server runs it."""
        fork = await calls.afork(run_id, body.checkpoint_id, body.state, store=resolved)
        flow = service.flows.get(fork.name)
        if flow is not None:
            service.drive(flow, fork.id)
        return {"id": fork.id, "status": fork.status, "parent_run_id": run_id}

    return app
