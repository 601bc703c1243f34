"""The approvals page at ``/durable/approvals``: the service's page, on Jupyter's sign-in and XSRF.

It lists the open gates of every store the server serves; each form carries Jupyter's
``_xsrf`` token, the store's key and the run, and posts to ``/durable/approvals/decide``,
which decides through the engine's one decision path and shows the page again with the outcome.
The page runs no script and may not be framed (the service's Content-Security-Policy).
"""

from __future__ import annotations

import dataclasses
import logging

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from ..engine.gates.decisions import decide, make_decision
from ..errors import DurableError, InvalidDecision, StoreError, StoreNotFound
from ..service.forms import page_decision, read_form
from ..service.headers import content_security_policy, security_headers
from ..service.page import STYLE_HASH, PageForms, WaitingGate, approvals_html, waiting_gates
from ..store.rules import check_run_id
from .api import CATALOG, MAX_BODY, user_name
from .catalog import StoreCatalog
from .errors import status_of

__all__ = ["HANDLERS", "ApprovalsHandler", "DecideHandler"]

log = logging.getLogger("durable_nb.jupyter")

_POLICY = content_security_policy([STYLE_HASH])


class _PageHandler(JupyterHandler):
    """A page of the extension: Jupyter's sign-in, and the service's strict headers."""

    auth_resource = "durable"

    @property
    def content_security_policy(self) -> str:
        return _POLICY

    def set_default_headers(self) -> None:
        super().set_default_headers()
        # After Jupyter's own (and any configured in its settings): this page's are stricter.
        for name, value in security_headers(_POLICY).items():
            self.set_header(name, value)

    @property
    def catalog(self) -> StoreCatalog:
        return self.settings[CATALOG]

    async def gates(self) -> list[WaitingGate]:
        """Every open gate of every store served, its form naming its store and run."""
        found: list[WaitingGate] = []
        for served in self.catalog.served():
            try:
                _, store = self.catalog.find(served.key)
                gates = await waiting_gates(store)
            except StoreNotFound:
                continue  # the default store before anything was stored in it
            except StoreError as error:
                log.warning("durable_nb: the store %s cannot be read: %s", served.describe()["label"], error)
                continue
            found += [dataclasses.replace(w, fields=(("store", served.key), ("run", w.gate.run_id))) for w in gates]
        return found

    async def page(self, note: str | None = None, error: bool = False) -> str:
        forms = PageForms(
            action=lambda _: url_path_join(self.base_url, "durable/approvals/decide"),
            csrf_field="_xsrf",
            csrf_value=self.xsrf_token.decode("ascii"),
            deciders="anyone signed in to this Jupyter server",
        )
        return approvals_html(await self.gates(), forms, note, error)


class ApprovalsHandler(_PageHandler):
    """``GET /durable/approvals``: every open gate, with Approve / Reject."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self.finish(await self.page())


class DecideHandler(_PageHandler):
    """``POST /durable/approvals/decide``: the page's Approve / Reject; answers with the page and the outcome."""

    @web.authenticated
    @authorized
    async def post(self) -> None:
        try:
            if len(self.request.body) > MAX_BODY:
                raise InvalidDecision(f"The form is over {MAX_BODY:,} bytes; decide from the approvals page.")
            form = read_form(self.request.headers.get("Content-Type"), self.request.body)
            asked = page_decision(form)
            run_id = form.get("run")
            check_run_id(run_id)
            _, store = self.catalog.find(form.get("store"))
            decision = make_decision(asked.approved, None, asked.comment, by=user_name(self.current_user))
            await decide(store, str(run_id), decision, asked.node)
        except DurableError as error:
            self.set_status(status_of(error))
            self.finish(await self.page(f"Not recorded: {error}", True))
            return
        verb = "Approved" if asked.approved else "Rejected"
        self.finish(await self.page(f"{verb} run {run_id}; it continues where its code runs.", False))


HANDLERS: list[tuple[str, type[_PageHandler]]] = [
    (r"/durable/approvals", ApprovalsHandler),
    (r"/durable/approvals/decide", DecideHandler),
]
