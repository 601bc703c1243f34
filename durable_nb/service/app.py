"""The HTTP service: start, watch, decide and steer runs; the server continues them, and recovers on start.

Every endpoint is one library call; runs proceed in the server's background, so each answer
comes at once. When it starts, and every ``recover_every`` seconds after, the server takes over
the runs that dead processes left of the workflows it serves and marks the others failed.
Given a notebooks folder, it also runs any notebook in it, each in a child process, and starts
those children again after a decision or a crash.

Before any endpoint, every request passes four layers, outermost first: the metrics' count of
requests (metrics.py), the security headers (headers.py) on whatever is answered, the Host
allow-list (hosts.py), and the request guard (guard.py: the token before the body, no
cross-origin state change, JSON only, bounded bodies). ``/metrics`` answers a ``read`` token.
The approvals page's forms carry a CSRF token per session (forms.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import secrets
from collections.abc import AsyncIterator, Iterable, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, StrictBool
from starlette.exceptions import HTTPException

from ..engine.workflows.workflow import Workflow
from ..errors import ConfigurationError, DurableError, InvalidDecision, KeyFileError, StoreError
from ..model import RunStatus
from ..store import resolve_store
from ..store.secret import load_secret
from .auth import Auth, Forbidden, Token, Unauthorized
from .errors import CrossSiteRequest, UnsupportedMediaType, error_body, status_of
from .forms import CsrfTokens, forms_key, page_decision, read_form
from .guard import MAX_BODY, RequestGuard
from .headers import SecurityHeaders, content_security_policy
from .hosts import AllowedHosts, allowed_hosts
from .mcp_tools import build_mcp
from .metrics import Measured, Metrics
from .notebook_folder import NotebookFolder
from .notebook_runs import NotebookRuns
from .operations import Service
from .page import COOKIE, STYLE_HASH, approvals_page, history_page, refusal_page
from .schedules import Planned, Schedules

__all__ = ["Service", "create_app"]


log = logging.getLogger("durable_nb.service")


class HealthAnswer(BaseModel):
    """What ``GET /health`` answers: ``ok`` or ``unavailable``, with a sentence."""

    status: str
    message: str


class StartBody(BaseModel):
    """``POST /api/workflows/{name}/runs``."""

    input: dict[str, Any] = {}


class NotebookStartBody(BaseModel):
    """``POST /api/notebooks/{path}/runs``."""

    parameters: dict[str, Any] = {}
    run: str | None = None


class ScheduleBody(BaseModel):
    """``POST /api/schedules``: a workflow with its input, or a notebook with its parameters, on a cron schedule."""

    cron: str
    workflow: str | None = None
    input: dict[str, Any] | None = None
    notebook: str | None = None
    parameters: dict[str, Any] | None = None
    timezone: str = "UTC"
    missed: str = "run-once"


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


class _TokenGate:
    """Lets a request through to the MCP app only with a known token, which the tools then read."""

    def __init__(self, inner: Any, auth: Auth, holder: contextvars.ContextVar[Token]) -> None:
        self.inner = inner
        self.auth = auth
        self.holder = holder

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"authorization"), None)
        try:
            token = self.auth.check(header, "read")
        except DurableError as error:
            await JSONResponse(error_body(error), status_code=status_of(error))(scope, receive, send)
            return
        self.holder.set(token)
        await self.inner(scope, receive, send)


def _shared_forms_key() -> bytes | None:
    """The page forms' key, shared by every server with the same signing key; None (a key of this
    process alone) when the signing key cannot be read, which the store's first value reports."""
    try:
        return forms_key(load_secret())
    except KeyFileError:
        return None


