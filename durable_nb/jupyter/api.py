"""The panel's API under ``/durable/api``: stores, a kernel's run, a run, its version, decisions, stale cells.

Every handler is Jupyter's ``APIHandler``: Jupyter's authentication (token or login cookie),
its Origin check, and its XSRF check on POST for cookie sessions. Each answer is one library
call (views, the engine's one decision path); errors are ``{"error", "message"}`` (errors.py).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..engine.gates.decisions import decide, make_decision
from ..errors import DurableError, InvalidDecision, InvalidInput
from ..store.protocol import Store
from ..store.rules import check_run_id
from .catalog import ServedStore, StoreCatalog
from .errors import KernelNotAttached, status_of
from .shapes import run_detail, version_of
from .stale import read_cells, stale_cells
from .stores import store_key

__all__ = ["CATALOG", "HANDLERS", "MAX_BODY", "json_body", "user_name"]

# Where the server keeps its StoreCatalog in the web app's settings.
CATALOG = "durable_nb_catalog"
# A decision is a few words; the stale cells of an edit, a few cells' code.
MAX_BODY = 1 << 20
# What a decision from the panel may say.
_DECISION_FIELDS = frozenset({"approved", "comment", "checkpoint_id"})


def json_body(body: bytes, limit: int = MAX_BODY) -> Any:
    """Return a request body read as JSON; raise InvalidInput when it is too large or not JSON."""
    if len(body) > limit:
        raise InvalidInput(f"The request body is {len(body):,} bytes; this endpoint reads at most {limit:,}.")
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise InvalidInput("The request body is not JSON (UTF-8); send a JSON object.") from None


def user_name(user: Any) -> str | None:
    """Return the name Jupyter knows the signed-in user by (recorded as who decided)."""
    for attribute in ("name", "username"):
        value = getattr(user, attribute, None)
        if isinstance(value, str) and value:
            return value
    return user if isinstance(user, str) and user else None


def answers(method: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    """Turn a library error raised by a handler method into its JSON answer."""

    @functools.wraps(method)
    async def wrapper(self: DurableHandler, *args: str) -> None:
        try:
            await method(self, *args)
        except DurableError as error:
            self.set_status(status_of(error))
            self.finish({"error": type(error).__name__, "message": str(error)})

    return wrapper


class DurableHandler(APIHandler):
    """A handler of the panel's API: the server's stores, and the store a request names by key."""

    auth_resource = "durable"

    @property
    def catalog(self) -> StoreCatalog:
        return self.settings[CATALOG]

    def store(self) -> tuple[ServedStore, Store]:
        """The served store the request's ``?store=KEY`` names; raise InvalidInput or StoreNotServed."""
        key = self.get_query_argument("store", None)
        if not key:
            raise InvalidInput("Name the store with ?store=KEY; GET /durable/api/stores lists the keys.")
        return self.catalog.find(key)

    @staticmethod
    def run_id(raw: str) -> str:
        check_run_id(raw)
        return raw


class StoresHandler(DurableHandler):
    """``GET /durable/api/stores``: the stores this server serves."""

    @web.authenticated
    @authorized
    @answers
    async def get(self) -> None:
        self.finish({"stores": [served.describe() for served in self.catalog.served()]})


class KernelHandler(DurableHandler):
    """``GET /durable/api/kernels/<kernel_id>``: the run and store a kernel of this server is attached to."""

    @web.authenticated
    @authorized
    @answers
    async def get(self, kernel_id: str) -> None:
        entry = self.catalog.kernel(kernel_id)
        if entry is None:
            raise KernelNotAttached(
                "This Jupyter server runs no kernel with that id attached to a durable run; "
                "run %durable run NAME in the notebook to attach it."
            )
        self.finish({"run_id": entry.run_id, "store_key": store_key(entry.store)})


class RunHandler(DurableHandler):
    """``GET /durable/api/runs/<run_id>?store=KEY``: a run, its checkpoints, fork tree, open gates (its own
    and those other runs of the tree wait at), replays' progress, version."""

    @web.authenticated
    @authorized
    @answers
    async def get(self, run_id: str) -> None:
        served, store = self.store()
        self.finish(await run_detail(store, self.run_id(run_id), served.key))


class VersionHandler(DurableHandler):
    """``GET /durable/api/runs/<run_id>/version?store=KEY``: what changes with the run or its forks."""

    @web.authenticated
    @authorized
    @answers
    async def get(self, run_id: str) -> None:
        _, store = self.store()
        self.finish({"version": await version_of(store, self.run_id(run_id))})


class GateHandler(DurableHandler):
    """``POST /durable/api/runs/<run_id>/gates/<node>?store=KEY``: approve or reject the gate of a node."""

    @web.authenticated
    @authorized
    @answers
    async def post(self, run_id: str, node: str) -> None:
        _, store = self.store()
        body = json_body(self.request.body)
        if not isinstance(body, dict) or "approved" not in body or not set(body) <= _DECISION_FIELDS:
            raise InvalidDecision(
                'Send {"approved": true|false, "comment": text|null} (and optionally "checkpoint_id", the gate\'s, '
                "as the run gave it) and nothing else."
            )
        gate = body.get("checkpoint_id")
        if gate is not None and not isinstance(gate, str):
            raise InvalidDecision(f"checkpoint_id names the gate's checkpoint (text), not {gate!r}.")
        decision = make_decision(body["approved"], None, body.get("comment"), by=user_name(self.current_user))
        # The one decision path: exactly one decider wins; the others get AlreadyResumed (409). With the
        # gate's checkpoint, a later gate of the same node is never decided by a click on this one.
        result = await decide(store, self.run_id(run_id), decision, node, gate=gate)
        self.finish(
            {
                "run_id": result.run.run_id,
                "node": node,
                "approved": decision.approved,
                "by": decision.by,
                "status": result.run.status.value,
                "version": await version_of(store, result.run.run_id),
            }
        )


class StaleHandler(DurableHandler):
    """``POST /durable/api/runs/<run_id>/stale?store=KEY``: which edited cells' code differs from their commit."""

    @web.authenticated
    @authorized
    @answers
    async def post(self, run_id: str) -> None:
        _, store = self.store()
        cells = read_cells(json_body(self.request.body))
        self.finish({"stale": await stale_cells(store, self.run_id(run_id), cells)})


# Path parts are one segment each (Jupyter's own ids and names never hold a slash; an encoded one
# arrives decoded, as data).
_PART = r"([^/]+)"
HANDLERS: list[tuple[str, type[DurableHandler]]] = [
    (r"/durable/api/stores", StoresHandler),
    (rf"/durable/api/kernels/{_PART}", KernelHandler),
    (rf"/durable/api/runs/{_PART}", RunHandler),
    (rf"/durable/api/runs/{_PART}/version", VersionHandler),
    (rf"/durable/api/runs/{_PART}/gates/{_PART}", GateHandler),
    (rf"/durable/api/runs/{_PART}/stale", StaleHandler),
]