def create_app(
    workflows: list[Workflow],
    *,
    store: Any = None,
    auth: Auth,
    recover_every: float = 30.0,
    host: str = "127.0.0.1",
    notebooks: str | Path | None = None,
    notebook_outputs: str | Path | None = None,
    allowed_host: Iterable[str] = (),
    max_body: int = MAX_BODY,
    schedules: Sequence[Planned] = (),
    max_notebooks: int | None = None,
) -> FastAPI:
    """Return the ASGI app serving ``workflows`` on ``store`` (default: the first workflow's), and the
    notebooks in the folder ``notebooks`` (outputs in ``notebook_outputs``, default a folder inside it).

    The server starts the runs of the store's schedules that it can run when they are due (looking
    at least every ``recover_every`` seconds, up to 30), and adds ``schedules`` to them as it starts.

    Requests must name a loopback host, ``host`` (unless a wildcard address) or one of
    ``allowed_host``; bodies are at most ``max_body`` bytes. At most ``max_notebooks`` notebook
    processes run at once here (default: twice the usable cores, at least 4); runs beyond it wait,
    pending, for a free place here or on another server of the store.
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ConfigurationError(f"max_body (--max-body) is a number of bytes of 1 or more, not {max_body!r}.")
    hosts = allowed_hosts(host, allowed_host)
    resolved = resolve_store(store) if store is not None or not workflows else workflows[0].store
    runner = (
        None
        if notebooks is None
        else NotebookRuns(NotebookFolder(notebooks, notebook_outputs), resolved, max_children=max_notebooks)
    )
    service = Service(workflows, resolved, runner)
    timetable = Schedules(service)
    planned = [timetable.planned(plan) for plan in schedules]  # refused here, before the server listens

    def caller(needed: str) -> Any:
        """A dependency that checks the request's token for ``needed`` and returns its Token."""

        async def check(authorization: Annotated[str | None, Header()] = None) -> Token:
            return auth.check(authorization, needed)

        return Depends(check)

    # MCP over HTTP, at /mcp/: the same tools as `durable-nb mcp`, with the request's token.
    asked_by: contextvars.ContextVar[Token] = contextvars.ContextVar("durable_nb_mcp_token")
    tools = build_mcp(service, asked_by.get)
    # The SDK's own DNS-rebinding check knows only loopback names, so it would refuse the names of
    # --allowed-host; the Host allow-list and the request guard in front of /mcp check Host and Origin
    # (more strictly: the SDK lets any port of 127.0.0.1 in as an Origin).
    unchecked = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    tools_app = tools.streamable_http_app(
        streamable_http_path="/", stateless_http=True, json_response=True, transport_security=unchecked
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def every() -> None:
            while True:
                await service.recover()
                await asyncio.sleep(recover_every)

        for record in planned:
            await timetable.add(record)
        loop = asyncio.get_running_loop()
        recovering = loop.create_task(every())
        scheduling = loop.create_task(timetable.run(min(recover_every, 30.0)))
        try:
            async with tools.session_manager.run():
                yield
        finally:
            recovering.cancel()
            scheduling.cancel()
            await asyncio.gather(recovering, scheduling, return_exceptions=True)
            await service.stop()

    app = FastAPI(
        title="durable_nb",
        summary="Start, watch, decide and steer durable runs.",
        version="1",
        lifespan=lifespan,
        # The interactive docs load scripts from a CDN, which the Content-Security-Policy forbids;
        # the OpenAPI document stays at /openapi.json.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    app.state.schedules = timetable
    metrics = Metrics(resolved)
    app.state.metrics = metrics
    app.mount("/mcp", _TokenGate(tools_app, auth, asked_by))
    # Added innermost first: headers on every answer, then the Host, then the request's own checks.
    app.add_middleware(RequestGuard, auth=auth, max_body=max_body)
    app.add_middleware(AllowedHosts, hosts=hosts)
    app.add_middleware(SecurityHeaders, policy=content_security_policy([STYLE_HASH]))
    # Outermost: every answer is counted, refusals included, and what the app and the runs it
    # drives (tasks started inside, the lifespan's recovery too) write is counted as this server's.
    app.add_middleware(Measured, metrics=metrics)
    read, decide, admin = caller("read"), caller("decide"), caller("admin")

    @app.exception_handler(DurableError)
    async def library_error(request: Request, error: DurableError) -> JSONResponse:
        return JSONResponse(error_body(error), status_code=status_of(error))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        # Starlette's own answers (no such endpoint, method not allowed) in the service's error shape.
        name = "".join(HTTPStatus(error.status_code).phrase.split())
        message = f"{error.detail}: {request.method} {request.url.path} (the endpoints are in /openapi.json)."
        return JSONResponse({"error": name, "message": message}, status_code=error.status_code, headers=error.headers)

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
        return await service.start(name, body.input, idempotency_key)

    @app.post("/api/notebooks/{path:path}/runs", status_code=202)
    async def start_notebook(path: str, body: NotebookStartBody, token: Token = admin) -> dict[str, Any]:
        """Run a notebook of the notebooks folder with parameters, in a child process; the same path and
        parameters find the same run (resumed if it stopped), others start another."""
        return await service.start_notebook(path, body.parameters, body.run)

    @app.get("/api/runs")
    async def list_runs(
        name: str | None = None, status: RunStatus | None = None, token: Token = read
    ) -> list[dict[str, Any]]:
        """List runs, newest first, optionally of one workflow and one status."""
        return await service.list(name, status)

    @app.get("/api/runs/{run_id}")
    async def get_run(run_id: str, token: Token = read) -> dict[str, Any]:
        """A run's status: ``{run_id, status, node_counts, executions}``."""
        return await service.status(run_id)

    @app.get("/api/runs/{run_id}/history")
    async def get_history(run_id: str, token: Token = read) -> list[dict[str, Any]]:
        """Every checkpoint of a run, in order."""
        return await service.history(run_id)

    @app.get("/api/runs/{run_id}/events")
    async def get_events(run_id: str, after: int = 0, token: Token = read) -> list[dict[str, Any]]:
        """A run's events after sequence number ``after`` (poll with the last one seen)."""
        return await service.events(run_id, after)

    @app.post("/api/runs/{run_id}/resume", status_code=202)
    async def resume_run(run_id: str, token: Token = admin) -> dict[str, Any]:
        """Continue a failed or cancelled run from its last checkpoint (a paused one is approved instead)."""
        return await service.resume(run_id)

    @app.post("/api/runs/{run_id}/approve", status_code=202)
    async def approve_run(run_id: str, body: DecisionBody, token: Token = decide) -> dict[str, Any]:
        """Decide the gate a run waits at (one decision wins; the others get 409); the server continues it."""
        return await service.decide(run_id, body.approved, body.comment, body.value, body.node, token.name)

    @app.post("/api/runs/{run_id}/cancel")
    async def cancel_run(run_id: str, token: Token = admin) -> dict[str, Any]:
        """Stop a running run mid-node, or settle a paused or pending one."""
        return await service.cancel(run_id)

    @app.post("/api/runs/{run_id}/fork", status_code=202)
    async def fork_run(run_id: str, body: ForkBody, token: Token = admin) -> dict[str, Any]:
        """Branch a run from a checkpoint (default: its latest) with state overrides; the server runs it."""
        return await service.fork(run_id, body.checkpoint_id, body.state)

    @app.post("/api/schedules", status_code=201)
    async def add_schedule(body: ScheduleBody, token: Token = admin) -> dict[str, Any]:
        """Start a workflow (with ``input``) or a notebook (with ``parameters``) at each time of ``cron``
        (in ``timezone``, default UTC), once per time whichever server gets there; times missed while no
        server ran get one run (``missed``: ``run-once``) or none (``skip``). The same schedule again is kept."""
        record = await asyncio.to_thread(
            timetable.resolve,
            body.cron,
            workflow=body.workflow,
            notebook=body.notebook,
            input=body.input,
            parameters=body.parameters,
            timezone=body.timezone,
            missed=body.missed,
        )
        return await timetable.add(record)

    @app.get("/api/schedules")
    async def list_schedules(token: Token = read) -> list[dict[str, Any]]:
        """Every schedule of the store, the soonest due first, with its next and last runs."""
        return await timetable.list()

    @app.get("/api/schedules/{schedule_id}")
    async def get_schedule(schedule_id: str, token: Token = read) -> dict[str, Any]:
        """One schedule, with its next and last runs."""
        return await timetable.get(schedule_id)

    @app.delete("/api/schedules/{schedule_id}")
    async def delete_schedule(schedule_id: str, token: Token = admin) -> dict[str, Any]:
        """Stop a schedule: no more runs start from it (those it started stay)."""
        return await timetable.delete(schedule_id)

    @app.get(
        "/metrics",
        response_class=Response,
        responses={200: {"description": "The metrics.", "content": {"text/plain": {}}}},
    )
    async def get_metrics(request: Request, token: Token = read) -> Response:
        """Metrics in Prometheus's text format (OpenMetrics when the Accept header asks for it)."""
        body, content_type = await metrics.scrape(request.headers.get("accept"))
        return Response(body, media_type=content_type)

    @app.get(
        "/health",
        responses={503: {"description": "The store does not answer.", "model": HealthAnswer}},
        response_model=HealthAnswer,
    )
    async def health() -> Any:
        """Whether this server can read its store: 200 if so, else 503. No token: it tells nothing else."""
        try:
            await service.store.ping()
        except StoreError as error:
            # The error names the store and its driver's words: the log has them, the open answer does not.
            log.warning("health check: the store does not answer: %s", error)
            return JSONResponse(
                {"status": "unavailable", "message": "The store does not answer; the server's log says why."},
                status_code=503,
            )
        return {"status": "ok", "message": "The server reads its store."}

    # -- the approvals page ---------------------------------------------------------------------

    forms = CsrfTokens(_shared_forms_key())

    def page_caller(request: Request, needed: str) -> Token:
        header = request.headers.get("authorization")
        cookie = request.cookies.get(COOKIE)
        return auth.check(header if header else (f"Bearer {cookie}" if cookie else None), needed)

    def session_of(request: Request) -> str | None:
        """The credential a page request came with: its bearer secret, else its cookie."""
        header = request.headers.get("authorization")
        if header:
            return header.partition(" ")[2].strip() or None
        return request.cookies.get(COOKIE)

    def refused(error: DurableError) -> HTMLResponse:
        hint = "Open /?token=YOUR_TOKEN once to sign in (a cookie keeps it)." if isinstance(error, Unauthorized) else ""
        return HTMLResponse(refusal_page(str(error), hint), status_code=status_of(error))

    def sign_in(response: Response, request: Request, value: str) -> None:
        # HttpOnly: no script reads it; SameSite=Strict: no other site's page sends it (other ports
        # of this host can: the forms' CSRF token is what stops those).
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, value, httponly=True, samesite="strict", secure=secure, path="/")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page(request: Request, token: str | None = None) -> Response:
        """The approvals page: every open gate, with Approve / Reject."""
        if token is not None:
            try:
                auth.check(f"Bearer {token}", "read")
            except (Unauthorized, Forbidden) as error:
                return refused(error)
            # Sign in once: the cookie keeps the token out of later URLs and off other sites' requests.
            signed = RedirectResponse("/", status_code=303)
            sign_in(signed, request, token)
            return signed
        try:
            page_caller(request, "read")
        except (Unauthorized, Forbidden) as error:
            return refused(error)
        session = session_of(request)
        fresh = session is None  # only without tokens (--no-auth): the page opens a session of its own
        if session is None:
            session = secrets.token_urlsafe(32)
        answer = HTMLResponse(await approvals_page(resolved, forms.issue(session)))
        if fresh:
            sign_in(answer, request, session)
        return answer

    @app.get("/runs/{run_id}", response_class=HTMLResponse, include_in_schema=False)
    async def run_page(request: Request, run_id: str) -> Response:
        """A run's history as a page."""
        try:
            page_caller(request, "read")
        except (Unauthorized, Forbidden) as error:
            return refused(error)
        return HTMLResponse(await history_page(resolved, run_id))

    @app.post("/runs/{run_id}/decide", response_class=HTMLResponse, include_in_schema=False)
    async def decide_from_page(request: Request, run_id: str) -> Response:
        """The page's Approve / Reject: decide, then show the page with the outcome."""
        session = session_of(request)
        try:
            caller = page_caller(request, "decide")
            form = read_form(request.headers.get("content-type"), await request.body())
            forms.check(session, form.get("csrf"))
        except (Unauthorized, Forbidden, UnsupportedMediaType, CrossSiteRequest) as error:
            return refused(error)
        except InvalidDecision as error:
            return HTMLResponse(
                await approvals_page(resolved, forms.issue(session or ""), f"Not recorded: {error}", True),
                status_code=status_of(error),
            )
        try:
            asked = page_decision(form)
            await service.decide(run_id, asked.approved, asked.comment, None, asked.node, caller.name)
        except DurableError as error:
            note, failed, status = f"Not recorded: {error}", True, status_of(error)
        else:
            verb = "Approved" if asked.approved else "Rejected"
            note, failed, status = f"{verb} run {run_id}; it continues.", False, 200
        shown = await approvals_page(resolved, forms.issue(session or ""), note, failed)
        return HTMLResponse(shown, status_code=status)

    return app
